"""The timing stage with fake timers and clocks: medians, the baseline cache, the floor."""
from __future__ import annotations

import contextlib
import dataclasses
import statistics

import numpy as np
import pytest
import torch

from fake_backend import QUICK, SPECS, load, softmax_op
from kdsl import spec
from kdsl.search.eval import floor, timers, timing

CONFIG = dataclasses.replace(QUICK, time=True, warmup=2, reps=5, slow_cutoff=10.0)


def softmax_kernel(inputs, outputs, sizes):
    x = inputs["x"].double().numpy()
    e = np.exp(x - x.max(axis=1, keepdims=True))
    outputs["y"].copy_(torch.from_numpy(e / e.sum(axis=1, keepdims=True)))


class FakeTimer:
    """Scripted samples for the candidate and the baseline. ``measure`` times the baseline
    first (unless its cache has it), then a probe of the candidate, one run of each of its
    input sets (no warmup, a rep a set: given the candidate's first samples), then the
    candidate's reps."""

    def __init__(self, kernel=(), baseline=None):
        self.kernel, self.baseline = list(kernel), baseline
        self.calls = []

    def __call__(self, fn, warmup, reps, setup=None):
        self.calls.append((warmup, reps))
        for _ in range(warmup + reps):  # run it for real, so the post-timing check sees outputs
            if setup:
                setup()
            fn()
        if warmup == 0 and reps <= timing.GPU_SETS:  # the probe: a run on each set
            return self.kernel[:reps]
        probed = any(w == 0 and r <= timing.GPU_SETS for w, r in self.calls)
        return self.kernel if probed else self.baseline


