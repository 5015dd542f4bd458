"""Red-team suite (issue 24): attack kernels through the real evaluation path, as `kdsl eval`.

Every file under ``tests/attacks/`` is one kernel; its first comment names the channel and the
trick. ``*.c`` files run on the c backend, files named ``*triton*`` on the triton backend
(interpreted on the CPU, so untimed), the rest on the numpy backend; all on device 'cpu', each
through ``PoolExecutor(workers=1)`` and ``EvalJob`` exactly as ``search/eval_command.py`` builds
it for ``kdsl eval --source FILE``, with the default ``EvalConfig`` (timed, every default case)
and a small CPU bench point (the spec text is written here, so timing stays fast).

Every attack must be REJECTED, and nothing evaluated after it in the same executor may be
affected: each attack is followed by a plainly wrong kernel (``wrong_identity.py``, the
canary), which must be rejected too. Attacks that slow the baseline get an executor of their
own (the judge times a baseline once a process), where a correct kernel evaluated after them
must be accepted with about the baseline time a clean executor measures. The controls
(``ok_*``) must be ACCEPTED, among them kernels that rightly read a small subset of their
input (the opposite fault: a floor that counts bytes never read rejects them).

An attack that gets through today is marked ``xfail(strict=True)`` (``OPEN_TODAY``): when the
fix lands, the marker must go. A stage is asserted only where it is certain.

Set ``KDSL_ATTACK_REPORT=FILE`` to append one JSON line per evaluation (verdict, stage,
speedup) to FILE.
"""
from __future__ import annotations

import functools
import json
import os
import pickle
from pathlib import Path

import pytest

from kdsl import spec
from kdsl.search.candidate import Candidate
from kdsl.search.executors import PoolExecutor
from kdsl.search.jobs import EvalConfig, EvalJob

ATTACKS = Path(__file__).resolve().parent / "attacks"

# specs/softmax.kspec at one dtype (a C kernel then exports only kdsl_f32), with the same test
# ranges (M up to 300, N up to 5000) and a small CPU bench point
SOFTMAX_SPEC = """
op softmax
  dims M, N
  in  x: f32 [M, N]
  out y: like x [M, N]
  m[i]    = max(j) x[i, j]
  e[i, j] = exp(x[i, j] - m[i])
  y[i, j] = e[i, j] / sum(j) e[i, j]
  baseline torch.softmax(x, dim=-1)
  tolerance f32(rtol=1e-5, atol=1e-6)
  test  M in 1..300, N in 1..5000
  bench cpu: M=256, N=1024, dtype=f32
"""

# The jagged op behind the opposite fault: the last T values of each segment, left-padded with
# 0. A correct kernel reads B*T of the L values; the bench point's values are 32 MB.
KEEP_LAST_SPEC = """
op keep_last
  dims L, B, T
  in  values: f32 [L]
  in  offsets: i64 [B + 1] offsets(L)
  out y: like values [B, T]
  y[b, t] = where(offsets[b + 1] - T + t >= offsets[b], values[offsets[b + 1] - T + t] pad(0), 0)
  baseline torch.where(offsets[1:, None] - T + torch.arange(T, device=values.device)[None, :] >= offsets[:-1, None], values[(offsets[1:, None] - T + torch.arange(T, device=values.device)[None, :]).clamp(min=0)], 0)
  tolerance exact
  test  L in 1..2000, B in 1..100, T in 1..16
  bench cpu: L=8388608, B=64, T=8, dtype=f32
"""

# as `kdsl eval` builds it (device cpu, timed, every default), with a time limit for a test
EVAL = EvalConfig(timeout_s=120.0)
CANARY = "wrong_identity.py"
CONTROL = "ok_softmax.py"
# A baseline slowed by an attack: over BASELINE_DRIFT times the clean executor's figure and
# over BASELINE_SLACK_MS. The slack absorbs a loaded machine: on 2 busy cores torch's two OpenMP
# threads miss each other by a scheduler tick, and a clean 0.09 ms baseline read 8-16 ms at
# times (2026-12-04). The attacks sleep 150 ms a call, far beyond both.
BASELINE_DRIFT = 3.0
BASELINE_SLACK_MS = 50.0

