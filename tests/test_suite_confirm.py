"""The suite's confirmations beside the searches: in order, one at a time, cut cleanly."""
from __future__ import annotations

import _thread
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import suite_confirm  # noqa: E402


def slow_confirmations(monkeypatch, seconds: dict, log: list):
    """Confirmations whose work is a sleep per op, logging when each starts and ends."""
    def fake(op, row, best, pool, args):
        log.append(("start", op.name))
        time.sleep(seconds[op.name])
        row["default"] = {"eager": {"ok": True}}
        log.append(("end", op.name))
        return row
    monkeypatch.setattr(suite_confirm, "confirm_row", fake)
    return suite_confirm.Confirmations(SimpleNamespace(), lanes=1)


def test_rows_come_back_in_order_one_confirmation_at_a_time(monkeypatch):
    log: list = []
    conf = slow_confirmations(monkeypatch, {"a": 0.3, "b": 0.0, "c": 0.1}, log)
    for name in "abc":
        conf.submit(SimpleNamespace(name=name), {"op": name}, {})
    assert conf.done() == []  # 'a' still confirming: nothing is handed back out of order
    rows = conf.done(wait=True)
    assert [r["op"] for r in rows] == ["a", "b", "c"]
    assert all(r["confirmed_beside_search"] and r["default"] for r in rows)
    events = log
    assert events == [("start", "a"), ("end", "a"), ("start", "b"), ("end", "b"),
                      ("start", "c"), ("end", "c")]


def test_a_cut_keeps_what_was_confirmed_and_names_the_rest(monkeypatch):
    log: list = []
    conf = slow_confirmations(monkeypatch, {"a": 0.0, "b": 2.0, "c": 0.0}, log)
    for name in "abc":
        conf.submit(SimpleNamespace(name=name), {"op": name}, {})
    while not any(e[:2] == ("start", "b") for e in log):
        time.sleep(0.01)
    rows = conf.cut("terminated")
    assert [r["op"] for r in rows] == ["a", "b", "c"]
    assert rows[0]["default"] and "skipped" not in rows[0]
    assert rows[1] == {"op": "b", "skipped": "terminated during its confirmation"}
    assert rows[2]["skipped"] == "terminated during its confirmation"
    time.sleep(2.2)
    assert not any(e[:2] == ("start", "c") for e in log)  # nothing starts after a cut


def test_a_failing_confirmation_is_a_row_not_the_end(monkeypatch):
    def broken(op, row, best, pool, args):
        raise RuntimeError("worker lost")
    monkeypatch.setattr(suite_confirm, "confirm_row", broken)
    conf = suite_confirm.Confirmations(SimpleNamespace())
    conf.submit(SimpleNamespace(name="a"), {"op": "a"}, {})
    (row,) = conf.done(wait=True)
    assert row["error"] == "confirmation: RuntimeError: worker lost"


def test_two_lanes_confirm_side_by_side_and_hand_rows_back_in_order(monkeypatch):
    log: list = []
    monkeypatch.setattr(suite_confirm, "confirm_row", lambda op, row, best, pool, args: (
        log.append(("start", op.name)), time.sleep({"a": 0.6, "b": 0.1, "c": 0.1}[op.name]),
        log.append(("end", op.name)), row)[-1])
    conf = suite_confirm.Confirmations(SimpleNamespace(), lanes=2)
    for name in "abc":
        conf.submit(SimpleNamespace(name=name), {"op": name}, {})
    rows = conf.done(wait=True)
    assert [r["op"] for r in rows] == ["a", "b", "c"]
    # b and c were confirmed while a still ran
    assert log.index(("end", "c")) < log.index(("end", "a"))


def test_a_stop_while_waiting_loses_no_confirmed_row(monkeypatch):
    """A SIGTERM arrives while the suite waits for the last confirmations: the rows already
    confirmed stay in the queue for the cut, not in a list the stop threw away."""
    log: list = []
    conf = slow_confirmations(monkeypatch, {"a": 0.0, "b": 5.0}, log)
    for name in "ab":
        conf.submit(SimpleNamespace(name=name), {"op": name}, {})
    while not any(e[:2] == ("start", "b") for e in log):
        time.sleep(0.01)
    threading.Timer(0.2, _thread.interrupt_main).start()  # what a signal handler raises
    with pytest.raises(KeyboardInterrupt):
        conf.done(wait=True)
    rows = conf.cut("terminated")
    assert [r["op"] for r in rows] == ["a", "b"] and rows[0]["default"]