class FakeClock:
    """A clock that the timed function advances by scripted amounts (seconds)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_cpu_timer_takes_reps_after_warmup_and_runs_setup_outside():
    clock = FakeClock()
    steps = iter([100.0, 100.0, 0.005, 0.001, 0.003, 0.002, 0.004])  # two warm-ups are slow
    setups = []

    def fn():
        clock.now += next(steps)

    def setup():
        setups.append(clock.now)
        clock.now += 50.0  # setup time must not count

    samples = timers.CpuTimer(clock)(fn, warmup=2, reps=5, setup=setup)
    assert samples == pytest.approx([5.0, 1.0, 3.0, 2.0, 4.0])
    assert len(setups) == 7


def test_cpu_timer_times_each_of_a_steps_calls_in_order():
    clock = FakeClock()
    ran = []

    def call(k, ms):
        def fn():
            ran.append(k)
            clock.now += ms / 1e3
        return fn

    samples = timers.CpuTimer(clock).each([call(0, 2.0), call(1, 7.0), call(2, 3.0)])
    assert samples == pytest.approx([2.0, 7.0, 3.0]) and ran == [0, 1, 2]
    assert timers.CpuTimer(clock).each([]) == []


def test_measure_reports_the_medians_and_the_floor(monkeypatch):
    monkeypatch.setattr(floor, "cache_bytes", lambda: 0)  # the 64 KB point counts in full
    op = softmax_op()
    timer = FakeTimer([5.0, 1.0, 3.0, 2.0, 4.0], [9.0, 6.0, 7.0, 8.0, 6.5])
    t = timing.measure(op, softmax_kernel, CONFIG, timer=timer, bandwidth=1e9, baselines={})
    assert t.message is None
    assert t.time_ms == 3.0 and t.baseline_ms == 7.0 and t.baseline_name == "eager"
    nbytes = 2 * 64 * 128 * 4
    assert t.artifacts["bytes"] == nbytes
    assert t.artifacts["floor_ms"] == pytest.approx(nbytes / 1e9 * 1e3)
    assert t.artifacts["suspect"] is False
    assert t.artifacts["bench"] == {"sizes": {"M": 64, "N": 128}, "dtype": "f32"}
    assert timer.calls == [(2, 5), (0, 2), (2, 5)]  # baseline, probe, candidate


def test_the_baseline_is_timed_once_per_process_and_point():
    op, cache = softmax_op(), {}
    first = FakeTimer([1.0] * 5, [4.0] * 5)
    timing.measure(op, softmax_kernel, CONFIG, timer=first, bandwidth=1e9, baselines=cache)
    second = FakeTimer([2.0] * 5)
    t = timing.measure(op, softmax_kernel, CONFIG, timer=second, bandwidth=1e9, baselines=cache)
    assert len(second.calls) == 2 and t.baseline_ms == 4.0 and t.time_ms == 2.0
    other = dataclasses.replace(CONFIG, baseline="compile")
    third = FakeTimer([2.0] * 5, [3.0] * 5)
    t = timing.measure(op, softmax_kernel, other, timer=third, bandwidth=1e9, baselines=cache,
                       compile_fn=lambda fn: fn)
    assert len(third.calls) == 3 and t.baseline_name == "torch.compile"


def test_a_kernel_far_slower_than_the_baseline_is_ranked_by_its_probe():
    op = softmax_op()
    timer = FakeTimer([200.0] * 5, [10.0] * 5)  # the probe: 20x the baseline, 7 runs 1.4 s
    t = timing.measure(op, softmax_kernel, CONFIG, timer=timer, bandwidth=1e9, baselines={})
    assert t.message is None and t.time_ms == 200.0 and t.baseline_ms == 10.0
    assert timer.calls == [(2, 5), (0, 2)]  # no warmup or reps after the probe
    assert t.artifacts["reps_cut"] == "one timed run, 200 ms: over 10x the baseline's 10 ms"
    assert t.artifacts["timings_ms"] == [200.0, 200.0]  # one run of each input set

    def timed_in_full(kernel_ms, baseline_ms, config=CONFIG):
        timer = FakeTimer([kernel_ms] * 5, [baseline_ms] * 5)
        t = timing.measure(op, softmax_kernel, config, timer=timer, bandwidth=1e9, baselines={})
        return timer.calls == [(2, 5), (0, 2), (2, 5)] and "reps_cut" not in t.artifacts
    assert timed_in_full(190.0, 20.0)  # 9.5x the baseline
    assert timed_in_full(140.0, 1.0)  # 140x, but seven runs are under a second
    assert timed_in_full(200.0, 10.0, dataclasses.replace(CONFIG, slow_cutoff=None))


def test_faster_than_the_memory_floor_is_suspect_once_timed_again(monkeypatch):
    monkeypatch.setattr(floor, "cache_bytes", lambda: 0)  # the 64 KB point counts in full
    op = softmax_op()
    timer = FakeTimer([0.001] * 5, [1.0] * 5)
    t = timing.measure(op, softmax_kernel, CONFIG, timer=timer, bandwidth=1e9, baselines={})
    assert t.artifacts["suspect"] is True
    assert t.message.startswith("suspect: 0.001 ms is faster than the memory-traffic floor")
    assert "timed again: 0.001 ms" in t.message and t.artifacts["recheck_timings_ms"]
    assert t.time_ms == 0.001  # kept for the record


def test_a_time_below_the_floor_once_is_believed_when_the_second_timing_is_not(monkeypatch):
    monkeypatch.setattr(floor, "cache_bytes", lambda: 0)
    op = softmax_op()

    class OnceFast(FakeTimer):
        def __call__(self, fn, warmup, reps, setup=None):
            out = super().__call__(fn, warmup, reps, setup)
            return [0.001] * reps if self.calls.count((warmup, reps)) == 1 and \
                (warmup, reps) == (CONFIG.warmup, CONFIG.reps) and len(self.calls) == 3 else out

    t = timing.measure(op, softmax_kernel, CONFIG, timer=OnceFast([1.0] * 5, [1.0] * 5),
                       bandwidth=1e9, baselines={})
    assert t.message is None and t.time_ms == 1.0 and t.artifacts["suspect"] is False


def test_a_failing_compile_falls_back_to_eager_and_says_so():
    op = softmax_op()

    def broken_compile(fn):
        raise RuntimeError("inductor is not available here")

    config = dataclasses.replace(CONFIG, baseline="compile")
    timer = FakeTimer([1.0] * 5, [2.0] * 5)
    t = timing.measure(op, softmax_kernel, config, timer=timer, bandwidth=1e9, baselines={},
                       compile_fn=broken_compile)
    assert t.message is None and t.baseline_name == "eager"
    assert "inductor is not available here" in t.artifacts["baseline_fallback"]


def test_a_compile_that_captures_no_graph_is_reported_as_eager():
    import torch
    op = load("softmax")
    sizes = {"M": 4, "N": 8}
    tensors = {"x": torch.randn(4, 8)}
    # config.patch, not monkeypatch: undoing a monkeypatch deletes the config entry
    with torch._dynamo.config.patch(disable=True):
        run, name, note = timing.baseline_runner(op, sizes, tensors, "compile")
    assert name == "eager" and "captured no graph" in note
    assert torch.allclose(run(), torch.softmax(tensors["x"], dim=1))


def test_the_baseline_function_has_a_source_file_of_its_own():
    # torch.compile < 2.13 wraps a function without one in a shared wrapper whose recompile
    # limit silently ended compilation after eight ops in one worker (H200, torch 2.11)
    import inspect

    import torch
    from kdsl import baseline
    fns = [timing.baseline_function(op, baseline.namespace(op, {"M": 4, "N": 8}, {}))
           for op in (load("softmax"), load("rmsnorm"))]
    files = [inspect.getsourcefile(fn) for fn in fns]
    assert None not in files and files[0] != files[1]
    assert "softmax" in inspect.getsource(fns[0])
    x = torch.randn(4, 8)
    assert torch.allclose(fns[0](x), torch.softmax(x, dim=1))
    run, name, note = timing.baseline_runner(load("softmax"), {"M": 4, "N": 8}, {"x": x},
                                             "compile")
    assert name == "torch.compile" and note == ""


def test_auto_baseline_is_compile_on_cuda_and_eager_on_cpu():
    assert timing.baseline_mode(CONFIG) == "eager"
    assert timing.baseline_mode(dataclasses.replace(CONFIG, device="cuda")) == "compile"
    assert timing.baseline_mode(dataclasses.replace(CONFIG, baseline="eager",
                                                    device="cuda")) == "eager"


def test_bench_point_prefers_the_device_and_bench_dtype_can_override():
    op = load("softmax")
    cpu, anywhere = timing.bench_point(op, "cpu"), timing.bench_point(op, "cuda")
    assert cpu.device == "cpu" and cpu.size_dict() == {"M": 4096, "N": 4096}
    assert anywhere.device is None and anywhere.dtype == "bf16"
    assert timing.bench_dtype(op, anywhere, None) == "bf16"
    assert timing.bench_dtype(op, anywhere, "f16") == "f16"
    assert timing.bench_dtype(op, anywhere, "i64") == "bf16"  # not a dtype of this op


def test_a_kernel_that_skips_work_at_the_bench_size_is_caught():
    op = softmax_op()

    def lazy(inputs, outputs, sizes):
        if sizes["M"] * sizes["N"] >= 64 * 128:
            outputs["y"][: sizes["M"] // 2].zero_()
            return
        softmax_kernel(inputs, outputs, sizes)

    t = timing.measure(op, lazy, CONFIG, timer=FakeTimer([1.0] * 5, [1.0] * 5), bandwidth=1e9,
                       baselines={})
    assert t.message.startswith("wrong at the bench point M=64, N=128, f32: y: 4096 of 8192 "
                                "elements never written")


def test_a_kernel_that_stops_working_after_its_first_calls_is_caught():
    op = softmax_op()
    calls = []

    def twice(inputs, outputs, sizes):  # right on the checked first run and the probe only
        calls.append(1)
        if len(calls) <= 2:
            softmax_kernel(inputs, outputs, sizes)

    t = timing.measure(op, twice, CONFIG, timer=FakeTimer([1.0] * 5, [1.0] * 5), bandwidth=1e9,
                       baselines={})
    assert t.message.startswith("wrong in a timed run at the bench point")


def test_a_kernel_that_keeps_its_first_answer_fails_in_the_timed_runs():
    op = softmax_op()
    kept = {}

    def keeping(inputs, outputs, sizes):  # an answer kept by shape, as a cache would
        key = tuple(sizes.items())
        if key not in kept:
            softmax_kernel(inputs, outputs, sizes)
            kept[key] = outputs["y"].clone()
        outputs["y"].copy_(kept[key])

    t = timing.measure(op, keeping, CONFIG, timer=FakeTimer([1.0] * 5, [1.0] * 5),
                       bandwidth=1e9, baselines={})
    assert t.message.startswith("wrong in a timed run at the bench point")


def test_every_timed_call_sees_inputs_no_call_saw_before():
    op = softmax_op()
    seen = []

    def noting(inputs, outputs, sizes):
        seen.append(inputs["x"].numpy().tobytes())
        softmax_kernel(inputs, outputs, sizes)

    t = timing.measure(op, noting, CONFIG, timer=FakeTimer([1.0] * 5, [1.0] * 5), bandwidth=1e9,
                       baselines={})
    assert t.message is None and len(seen) == 2 + CONFIG.warmup + CONFIG.reps + 1
    timed = seen[1:]  # after the first, checked run (the probe's two calls, then the reps)
    assert len(set(timed)) == len(timed)


def test_an_answer_kept_by_a_sample_of_the_input_is_never_served():
    """Every timed call's inputs differ from every earlier call's in every row: a key read
    from any part of them never comes round again."""
    op = softmax_op("M=1024, N=16")
    kept, served = {}, []

    def keeping(inputs, outputs, sizes):  # keyed by the first and last rows' contents
        x = inputs["x"].numpy()
        key = (x[:1].tobytes(), x[-1:].tobytes())
        served.append(key in kept)
        if key not in kept:
            softmax_kernel(inputs, outputs, sizes)
            kept[key] = outputs["y"].clone()
        outputs["y"].copy_(kept[key])

    t = timing.measure(op, keeping, CONFIG, timer=FakeTimer([1.0] * 5, [1.0] * 5),
                       bandwidth=1e9, baselines={})
    assert t.message is None
    assert len(served) >= 8 and not any(served[2:])  # (the first two: pristine sets)


def test_timed_runs_alternate_between_the_two_input_sets():
    op = softmax_op()
    seen = []

    def noting(inputs, outputs, sizes):
        seen.append(inputs["x"].data_ptr())
        softmax_kernel(inputs, outputs, sizes)

    t = timing.measure(op, noting, CONFIG, timer=FakeTimer([1.0] * 5, [1.0] * 5), bandwidth=1e9,
                       baselines={})
    assert t.message is None
    timed = seen[2:]  # after the first, checked run and the one probe run
    assert len(set(timed)) == 2 and all(a != b for a, b in zip(timed, timed[1:]))


def test_wrong_values_at_the_bench_size_name_the_worst_element():
    op = softmax_op()

    def off(inputs, outputs, sizes):
        softmax_kernel(inputs, outputs, sizes)
        outputs["y"][3, 7] += 0.5

    t = timing.measure(op, off, CONFIG, timer=FakeTimer([1.0] * 5, [1.0] * 5), bandwidth=1e9,
                       baselines={})
    assert "worst at [3, 7]" in t.message


def test_no_bench_point_is_a_clear_failure():
    op = dataclasses.replace(softmax_op(), bench=())
    t = timing.measure(op, softmax_kernel, CONFIG, timer=FakeTimer(), bandwidth=1e9)
    assert t.message == "op 'softmax' declares no bench point for cpu"


def test_traffic_counts_every_input_and_output_at_its_dtype():
    op = load("swiglu")
    assert floor.traffic_bytes(op, {"M": 4, "N": 8}, "bf16") == 3 * 32 * 2
    assert floor.traffic_bytes(op, {"M": 4, "N": 8}, "f32") == 3 * 32 * 4


def test_cpu_copy_bandwidth_is_measured_once_per_size():
    bw = floor.copy_bandwidth("cpu", 3 << 20)
    assert bw > 1e8
    assert floor.copy_bandwidth("cpu", 4 << 20) == bw  # same power-of-two bucket, cached


def test_gpu_copy_bandwidth_is_measured_at_each_call_and_the_fastest_kept(monkeypatch):
    """A copy slowed by interference once must not set a process's floors for good."""
    reads = iter([3.8e12, 4.2e12, 4.0e12])
    monkeypatch.setattr(floor, "_measure_copy", lambda device, moved: next(reads))
    monkeypatch.setattr(floor, "_BANDWIDTH", {})
    got = [floor.copy_bandwidth("cuda", 1 << 20) for _ in range(3)]
    assert got == [3.8e12, 4.2e12, 4.2e12]


