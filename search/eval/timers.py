"""Timers: ``timer(fn, warmup=, reps=, setup=) -> [ms, ...]``; ``setup`` runs before
every call, outside the timed region. On CUDA each run is bracketed by CUDA events
after a write that flushes L2 (``cuda_timer``); on CPU ``time.perf_counter``."""
from __future__ import annotations

import time
from typing import Callable

from .cuda_timer import CudaTimer

Timer = Callable[..., list[float]]
FLUSH_BYTES = 256 << 20


class CpuTimer:
    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock

    def __call__(self, fn, warmup: int, reps: int, setup=None) -> list[float]:
        for _ in range(warmup):
            if setup:
                setup()
            fn()
        samples = []
        for _ in range(reps):
            if setup:
                setup()
            start = self.clock()
            fn()
            samples.append((self.clock() - start) * 1e3)
        return samples

    def each(self, fns: list) -> list[float]:
        """One timed run of each of ``fns``, in order."""
        samples = []
        for fn in fns:
            start = self.clock()
            fn()
            samples.append((self.clock() - start) * 1e3)
        return samples


_TIMERS: dict[str, Timer] = {}


def default_timer(device: str) -> Timer:
    if device not in _TIMERS:
        _TIMERS[device] = CudaTimer(FLUSH_BYTES) if device == "cuda" else CpuTimer()
    return _TIMERS[device]
