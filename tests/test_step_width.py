"""Wider steps of timed calls for fast kernels on a GPU: more buffers, each varied at every
call and every one of the checked step checked (``search/eval/step_width.py``)."""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from fake_backend import QUICK, softmax_op
from kdsl.search.eval import step_width, timed_calls, timing

GIB = 1 << 30
CONFIG = dataclasses.replace(QUICK, time=True, warmup=2, reps=5, slow_cutoff=None)


def test_a_fast_kernel_gets_calls_enough_to_fill_a_step_within_memory_and_checks():
    w = step_width.calls_a_step
    # 0.14 ms a call: STEP_WORK_MS wants 29 calls, capped at MAX_STEP_CALLS
    assert w("cuda", 0.14, 2, 1 << 20, 70 * GIB, 0.01) == step_width.MAX_STEP_CALLS
    # memory: 768 MB a buffer, EXTRA_BYTES of room: 8 more buffers than the two sets
    assert w("cuda", 0.14, 2, 768 << 20, 70 * GIB, 0.01) == 2 + step_width.EXTRA_BYTES // (768 << 20)
    # ... or a quarter of what is free
    assert w("cuda", 0.14, 2, 768 << 20, 8 * GIB, 0.01) == 2 + 2 * GIB // (768 << 20)
    # the checked step's oracles: at 0.3 s each, three fit in CHECK_S, rounded to the sets
    assert w("cuda", 0.14, 2, 1 << 20, 70 * GIB, 0.3) == 2
    assert w("cuda", 0.14, 1, 1 << 20, 70 * GIB, 0.3) == 3
    # a multiple of the input sets: every set as often in a step
    assert w("cuda", 0.5, 4, 1 << 20, 70 * GIB, 0.01) == 8
    # a kernel that fills a step alone, an oracle of unknown cost, the CPU: no wider
    assert w("cuda", 5.0, 2, 1 << 20, 70 * GIB, 0.01) == 2
    assert w("cuda", 0.14, 2, 1 << 20, 70 * GIB, None) == 2
    assert w("cpu", 0.14, 2, 1 << 20, 70 * GIB, 0.01) == 2
    # a probe the judge's clock read as nothing (or a subnormal claim): the widest step,
    # never an error
    assert w("cuda", 0.0, 2, 1 << 20, 70 * GIB, 0.01) == step_width.MAX_STEP_CALLS
    assert w("cuda", 5e-324, 2, 1 << 20, 70 * GIB, 0.01) == step_width.MAX_STEP_CALLS


def test_every_buffer_of_a_wide_step_is_checked_at_one_step():
    op = softmax_op()
    outs = [{"y": torch.zeros(4, 8)} for _ in range(6)]
    pristine = [{"x": torch.ones(4, 8)} for _ in range(2)]
    for _ in range(20):
        p = timed_calls.plan(op, {"M": 4, "N": 8}, "f32", outs, 2, 22, "cpu", pristine)
        assert (p.buffers, p.bases) == (6, 2)
        at = sorted(p.snap_at.values())
        assert sorted(p.snap_at) == list(range(6))
        assert at[0] >= 2 and at[0] % 6 == 0 and at == list(range(at[0], at[0] + 6))


def softmax_kernel(inputs, outputs, sizes):
    x = inputs["x"].double().numpy()
    e = np.exp(x - x.max(axis=1, keepdims=True))
    outputs["y"].copy_(torch.from_numpy(e / e.sum(axis=1, keepdims=True)))


def measure(kernel, monkeypatch, width=4):
    """``timing.measure`` on the CPU with its steps widened to ``width`` calls as on a GPU."""
    monkeypatch.setattr(step_width, "calls_a_step", lambda *a: width)
    return timing.measure(softmax_op(), kernel, CONFIG, timer=timing.default_timer("cpu"),
                          bandwidth=1e9, baselines={})


def test_a_widened_request_calls_every_buffer_and_is_checked(monkeypatch):
    seen = set()

    def noting(inputs, outputs, sizes):
        seen.add(outputs["y"].data_ptr())
        softmax_kernel(inputs, outputs, sizes)

    t = measure(noting, monkeypatch)
    assert t.message is None, t.message
    assert t.artifacts["step_buffers"] == 4 and len(seen) == 4
    # the warm-up and at least TIMED_STEPS steps of timed calls only
    assert len(t.artifacts["timings_ms"]) >= step_width.TIMED_STEPS * 4


def test_a_kernel_wrong_only_on_the_added_buffers_is_caught(monkeypatch):
    """The buffers beyond the input sets are copies of them, varied at every call like
    them: a kernel honest only on the buffers it saw first fails the check of the step."""
    first = []

    def lazy(inputs, outputs, sizes):
        ptr = outputs["y"].data_ptr()
        if ptr not in first and len(first) < 2:
            first.append(ptr)
        if ptr in first:
            softmax_kernel(inputs, outputs, sizes)
        else:
            outputs["y"].zero_()

    t = measure(lazy, monkeypatch)
    assert t.message and "wrong in a timed run" in t.message, t.message