def test_real_cpu_timing_is_positive():
    op = softmax_op("M=16, N=32")
    every = dataclasses.replace(CONFIG, slow_cutoff=None)  # numpy may be 10x torch here
    t = timing.measure(op, softmax_kernel, every, baselines={})
    assert t.message is None and t.time_ms > 0 and t.baseline_ms > 0
    assert len(t.artifacts["timings_ms"]) == CONFIG.reps


class LockSpy:
    """Stands in for the device lock and says, at any moment, whether it is held."""

    def __init__(self):
        self.held, self.entries, self.sharing = False, 0, 0

    @contextlib.contextmanager
    def shared(self, device, waited=None):
        self.sharing += 1
        try:
            yield
        finally:
            self.sharing -= 1

    @property
    def on_device(self) -> bool:
        """Whether GPU work now would be under the lock, alone or shared."""
        return self.held or self.sharing > 0

    @contextlib.contextmanager
    def exclusive(self, device, waited=None):
        assert not self.held, "the lock was taken twice"
        self.held, self.entries = True, self.entries + 1
        try:
            yield
        finally:
            self.held = False


@pytest.mark.parametrize("threshold,mode", [(1 << 40, "phases"), (0, "stage")])
def test_the_device_lock_covers_bench_work_phase_by_phase_or_the_whole_stage(monkeypatch, threshold, mode):
    spy = LockSpy()
    monkeypatch.setattr(timing.device_lock, "exclusive", spy.exclusive)
    monkeypatch.setattr(timing.device_lock, "shared", spy.shared)
    kernel_calls, timer_calls, judged, poisoned, oracled, uploads = [], [], [], [], [], []
    fresh = timing.corr.fresh_inputs
    monkeypatch.setattr(timing.corr, "fresh_inputs",
                        lambda *a, **k: (uploads.append(spy.on_device), fresh(*a, **k))[1])
    judge = timing.bench_judge
    monkeypatch.setattr(timing, "bench_judge", lambda *a: (judged.append(spy.held), judge(*a))[1])
    alloc, outputs_of = timing.corr.alloc_outputs, timing.baseline.outputs_of
    monkeypatch.setattr(timing.corr, "alloc_outputs",
                        lambda *a, **k: (poisoned.append(spy.held), alloc(*a, **k))[1])
    monkeypatch.setattr(timing.baseline, "outputs_of",
                        lambda *a: (oracled.append(spy.held), outputs_of(*a))[1])
    monkeypatch.setattr(timing, "_ORACLES", {})

    def kernel(inputs, outputs, sizes):
        kernel_calls.append(spy.held)
        softmax_kernel(inputs, outputs, sizes)

    class Timer(FakeTimer):
        def __call__(self, fn, warmup, reps, setup=None):
            timer_calls.append(spy.held)
            return super().__call__(fn, warmup, reps, setup)

    config = dataclasses.replace(CONFIG, exclusive_bench_bytes=threshold)
    t = timing.measure(softmax_op(), kernel, config, timer=Timer([1.0] * 5, [2.0] * 5),
                       bandwidth=1e9, baselines={})
    assert t.message is None and t.artifacts["device_lock"] == mode
    assert timer_calls == [True, True, True]  # the baseline's, the probe's, the kernel's runs
    # the bench-size check runs on a held GPU too: no other worker times beside it
    assert all(kernel_calls) and len(kernel_calls) > 1
    # the first run's check, and each input set's check at a timed run the judge drew
    assert judged == [True, True, True]
    # the outputs' poisoning and the float64 oracle's runs are bench-size GPU work too
    # (uploads are not: they cross PCIe, not the HBM a timed run reads)
    # (the oracle of the first run, and of each set's inputs at its checked timed run)
    assert poisoned == [True, True] and oracled == [True, True, True]
    # uploads share the GPU with other sharers (small correctness cases), never with
    # another's timed runs: kernel's inputs, their pristine copy, the baseline's inputs
    assert len(uploads) >= 2 and all(uploads), uploads


def test_the_bench_traffic_is_counted_once_a_process(monkeypatch):
    """Counting the distinct rows a million indices gather took most of a second an
    evaluation, inside the device lock: a process's bench case is counted once."""
    op = softmax_op()
    case = timing.bench_case(op, timing.bench_point(op, "cpu"), "f32")
    counted = []
    monkeypatch.setattr(floor, "_BENCH_TRAFFIC", {})
    real = floor.traffic_bytes
    monkeypatch.setattr(floor, "traffic_bytes", lambda *a: counted.append(1) or real(*a))
    first = floor.bench_traffic_bytes(op, case)
    assert floor.bench_traffic_bytes(op, case) == first == real(op, case.sizes, "f32",
                                                                  case.inputs)
    assert len(counted) == 1


