"""Timed runs alone on the GPU, across every worker process on the host.

Evaluations run in parallel (render, compile and the small correctness cases
need the host's CPUs far more than the GPU), but a kernel of one process on the GPU
while another's timed runs are on it lengthens them: the GPU time-slices between
processes' contexts, and a bracket that spans a switch times the other's work too.
So every use of the GPU takes a host-wide reader-writer lock, an advisory ``flock``
on a file named after the device's UUID (pool workers and Ray workers on one host share
it; workers pinned to different GPUs never wait for each other):

- ``exclusive``: bench-size work, above all the timed runs (the timing stage; a small
  bench point takes it phase by phase, a large one for the whole stage, as
  ``timing.measure`` says);
- ``shared``: the rest of the work a search puts on the GPU (the small correctness
  cases, uploads). Any number of processes hold it at once, none while one holds it
  alone. torch.compile's first call takes neither (``timing.time_baseline`` says why).

Until 2026-12-04 only the bench-size work took the lock, and the small cases ran beside
others' timed runs: in that day's suite one kernel's two timings in a confirmation still
read up to 5.2% apart (cumsum_rows' default, 0.1415 against 0.1344 ms; matmul's 4.0%)
with the host's launch latency already out of the brackets (``cuda_timer``).

A second file, the gate, keeps a stream of shared holders from starving a process
that waits to hold the GPU alone: every taker passes the gate, and one waiting for
``exclusive`` keeps it closed until it has the GPU. A thread's hold inside its own hold
of the same device takes nothing more (shared inside exclusive is already alone);
exclusive inside shared would wait for itself and is refused.

Known limit: a shared hold lasts as long as the work under it. A small case's first call
compiles where the build could not compile ahead (a torch.compile candidate, a Triton
build whose ``prepare`` failed), and a kernel that hangs on a small case holds the GPU
until its job's time limit; meanwhile a process waiting to hold it alone closes the gate,
and every other sharer waits too (their waits count against their own time limits). Not
holding the lock would not help: a hanging kernel stays on the GPU, time-sliced with the
timed runs, and lengthens them; waiting is the lesser harm.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
import time
from pathlib import Path

LOCK_DIR_ENV = "KDSL_LOCK_DIR"  # where the lock files live (default: the temp dir)

_held = threading.local()  # name -> "exclusive" | "shared": this thread's holds


def lock_dir() -> Path:
    root = os.environ.get(LOCK_DIR_ENV) or tempfile.gettempdir()
    path = Path(root) / "kdsl-device-locks"
    path.mkdir(parents=True, exist_ok=True)
    return path


def device_id(device: str) -> str | None:
    """A host-wide name of the GPU this process uses; None for the CPU (no lock)."""
    if device != "cuda":
        return None
    import torch
    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid:
        return f"cuda-{uuid}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    physical = visible[index] if index < len(visible) and visible[index] else str(index)
    return f"cuda-{physical}"


def held_alone() -> bool:
    """Whether this thread holds a device alone now (a worker uses one GPU)."""
    return "exclusive" in _held.__dict__.values()


@contextlib.contextmanager
def exclusive(device: str, waited: dict | None = None):
    """Hold ``device`` alone for the block; the wait is added to ``waited['lock_wait_s']``."""
    with _on_device(device, waited, shared=False):
        yield


@contextlib.contextmanager
def shared(device: str, waited: dict | None = None):
    """Use ``device`` for the block beside other shared users, never beside an
    exclusive one; the wait is added to ``waited['lock_wait_s']``."""
    with _on_device(device, waited, shared=True):
        yield


@contextlib.contextmanager
def _on_device(device: str, waited: dict | None, shared: bool):
    name = device_id(device)
    if name is None:
        yield
        return
    with hold(name, waited, shared=shared):
        yield


@contextlib.contextmanager
def hold(name: str, waited: dict | None = None, shared: bool = False):
    """The host-wide lock called ``name``, held for the block (alone unless ``shared``)."""
    holds = _held.__dict__
    mode = "shared" if shared else "exclusive"
    if name in holds:
        if holds[name] == "shared" and not shared:
            raise RuntimeError(f"device lock {name}: exclusive asked for inside this thread's "
                               f"shared hold, which it would wait for forever")
        yield
        return
    base = lock_dir() / name.replace("/", "_")
    start = time.perf_counter()
    with open(f"{base}.lock", "a+") as f, open(f"{base}.gate", "a+") as gate:
        fcntl.flock(gate.fileno(), fcntl.LOCK_EX)
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        finally:
            fcntl.flock(gate.fileno(), fcntl.LOCK_UN)
        if waited is not None:  # summed over the holds of one job (rounded where shown)
            waited["lock_wait_s"] = waited.get("lock_wait_s", 0.0) + time.perf_counter() - start
        holds[name] = mode
        try:
            yield
        finally:
            del holds[name]
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
