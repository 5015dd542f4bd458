"""bench/profile_search.py: its arguments fail in one line without a GPU, its figures are
read from a run's records as the docstring says."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import profile_search  # noqa: E402


@pytest.mark.parametrize("argv, message", [
    ([], "--out"),
    (["--out", "OUT", "--ops", "no_such_op"], "no spec defines no_such_op"),
    (["--out", "OUT", "--ops", "specs/none.kspec"], "no spec file specs/none.kspec"),
    (["--out", "OUT", "--budget", "1"], "--budget must be at least 2"),
    (["--out", "OUT", "--seeds", "a,b"], "--seeds takes whole numbers"),
    (["--out", "OUT", "--stop-at-sol", "2"], "--stop-at-sol"),
    (["--out", "/proc/kdsl-profile-search"], "cannot create --out"),
])
def test_bad_usage_is_one_line_and_exit_2(argv, message, capsys, tmp_path):
    argv = [str(tmp_path / "o") if a == "OUT" else a for a in argv]
    assert profile_search.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_no_gpu_stops_before_any_search(monkeypatch, capsys, tmp_path):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert profile_search.main(["--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no CUDA device" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o" / "runs").exists()


def test_default_ops_resolve_to_library_and_kernelbench_specs():
    ops = profile_search.resolve_ops(list(profile_search.DEFAULT_OPS))
    names = [op.name for _, op in ops]
    assert len(names) == 8 and "softmax" in names and "kb19_relu" in names


def test_curve_and_evaluations_to_target():
    nodes = [{"id": i + 1, "iteration": i, "result": {"speedup": s}}
             for i, s in enumerate([0.5, 0.0, 1.2, 1.1, 2.0])]
    c = profile_search.curve(nodes)
    assert c == [0.5, 0.5, 1.2, 1.2, 2.0]
    assert profile_search.evals_to(c, 0.95 * 1.2) == 3
    assert profile_search.evals_to(c, 0.95 * 2.0) == 5
    assert profile_search.evals_to(c, 3.0) is None and profile_search.evals_to(c, 0) is None


def test_compare_row_verdict_and_markdown(tmp_path):
    from kdsl import spec
    path = profile_search.ROOT / "specs" / "softmax.kspec"
    op = spec.load(str(path)).ops[0]
    run = {"best_speedup": 2.0, "profile_seconds": 3.5, "diagnosis": "memory-bound: x",
           "sol": 0.91, "bound": "memory"}
    on = {**run, "curve": [1.0, 1.95, 2.0]}
    off = {**run, "best_speedup": 1.9, "curve": [1.0, 1.0, 1.2, 1.9], "bound": None}
    row = profile_search.compare_row(op, path, 0, off, on)
    assert row["on"]["evals_to_95_common"] == 2 and row["off"]["evals_to_95_common"] == 4
    assert row["verdict"] == "on fewer"
    doc = {"meta": {"device": "cpu", "budget": 4, "date": "today"},
           "rows": [row, {"op": "matmul", "seed": 0, "skipped": "deadline 1 s"}]}
    profile_search.write(tmp_path, doc)
    md = (tmp_path / "profile_search.md").read_text()
    assert "| softmax | 0 | 1.900x | 2.000x | 4 | 2 | on fewer | memory-bound: x | 91% |" in md
    assert "skipped: deadline" in md and doc["summary"]["on_fewer"] == 1
    assert (tmp_path / "profile_search.json").is_file()


def test_a_second_call_keeps_the_finished_rows(tmp_path):
    import json
    doc = {"rows": [{"op": "softmax", "seed": 0, "on": {}, "off": {}},
                    {"op": "matmul", "seed": 0, "skipped": "deadline 1 s"}]}
    (tmp_path / "profile_search.json").write_text(json.dumps(doc))
    assert set(profile_search.earlier_rows(tmp_path)) == {("softmax", 0)}
    assert profile_search.earlier_rows(tmp_path / "none") == {}