@pytest.mark.parametrize("threshold", [1 << 40, 0])
def test_a_kernel_that_writes_its_input_fails_with_or_without_a_kept_copy(monkeypatch,
                                                                           threshold):
    """A large point (threshold 0: the whole stage locked) compares the inputs with a copy
    taken on the device before any run instead of uploading them again: the same verdict."""
    uploads = []
    monkeypatch.setattr(timing, "_ORACLES", {})
    fresh = timing.corr.fresh_inputs
    monkeypatch.setattr(timing.corr, "fresh_inputs",
                        lambda *a, **k: uploads.append(1) or fresh(*a, **k))

    def scribbler(inputs, outputs, sizes):
        softmax_kernel(inputs, outputs, sizes)
        inputs["x"][0, 0] += 1.0

    config = dataclasses.replace(CONFIG, exclusive_bench_bytes=threshold)
    t = timing.measure(softmax_op(), scribbler, config, timer=FakeTimer([1.0] * 5, [2.0] * 5),
                       bandwidth=1e9, baselines={})
    assert t.message and "input 'x' was modified by the kernel" in t.message
    # the bench inputs, and without a device copy a second upload for the checks, which
    # the oracle also computes from
    assert len(uploads) == (1 if threshold == 0 else 2)


def test_a_16_bit_output_is_judged_in_float32_and_its_oracle_kept_so():
    """A GB bf16 output compared through float64 copies took seconds in the device lock;
    float32 holds its tolerances (1e-3 and wider) with room to spare."""
    op = softmax_op()
    rtol, atol = op.tolerance.for_dtype("bf16")
    ref = torch.tensor([[1.0, 2.0, float("inf"), 0.5]], dtype=torch.float64)
    near = ref.clone()
    near[0, 0] += 0.9 * (atol + rtol * 1.0)
    ok, worst = timing.close_on_device(op, "bf16", {"y": near.to(torch.bfloat16)}, {"y": ref})
    assert ok is True and 0 < worst < atol + rtol and np.isfinite(worst)  # inf == inf ignored
    far = ref.clone()
    far[0, 1] += 2 * (atol + rtol * 2.0)
    assert timing.close_on_device(op, "bf16", {"y": far.to(torch.bfloat16)}, {"y": ref})[0] \
        is False
    # where the reference is infinite only that infinity passes (inf <= inf would pass all)
    for wrong in (-3.0, float("-inf"), 3e38):
        off = ref.clone()
        off[0, 2] = wrong
        assert timing.close_on_device(op, "bf16", {"y": off.to(torch.bfloat16)},
                                      {"y": ref})[0] is False, wrong
    case = timing.bench_case(op, timing.bench_point(op, "cpu"), "bf16")
    kept, note = timing.oracle(op, case, "cpu")
    assert note == "" and kept["y"].dtype == torch.float32
    case32 = timing.bench_case(op, timing.bench_point(op, "cpu"), "f32")
    assert timing.oracle(op, case32, "cpu")[0]["y"].dtype == torch.float64


class ClockedKernel(timing.LocalKernel):
    """A local kernel whose calls the judge's clock saw take ``per_call[i]`` ms each in its
    i-th timing request (the last entry for every later one); a round trip costs nothing."""

    trip_ms = 0.0

    def __init__(self, fn, timer, per_call):
        super().__init__(fn, timer)
        self.per_call = list(per_call)

    def time(self, sets, sizes, warmup, reps, poisons, plan=None):
        samples = super().time(sets, sizes, warmup, reps, poisons, plan)
        ms = self.per_call.pop(0) if len(self.per_call) > 1 else self.per_call[0]
        self.walls = [ms] * len(samples)
        return samples


def test_a_timer_contradicted_once_by_the_judges_clock_is_timed_again_and_believed(
        monkeypatch):
    monkeypatch.setattr(floor, "cache_bytes", lambda: 0)
    timer = FakeTimer([2.0] * 5, [4.0] * 5)
    # the probe's request, then 500 ms a call once (a busy host), then as claimed
    kernel = ClockedKernel(softmax_kernel, timer, [2.0, 500.0, 2.0])
    t = timing.measure(softmax_op(), kernel, CONFIG, timer=timer, bandwidth=1e9, baselines={})
    assert t.message is None and t.time_ms == 2.0
    assert t.artifacts["clock_first"].startswith("suspect: the candidate's process reported")
    assert timer.calls.count((CONFIG.warmup, CONFIG.reps)) == 3  # baseline, kernel, again


def test_a_timer_contradicted_twice_by_the_judges_clock_is_a_verdict(monkeypatch):
    monkeypatch.setattr(floor, "cache_bytes", lambda: 0)
    timer = FakeTimer([2.0] * 5, [4.0] * 5)
    kernel = ClockedKernel(softmax_kernel, timer, [500.0])
    t = timing.measure(softmax_op(), kernel, CONFIG, timer=timer, bandwidth=1e9, baselines={})
    assert t.message.startswith("suspect: the candidate's process reported a median of 2 ms")
    assert "at least 489.8 ms" in t.message and t.artifacts["suspect"] is True


def test_a_sample_below_the_judges_clock_is_not_believed(monkeypatch):
    """A timer that under-reports a little (inside the contradiction's margin) gains nothing:
    each call counts at least its round trip less the round trip's measured cost (none
    here), with no allowance on top."""
    monkeypatch.setattr(floor, "cache_bytes", lambda: 0)
    timer = FakeTimer([2.0] * 5, [4.0] * 5)
    kernel = ClockedKernel(softmax_kernel, timer, [3.0])
    t = timing.measure(softmax_op(), kernel, CONFIG, timer=timer, bandwidth=1e9, baselines={})
    assert t.message is None
    assert t.time_ms == pytest.approx(3.0)
    assert t.artifacts["claimed_ms"] == [2.0] * 5
    assert t.artifacts["timings_ms"] == [pytest.approx(3.0)] * 5


def test_only_the_round_trips_measured_cost_is_allowed_for():
    """An honest call whose round trip costs what the probe measured keeps its sample; one
    whose step cost more than that counts the excess (the allowance is the verdict's only:
    a forger reporting under it was believed)."""
    kernel = ClockedKernel(softmax_kernel, None, [])
    kernel.trip_ms, kernel.walls = 0.4, [1.0 + 0.4] * 3
    believed, art, message = timing.judged_calls(kernel, [1.0, 1.0, 1.0])
    assert believed == [1.0] * 3 and message is None and "claimed_ms" not in art
    assert art["step_overhead_ms"] == pytest.approx(0.4)
    kernel.walls = [1.0 + 0.4 + 0.2] * 3
    believed, art, message = timing.judged_calls(kernel, [1.0, 1.0, 1.0])
    assert believed == [pytest.approx(1.2)] * 3 and message is None
    # a sample far under the bound: the bound stands for it, no verdict inside the slack
    believed, art, message = timing.judged_calls(kernel, [0.002] * 3, "cuda")
    assert believed == [pytest.approx(1.2)] * 3 and message is None
    assert art["judge_clock_ms"] == pytest.approx(1.2)
    # a step of several calls: each call's share of the step, less a call's own cost
    kernel.walls, kernel.shares, kernel.call_ms = [10.0] * 3, [8] * 3, 0.05
    believed, art, _ = timing.judged_calls(kernel, [0.01] * 3)
    assert believed == [pytest.approx((10.0 - 0.4) / 8 - 0.05)] * 3
    assert art["calls_a_step"] == 8


