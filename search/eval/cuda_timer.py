"""Timing CUDA work by events, with every timed run queued before the GPU reaches it.

A pair of CUDA events brackets each run on the GPU's own clock. That is only the
kernel's time if the host had launched the kernel by the time the GPU passed the start
event; otherwise the GPU idles inside the bracket, waiting for the host. Between runs
the timer writes 256 MB to flush L2 (about 65 us on an H200), which covered a quiet
host's launch; a host busy with other work did not make it: in the 2026-12-03 suite
(eight workers compiling candidates on 16 CPUs beside the confirmations) the same
0.13-0.15 ms kernels read 7-11% apart between two timings (cross_entropy 0.1360 against
0.1514 ms, cumsum_rows' default 0.1489 against 0.1360).

So the runs go in batches, each queued behind a GPU busy-wait (``torch.cuda._sleep``)
sized to outlast the host's queuing of the batch. An event recorded after the wait says
whether it held: if the GPU had already passed it when the host finished queuing, some
run may have waited on the host, and the batch is timed again behind a wait twice as
long. The busy-waits cost GPU time (a few ms a measurement) but
not the samples. (Sized in SM cycles once a process, a 1 ms wait read 0.97-1.00 ms after
an idle card, a 50 ms pause, a 4 GB copy and a 4096^3 GEMM alike on an H100, 2026-12-06:
the clock does not lengthen it under load. A wait on a flag in pinned host memory that
the host sets once the batch is queued, ``cuStreamWaitValue32``, would last only as long as
the queuing: tried the same day, it deadlocked every evaluation through the judge, since any
host-side wait on the stream before the flag is set, a lazily loaded kernel's first launch
or an ``.item()`` among them, never returns.)
"""
from __future__ import annotations

import time
from typing import Callable

BATCH = 10            # runs queued behind one wait
FIRST_WAIT_MS = 1.0   # the least wait; more when the warmup showed a slower host
# a step's wait (``each``), as its probes': what a forged timer could skip and work through
# unclocked, so no longer than a step's calls need to be queued ahead of the card. A
# generated wrapper took 0.1-0.32 ms of the host's to queue a call on an H100 (2026-12-07,
# ``bench/step_costs.py``), and the card is busy meanwhile with the calls already queued
# (each behind its flush, 0.09 ms).
STEP_WAIT_MS = 0.5
MAX_WAIT_MS = 200.0   # a batch behind a wait this long is kept as timed


def queued_batches(run_batch: Callable[[int, float], tuple[list[float], bool]], reps: int,
                   first_wait_ms: float, batch: int = BATCH,
                   max_wait_ms: float = MAX_WAIT_MS) -> tuple[list[float], int]:
    """``reps`` samples from ``run_batch(n, wait_ms) -> (samples, held)``, in batches of
    ``batch``: a batch whose wait did not hold is run again behind a doubled wait (a
    wait stays doubled for the batches after it). Returns the samples and how many
    batches were run again; one at ``max_wait_ms`` is kept whether it held or not."""
    samples: list[float] = []
    retried = 0
    wait = max(first_wait_ms, 0.0)
    while len(samples) < reps:
        n = min(batch, reps - len(samples))
        got, held = run_batch(n, wait)
        if not held and wait < max_wait_ms:
            retried += 1
            wait = min(max(wait, 0.05) * 2, max_wait_ms)
            continue
        samples += got
    return samples, retried


class CudaTimer:
    """``timer(fn, warmup=, reps=, setup=) -> [ms, ...]`` on the current CUDA device;
    ``setup`` (and the L2 flush) run before each call, outside its bracket."""

    def __init__(self, flush_bytes: int, batch: int = BATCH):
        self.flush_bytes = flush_bytes
        self.batch = batch
        self._flush = None
        self._cycles_per_ms = None
        self.retried = 0  # batches timed again, over this timer's life
        self._last_queue_ms = 0.0  # the host's queuing of the latest batch
        self.last_step: dict = {}  # the latest step's wait (``each``)

    def __call__(self, fn, warmup: int, reps: int, setup=None) -> list[float]:
        import torch
        self._flush_buffer(torch)
        torch.cuda.synchronize()
        host = time.perf_counter()
        for _ in range(warmup):
            if setup:
                setup()
            fn()
        per_run_ms = (time.perf_counter() - host) * 1e3 / max(warmup, 1)
        torch.cuda.synchronize()
        if reps <= 0:
            return []
        # the host's queuing of a batch, as fast as the warmup's, with room to spare
        first = max(FIRST_WAIT_MS, 2 * per_run_ms * min(self.batch, reps))
        samples, retried = queued_batches(
            lambda n, wait: self._batch(torch, [fn] * n, setup, wait), reps, first, self.batch)
        self.retried += retried
        return samples

    def each(self, fns: list) -> list[float]:
        """One timed run of each of ``fns``, in order, all queued behind one wait of
        ``STEP_WAIT_MS``: a step of the judge's (``candidate_main``), whose calls then share
        one head start instead of paying one each. The step runs once, whatever its wait
        did: the judge's clock times the whole step and subtracts what a probe's step cost
        (its calls of nothing queued behind this same wait), so a longer wait, or the step
        run again behind one, is charged to the candidate as if it were hidden work. On an
        H100 (2026-12-06) a cross-entropy's four-call steps cost 0.7 ms beyond their probe,
        0.18 ms a call, where a GELU's cost 0.17: sized by 1.5x the host's queuing of the
        last step, the wait had grown past the probe's for the wrapper that takes longer to
        queue. A step whose wait ran out before the host had queued it reads its calls with
        the host's gaps in them, which its wall holds anyway. The device is synced on the
        way out, whatever a call raised: nothing of the candidate's still runs once it
        answers. ``last_step``: the wait, whether it held and the host's queuing (ms)."""
        import torch
        self.last_step = {}
        if not fns:
            return []
        self._flush_buffer(torch)
        torch.cuda.synchronize()
        try:
            samples, held = self._batch(torch, fns, None, STEP_WAIT_MS)
        finally:
            torch.cuda.synchronize()
        self.last_step = {"wait_ms": STEP_WAIT_MS, "held": held,
                          "queue_ms": round(self._last_queue_ms, 4)}
        return samples

    def _flush_buffer(self, torch) -> None:
        if self._flush is None and self.flush_bytes:
            self._flush = torch.empty(self.flush_bytes, dtype=torch.int8, device="cuda")

    def _batch(self, torch, fns: list, setup, wait_ms: float) -> tuple[list[float], bool]:
        """A run of each of ``fns`` behind a wait of ``wait_ms``: their samples, and
        whether the wait held."""
        n = len(fns)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        waited = torch.cuda.Event()
        torch.cuda._sleep(int(wait_ms * self.cycles_per_ms(torch)))
        waited.record()
        host = time.perf_counter()
        for fn, start, end in zip(fns, starts, ends):
            if setup:
                setup()
            if self._flush is not None:
                self._flush.zero_()
            start.record()
            fn()
            end.record()
        self._last_queue_ms = (time.perf_counter() - host) * 1e3
        held = not waited.query()  # the GPU still in the wait: every run was queued
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)], held

    def cycles_per_ms(self, torch) -> float:
        """The busy-wait's clock cycles a millisecond, measured once (the SM clock)."""
        if self._cycles_per_ms is None:
            cycles = 2_000_000
            torch.cuda._sleep(cycles)  # the first call can be slow; measure the second
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            torch.cuda.synchronize()
            self._cycles_per_ms = cycles / max(start.elapsed_time(end), 1e-3)
        return self._cycles_per_ms
