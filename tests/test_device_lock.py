"""The device lock: timed regions alone across processes, per device name; other GPU
work shared, never beside them."""
from __future__ import annotations

import multiprocessing as mp
import time

import pytest

from kdsl.search.eval import device_lock


def _hold(name: str, lock_dir: str, seconds: float, q) -> None:
    import os
    os.environ[device_lock.LOCK_DIR_ENV] = lock_dir
    with device_lock.hold(name):
        start = time.monotonic()
        time.sleep(seconds)
        q.put((name, start, time.monotonic()))


def _intervals(names, tmp_path):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_hold, args=(n, str(tmp_path), 0.4, q)) for n in names]
    for p in procs:
        p.start()
    got = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    return sorted(got, key=lambda r: r[1])


def test_one_device_is_held_by_one_process_at_a_time(tmp_path):
    runs = _intervals(["cuda-A", "cuda-A", "cuda-A"], tmp_path)
    for (_, _, end), (_, start, _) in zip(runs, runs[1:]):
        assert start >= end - 0.01, runs


def _meet(name: str, lock_dir: str, barrier, q) -> None:
    import os
    os.environ[device_lock.LOCK_DIR_ENV] = lock_dir
    with device_lock.hold(name):
        try:
            barrier.wait()  # every holder inside its hold at once, or a timeout
            q.put(True)
        except Exception:  # noqa: BLE001 - threading.BrokenBarrierError, by any route
            q.put(False)


def test_different_devices_do_not_wait_for_each_other(tmp_path):
    """Both hold their locks at the same moment (a barrier inside the hold: no clock, so a
    loaded machine's late start proves nothing either way)."""
    ctx = mp.get_context("spawn")
    q, barrier = ctx.Queue(), ctx.Barrier(2, timeout=60)
    procs = [ctx.Process(target=_meet, args=(n, str(tmp_path), barrier, q))
             for n in ("cuda-A", "cuda-B")]
    for p in procs:
        p.start()
    met = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert met == [True, True]


def test_the_cpu_takes_no_lock(tmp_path, monkeypatch):
    monkeypatch.setenv(device_lock.LOCK_DIR_ENV, str(tmp_path))
    waited: dict = {}
    with device_lock.exclusive("cpu", waited):
        pass
    assert waited == {} and not any((tmp_path / "kdsl-device-locks").glob("*.lock"))


def test_wait_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv(device_lock.LOCK_DIR_ENV, str(tmp_path))
    waited: dict = {}
    with device_lock.hold("cuda-Z", waited):
        pass
    assert waited["lock_wait_s"] >= 0
    waited["lock_wait_s"] = 5.0  # a job's later holds add their waits to its earlier ones
    with device_lock.hold("cuda-Z", waited):
        pass
    assert waited["lock_wait_s"] >= 5.0


def _take(name: str, lock_dir: str, mode: str, delay: float, seconds: float, start: float,
          q) -> None:
    import os
    os.environ[device_lock.LOCK_DIR_ENV] = lock_dir
    # delays count from one moment shared by every process (``start``, wall clock), not
    # from each one's own start-up, which a loaded machine stretches unevenly
    time.sleep(max(0.0, start + delay - time.time()))
    with device_lock.hold(name, shared=(mode == "shared")):
        start = time.monotonic()
        time.sleep(seconds)
        q.put((mode, delay, start, time.monotonic()))


def _runs(plan, tmp_path):
    """``plan``: (mode, start delay, hold seconds) for one process each."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start = time.time() + 5.0  # every process started up by then, even on a loaded machine
    procs = [ctx.Process(target=_take, args=("cuda-S", str(tmp_path), m, d, s, start, q))
             for m, d, s in plan]
    for p in procs:
        p.start()
    got = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    return {(mode, delay): (start, end) for mode, delay, start, end in got}


def test_shared_holders_overlap_but_never_an_exclusive_one(tmp_path):
    runs = _runs([("shared", 0.0, 1.0), ("shared", 0.05, 1.0), ("exclusive", 0.3, 0.3)],
                 tmp_path)
    (s1, e1), (s2, e2) = runs[("shared", 0.0)], runs[("shared", 0.05)]
    assert s2 < e1 and s1 < e2, runs  # the two sharers held the device at once
    alone = runs[("exclusive", 0.3)]
    assert alone[0] >= max(e1, e2) - 0.01, runs  # waited for both to finish


def test_a_waiting_exclusive_holder_is_not_starved_by_later_shared_ones(tmp_path):
    # a shared holder first; one waits to hold alone; a later sharer must wait behind it
    runs = _runs([("shared", 0.0, 1.0), ("exclusive", 0.3, 0.5), ("shared", 0.6, 0.1)],
                 tmp_path)
    first, alone, late = runs[("shared", 0.0)], runs[("exclusive", 0.3)], runs[("shared", 0.6)]
    assert alone[0] >= first[1] - 0.01, runs
    assert late[0] >= alone[1] - 0.01, runs  # the gate held it back until the exclusive one ran


def test_a_hold_inside_this_threads_own_hold(tmp_path, monkeypatch):
    monkeypatch.setenv(device_lock.LOCK_DIR_ENV, str(tmp_path))
    with device_lock.hold("cuda-N"):
        with device_lock.hold("cuda-N", shared=True):  # already alone: takes nothing more
            with device_lock.hold("cuda-N"):
                pass
    with device_lock.hold("cuda-N", shared=True):
        with pytest.raises(RuntimeError, match="wait for forever"):
            with device_lock.hold("cuda-N"):
                pass
    with device_lock.hold("cuda-N"):  # every hold was let go
        pass