def test_a_kernel_patching_only_what_changed_recomputes_everything():
    """A kept answer patched where the inputs changed (rows compared with a kept copy, only
    the changed ones recomputed): every row changes at every call, so nothing is saved."""
    op = softmax_op("M=256, N=64")
    kept, recomputed = {}, []

    def patching(inputs, outputs, sizes):
        x, y = inputs["x"], outputs["y"]
        last = kept.get(y.data_ptr())
        if last is None:
            softmax_kernel(inputs, outputs, sizes)
            kept[y.data_ptr()] = (x.clone(), y.clone())
            return
        old_x, old_y = last
        changed = (x != old_x).any(dim=1)
        recomputed.append(int(changed.sum()))
        y.copy_(old_y)
        y[changed] = torch.softmax(x[changed].double(), dim=1).to(y.dtype)
        kept[y.data_ptr()] = (x.clone(), y.clone())

    t = timing.measure(op, patching, CONFIG, timer=FakeTimer([1.0] * 5, [1.0] * 5),
                       bandwidth=1e9, baselines={})
    assert t.message is None
    assert recomputed and min(recomputed) == 256  # every row, at every call


@pytest.mark.parametrize("sets,wrong", [(2, 1), (4, 1), (4, 3)])
def test_every_input_set_is_checked_at_a_timed_call(monkeypatch, sets, wrong):
    """A kernel wrong on one of the input sets only (told apart by its output's address)
    is caught every time, not when the draw happens to pick that set; with the four sets a
    small point gets on a GPU, too."""
    op = softmax_op()
    monkeypatch.setattr(timing, "input_sets", lambda op, case, device: sets)
    monkeypatch.setattr(timing, "CHEAP_ORACLE_S", float("inf"))
    for _ in range(3):
        seen = []

        def wrong_on_one_set(inputs, outputs, sizes):
            ptr = outputs["y"].data_ptr()
            if ptr not in seen:
                seen.append(ptr)
            if seen.index(ptr) == wrong:
                outputs["y"].zero_()
            else:
                softmax_kernel(inputs, outputs, sizes)

        t = timing.measure(op, wrong_on_one_set, CONFIG,
                           timer=FakeTimer([1.0] * 5, [1.0] * 5), bandwidth=1e9, baselines={})
        assert t.message and f"(input set {wrong + 1})" in t.message, t.message
        assert len(seen) == sets


def test_a_small_point_gets_more_input_sets_on_a_gpu(monkeypatch):
    """Up to GPU_SETS sets within GPU_SETS_BYTES of copies on a GPU, two on the CPU, one
    where two do not fit."""
    op = softmax_op()
    case = timing.bench_case(op, timing.bench_point(op, "cpu"), "f32")
    from kdsl.search.eval.floor import allocated_bytes
    held = allocated_bytes(op, case.sizes, case.dtype)
    monkeypatch.setattr(timing, "device_memory", lambda device: 1 << 40)
    assert timing.input_sets(op, case, "cpu") == 2
    assert timing.input_sets(op, case, "cuda") == timing.GPU_SETS
    monkeypatch.setattr(timing, "GPU_SETS_BYTES", 3 * held * timing.SET_COPIES)
    assert timing.input_sets(op, case, "cuda") == 3
    monkeypatch.setattr(timing, "GPU_SETS_BYTES", 0)
    assert timing.input_sets(op, case, "cuda") == 2
    monkeypatch.setattr(timing, "device_memory", lambda device: 1)
    assert timing.input_sets(op, case, "cuda") == 1


def test_every_kind_of_input_is_redrawn_between_calls():
    """Floats without a domain take signed log-uniform factors (positive powers of two kept
    signs and mantissas: a product of signs and a sort were served from kept answers);
    integers without a domain have their bits XORed with drawn bits, bools are flipped."""
    from fake_backend import load
    from kdsl.search.eval import timed_calls
    op = load("sort_rows")
    for dtype in op.dtype_choices:
        names = timed_calls.varied_inputs(op, dict(op.bench[0].sizes), dtype)
        assert names == [t.name for t in op.inputs], (dtype, names)
    p = timed_calls.CallPlan(["f", "i", "b"], seed=5, offsets=[3, 9])
    f = torch.linspace(0.5, 3.0, 4096)
    i = torch.arange(4096, dtype=torch.int64)
    b = torch.zeros(4096, dtype=torch.bool)
    for name, x in (("f", f), ("i", i), ("b", b)):
        out = torch.empty_like(x)
        timed_calls.change(p, name, out, x, 0)
        again = torch.empty_like(x)
        timed_calls.change(p, name, again, x, 0)
        assert torch.equal(out, again)  # the judge makes a call's inputs again exactly
        if name == "f":
            ratio = out / f
            assert float(ratio.abs().min()) >= 0.5 and float(ratio.abs().max()) < 2.0
            assert (ratio < 0).any() and (ratio > 0).any()
            assert len(set(ratio.abs().tolist())) > 1000  # not a handful of exact factors
        elif name == "i":
            assert (out != i).float().mean() > 0.99 and (out < 0).any()
        else:
            assert 0 < int(out.sum()) < 4096

def test_the_time_is_never_below_the_fastest_checked_call():
    """A kernel honest at a random fraction of its calls passes only when honest at every
    checked call: those calls' (honest) times bound the figure, not the cheap calls'."""
    from kdsl.search.eval import timed_calls
    p = timed_calls.CallPlan(snap_at={0: 5, 1: 8})  # calls 5 and 8, after 2 warm-ups
    samples = [1.0, 1.0, 1.0, 9.0, 1.0, 1.0, 8.0, 1.0]
    arts = {}
    assert timing.figure(samples, p, 2, arts) == 8.0
    assert arts["checked_calls_ms"] == [9.0, 8.0]
    honest = [3.0, 2.9, 3.1, 3.0, 3.2, 2.8, 3.0, 3.1]
    assert timing.figure(honest, p, 2, {}) == statistics.median(honest)


def test_loaded_modules_keep_no_state_in_containers_or_defaults():
    import types

    from kdsl.backends.frozen import freeze_module
    mod = types.ModuleType("m")
    exec("TABLE = {'a': [1, 2]}\n"
         "def kernel(x, _state=([0],), *, seen={}):\n"
         "    _state[0][0] += 1\n", vars(mod))
    freeze_module(mod)
    assert mod.TABLE["a"] == (1, 2)
    with pytest.raises(TypeError):
        mod.TABLE["b"] = 1
    with pytest.raises(TypeError):
        mod.kernel(None)
    with pytest.raises(TypeError):
        mod.kernel.__kwdefaults__["seen"]["k"] = 1


