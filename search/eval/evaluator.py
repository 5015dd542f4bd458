"""The evaluator: one candidate through named stages, into one ``Result``.

render -> guards -> build -> correctness -> timing. Each stage reads what the
ones before left in a ``_Run`` and leaves its artifact in ``artifacts``; the
first that fails ends the pipeline with ``Result.failure(stage, message)``. An
exception in a stage is a failure of that stage, never raised (an out-of-memory
one is marked ``out_of_memory`` so a worker can report it and restart).

This process is the judge: it renders, guards, draws the cases, computes the
reference and the oracle, times the baseline and gives the verdict. The candidate's
code never runs here: the build stage loads it in a candidate process of its own
(``sandbox``), used for this candidate only, and the later stages call it there.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field

from kdsl import backends
from kdsl.backends import Built, Unsupported

from . import correctness, guards, ipc_pool, plan, sandbox, threads, timing
from ..jobs import EvalJob
from ..result import STAGES, Result


class StageFailed(Exception):
    """A stage's verdict, as opposed to a crash inside it."""


@dataclass
class _Run:
    job: EvalJob
    timer: object = None
    backend: object = None
    source: str = ""
    built: Built | None = None
    box: sandbox.Sandbox | None = None
    timing: timing.Timing | None = None
    artifacts: dict = field(default_factory=dict)


def render(run: _Run) -> None:
    job = run.job
    try:
        run.backend = backend = backends.get(job.candidate.backend)
    except Exception as e:
        raise StageFailed(f"backend '{job.candidate.backend}' unavailable: {e}") from None
    device = job.config.device
    if device not in backend.devices:
        raise StageFailed(f"backend '{backend.name}' does not run on {device}")
    reason = backend.supports(job.op, device)
    if reason:
        raise StageFailed(f"unsupported: {reason}")
    if job.candidate.source is not None:
        run.source = job.candidate.source
    else:
        genome = _genome(backend.space(job.op, device), job.candidate.genes)
        run.artifacts["genome"] = genome
        try:
            run.source = backend.render(job.op, genome, device)
        except Unsupported as e:
            raise StageFailed(f"unsupported: {e}") from None
    run.artifacts["source"] = run.source


def _genome(space, genes: dict) -> dict:
    """``genes`` completed with the space's defaults; an unknown gene or value is an error."""
    for name, value in genes.items():
        if name not in space.names:
            raise StageFailed(f"unknown gene '{name}'; the space has {', '.join(space.names)}")
        if value not in space.gene(name).values:
            raise StageFailed(f"gene {name}={value!r} is not one of {space.gene(name).values}")
    return {**space.default(), **genes}


def build(run: _Run) -> None:
    """The candidate built and loaded in its own process; ``run.built`` calls it there."""
    config = run.job.config
    run.box = box = sandbox.open_sandbox(config.device, _memory_mb(config))
    started = time.perf_counter()
    try:
        box.ready()
    except sandbox.CandidateFault as e:
        raise StageFailed(str(e)) from None
    run.artifacts["sandbox_wait_s"] = round(time.perf_counter() - started, 3)
    run.artifacts["confinement"] = dict(box.confinement)
    try:
        reply = box.call("load", run.backend, run.job.op, run.source, config.device,
                         _linked(run))
    except sandbox.CandidateFault as e:
        raise StageFailed(str(e)) from None
    if reply[0] == "build_error":
        _, message, log = reply
        run.artifacts["build_log"] = log
        log = log.strip()
        raise StageFailed(f"{message}\n{log[-4000:]}" if log else message)
    _, log, meta, can_prepare = reply
    kernel = sandbox.RemoteKernel(box)
    prepare = (lambda shapes: box.call("prepare", shapes)) if can_prepare else None
    run.built = Built(kernel, log, meta, prepare)
    run.artifacts["build_log"] = log
    run.artifacts["meta"] = dict(meta)


def _linked(run: _Run) -> dict:
    """{build key: sha256} of the shared object the C guards compiled and linked for this
    source in this process: the only cached build the candidate's process may load."""
    if run.backend.language != "c":
        return {}
    from kdsl.backends.c import build as c_build

    from . import c_object
    digest = c_object.linked_digest(run.source)
    return {c_build.build_key(run.source): digest} if digest else {}


def _memory_mb(config) -> int | None:
    return config.memory_mb if config.device == "cpu" else None


