"""bench/genome_variants.py: chosen variants through the full evaluation, side by side."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import genome_variants  # noqa: E402


@pytest.mark.parametrize("argv, message", [
    (["--op", "no_such_op", "--genome", "{}"], "no spec defines no_such_op"),
    (["--op", "softmax", "--genome", "{BLOCK"], "is not JSON"),
    (["--op", "softmax", "--genome", "[1]"], "not a JSON object"),
    (["--op", "softmax"], "at least one --genome or --source"),
    (["--op", "softmax", "--source", "/no/such/file.py"], "cannot read --source"),
    (["--op", "softmax", "--genome", "{}"], "--out DIR is required"),
])
def test_bad_usage_is_one_line_and_exit_2(argv, message, capsys):
    assert genome_variants.main(argv + ["--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_cuda_without_a_gpu_is_bad_usage(monkeypatch, capsys):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert genome_variants.main(["--op", "softmax", "--genome", "{}", "--out", "x"]) == 2
    assert "no CUDA device is visible" in capsys.readouterr().err


def test_variants_are_evaluated_in_order_and_a_bad_gene_is_a_failed_row(tmp_path):
    out = tmp_path / "v"
    argv = ["--op", "hash_bucketize", "--backend", "numpy", "--device", "cpu", "--reps", "2",
            "--genome", "{}", "--genome", '{"no_such_gene": 1}', "--out", str(out)]
    assert genome_variants.main(argv) == 0
    doc = json.loads((out / "variants-hash_bucketize.json").read_text())
    first, second = doc["rows"]
    assert first["variant"] == "{}" and first["ok"] and first["time_ms"] > 0
    assert first["baseline"] == "eager" and first["of_floor"] > 0
    assert not second["ok"] and second["stage"] == "render" and "no_such_gene" in second["message"]
    assert doc["meta"]["op"] == "hash_bucketize" and "genome_variants.py" in doc["meta"]["command"]