def test_a_probe_inflated_by_a_busy_host_is_no_allowance():
    """A step's own cost is its probes' median, never more than TRIP_SPREAD_MS above the
    fastest (a busy host only lengthens a step), and no more than the median extra of the
    request's own steps: a probe that read 3.6 ms on a busy host leaves the candidate no
    unclocked 3.6 ms a step."""
    from kdsl.search.eval.sandbox import TRIP_SPREAD_MS, step_costs
    spread = TRIP_SPREAD_MS["cuda"]
    trip, call = step_costs([3.6, 0.12, 2.0, 0.15], [3.9, 0.19, 2.5, 0.3], 8, spread)
    assert call == pytest.approx(0.01) and trip == pytest.approx(0.12 + spread - 0.01)
    # on a quiet host, the median: where an honest step's own cost stands
    ones, manys = [0.30, 0.32, 0.35, 0.40, 0.50], [1.0, 1.05, 1.05, 1.2, 1.4]
    trip, call = step_costs(ones, manys, 8, spread)
    assert call == pytest.approx(0.1) and trip == pytest.approx(0.25)
    # the CPU's spread is none: the fastest
    assert step_costs(ones, manys, 8, TRIP_SPREAD_MS["cpu"]) == \
        (pytest.approx(0.3 - 0.1), pytest.approx(0.1))
    assert step_costs([0.1], [0.05], 8, spread) == (0.1, 0.0)  # (a call costs no less than 0)
    kernel = ClockedKernel(softmax_kernel, None, [])
    kernel.trip_ms, kernel.walls, kernel.shares = 3.6, [1.2] * 4, [2] * 4
    kernel.step_extras = [1.1, 0.2, 0.3]  # steps whose calls claimed all but 0.2-0.3 ms
    believed, art, _ = timing.judged_calls(kernel, [0.05] * 4, "cuda")  # (their median)
    assert believed == [pytest.approx((1.2 - 0.3) / 2)] * 4
    assert art["step_trip_ms"] == pytest.approx(0.3) and art["probed_trip_ms"] == 3.6
    believed, art, _ = timing.judged_calls(kernel, [0.05] * 4, "cpu")  # (their least)
    assert believed == [pytest.approx((1.2 - 0.2) / 2)] * 4
    kernel.step_extras = [5.0, 4.0]  # a request whose steps all cost more: the probe stands
    assert timing.judged_calls(kernel, [0.05] * 4)[1]["step_trip_ms"] == 3.6


def test_the_sets_past_two_are_decided_by_the_cached_oracle_alone(monkeypatch):
    """Whether a point gets its sets past two rests on what its cached oracle took, the same
    for every job of the process: the checks' own oracles (warm) never change it, so two
    candidates of one op are never timed with their steps shared by different numbers of
    calls."""
    op = softmax_op()
    monkeypatch.setattr(timing, "input_sets", lambda op, case, device: 4)
    got, seen = [], []
    for _ in range(2):
        t = timing.measure(op, softmax_kernel, CONFIG, timer=FakeTimer([1.0] * 5, [1.0] * 5),
                           bandwidth=1e9, baselines={})
        assert t.message is None
        case = timing.bench_case(op, timing.bench_point(op, "cpu"), "f32")
        seen.append(timing.oracle_seconds(op, case, "cpu"))
        got.append(t.artifacts["input_sets"])
    assert seen[0] is not None and seen[0] == seen[1]
    assert got[0] == got[1] == (4 if seen[0] <= timing.CHEAP_ORACLE_S else 2)


def test_every_probe_step_follows_the_judges_own_work_on_the_device():
    """A timed step always follows the judge's work on the device (its inputs varied, its
    outputs poisoned, a sync); a probe that measures a step's own cost must too, or on a
    GPU it misses the switch between the two processes' contexts."""
    from kdsl.search.eval import sandbox as sb
    box = object.__new__(sb.Sandbox)
    box.device = "cuda"
    log = []
    box._judge_work = lambda: log.append("judge")

    def call(*message):
        log.append(message)
        box.last_wall_ms = 2.0 * message[1]
        return "ok", [1.0] * message[1]
    box.call = call
    trip, per_call = box._probe()
    assert len(log) == 2 * 2 * sb.PROBES
    assert log[0::2] == ["judge"] * (2 * sb.PROBES)  # before each probe, never after only
    assert (trip, per_call) == (0.0, 1.0)  # a call of nothing costs 1 ms a call, no more


def test_a_probe_waits_as_long_as_the_judge_works_between_steps(monkeypatch):
    """The process is stopped through PROBE_GAP_MS of the judge's work before each probe, as
    through the judge's work between timed steps: its idle cores wake slower after it."""
    import time

    from kdsl.search.eval import sandbox as sb
    box = object.__new__(sb.Sandbox)
    box.device, box._scratch = "cpu", None
    assert sb.PROBE_GAP_MS["cuda"] > 0
    monkeypatch.setitem(sb.PROBE_GAP_MS, "cpu", 5.0)  # (the CPU's is none: the wait is tested)
    start = time.perf_counter()
    box._judge_work()
    assert (time.perf_counter() - start) * 1e3 >= 5.0


