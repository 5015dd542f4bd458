"""The Python API: kdsl.load, kdsl.search (a real 3-evaluation search on the c backend),
the run's best, table and export, kdsl.import_module through the importer."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import types

import pytest
import torch

import kdsl
from kdsl.errors import UsageError
from small_specs import rmsnorm

SPEC = rmsnorm("rmsnorm_api")


def test_importing_kdsl_stays_cheap():
    code = ("import sys, kdsl; heavy = [m for m in ('torch', 'numpy', 'lark', 'kdsl.api', "
            "'kdsl.search.runs') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_kdsl_search_is_callable_even_after_its_subpackage_is_imported():
    code = ("from kdsl.search import settings; import kdsl, kdsl.search.files; "
            "print(callable(kdsl.search), kdsl.search.files.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["True", "kdsl.search.files"]


def test_load_gives_the_specs_ops(tmp_path):
    path = tmp_path / "s.kspec"
    path.write_text(SPEC)
    spec = kdsl.load(path)
    assert [op.name for op in spec.ops] == ["rmsnorm_api"]
    assert "load" in dir(kdsl) and callable(kdsl.search)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    path = tmp / "rmsnorm_api.kspec"
    path.write_text(SPEC)
    return kdsl.search(kdsl.load(path), backend="c", budget=3, seed=0, executor="inline",
                       out=tmp / "run", use_priors=False)


def test_search_returns_a_run_with_its_best(run):
    best = run.best
    assert best is not None and best.speedup > 0 and best.time_ms > 0
    assert best.backend == "c" and isinstance(best.genome, dict) and best.genome
    assert "kdsl_f32" in best.source  # the C kernel's entry point
    assert run.summary["evaluations"] == 3
    assert "best" in repr(run)


def test_table_lists_every_candidate(run):
    rows = run.table()
    assert len(rows) == 3 and [r["node"] for r in rows] == sorted(r["node"] for r in rows)
    assert {"node", "operator", "genome", "ok", "stage", "time_ms", "speedup"} <= set(rows[0])
    assert max(r["speedup"] for r in rows) == run.best.speedup


def test_export_writes_a_torch_op(run, tmp_path):
    # (forced: what is written is the point here; whether a 3-evaluation search of a 0.05 ms
    # kernel beat the baseline on a loaded 2-core machine is timing, and export refuses a best
    # the re-measurement found slower, as test_confirm asserts)
    out = run.export(tmp_path / "rms.py", force=True)
    spec = importlib.util.spec_from_file_location("kdsl_test_api_rms", out)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kdsl_test_api_rms"] = mod
    spec.loader.exec_module(mod)
    x, w = torch.randn(5, 33), torch.randn(33)
    want = torch.nn.functional.rms_norm(x, (33,), w, eps=1e-6)
    assert torch.allclose(mod.run(x, w), want, rtol=1e-4, atol=1e-4)
    kb = run.export(tmp_path / "kb.py", format="kernelbench", force=True)
    assert "class ModelNew" in kb.read_text()


def test_open_run_reads_a_finished_run_and_refuses_other_directories(run, tmp_path):
    again = kdsl.open_run(run.path)
    assert again.best == run.best
    with pytest.raises(UsageError):
        kdsl.open_run(tmp_path)


def test_search_refuses_what_is_not_a_spec():
    with pytest.raises(TypeError, match="give a .kspec path"):
        kdsl.search(42)


def test_import_module_goes_through_the_importer(tmp_path, monkeypatch):
    calls = []

    def import_model(path, *, check=True):
        calls.append((str(path), check))
        return types.SimpleNamespace(name="rmsnorm_api", spec_text=SPEC)

    # the importer is another module's work; its contract is import_model(path, check=True)
    monkeypatch.setitem(sys.modules, "kdsl.importer",
                        types.SimpleNamespace(import_model=import_model))
    spec = kdsl.import_module(tmp_path / "model.py", out=tmp_path)
    assert calls == [(str(tmp_path / "model.py"), True)]
    assert spec.ops[0].name == "rmsnorm_api"
    assert (tmp_path / "rmsnorm_api.kspec").read_text() == SPEC
