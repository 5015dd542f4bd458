"""bench/compile_ahead.py: an evaluation's time with and without compiling ahead."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import compile_ahead  # noqa: E402


def test_an_unknown_op_is_one_line_and_exit_2(capsys):
    assert compile_ahead.main(["--ops", "topk_rows,no_such_op", "--out", "x"]) == 2
    err = capsys.readouterr().err
    assert "no_such_op" in err and len(err.strip().splitlines()) == 1


def test_without_a_gpu_it_refuses_and_writes_nothing(monkeypatch, capsys, tmp_path):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert compile_ahead.main(["--out", str(tmp_path / "o")]) == 2
    assert "no CUDA device is visible" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_run_that_dies_is_a_failed_row_not_a_raise(monkeypatch):
    monkeypatch.setattr(compile_ahead, "ONE", "import sys; sys.exit('no GPU here')")
    row = compile_ahead.run_one("topk_rows", "on", 2)
    assert row["ok"] is False and row["stage"] == "process" and "no GPU here" in row["message"]
