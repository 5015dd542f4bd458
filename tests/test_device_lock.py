"""The device lock serializes timed regions across processes, per device name."""
from __future__ import annotations

import multiprocessing as mp
import time

from kdsl.search import device_lock


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


def test_different_devices_do_not_wait_for_each_other(tmp_path):
    runs = _intervals(["cuda-A", "cuda-B"], tmp_path)
    (_, s1, e1), (_, s2, e2) = runs
    assert s2 < e1, runs  # overlapping: the second did not wait for the first


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
