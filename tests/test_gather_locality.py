"""bench/gather_locality.py: one kernel on the bench indices and on the same indices sorted."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import gather_locality  # noqa: E402


@pytest.mark.parametrize("argv,message", [
    (["--op", "softmax", "--device", "cpu"], "reads no table by index"),
    (["--op", "embedding_bag_sum", "--device", "cpu", "--genome", "[1]"], "JSON object"),
    (["--op", "embedding_bag_sum", "--device", "cpu", "--genome", "{"], "not JSON"),
    (["--op", "nope", "--device", "cpu"], "nope"),
])
def test_bad_usage_is_one_line_and_exit_2(argv, message, capsys):
    assert gather_locality.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_sorting_keeps_the_rows_and_orders_them():
    from kdsl import cases
    table = np.zeros(3)
    case = cases.Case(cases.Shape({"L": 4}, "f32", "bench", 0),
                      {"idx": np.array([5, 1, 5, 0]), "t": table})
    got = gather_locality.sorted_case(case, "idx")
    assert got.inputs["idx"].tolist() == [0, 1, 5, 5] and got.inputs["t"] is table
    assert case.inputs["idx"].tolist() == [5, 1, 5, 0]  # the bench case is not changed


def test_both_orders_are_checked_and_timed_on_the_cpu(tmp_path):
    """The c backend at embedding_bag_sum's cpu bench point (a 512 MB table)."""
    from kdsl.search.eval import timing
    try:
        assert gather_locality.main(["--op", "embedding_bag_sum", "--backend", "c",
                                     "--device", "cpu", "--reps", "3", "--out",
                                     str(tmp_path)]) == 0
    finally:
        timing._BENCH_CASES.clear()  # the process keeps its bench case: not this one
    doc = json.loads((tmp_path / "gather-locality-embedding_bag_sum.json").read_text())
    assert doc["index"] == "idx" and [r["order"] for r in doc["rows"]] == ["bench order",
                                                                            "sorted"]
    assert all(r["correct"] and r["kernel_ms"] > 0 and r["baseline_ms"] > 0 for r in doc["rows"])
    assert doc["rows"][0]["floor_ms"] == doc["rows"][1]["floor_ms"]
    # the memory's own cost for the same rows: a plain gather of them, both orders
    plain = doc["plain_gather"]
    assert [r["order"] for r in plain] == ["bench order", "sorted"]
    assert all(r["correct"] and r["gather_ms"] > 0 and r["of_floor"] > 0 for r in plain)
    assert plain[0]["rows"] == plain[1]["rows"] and plain[0]["bytes"] == plain[1]["bytes"]


def test_distinct_rows_in_order_of_first_appearance_or_sorted():
    idx = np.array([7, 3, 7, 9, 3, 1])
    assert gather_locality.distinct_rows(idx, "bench order").tolist() == [7, 3, 9, 1]
    assert gather_locality.distinct_rows(idx, "sorted").tolist() == [1, 3, 7, 9]
