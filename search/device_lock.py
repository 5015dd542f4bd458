"""One timed measurement at a time per GPU, across every worker process on the host.

Evaluations run in parallel (render, compile and the small correctness cases
need the host's CPUs far more than the GPU), but two processes timing kernels on
one GPU at once would each measure the other's work, and a bench-size kernel of one
(a first run, the float64 oracle, a check) beside another's timed runs would lengthen
them. The timing stage therefore holds an exclusive lock on the GPU for its bench-size
work: an advisory ``flock`` on a file named after the device's UUID, so pool workers
and Ray workers on one host share it, and workers pinned to different GPUs never wait
for each other. The build compiles the bench point's kernels before (Triton's JIT
never compiles while others wait); a small bench point takes the lock phase by phase,
a large one for the whole stage (``timing.measure`` says why).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from pathlib import Path

LOCK_DIR_ENV = "KDSL_LOCK_DIR"  # where the lock files live (default: the temp dir)


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


@contextlib.contextmanager
def exclusive(device: str, waited: dict | None = None):
    """Hold ``device`` alone for the block; the wait is added to ``waited['lock_wait_s']``."""
    name = device_id(device)
    if name is None:
        yield
        return
    with hold(name, waited):
        yield


@contextlib.contextmanager
def hold(name: str, waited: dict | None = None):
    """The host-wide lock called ``name``, held for the block."""
    path = lock_dir() / f"{name.replace('/', '_')}.lock"
    start = time.perf_counter()
    with open(path, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        if waited is not None:  # summed over the holds of one job
            waited["lock_wait_s"] = round(waited.get("lock_wait_s", 0.0) +
                                          time.perf_counter() - start, 4)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
