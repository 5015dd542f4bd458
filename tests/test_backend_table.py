"""The default-genome table's bookkeeping: parts measured in separate runs join into one."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import backend_table  # noqa: E402


def part(tmp_path: Path, name: str, ops: list[str], device="GPU-A") -> str:
    rows = [{"op": op, "shape": {"N": 8}, "dtype": "f32", "ok": True, "stage": "timing",
             "message": "", "eager_ms": 2.0, "compile_ms": 1.0, "compile_baseline": "torch.compile",
             "kernel_ms": 0.5, "floor_ms": 0.25, "wall_s": 1.0} for op in ops]
    meta = {"date": f"{name}-date", "device": device, "backend": "triton",
            "versions": {"torch": "t", "triton": "tr"}}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"meta": meta, "rows": rows}))
    return str(path)


def test_parts_join_in_library_order_with_both_dates(tmp_path):
    a = part(tmp_path, "first", ["topk_rows", "softmax"])
    b = part(tmp_path, "second", ["conv1d"])
    assert backend_table.main(["--merge", a, b, "--out", str(tmp_path / "all")]) == 0
    joined = json.loads((tmp_path / "all" / "backend_table.json").read_text())
    assert [r["op"] for r in joined["rows"]] == ["conv1d", "softmax", "topk_rows"]
    assert joined["meta"]["date"] == "first-date and second-date"
    md = (tmp_path / "all" / "backend_table.md").read_text()
    assert "| softmax | N=8 | f32 | 2 | 1 | 0.5 | 0.25 | 4 | 2 | 2 |" in md


def test_parts_from_different_gpus_are_refused(tmp_path, capsys):
    a = part(tmp_path, "first", ["softmax"])
    b = part(tmp_path, "second", ["conv1d"], device="GPU-B")
    assert backend_table.main(["--merge", a, b, "--out", str(tmp_path / "all")]) == 2
    assert "different devices" in capsys.readouterr().err
    assert not (tmp_path / "all").exists()


def test_an_op_measured_in_two_parts_is_refused(tmp_path, capsys):
    a = part(tmp_path, "first", ["softmax"])
    b = part(tmp_path, "second", ["softmax", "conv1d"])
    assert backend_table.main(["--merge", a, b, "--out", str(tmp_path / "all")]) == 2
    assert "softmax measured in more than one part" in capsys.readouterr().err


def test_a_compile_that_fell_back_has_no_compile_figure(tmp_path):
    class Res:
        def __init__(self, name):
            self.ok, self.stage, self.message, self.time_ms = True, "timing", "", 0.5
            self.baseline_ms, self.baseline_name = 2.0, name
            self.artifacts = {"floor_ms": 0.25, "bench": {"dtype": "f32"}}

    class Op:
        name = "softmax"

    row = backend_table.row_of(Op, {"N": 8}, Res("eager"), Res("eager"))
    assert row["compile_ms"] is None and row["compile_baseline"] == "eager"
    md = backend_table.write_tables(tmp_path, {"date": "d", "device": "GPU-A",
                                               "backend": "triton",
                                               "versions": {"torch": "t", "triton": "tr"}},
                                    [dict(row, wall_s=1.0)])
    assert "| softmax | N=8 | f32 | 2 | - | 0.5 |" in md
    assert "torch.compile fell back to eager (no compile figure): softmax" in md


def test_unknown_ops_are_bad_usage(tmp_path, capsys):
    assert backend_table.main(["--device", "cpu", "--ops", "nosuch", "--out",
                               str(tmp_path / "t")]) == 2
    assert "no spec defines nosuch" in capsys.readouterr().err