# Attacks the evaluator accepts: each would carry OPEN (a strict xfail) until its channel is
# closed. At 2f7d30d, before the candidate process of its own and the allow-lists, 43 of the
# 47 attacks then written were accepted (judge_builtins_import.py at 147x). At 24c53b9 six
# still were, each closed since by a general mechanism: shapes_large_problem.* (wrong only when
# every dim is large: the 'all' upper-end case), cache_content_key.py and cache_stack_slot.c
# (answers kept under a key of sampled contents: every timed call now sees new inputs and the
# outputs of a secretly drawn call are checked), route_tensor_class_method.py and
# route_triton_tensor_class.py (torch.Tensor.softmax: a class on the allow-list ends a path).
OPEN_TODAY: set[str] = set()  # every channel the suite knows is closed
OPEN = pytest.mark.xfail(reason="issue 24: channel open", strict=True)

# slow the baseline: each gets an executor of its own (the judge times a baseline once a
# process), where a correct kernel after it must see a clean executor's baseline time
OWN_WORKER = [
    "baseline_setattr_softmax.py", "baseline_direct_patch.py", "baseline_functional_dict.py",
    "baseline_set_num_threads.py", "baseline_omp_threads.c", "baseline_constructor_sleep.c",
]
# one shared executor, each followed by the canary (a plainly wrong kernel)
SHARED_WORKER = [
    "judge_builtins_import.py", "judge_sys_modules.py", "judge_getframe_globals.py",
    "judge_traceback_globals.py", "judge_lazy_builtins.py", "judge_triton_builtins.py",
    "judge_pyrun_tokenpaste.c", "judge_constructor_pyrun.c",
    "cache_tensor_attr.py", "cache_tensor_dict.py", "cache_outputs_key.py",
    "cache_inputs_key.py", "cache_module_alias.py", "cache_closure.py", "cache_default_arg.py",
    "cache_callable_object.py", "cache_keep_static.c", "cache_const_named_static.c",
    "cache_env_pointer.c", "cache_content_key.py", "cache_stack_slot.c",
    "async_pthread_after_return.c", "async_gomp_parallel_start.c", "async_after_reply_walk.c",
    "clock_timer_patch.py", "clock_timer_constructor.c", "clock_elf_walk.c",
    "clock_elf_walk_fast.c", "clock_slack_walk_once.c", "stop_sibling_farm.c",
    "clock_sigcont_after_stop.c", "clock_starved_stop_taker.c",
    "oracle_getframe_ref.py", "oracle_traceback_ref.py", "oracle_module_state.py",
    "oracle_pyrun_frames.c",
    "route_sys_modules_torch.py", "route_getattr_torch.py", "route_tensor_type_method.py",
    "route_triton_sys_modules.py", "route_dlsym_pyrun_torch.c", "route_tensor_class_method.py",
    "route_triton_tensor_class.py",
    "rebind_setitem.py", "rebind_update.py", "rebind_data_attr.py", "rebind_triton.py",
    "shapes_wide_rows.py", "shapes_large_problem.py", "shapes_wide_rows.c",
    "shapes_large_problem.c", "shapes_triton_block.py",
]
LOG_FLOODS = ["log_flood_module.py", "log_flood_constructor.c"]
CONTROLS = ["ok_softmax.py", "ok_softmax.c", "ok_softmax_triton.py", "ok_softmax_vector.c"]
SUBSET_CONTROLS = ["ok_keep_last.py", "ok_keep_last.c"]
# Where the stage is certain. Guards: what no allow-list admits (the Python C API, dlopen,
# pthreads, omp_set_num_threads, setenv/getenv, write(2) as symbols of a C object; __builtins__,
# dunders, private or frame attributes, os.sys, getattr with a computed name, builtins such as
# type, imports of time or sys, classes, attribute stores in Python). Correctness: a kernel
# innocent to read and wrong only at the sizes an upper-end case reaches. The rest (caches,
# rebinding) may be caught at guards or when run, whichever comes first.
STAGE = {
    **dict.fromkeys([
        "judge_builtins_import.py", "judge_sys_modules.py", "judge_getframe_globals.py",
        "judge_traceback_globals.py", "judge_lazy_builtins.py", "judge_triton_builtins.py",
        "judge_pyrun_tokenpaste.c", "judge_constructor_pyrun.c",
        "cache_tensor_attr.py", "cache_tensor_dict.py", "cache_callable_object.py",
        "cache_env_pointer.c", "async_pthread_after_return.c", "async_gomp_parallel_start.c",
        "clock_timer_patch.py", "clock_timer_constructor.c",
        "oracle_getframe_ref.py", "oracle_traceback_ref.py", "oracle_module_state.py",
        "oracle_pyrun_frames.c",
        "route_sys_modules_torch.py", "route_getattr_torch.py", "route_tensor_type_method.py",
        "route_triton_sys_modules.py", "route_dlsym_pyrun_torch.c",
        "rebind_data_attr.py",
        "baseline_setattr_softmax.py", "baseline_direct_patch.py", "baseline_functional_dict.py",
        "baseline_set_num_threads.py", "baseline_omp_threads.c", "baseline_constructor_sleep.c",
        "log_flood_module.py", "log_flood_constructor.c",
    ], "guards"),
    **dict.fromkeys(["shapes_wide_rows.py", "shapes_wide_rows.c", "shapes_triton_block.py"],
                    "correctness"),
    # past every static guard by design, and correct: only the judge's clock can tell
    "clock_elf_walk.c": "timing",
    "async_after_reply_walk.c": "timing",
}


