"""The evaluator in-process: every stage, and an adversarial suite of cheating or broken kernels.

Each adversarial candidate is free source for a small op; it must be rejected at
the right stage with a message that says what went wrong, and the evaluator must
return a Result rather than raise. (Crashes, hangs and memory blow-ups need a
worker process: tests/test_isolation.py.)
"""
from __future__ import annotations

import contextlib
import dataclasses
import textwrap

import numpy as np
import pytest
import torch

import fake_backend
from fake_backend import QUICK, SOFTMAX, load, softmax_op
from kdsl import cases
from kdsl.search.eval import correctness, evaluator, plan, timing
from kdsl.search.candidate import Candidate
from kdsl.search.executors import InlineExecutor
from kdsl.search.jobs import EvalJob
from kdsl.search.result import STAGES

fake_backend.register()


def evaluate(source: str | None = None, op=None, config=QUICK, genome=None, timer=None,
             backend="fakepy"):
    candidate = Candidate.of(backend, genome or {}, textwrap.dedent(source) if source else None)
    return evaluator.evaluate(EvalJob(op or load("softmax"), candidate, config), timer=timer)


def numpy_softmax_then(extra: str) -> str:
    """The honest softmax kernel followed by ``extra`` lines inside kernel()."""
    return SOFTMAX + textwrap.indent(textwrap.dedent(extra), "    ")


# ---- the honest candidate --------------------------------------------------

def test_a_correct_candidate_passes_every_stage_with_each_artifact(monkeypatch):
    monkeypatch.setattr(timing, "BASELINES", {})

    def baseline_timer(fn, warmup, reps, setup=None):
        # the judge's timer times the baseline only; the candidate is timed in its own
        # process, by its own clock, and bounded by the judge's (its round trips)
        for _ in range(warmup + reps):
            setup and setup()
            fn()
        return [3.0] * reps

    config = dataclasses.replace(QUICK, time=True, reps=3, warmup=1)
    r = evaluate(op=softmax_op(), config=config, genome={"variant": "softmax"},
                 timer=baseline_timer)
    assert r.ok and r.stage == "timing" and r.message == ""
    assert 0 < r.time_ms < 3.0 and r.baseline_ms == 3.0 and r.baseline_name == "eager"
    assert r.speedup == pytest.approx(3.0 / r.time_ms)
    assert len(r.artifacts["timings_ms"]) == 3 and r.artifacts["judge_clock_ms"] >= 0
    assert r.artifacts["step_trip_ms"] > 0
    a = r.artifacts
    assert a["source"] == SOFTMAX and a["genome"] == {"variant": "softmax", "unused": 1}
    assert a["build_log"] == "exec ok" and a["meta"] == {"lines": SOFTMAX.count("\n")}
    assert "no_torch_compute" in a["guards"]
    assert a["cases_checked"] >= 4 and 0 <= a["max_error"] < 1e-6
    assert a["floor_ms"] >= 0 and a["suspect"] is False  # (0: a point inside the caches)
    assert set(a["stage_s"]) == set(STAGES)
    # the timing stage says where its seconds went
    assert set(a["timing_phases_s"]) == {"draw", "inputs", "first_run", "oracle", "check",
                                         "baseline", "timed_runs", "check_again",
                                         "floor"}
    assert sum(a["timing_phases_s"].values()) <= a["stage_s"]["timing"] + 1e-3


def test_without_timing_the_result_ends_at_correctness():
    r = evaluate(SOFTMAX)
    assert r.ok and r.stage == "correctness" and r.time_ms is None


def test_swiglu_with_two_inputs_passes():
    source = """
        import numpy as np
        import torch

        def kernel(inputs, outputs, sizes):
            a, b = inputs["a"].double().numpy(), inputs["b"].double().numpy()
            outputs["y"].copy_(torch.from_numpy(a / (1 + np.exp(-a)) * b))
    """
    assert evaluate(source, op=load("swiglu")).ok


# ---- adversarial: wrong answers --------------------------------------------

