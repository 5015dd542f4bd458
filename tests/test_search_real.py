"""Real searches on the c backend (small bench sizes), and exporting their best kernel."""
from __future__ import annotations

import importlib.util
import json
import sys

import pytest
import torch

from kdsl.cli import main
from kdsl.search import runs
from kdsl.search.display import QuietDisplay
from kdsl.search.executors import InlineExecutor
from kdsl.search.jobs import EvalConfig
from kdsl.search.settings import SearchSettings
from small_specs import rmsnorm

SPEC = rmsnorm()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real")
    spec = tmp / "rmsnorm_small.kspec"
    spec.write_text(SPEC)
    s = SearchSettings(spec=str(spec), op=None, backends=("c",), policy="mcts", seed=0,
                       budget=8, executor="inline", use_priors=False,
                       eval=EvalConfig(seeds=(1,), cases_per_dtype=2, reps=15))
    store, summary = runs.start(s, tmp / "run", None, QuietDisplay(), InlineExecutor())
    return tmp / "run", store, summary


def test_a_real_search_is_at_least_as_fast_as_the_default(run_dir):
    path, store, summary = run_dir
    default = store.nodes[0]
    assert default["operator"] == "start" and default["result"]["ok"], default["result"]
    assert summary["best"]["speedup"] >= default["result"]["speedup"]
    assert summary["failures"] == 0, summary["failures_by_stage"]
    assert summary["baseline"]["name"] == "eager"
    assert (path / "kernels" / "best.c").read_text().startswith(("/*", "#", "//"))
    # where its seconds went, summed over the evaluations (a CPU has no device lock)
    stages = summary["seconds"]["stages"]
    assert stages["build"] > 0 and stages["correctness"] > 0 and stages["timing"] > 0
    assert summary["seconds"]["timing_phases"]["timed_runs"] > 0
    assert summary["seconds"]["lock_wait"] == 0


