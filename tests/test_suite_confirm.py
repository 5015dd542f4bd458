"""The suite's confirmations beside the searches: in order, one at a time, cut cleanly."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import suite_confirm  # noqa: E402


def slow_confirmations(monkeypatch, seconds: dict, log: list, lanes: int = 1):
    """Confirmations whose work is a sleep per op, logging when each starts and ends."""
    def fake(op, row, best, pool, args):
        log.append(("start", op.name))
        time.sleep(seconds[op.name])
        row["default"] = {"eager": {"ok": True}}
        log.append(("end", op.name))
        return row
    monkeypatch.setattr(suite_confirm, "confirm_row", fake)
    return suite_confirm.Confirmations(SimpleNamespace(), lanes=lanes)


def submit_all(conf, names):
    for name in names:
        conf.submit(SimpleNamespace(name=name), {"op": name, "search": {"evaluations": 3}}, {})


def started(log, name):
    while ("start", name) not in log:
        time.sleep(0.01)


def test_rows_come_back_in_order_one_confirmation_at_a_time(monkeypatch):
    log: list = []
    conf = slow_confirmations(monkeypatch, {"a": 0.3, "b": 0.0, "c": 0.1}, log)
    submit_all(conf, "abc")
    rows: list = []
    assert conf.move_done(rows) == [] and rows == []  # 'a' still confirming: none out of order
    assert [r["op"] for r in conf.move_done(rows, wait=True)] == ["a", "b", "c"]
    assert [r["op"] for r in rows] == ["a", "b", "c"]
    assert all(r["confirmed_beside_search"] and r["default"] for r in rows)
    assert log == [("start", "a"), ("end", "a"), ("start", "b"), ("end", "b"),
                   ("start", "c"), ("end", "c")]


def test_two_lanes_confirm_side_by_side_and_hand_rows_back_in_order(monkeypatch):
    log: list = []
    conf = slow_confirmations(monkeypatch, {"a": 0.6, "b": 0.1, "c": 0.1}, log, lanes=2)
    submit_all(conf, "abc")
    rows: list = []
    conf.move_done(rows, wait=True)
    assert [r["op"] for r in rows] == ["a", "b", "c"]
    assert log.index(("end", "c")) < log.index(("end", "a"))  # b, c confirmed while a ran


def test_a_cut_keeps_what_was_confirmed_and_the_rest_keep_their_search(monkeypatch):
    log: list = []
    conf = slow_confirmations(monkeypatch, {"a": 0.0, "b": 2.0, "c": 0.0}, log)
    submit_all(conf, "abc")
    started(log, "b")
    rows = conf.cut("terminated", [])
    assert [r["op"] for r in rows] == ["a", "b", "c"]
    assert rows[0]["default"] and "skipped" not in rows[0]
    assert rows[1] == {"op": "b", "search": {"evaluations": 3},
                       "skipped": "terminated during its confirmation"}
    assert rows[2]["skipped"] == "terminated during its confirmation"
    time.sleep(2.2)
    assert ("start", "c") not in log  # nothing starts after a cut


class StoppablePool:
    """Stands in for a confirmation's worker: its jobs end when it is shut down."""

    def __init__(self, workers):
        self.stopped = threading.Event()

    def shutdown(self):
        self.stopped.set()


def test_a_confirmation_its_cut_ends_is_cut_not_a_failed_row(monkeypatch):
    """Shutting a worker down ends its job with a failure at once, so the lane finishes the
    row a moment later: the cut must still call it cut (a failed row would count as done
    and `--rest-of` would never run the op again)."""
    import kdsl.search.executors as executors
    monkeypatch.setattr(executors, "PoolExecutor", StoppablePool)

    def confirm(op, row, best, pool, args):
        pool.stopped.wait()
        row["default"] = {"eager": {"ok": False, "stage": "worker"}}
        return row
    monkeypatch.setattr(suite_confirm, "confirm_row", confirm)
    for _ in range(20):  # a race: try it often
        conf = suite_confirm.Confirmations(SimpleNamespace(), lanes=1)
        submit_all(conf, "a")
        while not conf._pools:
            time.sleep(0.001)
        (row,) = conf.cut("terminated", [])
        assert row["skipped"] == "terminated during its confirmation" and "default" not in row


@pytest.fixture
def ctrl_c():
    """Python's own SIGINT handler for the test, whatever this process inherited (a shell
    that starts a command in the background without job control has it ignore SIGINT)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_stop_while_waiting_loses_no_confirmed_row(monkeypatch, ctrl_c):
    """SIGINT arrives while the suite waits for the last confirmations: the rows already
    confirmed are in the suite's rows or in the queue for the cut, never in neither."""
    log: list = []
    conf = slow_confirmations(monkeypatch, {"a": 0.0, "b": 5.0}, log)
    submit_all(conf, "ab")
    started(log, "b")
    threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    rows: list = []
    begun = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        conf.move_done(rows, wait=True)
    assert time.monotonic() - begun < 3  # the wait itself was interrupted
    rows += conf.cut("interrupted", rows)
    assert [r["op"] for r in rows] == ["a", "b"] and rows[0]["default"]
    assert rows[1]["skipped"] == "interrupted during its confirmation"


def test_a_failing_confirmation_is_a_row_not_the_end(monkeypatch):
    def broken(op, row, best, pool, args):
        raise RuntimeError("worker lost")
    monkeypatch.setattr(suite_confirm, "confirm_row", broken)
    conf = suite_confirm.Confirmations(SimpleNamespace())
    submit_all(conf, "a")
    (row,) = conf.move_done([], wait=True)
    assert row["error"] == "confirmation: RuntimeError: worker lost"


def test_a_worker_that_cannot_start_is_a_row_not_a_hang(monkeypatch):
    import kdsl.search.executors as executors

    def no_worker(workers):
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(executors, "PoolExecutor", no_worker)
    conf = suite_confirm.Confirmations(SimpleNamespace())
    submit_all(conf, "a")
    (row,) = conf.move_done([], wait=True)
    assert row["error"].startswith("confirmation: OSError")


def test_the_backlog_is_the_queued_confirmations_at_the_pace_of_those_done(monkeypatch):
    log: list = []
    conf = slow_confirmations(monkeypatch, {"a": 0.0, "b": 3.0, "c": 0.0}, log, lanes=2)
    assert conf.backlog_s() == 0.0
    submit_all(conf, "abc")
    assert conf.backlog_s() == 3 * 40.0 / 2  # nothing confirmed yet: 40 s each
    started(log, "b")
    while ("end", "a") not in log or ("end", "c") not in log:
        time.sleep(0.01)
    time.sleep(0.05)
    conf._queue[0][0]["confirm_s"] = 10.0  # a, as confirm_row would have timed it
    assert conf.backlog_s() == 1 * 10.0 / 2  # b still running