def test_returning_its_input_fails_correctness():
    r = evaluate(fake_backend.IDENTITY)
    assert (r.ok, r.stage) == (False, "correctness")
    assert "elements outside rtol" in r.message and "worst at [" in r.message
    assert "case f32" in r.message


def test_a_constant_fails_correctness():
    r = evaluate("""
        def kernel(inputs, outputs, sizes):
            outputs["y"].fill_(1.0 / sizes["N"])
    """)
    assert r.stage == "correctness" and "elements outside rtol" in r.message


def test_writing_half_the_output_fails_with_where_and_how_many():
    r = evaluate("""
        import numpy as np
        import torch

        def kernel(inputs, outputs, sizes):
            x = inputs["x"].double().numpy()
            e = np.exp(x - x.max(axis=1, keepdims=True))
            y = torch.from_numpy(e / e.sum(axis=1, keepdims=True)).flatten()
            flat = outputs["y"].view(-1)
            half = flat.numel() // 2
            flat[:half].copy_(y[:half])
    """)
    assert r.stage == "correctness"
    assert r.message.startswith("y: 1 of 1 elements never written (poison left), at [0, 0]")


def test_skipping_rows_fails_as_unwritten():
    r = evaluate("""
        import numpy as np
        import torch

        def kernel(inputs, outputs, sizes):
            M = sizes["M"]
            x = inputs["x"].double().numpy()[: (M + 1) // 2]
            e = np.exp(x - x.max(axis=1, keepdims=True))
            outputs["y"][: (M + 1) // 2].copy_(torch.from_numpy(e / e.sum(axis=1, keepdims=True)))
    """)
    assert r.stage == "correctness"
    assert "never written (poison left)" in r.message
    m = r.artifacts["failed_case"]["sizes"]["M"]
    n_left = (m - (m + 1) // 2) * r.artifacts["failed_case"]["sizes"]["N"]
    assert f"{n_left} of " in r.message


def test_mutating_an_input_fails_and_names_it():
    r = evaluate("""
        import numpy as np
        import torch

        def kernel(inputs, outputs, sizes):
            a, b = inputs["a"].double().numpy(), inputs["b"].double().numpy()
            outputs["y"].copy_(torch.from_numpy(a / (1 + np.exp(-a)) * b))
            inputs["b"].zero_()
    """, op=load("swiglu"))
    assert r.stage == "correctness"
    assert r.message.startswith("input 'b' was modified by the kernel")


def test_producing_nan_fails_even_where_the_answer_is_close():
    r = evaluate(numpy_softmax_then('outputs["y"][0, 0] = float("nan")'))
    assert r.stage == "correctness"
    assert r.message.startswith("y: NaN in 1 of ") and "at [0, 0]" in r.message


def test_producing_inf_fails():
    r = evaluate(numpy_softmax_then('outputs["y"][-1, -1] = float("inf")'))
    assert r.stage == "correctness" and r.message.startswith("y: inf in 1 of ")


def test_a_kernel_that_raises_fails_correctness_with_the_error():
    r = evaluate("""
        def kernel(inputs, outputs, sizes):
            raise ValueError("block size too large")
    """)
    assert r.stage == "correctness"
    assert "kernel raised ValueError: block size too large" in r.message


def test_caching_by_shape_is_caught_by_the_second_run_on_new_values():
    """A cache the guards cannot see (a closure, not source): the twin run catches it."""
    op = load("softmax")
    memo = {}

    def cached(inputs, outputs, sizes):
        key = (sizes["M"], sizes["N"], inputs["x"].dtype)
        if key not in memo:
            x = inputs["x"].double().numpy()
            e = np.exp(x - x.max(axis=1, keepdims=True))
            memo[key] = torch.from_numpy(e / e.sum(axis=1, keepdims=True))
        outputs["y"].copy_(memo[key])

    config = dataclasses.replace(QUICK, cases_per_dtype=1)
    shapes = [p.shape.sizes for p in plan.plan(op, config)]
    assert len({tuple(s.items()) for s in shapes}) == len(shapes)  # no repeat to give it away
    outcome = correctness.check(op, cached, config)
    assert "second run, new values" in outcome.message


# ---- adversarial: the guards -----------------------------------------------

def test_a_cache_in_the_source_is_refused_by_the_guards():
    r = evaluate("""
        import numpy as np
        import torch

        _memo = {}

        def kernel(inputs, outputs, sizes):
            key = (sizes["M"], sizes["N"])
            if key not in _memo:
                x = inputs["x"].double().numpy()
                e = np.exp(x - x.max(axis=1, keepdims=True))
                _memo[key] = torch.from_numpy(e / e.sum(axis=1, keepdims=True))
            outputs["y"].copy_(_memo[key])
    """)
    assert r.stage == "guards"
    assert "no_state" in r.message and "'_memo'" in r.message


def test_calling_torch_softmax_is_refused_by_the_guards():
    r = evaluate("""
        import torch

        def kernel(inputs, outputs, sizes):
            outputs["y"].copy_(torch.softmax(inputs["x"], dim=-1))
    """)
    assert r.stage == "guards"
    assert r.message == "no_torch_compute: line 5: uses torch.softmax"
    assert r.artifacts["violations"] == [r.message]


def test_launching_on_a_side_stream_is_refused_by_the_guards():
    r = evaluate(numpy_softmax_then("""
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            pass
    """))
    assert r.stage == "guards" and "no_side_streams" in r.message
    assert "torch.cuda.Stream" in r.message


# ---- the early stages ------------------------------------------------------

def test_an_unknown_gene_value_fails_render():
    r = evaluate(genome={"variant": "fastest"})
    assert (r.stage, r.message) == ("render", "gene variant='fastest' is not one of "
                                              "('softmax', 'identity')")


def test_an_unknown_gene_fails_render():
    r = evaluate(genome={"BLOCK": 64})
    assert r.stage == "render" and r.message.startswith("unknown gene 'BLOCK'")


def test_an_unknown_backend_fails_render():
    job = EvalJob(load("softmax"), Candidate.of("no-such-backend"), QUICK)
    r = evaluator.evaluate(job)
    assert r.stage == "render" and "no-such-backend" in r.message


def test_a_device_the_backend_lacks_fails_render():
    r = evaluate(SOFTMAX, config=dataclasses.replace(QUICK, device="cuda"))
    assert r.stage == "render" and "does not run on cuda" in r.message


def test_a_syntax_error_fails_the_guards_before_any_build():
    r = evaluate("def kernel(:\n")
    assert r.stage == "guards" and "does not parse" in r.message


def test_a_build_error_fails_build_with_the_log():
    r = evaluate("LIMIT = 3\n")
    assert r.stage == "build" and r.message.startswith("the source defines no kernel()")


def test_an_exception_inside_a_stage_is_a_failure_not_a_raise(monkeypatch):
    def explode(op, kernel, config, interpreted=False):
        raise RuntimeError("evaluator bug")

    monkeypatch.setattr(correctness, "check", explode)
    r = evaluate(SOFTMAX)
    assert (r.ok, r.stage) == (False, "correctness")
    assert r.message == "correctness raised RuntimeError: evaluator bug"
    assert "evaluator bug" in r.artifacts["traceback"]


def _with_prepare(monkeypatch, hook):
    """Builds given ``hook`` as their prepare step, on the judge's side of the sandbox."""
    real = evaluator.PIPELINE["build"]

    def build(run):
        real(run)
        run.built.prepare = hook
    monkeypatch.setitem(evaluator.PIPELINE, "build", build)


def test_a_build_prepares_every_planned_shape_before_the_cases_run(monkeypatch):
    seen, ran = [], []
    _with_prepare(monkeypatch, lambda shapes: seen.append((list(shapes), len(ran))))
    real = correctness.run_case
    monkeypatch.setattr(correctness, "run_case", lambda *a: ran.append(1) or real(*a))
    r = evaluate(SOFTMAX)
    assert r.ok, r.message
    (shapes, cases_before), = seen  # once, before any case ran
    planned = plan.plan(load("softmax"), QUICK)
    assert cases_before == 0 and shapes == [(p.shape.sizes, p.shape.dtype) for p in planned]
    assert r.artifacts["prepare_s"] >= 0 and "prepare" not in r.artifacts


def test_a_failing_prepare_is_no_verdict(monkeypatch):
    def broken(shapes):
        raise RuntimeError("no compiler here")
    _with_prepare(monkeypatch, broken)
    r = evaluate(SOFTMAX)
    assert r.ok and r.artifacts["cases_checked"] >= 4
    assert r.artifacts["prepare"] == "skipped: RuntimeError: no compiler here"


def test_running_out_of_memory_is_marked_for_the_worker(monkeypatch):
    def exhaust(op, kernel, config, interpreted=False):
        raise MemoryError("Unable to allocate 4.00 EiB")

    monkeypatch.setattr(correctness, "check", exhaust)
    r = evaluate(SOFTMAX)
    assert r.stage == "correctness" and r.artifacts["out_of_memory"] is True


def test_sys_exit_in_a_kernel_is_a_failure():
    r = evaluate("""
        import sys

        def kernel(inputs, outputs, sizes):
            sys.exit(4)
    """, backend="fakeraw")
    assert r.stage == "correctness" and "raised SystemExit: 4" in r.message


def test_triton_on_cpu_is_not_timed_since_it_runs_interpreted():
    class Named:
        def __init__(self, name):
            self.name = name

    assert "interpreter" in evaluator.untimed(Named("triton"), "cpu")
    assert evaluator.untimed(Named("triton"), "cuda") is None
    assert evaluator.untimed(Named("c"), "cpu") is None


def test_inline_executor_returns_a_completed_future():
    future = InlineExecutor().submit(EvalJob(load("softmax"), Candidate.of(
        "fakepy", {"variant": "identity"}), QUICK))
    assert future.done() and future.result().stage == "correctness"


# ---- correctness details ---------------------------------------------------

def test_poison_is_not_what_arithmetic_produces():
    for dt in ("f32", "f16", "bf16", "f64"):
        t = torch.empty(4, dtype=getattr(torch, {"f32": "float32", "f16": "float16",
                                                  "bf16": "bfloat16", "f64": "float64"}[dt]))
        correctness.poison(t, dt, 0)
        assert torch.isnan(t).all()
        t[1] = float("nan")  # a computed NaN is written, not poison
        assert correctness._poisoned(t, dt, 0).cpu().tolist() == [True, False, True, True]
    b = torch.empty(3, dtype=torch.bool)
    correctness.poison(b, "bool", 1)
    b[0] = True
    assert correctness._poisoned(b, "bool", 1).cpu().tolist() == [False, True, True]


def test_the_plan_adds_edge_sizes_and_respects_the_element_limit():
    op = load("softmax")
    planned = plan.plan(op, dataclasses.replace(QUICK, max_case_elements=2000))
    sizes = [p.shape.sizes for p in planned]
    # every case within the limit, but those at the upper ends of the declared ranges
    assert all(plan.elements(op, p.shape.sizes) <= 2000 for p in planned
               if p.shape.label not in cases.UPPER_LABELS)
    assert {"M": 1, "N": 1} in sizes
    assert any(p.shape.label == "edge-size" for p in planned)
    assert {p.shape.dtype for p in planned} == {"f32"}


def test_dtypes_the_op_lacks_fall_back_to_its_own():
    op = load("hash_bucketize")
    assert plan.chosen_dtypes(op, ("f32",)) == op.dtype_choices


def test_real_backends_pass_correctness_inline():
    from kdsl import backends
    for name in ("numpy", "c", "torch"):
        try:
            backends.get(name)
        except Exception:
            continue
        job = EvalJob(load("softmax"), Candidate.of(name), QUICK)
        r = evaluator.evaluate(job)
        assert r.ok, (name, r.stage, r.message)


def test_the_small_cases_run_and_are_judged_sharing_the_device(monkeypatch):
    """On a GPU the correctness cases take the device lock shared (never beside another
    process's timed runs); the float64 reference is computed outside it."""
    from kdsl.search.eval import device_lock
    sharing = []

    @contextlib.contextmanager
    def shared(device, waited=None):
        sharing.append(True)
        try:
            yield
        finally:
            sharing.pop()

    monkeypatch.setattr(device_lock, "shared", shared)
    seen = {"kernel": [], "reference": [], "judge": []}
    reference, judge = correctness.reference, correctness.judge
    monkeypatch.setattr(correctness, "reference",
                        lambda *a: (seen["reference"].append(bool(sharing)), reference(*a))[1])
    monkeypatch.setattr(correctness, "judge",
                        lambda *a, **k: (seen["judge"].append(bool(sharing)), judge(*a, **k))[1])
    op = load("softmax")
    out = op.outputs[0].name

    def kernel(ins, outs, sizes):
        seen["kernel"].append(bool(sharing))
        outs[out][...] = torch.softmax(ins["x"].double(), dim=-1).to(outs[out].dtype)

    outcome = correctness.check(op, kernel, QUICK)
    assert outcome.message is None, outcome.message
    assert seen["kernel"] and all(seen["kernel"]) and all(seen["judge"])
    assert seen["reference"] and not any(seen["reference"])


def test_a_result_sums_the_lock_waits_of_its_correctness_and_timing_stages(monkeypatch):
    """Each hold of the device lock (shared or alone) in either stage adds its wait to the
    one figure the run's summary adds up."""
    from kdsl.search.eval import device_lock
    monkeypatch.setattr(timing, "BASELINES", {})
    monkeypatch.setattr(device_lock, "device_id", lambda device: "cuda-test")
    holds = {"correctness": 0, "timing": 0}
    stage = ["correctness"]

    @contextlib.contextmanager
    def hold(name, waited=None, shared=False):
        if waited is not None:  # every hold waits one second here
            waited["lock_wait_s"] = waited.get("lock_wait_s", 0.0) + 1.0
            holds[stage[0]] += 1
        yield

    monkeypatch.setattr(device_lock, "hold", hold)
    monkeypatch.setitem(evaluator.PIPELINE, "timing", lambda run: (
        stage.__setitem__(0, "timing"), evaluator.time_it(run))[1])
    config = dataclasses.replace(QUICK, time=True, reps=3, warmup=1)
    r = evaluate(op=softmax_op(), config=config, genome={"variant": "softmax"},
                 timer=lambda fn, warmup, reps, setup=None: [1.0] * reps)
    assert r.ok, r.message
    assert holds["correctness"] > 0 and holds["timing"] > 0, holds
    assert r.artifacts["lock_wait_s"] == holds["correctness"] + holds["timing"]


def test_a_shared_object_planted_in_the_build_cache_is_never_loaded(tmp_path, monkeypatch):
    """The cache folder is the candidate's to write too (the same user): a kernel compiled
    from other code, left under the key of a source the guards will pass, must not be what
    that source's candidate process loads."""
    import subprocess

    from kdsl.backends.c import build as c_build
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    op = load("softmax")
    from kdsl import backends
    c = backends.get("c")
    source = c.render(op, c.space(op, "cpu").default(), "cpu")
    first = evaluate(source, op=op, backend="c")
    assert first.ok, first.message
    stub = tmp_path / "stub.c"  # every entry point, computing nothing
    stub.write_text("".join(f"void kdsl_{dt}(void **p, long *d) {{ (void)p; (void)d; }}\n"
                            for dt in op.dtype_choices))
    planted = c_build.cache_dir() / f"{c_build.build_key(source)}.so"
    planted.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([c_build.COMPILER, "-shared", "-fPIC", str(stub), "-o", str(planted)],
                   check=True)
    again = evaluate(source, op=op, backend="c")
    assert again.ok, again.message  # compiled afresh, not the stub
    assert again.artifacts["meta"]["cached"] is False, again.artifacts["meta"]
