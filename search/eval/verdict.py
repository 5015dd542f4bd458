"""How a worker process (pool or Ray) judges a finished evaluation, in one place.

An evaluation that ran out of memory, or after which the CUDA context is dead,
is a worker failure, and the process that ran it must not evaluate again. Both
executors word these results the same way, so a run gives the same records
whichever executor it used.
"""
from __future__ import annotations

import pickle
import sys
from dataclasses import replace

from ..result import Result


def verdict(job, result: Result) -> tuple[Result, str | None]:
    """The result to report, and why this process must retire (None: it may go on)."""
    if result.artifacts.get("out_of_memory"):
        return Result.failure("worker", f"out of memory in {result.stage}: {result.message}",
                              **result.artifacts), "the last evaluation ran out of memory"
    broken = cuda_broken() if job.config.device == "cuda" else None
    if broken:
        return Result.failure("worker", f"CUDA context lost ({broken}) in {result.stage}: "
                                        f"{result.message}", **result.artifacts), \
            f"CUDA context lost ({broken})"
    return result, None


def cuda_broken() -> str | None:
    """None when CUDA (if this process uses it) still works, else the error it gives."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
        return None
    except Exception as e:  # a sticky error (illegal address): the context is dead
        return (str(e).strip().splitlines() or [type(e).__name__])[0]


def picklable(result: Result) -> Result:
    try:
        pickle.dumps(result)
        return result
    except Exception:  # an artifact that cannot travel is sent as its repr
        return replace(result, artifacts=_plain(result.artifacts))


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)