def test_a_candidate_process_is_sent_the_added_buffers(monkeypatch):
    """Through the sandbox: the candidate's process maps the wider request's buffers and
    the judge's clock shares each step's wall among its calls."""
    import textwrap

    import fake_backend
    from fake_backend import SOFTMAX
    from kdsl.search.candidate import Candidate
    from kdsl.search.eval.evaluator import evaluate
    from kdsl.search.jobs import EvalJob
    fake_backend.register()
    monkeypatch.setattr(step_width, "calls_a_step", lambda *a: 4)
    r = evaluate(EvalJob(softmax_op(), Candidate.of("fakeraw", source=textwrap.dedent(SOFTMAX)),
                         dataclasses.replace(CONFIG, timeout_s=120.0)))
    assert r.ok, r.message
    assert r.artifacts["step_buffers"] == 4 and r.artifacts["calls_a_step"] == 4


def as_on_a_gpu(monkeypatch, seen: list | None = None):
    """``step_width.calls_a_step`` as on a GPU with room to spare and a cheap oracle; the
    work a call it was given appended to ``seen``."""
    real = step_width.calls_a_step

    def calls_a_step(device, call_ms, sets, nbytes, free, oracle_s):
        if seen is not None:
            seen.append(call_ms)
        return real("cuda", call_ms, sets, nbytes, 70 * GIB, 0.001)
    monkeypatch.setattr(step_width, "calls_a_step", calls_a_step)


def test_a_kernel_slow_only_in_its_probe_does_not_narrow_its_steps(monkeypatch):
    """The width is the judge's to choose: from its clock's share of the probe, or the
    baseline's time where that is less. A kernel slow at its probe calls alone (a red-team
    pass: it kept steps of two calls, and with them the most of a step's head start a
    forged timer could work through) gets the steps an honest one gets."""
    import time
    seen: list = []
    as_on_a_gpu(monkeypatch, seen)
    calls = [0]

    def slow_probe(inputs, outputs, sizes):
        if sizes.get("M") == 64:
            calls[0] += 1
            if calls[0] in (2, 3):  # the probe request: a call on each set
                time.sleep(0.01)
        softmax_kernel(inputs, outputs, sizes)

    slow = timing.measure(softmax_op(), slow_probe, CONFIG,
                          timer=timing.default_timer("cpu"), bandwidth=1e9, baselines={})
    assert slow.message is None
    # its width came from the baseline's time (tens of microseconds), not the 10 ms its
    # probe calls took (the old rule's; under that, steps of two calls). (Whole widths
    # compared with an honest kernel's moved with the load of a busy CI machine.)
    assert len(seen) == 1 and seen[0] <= slow.baseline_ms * 1.001 and seen[0] < 5.0, seen
    assert slow.artifacts["step_buffers"] > 2


# claims a second more than its probe calls took, and works as an honest kernel does
CLAIMS_A_SLOW_PROBE = """
import time
from kdsl.search.eval import timers
_real = time.perf_counter
_ahead = [0.0]
timers._TIMERS["cpu"] = timers.CpuTimer(clock=lambda: _real() + _ahead[0])
"""


def test_a_candidate_claiming_a_slow_probe_does_not_narrow_its_steps(monkeypatch):
    import textwrap

    import fake_backend
    from fake_backend import SOFTMAX
    from kdsl.search.candidate import Candidate
    from kdsl.search.eval.evaluator import evaluate
    from kdsl.search.jobs import EvalJob
    fake_backend.register()
    as_on_a_gpu(monkeypatch)
    monkeypatch.setattr(timing, "BASELINES", {})  # (not one judged at another width)
    # a step's work wanted far above what the judge's clock reads a call on a busy 2-core
    # host (up to a few ms): an honest kernel's steps are the widest, and a claim of a
    # second a call would have made them one call a set
    monkeypatch.setattr(step_width, "STEP_WORK_MS", 400.0)
    source = CLAIMS_A_SLOW_PROBE + SOFTMAX.replace(
        "def kernel(inputs, outputs, sizes):\n",
        "def kernel(inputs, outputs, sizes):\n"
        "    global _n\n"
        "    _n = globals().get('_n', 0) + ((sizes.get('M'), sizes.get('N')) == (64, 128))\n"
        "    if _n in (2, 3):\n"
        "        _ahead[0] += 1.0\n")
    r = evaluate(EvalJob(softmax_op(), Candidate.of("fakeraw", source=textwrap.dedent(source)),
                         dataclasses.replace(CONFIG, timeout_s=120.0)))
    assert r.ok, r.message
    assert r.artifacts["step_buffers"] == step_width.MAX_STEP_CALLS
    # the baseline, judged as a candidate on the CPU, in steps as wide as a kernel of its
    # time gets (here the widest): a step's own cost shared alike in both figures
    assert r.artifacts["baseline_clock"]["calls_a_step"] == step_width.MAX_STEP_CALLS