def test_an_oracle_that_runs_out_of_device_memory_is_computed_on_the_host(monkeypatch):
    """The float64 copies of a large point's inputs may not fit beside the judge's sets
    on a shared GPU; the host computes the oracle then, and the result is the same."""
    import textwrap

    from kdsl import spec as kspec
    op = kspec.parse_text(textwrap.dedent("""
        op rowsum
          dims M, N
          in  x: f32 [M, N]
          out y: f32 [M]
          y[i] = sum(j) x[i, j]
          baseline x.sum(dim=1)
          tolerance f32(rtol=1e-5, atol=1e-5)
          test  M in 1..4, N in 1..8
          bench M=4, N=8, dtype=f32
    """).strip() + "\n", "<t>").ops[0]
    x = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    real, seen = timing._oracle_at, []

    def short_on_the_device(op, sizes, dtype, ins, device, hold=None):
        seen.append(device)
        threads_seen.append(torch.get_num_threads())
        if device != "cpu":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")
        return real(op, sizes, dtype, ins, device)
    monkeypatch.setattr(timing, "_oracle_at", short_on_the_device)
    from kdsl.search.eval import device_lock, threads
    threads_seen: list = []
    monkeypatch.setattr(threads, "_DEFAULT", [3])  # torch's own count, as if on 3 cores
    with threads.judge_work():  # as the evaluator runs it
        with device_lock.hold("test-gpu"):  # the card held alone: the host's copy on all 3
            got = timing.oracle_of(op, {"M": 4, "N": 8}, "f32", {"x": x}, "cuda")
        timing.oracle_of(op, {"M": 4, "N": 8}, "f32", {"x": x}, "cuda")  # not held: one
    # (the whole, then its first slice of a batch axis, ``oracle_chunks``, then the host)
    assert seen == ["cuda", "cuda", "cpu"] * 2 and threads_seen == [1, 1, 3, 1, 1, 1]
    assert torch.equal(got["y"], x.double().sum(dim=1).to(got["y"].dtype))

    seen.clear()

    def room_for_a_slice(op, sizes, dtype, ins, device, hold=None):
        seen.append(device)
        if sizes["M"] > 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")
        return real(op, sizes, dtype, ins, "cpu")
    monkeypatch.setattr(timing, "_oracle_at", room_for_a_slice)
    got = timing.oracle_of(op, {"M": 4, "N": 8}, "f32", {"x": x}, "cuda")
    assert seen == ["cuda"] * 5  # the whole, then its four rows: no host
    assert torch.equal(got["y"], x.double().sum(dim=1))

    seen.clear()

    def library_short(op, sizes, dtype, ins, device, hold=None):  # cuBLAS's own words
        seen.append(device)
        if device != "cpu":
            raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate")
        return real(op, sizes, dtype, ins, device)
    monkeypatch.setattr(timing, "_oracle_at", library_short)
    got = timing.oracle_of(op, {"M": 4, "N": 8}, "f32", {"x": x}, "cuda")
    assert seen == ["cuda", "cuda", "cpu"] and torch.equal(got["y"], x.double().sum(dim=1))

    def broken(op, sizes, dtype, ins, device, hold=None):
        seen.append(device)
        raise RuntimeError("the baseline raised")
    monkeypatch.setattr(timing, "_oracle_at", broken)
    seen.clear()
    # a baseline that fails for another reason than memory leaves the oracle to the spec's
    # own float64 reference, on the host; only a failure there as well is the oracle's
    got = timing.oracle_of(op, {"M": 4, "N": 8}, "f32", {"x": x}, "cuda")
    assert seen == ["cuda"] and torch.equal(got["y"], x.double().sum(dim=1))

    def no_reference(*args, **kwargs):
        raise ValueError("the reference raised")
    import kdsl.reference
    monkeypatch.setattr(kdsl.reference, "reference", no_reference)
    with pytest.raises(RuntimeError, match="baseline raised.*and so did the spec's reference"):
        timing.oracle_of(op, {"M": 4, "N": 8}, "f32", {"x": x}, "cuda")


def test_an_oracle_the_device_has_no_room_for_stays_on_the_host_and_still_judges():
    """Moving a host oracle's outputs to the device can run out of memory in turn (a 12 GiB
    float64 output, H100, 2026-12-06): they stay on the host, and the comparison brings them
    over a chunk at a time, wrong outputs still found wrong."""
    import textwrap

    from kdsl import spec as kspec
    from search.eval import baseline_precision
    op = kspec.parse_text(textwrap.dedent("""
        op double
          dims N
          in  x: f32 [N]
          out y: f32 [N]
          y[i] = 2 * x[i]
          baseline 2 * x
          tolerance f32(rtol=1e-5, atol=1e-5)
          test  N in 1..8
          bench N=8, dtype=f32
    """).strip() + "\n", "<t>").ops[0]

    class NoRoom:  # a tensor whose move to the device runs out of memory
        def __init__(self, t):
            self.t = t

        def to(self, device):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")

    kept = {"y": NoRoom(torch.ones(3))}
    assert timing.on_device_if_room(kept, "cuda")["y"] is kept["y"]
    with pytest.raises(RuntimeError, match="device string"):  # anything but memory shows
        timing.on_device_if_room({"y": torch.ones(3)}, "no such device")
    ref = {"y": torch.arange(100_000, dtype=torch.float64) * 2}
    good = {"y": torch.arange(100_000, dtype=torch.float32) * 2}
    bad = {"y": good["y"].clone()}
    bad["y"][1] += 1
    assert timing.close_on_device(op, "f32", good, ref)[0] is True
    assert timing.close_on_device(op, "f32", bad, ref)[0] is False
    assert baseline_precision._max_error(bad["y"], ref["y"]) == 1.0


def test_inputs_with_bounded_domains_change_between_calls():
    """An op whose every input has a domain was timed on the same inputs at every call (a
    factor could leave the domain), and an answer kept by their contents was right at every
    checked call; rotated only, the values stayed the same, and an answer kept by a key
    blind to order (a sort keyed by the input's sum) was served. Such an input is rotated
    and a drawn subset of it mirrored in its range: every call sees other values, each
    still in the domain."""
    text = (SPECS / "softmax.kspec").read_text().replace(
        "in  x: f32 | bf16 | f16 [M, N]", "in  x: f32 | bf16 | f16 [M, N] in -3 .. 3")
    text = text.replace("bench cpu: M=4096, N=4096", "bench cpu: M=64, N=128")
    op = spec.parse_text(text, "t.kspec").ops[0]
    kept, served, seen = {}, [], []

    def keeping(inputs, outputs, sizes):  # keyed by the input's sorted values
        x = inputs["x"]
        seen.append(x.clone())
        key = torch.sort(x.reshape(-1)).values.numpy().tobytes()
        served.append(key in kept)
        if key not in kept:
            softmax_kernel(inputs, outputs, sizes)
            kept[key] = outputs["y"].clone()
        outputs["y"].copy_(kept[key])

    t = timing.measure(op, keeping, CONFIG, timer=FakeTimer([1.0] * 5, [1.0] * 5),
                       bandwidth=1e9, baselines={})
    assert t.message is None
    assert len(served) >= 8 and not any(served[2:])  # (the first two: pristine sets)
    assert all(float(x.abs().max()) <= 3 for x in seen)


def test_bounded_inputs_are_redrawn_within_their_domain():
    """A value range's elements move by drawn offsets wrapped into the range (rotated and
    mirrored, ``lo + hi - x`` being a negation in ``-1 .. 1``, their magnitudes stayed and a
    sort of them was served from a kept answer); two inputs move apart; a positive input
    stays positive; a single element changes too."""
    from kdsl.search.eval import timed_calls
    text = """
op pair
  dims N, V
  in  a: f32 [N] in -1 .. 1
  in  b: f32 [N] in -1 .. 1
  in  idx: i64 [N] in 0 .. V
  in  s: f32 [1] in 0 .. 4
  in  q: f32 [N] positive
  out y: f32 [N]
  y[i] = a[i] * b[i] + f32(idx[i]) + s[0] + q[i]
  baseline a * b + idx.float() + s[0] + q
  tolerance f32(rtol=1e-5, atol=1e-5)
  test  N in 1..64, V in 1..9
  bench N=4096, V=7
"""
    op = spec.parse_text(text, "t.kspec").ops[0]
    sizes = {"N": 4096, "V": 7}
    g = torch.Generator().manual_seed(0)
    ins = {"a": torch.rand(4096, generator=g) * 2 - 1, "b": torch.rand(4096, generator=g) * 2 - 1,
           "idx": torch.randint(0, 7, (4096,), generator=g), "s": torch.tensor([1.5]),
           "q": torch.rand(4096, generator=g) + 0.1}
    p = timed_calls.plan(op, sizes, "f32", [{"y": torch.empty(4096)}], 2, 10, "cpu")
    assert p.names == ["a", "b", "idx", "s", "q"] and p.positive == ["q"]
    seen = set()
    for c in range(12):
        got = timed_calls.expected_inputs(p, ins, c)
        assert float(got["a"].abs().max()) <= 1 and float(got["b"].abs().max()) <= 1
        assert int(got["idx"].min()) >= 0 and int(got["idx"].max()) <= 6
        assert 0 <= float(got["s"][0]) <= 4 and float(got["q"].min()) > 0
        mags = torch.sort(got["a"].abs()).values
        assert not torch.equal(mags, torch.sort(ins["a"].abs()).values)
        assert not torch.allclose(got["a"] - ins["a"], got["b"] - ins["b"])
        seen.add(float(got["s"][0]))
    assert len(seen) > 1


