"""The CUDA timer's batching: a batch whose GPU wait ran out before the host had queued it
is timed again behind a longer wait (the GPU side runs only on a CUDA machine)."""
from __future__ import annotations

import pytest
import torch

from kdsl.search.eval.cuda_timer import queued_batches


class ScriptedBatches:
    """A batch holds once its wait reaches ``needs_ms`` (the host's queuing time)."""

    def __init__(self, needs_ms: float):
        self.needs_ms, self.calls = needs_ms, []

    def __call__(self, n: int, wait_ms: float):
        self.calls.append((n, wait_ms))
        held = wait_ms >= self.needs_ms
        # a batch that did not hold reads slow, as a run waiting on the host would
        return [1.0 if held else 9.0] * n, held


def test_batches_that_held_are_kept_in_order_of_reps():
    runs = ScriptedBatches(needs_ms=0.5)
    samples, retried = queued_batches(runs, reps=25, first_wait_ms=1.0, batch=10)
    assert samples == [1.0] * 25 and retried == 0
    assert runs.calls == [(10, 1.0), (10, 1.0), (5, 1.0)]


def test_a_wait_too_short_is_doubled_and_the_batch_timed_again():
    runs = ScriptedBatches(needs_ms=3.0)
    samples, retried = queued_batches(runs, reps=20, first_wait_ms=1.0, batch=10)
    assert samples == [1.0] * 20  # no sample of a batch that waited on the host
    assert retried == 2
    # 1 -> 2 -> 4 ms, and the later batch starts at the wait that held
    assert runs.calls == [(10, 1.0), (10, 2.0), (10, 4.0), (10, 4.0)]


def test_past_the_longest_wait_a_batch_is_kept_as_timed():
    runs = ScriptedBatches(needs_ms=1e9)
    samples, retried = queued_batches(runs, reps=3, first_wait_ms=1.0, batch=10,
                                      max_wait_ms=8.0)
    assert samples == [9.0] * 3
    assert [w for _, w in runs.calls] == [1.0, 2.0, 4.0, 8.0] and retried == 3


def test_no_reps_runs_nothing():
    runs = ScriptedBatches(needs_ms=0.0)
    assert queued_batches(runs, reps=0, first_wait_ms=1.0) == ([], 0)
    assert runs.calls == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_timer_times_a_kernel_behind_its_waits():
    from kdsl.search.eval.cuda_timer import CudaTimer
    x = torch.ones(1 << 24, device="cuda")
    timer = CudaTimer(flush_bytes=1 << 20, batch=4)
    samples = timer(lambda: x.mul_(1.0), warmup=2, reps=10)
    assert len(samples) == 10 and all(0 < s < 100 for s in samples)