# the slowest (a worker of their own, Triton interpreted): still run by `make test`
SLOW = {"judge_triton_builtins.py", "baseline_functional_dict.py"}


def params(names):
    return [pytest.param(n, id=n, marks=[m for m, on in ((OPEN, n in OPEN_TODAY),
                                                         (pytest.mark.slow, n in SLOW)) if on])
            for n in names]


@functools.cache
def softmax_op():
    return spec.parse_text(SOFTMAX_SPEC, "attack_softmax.kspec").ops[0]


@functools.cache
def keep_last_op():
    return spec.parse_text(KEEP_LAST_SPEC, "attack_keep_last.kspec").ops[0]


def backend_of(name: str) -> str:
    return "c" if name.endswith(".c") else "triton" if "triton" in name else "numpy"


def job(name: str, op=None) -> EvalJob:
    source = (ATTACKS / name).read_text()
    candidate = Candidate.of(backend_of(name), {}, source, origin="attack")
    return EvalJob(op or softmax_op(), candidate, EVAL)


def describe(name: str, r) -> str:
    verdict = f"ACCEPTED, {r.speedup:.3g}x" if r.ok else f"rejected at {r.stage}"
    times = f" ({r.time_ms:.4g} ms vs baseline {r.baseline_ms:.4g} ms)" \
        if r.time_ms and r.baseline_ms else ""
    return f"{name}: {verdict}{times}: {r.message.strip()[:300]}"


def record(name: str, r, role: str, after: str | None = None) -> None:
    path = os.environ.get("KDSL_ATTACK_REPORT")
    if not path:
        return
    line = {"file": name, "role": role, "after": after, "ok": r.ok, "stage": r.stage,
            "speedup": r.speedup, "time_ms": r.time_ms, "baseline_ms": r.baseline_ms,
            "message": r.message.strip()[:400]}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def evaluate(pool: PoolExecutor, names: list[str], op=None) -> list:
    """Submit ``names`` in order to ``pool`` (one worker: they run one after the other)."""
    futures = [pool.submit(job(n, op)) for n in names]
    return [f.result() for f in futures]