def test_an_op_named_by_a_bool_input_is_judged_by_its_outputs_tolerance():
    """An op's dtype is its first input's: a bool mask there had the bench check ask the
    tolerance table for 'bool' (a KeyError that failed every kernel of such an op); the
    bench check takes the output's own dtype's entry, as the correctness check does. Its
    bool, f16 and i32 inputs are redrawn between calls too."""
    from kdsl.backends import get
    from kdsl.search.eval import timed_calls
    text = """
op masked_pick
  dims N
  in  m: bool [N]
  in  h: f16 [N] in -1 .. 1
  in  k: i32 [N]
  out y: f32 [N]
  y[i] = where(m[i], f32(h[i]), f32(k[i] % 7))
  baseline torch.where(m, h.float(), (k % 7).float())
  tolerance f32(rtol=1e-3, atol=1e-3) f16(rtol=1e-3, atol=1e-3)
  test  N in 1..64
  bench cpu: N=4096
"""
    op = spec.parse_text(text, "t.kspec").ops[0]
    assert op.dtype_choices == ("bool",)
    be = get("numpy")
    built = be.build(op, be.render(op, be.space(op, "cpu").default(), "cpu"), "cpu")
    t = timing.measure(op, built.fn, CONFIG, timer=FakeTimer([1.0] * 5, [1.0] * 5),
                       bandwidth=1e9, baselines={})
    assert t.message is None
    p = timed_calls.plan(op, {"N": 4096}, "bool", [{"y": torch.empty(4096)}], 1, 3, "cpu")
    assert p.names == ["m", "h", "k"]


def test_the_draws_do_not_repeat_along_a_large_input():
    """An input longer than a window: with one window repeated along it, elements a window
    apart kept their ratio at every call, and a column sum learned it once and read a
    sixteenth of its input; two halves of coprime periods make every element's number its
    own, and two calls' numbers no shifted copies of each other."""
    from kdsl.search.eval import timed_calls
    w = timed_calls.WINDOW
    p = timed_calls.CallPlan(["x"], seed=11, offsets=[5, 900], second=[7, 3000])
    x = torch.rand(2 * w + 5) + 0.5
    first, second = torch.empty_like(x), torch.empty_like(x)
    timed_calls.change(p, "x", first, x, 0)
    timed_calls.change(p, "x", second, x, 1)
    f = first / x
    assert float((f[w:2 * w] == f[:w]).float().mean()) < 1e-3
    assert float(((first[w:2 * w] / first[:w]) == (second[w:2 * w] / second[:w]))
                 .float().mean()) < 1e-3
    assert 0.5 <= float(f.abs().min()) and float(f.abs().max()) < 2.0


def test_a_gpu_step_ends_once_the_card_has_run_what_the_candidate_left_queued(monkeypatch):
    """``drain_card``: the judge's writes go on while each waits on work another context
    left on the card (a slice at a time), and the clock with them; a card never free of it
    fails the candidate. Here a fake card: each synced write takes the next scripted ms."""
    import time as _time

    import torch as real_torch

    from kdsl.search.eval import sandbox as sb

    class Scratch:
        def add_(self, _):
            return self

    def card(script):
        waits = iter(script)
        monkeypatch.setattr(real_torch.cuda, "synchronize",
                            lambda *a: _time.sleep(next(waits, 0.0001) / 1e3))
    card([0.1])  # an honest step: the switch between contexts, once
    assert sb.drain_card(Scratch()) < 5
    card([2.0, 2.0, 2.0, 0.1])  # 6 ms of queued work, served a slice at a time
    assert sb.drain_card(Scratch()) >= 6.0
    monkeypatch.setattr(sb, "DRAIN_MAX_MS", 20.0)
    card([2.0] * 100)  # a kernel that never ends
    assert sb.drain_card(Scratch()) is None


def test_the_baseline_is_timed_only_once_the_card_has_run_out_of_others_work(monkeypatch):
    """A stopped candidate's process keeps running on the GPU what it queued after an
    untimed call; the baseline, timed once and kept for every later speedup, waits for the
    card to be quiet, and is not timed on a card that never is."""
    import torch as real_torch

    from kdsl.search.eval import sandbox as sb
    timing.card_quiet("cpu")  # (nothing to wait for on the CPU)
    monkeypatch.setattr(real_torch, "zeros", lambda *a, **k: object())
    drained = []
    monkeypatch.setattr(sb, "drain_card", lambda scratch: drained.append(1) or 0.2)
    timing.card_quiet("cuda")
    assert drained == [1]
    monkeypatch.setattr(sb, "drain_card", lambda scratch: None)
    with pytest.raises(timing.CardBusy):
        timing.card_quiet("cuda")


F32_CONSTANT_BASELINE = """
op ema_f32_baseline
  dims M, N
  in  x: f32 [M, N]
  out y: like x [M, N]
  y[i, j] = sum(k in 0 .. j + 1) pow(0.9, j - k) * x[i, k]
  baseline x @ torch.where(torch.arange(x.shape[1])[:, None] <= torch.arange(x.shape[1])[None, :], 0.9 ** (torch.arange(x.shape[1])[None, :] - torch.arange(x.shape[1])[:, None]).clamp(min=0).float(), 0.0)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  M in 1..8, N in 1..100
  bench M=4, N=64
"""


def test_a_baseline_that_fails_on_float64_inputs_leaves_the_oracle_to_the_reference():
    """A constant made in float32 passes ``kdsl check`` (the spec's dtypes) and failed the
    bench point's float64 oracle, so every evaluation; the spec's own reference stands in."""
    from kdsl.reference import reference
    op = spec.parse_text(F32_CONSTANT_BASELINE, "t.kspec").ops[0]
    x = torch.randn(4, 64)
    with pytest.raises(RuntimeError, match="dtype"):
        timing._oracle_at(op, {"M": 4, "N": 64}, "f32", {"x": x}, "cpu")
    got = timing.oracle_of(op, {"M": 4, "N": 64}, "f32", {"x": x}, "cpu")
    want = reference(op, {"M": 4, "N": 64}, {"x": x.double().numpy()})["y"]
    assert got["y"].dtype == torch.float64
    np.testing.assert_allclose(got["y"].numpy(), want, rtol=1e-12)
