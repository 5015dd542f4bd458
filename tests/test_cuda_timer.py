"""The CUDA timer's batching: a batch whose GPU wait ran out before the host had queued it
is timed again behind a longer wait (the GPU side runs only on a CUDA machine)."""
from __future__ import annotations

import sys
import types

import pytest
import torch

from kdsl.search.eval import cuda_timer
from kdsl.search.eval.cuda_timer import STEP_WAIT_MS, CudaTimer, queued_batches


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



class VirtualCard:
    """torch.cuda as ``CudaTimer`` uses it, on two clocks (ms): the host's and the GPU's
    (how far its queue reaches). A 1,000-cycle millisecond."""

    def __init__(self):
        self.host = self.gpu = 0.0
        card = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self):
                card.gpu = max(card.gpu, card.host)
                self.at = card.gpu

            def query(self):
                return self.at <= card.host

            def elapsed_time(self, other):
                return other.at - self.at

        class Flush:
            def zero_(self):
                card.gpu = max(card.gpu, card.host) + 0.07
                card.host += 0.005

        self.torch = types.SimpleNamespace(
            cuda=types.SimpleNamespace(Event=Event, _sleep=self.sleep,
                                       synchronize=self.sync),
            empty=lambda *a, **k: Flush(), int8=None)
        self.time = types.SimpleNamespace(perf_counter=lambda: self.host / 1e3)

    def sleep(self, cycles):
        self.gpu = max(self.gpu, self.host) + cycles / 1000.0

    def sync(self):
        self.host = max(self.host, self.gpu)

    def call(self, work_ms: float, host_ms: float, syncs: bool = False):
        def fn():
            self.host += host_ms
            self.gpu = max(self.gpu, self.host) + work_ms
            if syncs:
                self.sync()
        return fn


@pytest.fixture
def card(monkeypatch):
    c = VirtualCard()
    monkeypatch.setitem(sys.modules, "torch", c.torch)
    monkeypatch.setattr(cuda_timer, "time", c.time)
    return c


def _timer() -> CudaTimer:
    timer = CudaTimer(flush_bytes=1)
    timer._cycles_per_ms = 1000.0
    return timer


def test_a_steps_calls_share_one_wait_and_read_their_own_work(card):
    timer = _timer()
    for _ in range(3):
        start = card.host
        samples = timer.each([card.call(0.1 * (k + 1), 0.03) for k in range(4)])
        assert samples == pytest.approx([0.1, 0.2, 0.3, 0.4])
        # one wait, four flushes and the work: no wait a call
        assert card.host - start == pytest.approx(STEP_WAIT_MS + 4 * 0.07 + 1.0)
    assert timer.retried == 0


def test_a_step_runs_once_behind_the_probes_wait_however_slow_its_host(card):
    """The judge subtracts a probe's step, queued behind the same wait: a step is never run
    again, nor queued behind a longer wait because an earlier step queued slowly (both
    would be on the judge's clock as the candidate's own time)."""
    timer = _timer()
    runs = []

    def slow(work_ms, host_ms, syncs=False):
        inner = card.call(work_ms, host_ms, syncs)
        return lambda: (runs.append(1), inner())
    start = card.host
    samples = timer.each([slow(0.05, 0.6)] * 4)  # 2.4 ms to queue: the wait runs out
    assert len(runs) == 4 and timer.last_step["held"] is False
    # the host's gaps are in the later calls' samples, and on the wall only once
    assert samples[-1] > 0.05 and card.host - start < 2 * (STEP_WAIT_MS + 4 * 0.6)
    start = card.host
    samples = timer.each([card.call(0.1, 0.03)] * 4)  # a quick step after it
    assert samples == pytest.approx([0.1] * 4) and timer.last_step["held"] is True
    assert card.host - start == pytest.approx(STEP_WAIT_MS + 4 * 0.07 + 0.4)
    assert timer.last_step["wait_ms"] == STEP_WAIT_MS and timer.retried == 0


def test_a_step_whose_calls_wait_on_the_gpu_is_run_once(card):
    """A call that syncs (``.item()``) lets no wait hold: its step is kept as timed."""
    timer = _timer()
    walls = []
    for _ in range(3):
        start = card.host
        timer.each([card.call(0.1, 0.03, syncs=True)] * 4)
        walls.append(card.host - start)
    assert walls == pytest.approx([walls[0]] * 3)
    # one wait and one pass of its calls (flush, host, work), never a second
    assert walls[0] <= STEP_WAIT_MS + 4 * (0.07 + 0.005 + 0.03 + 0.1)


def test_a_raising_call_leaves_nothing_queued(card):
    timer = _timer()

    def raises():
        card.gpu = max(card.gpu, card.host) + 5.0  # queued, then the call raises
        raise RuntimeError("tampered")
    with pytest.raises(RuntimeError):
        timer.each([card.call(0.1, 0.03), raises])
    assert card.host >= card.gpu  # synced on the way out

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_timer_times_a_kernel_behind_its_waits():
    from kdsl.search.eval.cuda_timer import CudaTimer
    x = torch.ones(1 << 24, device="cuda")
    timer = CudaTimer(flush_bytes=1 << 20, batch=4)
    samples = timer(lambda: x.mul_(1.0), warmup=2, reps=10)
    assert len(samples) == 10 and all(0 < s < 100 for s in samples)