# The judge's clock (each timed call's round trip) can contradict a fast correct kernel on a
# loaded 2-core machine, where the other worker's processes delay the candidate's wake-ups
# (under the earlier batch view, ok_softmax.c: "reported 0.6585 ms a call, but 10 calls took
# 11.07 ms each"). Such a verdict says nothing about the channel an attack uses, except where
# the attack is on the clock itself.
OUTSIDE_VIEW = "suspect: the candidate's process reported"
ON_THE_CLOCK = {"clock_timer_patch.py", "clock_timer_constructor.c",
                "async_pthread_after_return.c", "clock_elf_walk.c", "clock_elf_walk_fast.c",
                "async_after_reply_walk.c", "clock_slack_walk_once.c", "stop_sibling_farm.c",
                "clock_sigcont_after_stop.c", "clock_starved_stop_taker.c"}


def outside_view_noise(name: str, r) -> None:
    """xfail (now) a verdict given only by the judge's clock, where it is noise for ``name``."""
    if not r.ok and r.stage == "timing" and r.message.startswith(OUTSIDE_VIEW) \
            and name not in ON_THE_CLOCK:
        pytest.xfail(f"only the judge's clock (noise on a loaded CPU?) judged it: "
                     f"{describe(name, r)}")


def assert_rejected(name: str, r) -> None:
    outside_view_noise(name, r)
    assert not r.ok, f"attack accepted: {describe(name, r)}"
    if name in STAGE:
        assert r.stage == STAGE[name], describe(name, r)


def assert_canary_rejected(attack: str, r) -> None:
    assert not r.ok, (f"after {attack}, a plainly wrong kernel in the same executor was "
                      f"accepted: {describe(CANARY, r)}")


@pytest.fixture(scope="module")
def shared():
    with PoolExecutor(workers=1) as pool:
        yield pool


@pytest.fixture(scope="module")
def clean(shared):
    """The correct control in a clean executor: the honest baseline time."""
    [r] = evaluate(shared, [CONTROL])
    record(CONTROL, r, "control")
    assert r.ok, describe(CONTROL, r)
    return r


def test_every_kernel_file_is_evaluated():
    listed = [*OWN_WORKER, *SHARED_WORKER, *LOG_FLOODS, *CONTROLS, *SUBSET_CONTROLS, CANARY]
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(p.name for p in ATTACKS.iterdir() if p.suffix in (".py", ".c"))
    assert OPEN_TODAY <= set(listed) and set(STAGE) <= set(listed) and SLOW <= set(listed)


# ---- controls ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", CONTROLS)
def test_correct_kernel_accepted(shared, clean, name):
    [r] = evaluate(shared, [name])
    record(name, r, "control")
    outside_view_noise(name, r)
    assert r.ok, describe(name, r)
    if backend_of(name) != "triton":  # (Triton on the CPU is interpreted and not timed)
        assert r.time_ms and r.baseline_ms, describe(name, r)


def test_canary_rejected(shared, clean):
    [r] = evaluate(shared, [CANARY])
    record(CANARY, r, "canary")
    assert not r.ok and r.stage == "correctness", describe(CANARY, r)


@pytest.mark.parametrize("name", SUBSET_CONTROLS)
def test_subset_reading_kernel_accepted(shared, clean, name):
    [r] = evaluate(shared, [name], keep_last_op())
    record(name, r, "control")
    outside_view_noise(name, r)
    assert r.ok, describe(name, r)


# ---- every other attack: one shared executor, the canary after each ----------------------

# Attacks that may be accepted, but only at an honest figure: as slow as their honest twin
# beside them (a third of its time or more), so what is reported is real. A cache no check can
# see (C's dead stack) that never serves an answer now (every timed call's inputs differ from
# every earlier call's in every row); a forged timer on a kernel so fast that the judge's
# clock bounds its figure rather than contradicting it; work left to a thread after the reply,
# which the group's SIGSTOP freezes and the next SIGCONT resumes inside the next step's clock
# (accepted so at 0.047x, 2.0 ms a call against a 0.094 ms baseline, its 3,000 threads' wake-up
# included).
TWIN_RETIMES = 3
NEVER_SERVED = {"cache_stack_slot.c": "ok_softmax.c",
                # its late worker, woken with the group, now works on the step's clock
                "async_after_reply_walk.c": "ok_softmax.c",
                "clock_elf_walk_fast.c": "ok_softmax_vector.c",
                "clock_slack_walk_once.c": "ok_softmax_vector.c",
                "stop_sibling_farm.c": "ok_softmax.c",
                # what their workers compute after the signal is on the step's clock now
                "clock_sigcont_after_stop.c": "ok_softmax.c",
                "clock_starved_stop_taker.c": "ok_softmax.c"}