def check_guards(run: _Run) -> None:
    if getattr(run.backend, "unguarded", False):  # test backends only: see tests/fake_backend
        run.artifacts["guards"] = []
        return
    found = guards.check(run.source, run.backend.language, run.backend.name)
    run.artifacts["guards"] = [g.name for g in guards.applicable(run.backend.name)]
    if found:
        run.artifacts["violations"] = [str(v) for v in found]
        raise StageFailed("; ".join(str(v) for v in found[:5]) +
                          (f" (and {len(found) - 5} more)" if len(found) > 5 else ""))


def check_correctness(run: _Run) -> None:
    if run.built.prepare is not None:
        prepare(run)
    with threads.judge_work():
        outcome = correctness.check(run.job.op, run.built.fn, run.job.config,
                                    interpreted(run))
    run.artifacts.update(outcome.artifacts)
    if outcome.message:
        raise StageFailed(outcome.message)


def prepare(run: _Run) -> None:
    """Let the build compile ahead for every test shape at once. A failure here is no
    verdict: the cases then compile their kernels at their first call, as without it."""
    started = time.perf_counter()
    planned = plan.plan(run.job.op, run.job.config, interpreted(run))
    shapes = [(p.shape.sizes, p.shape.dtype) for p in planned]
    try:
        run.built.prepare(shapes)
    except Exception as e:
        run.artifacts["prepare"] = f"skipped: {type(e).__name__}: {str(e)[:300]}"
    run.artifacts["prepare_s"] = round(time.perf_counter() - started, 3)


def interpreted(run: _Run) -> bool:
    """Whether the candidate runs in the Triton interpreter (slow: its cases stay small)."""
    return untimed(run.backend, run.job.config.device) is not None


def untimed(backend, device: str) -> str | None:
    """Why a kernel's time would mean nothing here (Triton on cpu runs in its interpreter)."""
    if device == "cpu" and backend.name.startswith("triton"):
        return "Triton on cpu runs in the interpreter; time it on cuda"
    return None


def time_it(run: _Run) -> None:
    reason = untimed(run.backend, run.job.config.device)
    if reason:
        run.artifacts["timing_skipped"] = reason
        return
    with sandbox.spares_paused(run.job.config.device), threads.judge_work():
        run.timing = t = timing.measure(run.job.op, run.built.fn, run.job.config,
                                        timer=run.timer)
    waited = run.artifacts.get("lock_wait_s", 0.0) + t.artifacts.get("lock_wait_s", 0.0)
    run.artifacts.update(t.artifacts)
    if waited:  # the correctness stage's waits and the timing stage's, together
        run.artifacts["lock_wait_s"] = round(waited, 4)
    if t.message:
        raise StageFailed(t.message)


PIPELINE = {"render": render, "guards": check_guards, "build": build,
            "correctness": check_correctness, "timing": time_it}
assert tuple(PIPELINE) == STAGES


def evaluate(job: EvalJob, timer=None) -> Result:
    """The result of ``job``; never raises (KeyboardInterrupt aside)."""
    run = _Run(job, timer)
    try:
        return _pipeline(run)
    finally:
        if run.box is not None:
            run.box.stop()
        # the next job's tensors in segments this candidate never mapped (its pool keeps
        # what it freed); whatever stage ended the job
        ipc_pool.release(job.config.device)


def _pipeline(run: _Run) -> Result:
    job = run.job
    spent = run.artifacts.setdefault("stage_s", {})
    for stage, fn in PIPELINE.items():
        if stage == "timing" and not job.config.time:
            stage = "correctness"
            break
        start = time.perf_counter()
        try:
            fn(run)
        except StageFailed as e:
            return _failed(run, stage, str(e))
        except (Exception, SystemExit) as e:
            tb = traceback.format_exception(type(e), e, e.__traceback__)
            run.artifacts["traceback"] = "".join(tb[-12:])
            if correctness.out_of_memory(e):
                run.artifacts["out_of_memory"] = True
            return _failed(run, stage, f"{stage} raised {type(e).__name__}: {e}")
        finally:
            spent[stage] = round(time.perf_counter() - start, 4)
    t = run.timing or timing.Timing(None)
    return Result(True, stage, "", time_ms=t.time_ms, baseline_ms=t.baseline_ms,
                  baseline_name=t.baseline_name, artifacts=run.artifacts)


def _failed(run: _Run, stage: str, message: str) -> Result:
    t = run.timing
    if t is not None and t.time_ms is not None:  # a suspect time is kept, for the record
        return Result(False, stage, message, time_ms=t.time_ms, baseline_ms=t.baseline_ms,
                      baseline_name=t.baseline_name, artifacts=run.artifacts)
    return Result.failure(stage, message, **run.artifacts)