@pytest.mark.parametrize("fmt", ["module", "kernelbench"])
def test_export_gives_a_standalone_torch_op(run_dir, tmp_path, fmt):
    path, _, _ = run_dir
    out = tmp_path / f"exported_{fmt}.py"
    assert main(["export", str(path), "--out", str(out), "--format", fmt]) == 0
    text = out.read_text()
    assert "import kdsl" not in text and "from kdsl" not in text
    name = f"kdsl_test_real_exported_{fmt}"
    spec = importlib.util.spec_from_file_location(name, out)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # torch.compile looks the module up by name
    spec.loader.exec_module(mod)
    x, w = torch.randn(37, 300), torch.randn(300)  # not the bench point (256 x 512)
    call = mod.ModelNew() if fmt == "kernelbench" else mod.run
    ref = torch.nn.functional.rms_norm(x, (300,), w, eps=1e-6)
    assert torch.allclose(call(x, w), ref, rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()
    compiled = torch.compile(call, fullgraph=True, backend="eager")
    assert torch.allclose(compiled(x, w), ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(TypeError, match="input 'x' is float16"):
        call(x.half(), w.half())


@pytest.mark.parametrize("where", ["missing/k.py", "afile/k.py"])
def test_export_where_no_directory_is_one_line(run_dir, tmp_path, capsys, where):
    path, _, _ = run_dir
    (tmp_path / "afile").write_text("")
    assert main(["export", str(path), "--out", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "missing").exists()


def test_summary_names_everything(run_dir):
    path, _, _ = run_dir
    s = json.loads((path / "summary.json").read_text())
    assert s["backend"] == "c" and s["device"] == "cpu" and s["evaluations"] == 8
    assert s["versions"]["torch"] and s["best"]["time_ms"] > 0


def test_compare_runs_every_policy_and_seed_from_the_defaults(tmp_path):
    spec = tmp_path / "rmsnorm_small.kspec"
    spec.write_text(SPEC)
    out = tmp_path / "cmp"
    assert main(["compare", str(spec), "--backend", "c", "--policies", "mcts,random",
                 "--seeds", "0-1", "--budget", "3", "--executor", "inline", "--llm", "off",
                 "--confirm-rounds", "1", "--out", str(out)]) == 0
    result = json.loads((out / "compare.json").read_text())
    assert set(result["policies"]) == {"mcts", "random"}
    # the fastest kernels of all runs (the leaders, then every kernel timed at the target)
    # were evaluated once more, and the runs themselves not
    from kdsl.search.compare import CONFIRM_MAX
    assert 1 <= len(result["confirmed"]) <= CONFIRM_MAX
    assert all(len(v["speedups"]) == 1 and v["median"] > 0 for v in result["confirmed"].values())
    assert all("confirmed" not in json.loads((out / f"{p}-{s}" / "summary.json").read_text())
               for p in ("mcts", "random") for s in (0, 1))
    for policy in ("mcts", "random"):
        p = result["policies"][policy]
        assert len(p["best"]) == 2 and all(b > 0 for b in p["best"]), p
        for seed in (0, 1):
            first = runs.RunStore.open(out / f"{policy}-{seed}").nodes[0]
            assert first["candidate"]["origin"] == "default"
    assert (out / "compare.png").stat().st_size > 0


def test_compare_resumes_a_run_cut_mid_way_instead_of_counting_it_done(tmp_path, capsys):
    """A run killed before its budget (a device call's time limit) has no ``finished`` mark:
    a second compare over the same directory takes it on to its budget; finished runs
    are reused as they are."""
    import msgpack
    spec = tmp_path / "rmsnorm_small.kspec"
    spec.write_text(SPEC)
    out = tmp_path / "cmp"
    argv = ["compare", str(spec), "--backend", "c", "--policies", "greedy", "--seeds", "0-1",
            "--budget", "3", "--executor", "inline", "--llm", "off", "--confirm-rounds", "0",
            "--out", str(out)]
    assert main(argv) == 0
    for seed in (0, 1):
        assert json.loads((out / f"greedy-{seed}" / "summary.json").read_text())["finished"]
    cut = out / "greedy-1"
    lineage = cut / "lineage.msgpack"
    records = list(msgpack.Unpacker(open(lineage, "rb"), raw=False, strict_map_key=False))
    lineage.write_bytes(b"".join(msgpack.packb(r, default=str) for r in records[:-1]))
    summary = json.loads((cut / "summary.json").read_text())
    del summary["finished"]
    (cut / "summary.json").write_text(json.dumps(summary))
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "greedy seed 1: resuming after 2 evaluations" in err and "seed 0: resuming" not in err
    assert len(runs.RunStore.open(cut).nodes) == 3
    assert json.loads((cut / "summary.json").read_text())["finished"]
    result = json.loads((out / "compare.json").read_text())
    assert len(result["curves"]["greedy"]["1"]) == 3


def test_compare_warms_the_marked_runs_from_other_ops_of_the_class_only(tmp_path, capsys):
    """``mcts+warm`` starts its cost model from --warm-from's rows of other ops of the op's
    class (never the op's own: that would be recalling, not ranking); ``mcts`` beside it
    starts cold; a marked policy without --warm-from is one line of bad usage."""
    import sqlite3
    target, sibling = tmp_path / "rmsnorm_small.kspec", tmp_path / "rmsnorm_sibling.kspec"
    target.write_text(SPEC)
    sibling.write_text(rmsnorm("rmsnorm_sibling"))
    warm = tmp_path / "warm.sqlite"
    for spec in (sibling, target):  # the cache holds rows of both ops
        assert main(["search", str(spec), "--backend", "c", "--budget", "3", "--executor",
                     "inline", "--llm", "off", "--confirm-rounds", "0", "--quiet",
                     "--cache", str(warm), "--out", str(tmp_path / spec.stem)]) == 0
    with sqlite3.connect(warm) as db:
        by_op = dict(db.execute("SELECT op_hash, COUNT(*) FROM observations GROUP BY op_hash"))
    assert len(by_op) == 2 and all(n > 0 for n in by_op.values())
    op_hash = runs.load_op(str(target), None)[0].hash
    out = tmp_path / "cmp"
    argv = ["compare", str(target), "--backend", "c", "--policies", "mcts,mcts+warm",
            "--seeds", "0", "--budget", "2", "--executor", "inline", "--llm", "off",
            "--confirm-rounds", "0", "--out", str(out)]
    assert main(argv + ["--warm-from", str(warm)]) == 0
    cold = runs.RunStore.open(out / "mcts-0").header["cost_model"]
    hot = runs.RunStore.open(out / "mcts+warm-0").header["cost_model"]
    assert cold["prior"] == []
    assert len(hot["prior"]) == sum(n for h, n in by_op.items() if h != op_hash)
    assert set(json.loads((out / "compare.json").read_text())["policies"]) == \
        {"mcts", "mcts+warm"}
    result = json.loads((out / "compare.json").read_text())
    assert result["warm"] == ["mcts+warm"] and result["warm_from"] == [str(warm)]
    capsys.readouterr()
    assert main(argv[:-2] + ["--out", str(tmp_path / "cmp2")]) == 2
    assert "+warm needs --warm-from" in capsys.readouterr().err
    assert main(argv + ["--warm-from", str(tmp_path / "missing.sqlite")]) == 2
    assert "no such measurement cache" in capsys.readouterr().err
    # the other cache is read, never written: not its journal mode, not a row
    before = warm.read_bytes()
    odd = tmp_path / "a?b#c.sqlite"  # characters a URI would cut at
    odd.write_bytes(before)
    assert main(["compare", str(target), "--backend", "c", "--policies", "mcts+warm",
                 "--seeds", "1", "--budget", "1", "--executor", "inline", "--llm", "off",
                 "--confirm-rounds", "0", "--out", str(tmp_path / "cmp3"), "--warm-from",
                 str(odd)]) == 0
    assert odd.read_bytes() == before and not (tmp_path / "a").exists()
    # a run reused under the other start is refused, not counted as it
    assert main(["compare", str(target), "--backend", "c", "--policies", "mcts", "--seeds",
                 "0", "--budget", "2", "--executor", "inline", "--llm", "off",
                 "--confirm-rounds", "0", "--out", str(out), "--warm-from", str(warm)]) == 2
    assert "was run cold, but mcts now starts warm" in capsys.readouterr().err
    # a warm start of a model that is off is said, not dropped (and leaves no run behind)
    assert main(["search", str(target), "--backend", "c", "--budget", "1", "--executor",
                 "inline", "--llm", "off", "--cost-model", "off", "--warm-from", str(warm),
                 "--out", str(tmp_path / "off")]) == 2
    assert "--warm-from starts the cost model, which is off" in capsys.readouterr().err
    assert not (tmp_path / "off").exists()
    # compare says so before any run, not after the cold ones have spent their budgets
    assert main(argv[:-2] + ["--out", str(tmp_path / "cmp-off"), "--cost-model", "off",
                             "--warm-from", str(warm)]) == 2
    assert "which is off" in capsys.readouterr().err
    assert not list((tmp_path / "cmp-off").glob("mcts*"))