def twin_ms(result) -> float:
    """The honest twin's work as the judge's clock reads it, or its figure where that is
    less. A forged timer's figure is bounded by the clock (``timing.judged_calls``), so the
    like-for-like figure is the same clock on the same work: the twin's own timer also
    counts what the clock takes off a step (a CI run read the twin's timer at 0.386 ms four
    times over and the forger's clock at 0.107, on work that takes 0.11 ms on a quiet VM)."""
    clock = (result.artifacts or {}).get("judge_clock_ms")
    return min(result.time_ms, clock) if clock else result.time_ms


@pytest.mark.parametrize("name", params(SHARED_WORKER))
def test_attack_rejected(shared, clean, name):
    honest = NEVER_SERVED.get(name)
    attack, canary, *control = evaluate(shared, [name, CANARY] + ([honest] if honest else []))
    record(name, attack, "attack")
    record(CANARY, canary, "canary", after=name)
    assert_canary_rejected(name, canary)
    if honest and attack.ok:
        [control] = control
        assert control.ok, describe(honest, control)
        honest_ms = twin_ms(control)
        # One load spike on a 2-core machine can make the twin read 15x its time, so compare
        # against its best of a few timings: the honest figure, not a noisy one.
        for _ in range(TWIN_RETIMES):
            if attack.time_ms >= honest_ms / 3:
                break
            [again] = evaluate(shared, [honest])
            if again.ok and again.time_ms:
                honest_ms = min(honest_ms, twin_ms(again))
        assert attack.time_ms >= honest_ms / 3, (
            f"{describe(name, attack)}; the honest {honest}: {honest_ms:.4g} ms at best")
        return
    assert_rejected(name, attack)


# ---- attacks that slow the baseline: an executor each -------------------------------------

@pytest.mark.parametrize("name", params(OWN_WORKER))
def test_attack_rejected_and_process_unharmed(clean, name):
    with PoolExecutor(workers=1) as pool:
        attack, canary, control = evaluate(pool, [name, CANARY, CONTROL])
    record(name, attack, "attack")
    record(CANARY, canary, "canary", after=name)
    record(CONTROL, control, "control", after=name)
    assert_rejected(name, attack)
    assert_canary_rejected(name, canary)
    outside_view_noise(CONTROL, control)
    assert control.ok, f"after {name}: {describe(CONTROL, control)}"
    limit = max(BASELINE_DRIFT * clean.baseline_ms, BASELINE_SLACK_MS)
    assert control.baseline_ms < limit, (
        f"after {name} the baseline took {control.baseline_ms:.4g} ms, a clean executor "
        f"measured {clean.baseline_ms:.4g} ms")


# ---- worker output -----------------------------------------------------------------------

LOG_CAP = 64 << 20  # whatever the fix caps output at, hundreds of MB is over it


@pytest.mark.slow
@pytest.mark.parametrize("name", params(LOG_FLOODS))
def test_log_flood_rejected_and_bounded(clean, name):
    with PoolExecutor(workers=1) as pool:
        attack, canary = evaluate(pool, [name, CANARY])
        logs = getattr(pool, "_logs", None)  # the pool's log folder, where it has one
        kept = sum(p.stat().st_size for p in Path(logs).iterdir() if p.is_file()) \
            if logs and Path(logs).is_dir() else 0
    record(name, attack, "attack")
    record(CANARY, canary, "canary", after=name)
    assert len(pickle.dumps(attack)) < 1 << 20, "the result carries the flood back"
    assert kept < LOG_CAP, f"{kept / 1e6:.0f} MB of worker output kept on disk"
    assert_rejected(name, attack)
    assert_canary_rejected(name, canary)
