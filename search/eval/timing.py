"""The timing stage: candidate and baseline timed alike on the op's bench point.

A timer is any callable ``timer(fn, warmup=, reps=, setup=) -> [ms, ...]``
(``setup`` runs before every call, outside the timed region), so tests pass a
fake one. On CUDA each run is bracketed by CUDA events after a 256 MB write
that flushes L2, queued ahead of the GPU (``cuda_timer``); on CPU
``time.perf_counter`` brackets it. The result is the
median. The baseline is timed first (once per process), then one probe run of the
candidate: a kernel already ``slow_cutoff`` times the baseline, whose warmup and reps
would hold the device for over ``CUT_OVER_MS``, is ranked by that one run
(artifact ``reps_cut``): searches set it; by default every rep is timed.

Before timing, the kernel's bench-size output is checked against a float64
oracle (the spec's baseline run on float64 inputs, on the device), so a kernel
cannot be right on small cases and skip work at the bench size. Every timed call
sees inputs no call saw before, and outputs kept at calls the judge draws in secret
are checked (``timed_calls``). The candidate's process times each call, and the
judge times the same call's round trip: a sample below what the judge's clock shows
is not believed (``judged_calls``).

A candidate faster than the memory-traffic floor (``floor``) is not believed.
"""
from __future__ import annotations

import contextlib
import functools
import linecache
import os
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from kdsl import baseline, cases, dtypes, ir
from kdsl.compare import float_roundings, int_slack
from kdsl.reference import cast_bounds

from . import correctness as corr
from . import baseline_precision as precision
from . import device_lock
from . import allocator, floor, oracle_chunks, step_width, threads, timed_calls
from .floor import bench_traffic_bytes, copy_bandwidth
from .timers import Timer, default_timer



# ---- the bench point -------------------------------------------------------

def bench_point(op: ir.Op, device: str) -> ir.BenchPoint | None:
    """The point declared for ``device``, else the one declared for every device."""
    for want in (device, None):
        for p in op.bench:
            if p.device == want:
                return p
    return None


def bench_dtype(op: ir.Op, point: ir.BenchPoint, wanted: str | None) -> str:
    if wanted in op.dtype_choices:
        return wanted
    return point.dtype or op.dtype_choices[0]


_BENCH_CASES: dict[tuple, cases.Case] = {}


def bench_case(op: ir.Op, point: ir.BenchPoint, dtype: str, variant: int = 0) -> cases.Case:
    """The bench inputs (numpy, never handed to a kernel), kept for the latest point only.

    ``variant`` k > 0 is another set of inputs at the same point, drawn from another seed:
    timed runs cycle over the sets, so an answer kept from an earlier call is the
    wrong answer for the next one."""
    key = (op.hash, point.sizes, dtype, variant)
    if key not in _BENCH_CASES:
        for k in [k for k in _BENCH_CASES if k[:3] != key[:3]]:
            del _BENCH_CASES[k]
            floor.forget()
        _BENCH_CASES[key] = cases.bench_case(op, ir.BenchPoint(point.device, point.sizes, dtype),
                                             seed=variant * corr.TWIN_SEED)
    return _BENCH_CASES[key]


# ---- the baseline ----------------------------------------------------------

@dataclass(frozen=True)
class BaselineTime:
    ms: float
    name: str       # 'torch.compile' | 'eager'
    note: str = ""  # why torch.compile fell back to eager
    precision: str = ""  # where torch's default precision failed the spec (baseline_precision)
    default_ms: float | None = None  # then: the time at torch's defaults, not the baseline
    own_ms: float | None = None  # judged (``judged_baseline``): its median in this process
    clock: dict = field(default_factory=dict)  # and what the judge's clock saw of its steps


BASELINES: dict[tuple, BaselineTime] = {}


def baseline_mode(config) -> str:
    if config.baseline == "auto":
        return "compile" if config.device == "cuda" else "eager"
    return config.baseline


def baseline_function(op: ir.Op, ns: dict) -> Callable:
    """The spec's baseline as a function of its inputs, with a source file that inspect finds.

    torch.compile before 2.13 wraps a function without a source file (an eval'd lambda) in
    one shared wrapper, whose recompile limit (8) then ends compilation for every later op
    in the process without an error (pytorch/pytorch#124269); measured on an H200 with
    torch 2.11: a worker confirming op after op ran torch.compile eagerly from its ninth op
    on. Registering the source in linecache gives the lambda a file of its own."""
    names = ", ".join(t.name for t in op.inputs)
    source = f"lambda {names}: ({op.baseline.source})\n"
    filename = f"<kdsl baseline {op.name} {op.hash}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return eval(compile(source, filename, "eval"), ns)  # noqa: S307 - the spec's own baseline


def baseline_runner(op: ir.Op, sizes: dict[str, int], tensors: dict, mode: str,
                    compile_fn=None) -> tuple[Callable[[], object], str, str]:
    """(zero-argument callable, 'eager' | 'torch.compile', fallback note)."""
    names = [t.name for t in op.inputs]
    fn = baseline_function(op, baseline.namespace(op, sizes, {}))
    args = [tensors[n] for n in names]
    if mode == "eager":
        return (lambda: fn(*args)), "eager", ""
    graphs = None
    try:
        if compile_fn is None:
            import torch
            from torch._dynamo.utils import counters
            compile_fn = torch.compile
            graphs = lambda: counters["stats"]["unique_graphs"]  # noqa: E731
        before = graphs() if graphs else 0
        compiled = compile_fn(fn)
        compiled(*args)  # compiles now, so a failure falls back here and not mid-timing
        if graphs and graphs() == before:
            # dynamo can skip a frame without raising (a limit, a disabled config): the
            # "compiled" function then runs eagerly and must not be reported as compiled
            return ((lambda: compiled(*args)), "eager",
                    "torch.compile captured no graph, so it ran eagerly")
        return (lambda: compiled(*args)), "torch.compile", ""
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0][:200]
        return (lambda: fn(*args)), "eager", f"torch.compile failed ({type(e).__name__}: {first})"


class CardBusy(RuntimeError):
    """The GPU kept running another process's work past ``sandbox.DRAIN_MAX_MS``."""


def card_quiet(device: str) -> None:
    """Before the baseline is timed on a GPU (the device held alone): every other process's
    queued work run out. A stopped candidate's process keeps running on the card what it
    queued and did not wait for (after a correctness call, say, which is not timed), and
    beside the baseline's runs it would lengthen them, and every speedup measured against
    the baseline this process keeps. Raises ``CardBusy`` where it never runs out."""
    if device != "cuda":
        return
    import torch

    from .sandbox import DRAIN_MAX_MS, drain_card
    if drain_card(torch.zeros(1, device="cuda")) is None:
        raise CardBusy(f"the GPU ran another process's work for more than {DRAIN_MAX_MS:g} "
                       f"ms before the baseline was timed")


def time_baseline(op, case, device, mode, config, timer, cache, compile_fn=None,
                  hold=contextlib.nullcontext, waited: dict | None = None) -> BaselineTime:
    """The baseline's median, once per (op, device, point, dtype, mode) in this process.

    torch.compile runs before ``hold()`` is entered (the device lock, when the caller
    does not hold it already) and takes no lock: it compiles for seconds, which would
    keep every timed run waiting, then runs the baseline once at the bench size (one
    batch of another's timed runs can be lengthened; the median outvotes it). The
    inputs are freed once timed, so they do not stay on a shared GPU between jobs."""
    import torch
    key = (op.hash, device, tuple(case.sizes.items()), case.dtype, mode, config.warmup,
           config.reps)
    if key not in cache:
        with device_lock.shared(device, waited):
            tensors = corr.fresh_inputs(op, case.dtype, case.inputs, device)
        # (its outputs from memory the heap holds, as a candidate's are: ``allocator``)
        with torch.no_grad(), threads.timed_work(), allocator.freed_memory_kept():
            run, name, note = baseline_runner(op, case.sizes, tensors, mode, compile_fn)
            with hold():
                card_quiet(device)
                samples = timer(run, warmup=config.warmup, reps=config.reps)
            base, keep = BaselineTime(statistics.median(samples), name, note), True
            if precision.applies(op, case.dtype, device):
                base, keep = _held_to_spec(op, case, device, config, timer, hold, waited,
                                           tensors, run, base)
        del run, tensors
        if not keep:  # (checked again by the next job, when the device may have room)
            return base
        cache[key] = base
    return cache[key]


def whole_steps(config, sets: int, steps: int = 1) -> tuple[int, int]:
    """(warm-up calls, timed calls): the configured ones, with at least ``steps`` steps (a
    call on each buffer) of timed calls only."""
    whole_from = -(-config.warmup // sets) * sets
    return config.warmup, max(config.reps, whole_from + steps * sets - config.warmup)


# requests of timed calls a judged baseline is given, its figure the lowest: it is timed
# once a process and serves every candidate of the op after it, so one request slowed by
# the host (a process starting on the same cores) would inflate every later speedup
BASELINE_REQUESTS = 2


def judges_baseline(device: str) -> bool:
    """Whether the baseline is timed in a process of its own on ``device``:
    ``KDSL_JUDGED_BASELINE`` 1 or 0, or by default on the CPU only. On an H200 (2026-12-06,
    KernelBench level 1, four workers) it took 8-11 s an evaluation (a process started,
    torch.compile run again there), evaluations took 30-98 s against 7-45 s before, five
    ran past their 100 s and two ran out of the card's memory beside the other workers'
    (a 6.4 GB activation's baseline allocating its outputs in a third process)."""
    wanted = os.environ.get("KDSL_JUDGED_BASELINE", "auto")
    return wanted == "1" or (wanted != "0" and device == "cpu")


def judged_baseline(op, case, device, config, base: BaselineTime, sets: list, hold, cache,
                    arts: dict) -> BaselineTime:
    """``base`` timed again as candidates are: in a candidate process of its own that has
    loaded nothing else (``baseline_kernel``), a step of calls at a time on the judge's
    clock, over the candidate's input sets varied before every call, its figure never
    below what the clock shows (``judged_calls``), the lowest of ``BASELINE_REQUESTS``
    requests. Then what the judge's round trips cost is in both figures of a speedup, not
    in the candidate's alone. Where the process fails, ``base`` stands, with a note
    (artifact ``baseline_judged``). Once per process
    and key, as ``time_baseline``; not where ``base`` was held to the spec's precision
    (torch's settings were changed in this process for it)."""
    import torch

    from . import sandbox
    if base.precision:
        return base
    key = ("judged", op.hash, device, tuple(case.sizes.items()), case.dtype, base.name,
           config.warmup, config.reps)
    if key in cache:
        return cache[key]
    pairs = [(ins, outs) for _, ins, outs, _ in sets]
    # as wide a step as a candidate of the baseline's time gets (``step_width``): what a
    # step costs by itself is then shared alike in both figures of a speedup
    steps = 1
    if widen(op, case, case.dtype, device, pairs, base.ms, 0.0, hold):
        steps = step_width.TIMED_STEPS
    warmup, reps = whole_steps(config, len(pairs), steps)
    box = None
    figures = []  # (judged median, clock) of each request
    try:
        # a process of its own, not the spare: the spare is paused while anything is timed
        # on the CPU, and taking it would start another, importing on the cores being timed
        box = sandbox.Sandbox(device, config.memory_mb if device == "cpu" else None)
        box.ready()
        box.call("baseline", op, base.name)
        remote = sandbox.RemoteKernel(box)
        remote(*pairs[0], dict(case.sizes))  # built (compiled) here, untimed, unlocked
        for _ in range(BASELINE_REQUESTS):
            with hold(), torch.no_grad():
                p = timed_calls.plan(op, case.sizes, case.dtype, [o for _, o in pairs],
                                     warmup, reps, device, [pristine for *_, pristine in sets])
                samples = remote.time(pairs, case.sizes, warmup, reps, [], p)
                for k, (ins, _) in enumerate(pairs):
                    timed_calls.restore(p, ins, sets[k % len(sets)][3])
            judged, clock, contradiction = judged_calls(remote, samples, device)
            if contradiction is None:  # (the judge's own code: a busy host, not a forger)
                figures.append((statistics.median(judged), clock))
    except sandbox.CandidateFault as e:
        arts["baseline_judged"] = f"timed in the judge's process: its own failed ({e})"[:400]
        return base
    finally:
        if box is not None:
            box.stop()
    if not figures:
        arts["baseline_judged"] = "timed in the judge's process: the judge's clock " \
                                  "contradicted the baseline's own timer at every request"
        return base
    ms, clock = min(figures, key=lambda f: f[0])
    cache[key] = replace(base, ms=ms, own_ms=base.ms, clock=clock)
    return cache[key]


def _held_to_spec(op, case, device, config, timer, hold, waited, tensors, run,
                  base: BaselineTime) -> tuple[BaselineTime, bool]:
    """(``base``, or the baseline timed with TF32 off where torch's default failed the
    spec's tolerance at the bench point and TF32 off passes; whether to keep it for the
    process's later jobs: not where the device was short of memory this once)."""
    step = "the check"
    try:
        ref, _ = oracle(op, case, device, hold, uploaded=tensors, waited=waited)
        with hold():
            default = precision.judge(op, case.dtype, run(), ref)
        if default[0] is not False:
            held = precision.verdict(default, None)
            return replace(base, precision=held.note), True
        # the same callable: cuDNN and cuBLAS read the switches at each call (and what
        # the output shows, not the switch, decides), so nothing compiles a second time
        with precision.tf32_off():
            with hold():
                strict = precision.judge(op, case.dtype, run(), ref)
            del ref
            held = precision.verdict(default, strict)
            if not held.tf32_off:
                return replace(base, precision=held.note), True
            step = "the timing with TF32 off"
            with hold():
                samples = timer(run, warmup=config.warmup, reps=config.reps)
    except Exception as e:
        # the check never costs the baseline its time: torch's defaults stand, and why
        short = corr.out_of_memory(e)
        first = (str(e).strip().splitlines() or [""])[0][:160]
        why = "out of device memory" if short else f"{type(e).__name__}: {first}"
        ref = default = strict = None  # (what the check held, freed before the caller goes on)
        if device == "cuda":
            import torch
            torch.cuda.empty_cache()
        return replace(base, precision=precision.unchecked(f"{step}: {why}")), not short
    return BaselineTime(statistics.median(samples), base.name, base.note, held.note,
                        base.ms), True


# ---- the oracle at the bench point -----------------------------------------

_ORACLES: dict[tuple, tuple] = {}


def oracle(op: ir.Op, case: cases.Case, device: str, hold=contextlib.nullcontext,
           uploaded: dict | None = None, waited: dict | None = None, variant: int = 0
           ) -> tuple[dict | None, str]:
    """The baseline on float64 inputs, as device tensors (None and why when it fails).

    Computed once a process for each input ``variant``, on the device under ``hold()`` (the device lock, where the
    caller does not hold it already), from ``uploaded`` (the case's inputs on the device,
    left as they are) or a fresh upload. Kept between jobs on the host, not the GPU: many
    workers share one card, and each holding a copy of the bench outputs would crowd it
    out; each job uploads it again."""
    key = (op.hash, device, tuple(case.sizes.items()), case.dtype, variant)
    if key not in _ORACLES:
        for k in [k for k in _ORACLES if k[:4] != key[:4]]:  # the sets of one point
            del _ORACLES[k]
            _ORACLE_S.pop(k, None)
        try:
            ins = uploaded
            if ins is None:  # (freed with ``ins`` below)
                with device_lock.shared(device, waited):
                    ins = corr.fresh_inputs(op, case.dtype, case.inputs, device)
            with hold():  # (timed once the device is held: its wait is not the oracle's)
                start = time.perf_counter()
                got = oracle_of(op, case.sizes, case.dtype, ins, device)
                took = time.perf_counter() - start
            del ins
            _ORACLES[key] = ({k: v.cpu() for k, v in got.items()}, "")
            _ORACLE_S[key] = took
        except Exception as e:
            if corr.out_of_memory(e):
                raise
            _ORACLES[key] = (None, f"float64 oracle failed ({type(e).__name__}: {e}); checked "
                                   f"that every element was written only")
    kept, note = _ORACLES[key]
    return (None if kept is None else on_device_if_room(kept, device)), note


# seconds computing each cached oracle (the first of its point in this process, so every
# job of the process reads the same figure)
_ORACLE_S: dict[tuple, float] = {}


def oracle_of(op: ir.Op, sizes: dict, dtype: str, ins: dict, device: str,
              hold=contextlib.nullcontext) -> dict:
    """The spec's baseline on float64 copies of ``ins`` (on the device), uncached.

    Where the device fails at it (out of memory for those copies, or a library's own
    allocation failure), they are made on the host from copies of ``ins`` and the outputs
    stay there unless the device has room for them (``close_on_device`` compares across
    devices a chunk at a time): float64 copies take twice the inputs, and on an H100
    (2026-12-06, three workers) 13 KernelBench problems of 1-8 GiB inputs ran out of memory
    in the timing stage, 9 of them asking for exactly the float64 copy of their largest
    input (2-16 GiB, with 0.6-12.5 free); at four workers the same day, moving a host
    oracle's 12 GiB output back to the device ran out of memory in turn. The host has the
    memory (the inputs are drawn there), and its seconds count against the job's time limit
    like the device's. Only a failure on the host as well is the oracle's. (A failure that is
    not one of memory leaves the oracle to the spec's own float64 reference, ``_by_reference``.)
    Before the host,
    an op with a batch axis is computed on the device a slice of it at a time
    (``oracle_chunks``: the same values in a fraction of the memory; 104 of the 119 specs
    in ``specs/`` have one).

    The host's copy runs on torch's default thread count, not the judge's one thread
    (``threads``), where the caller holds the GPU alone (``device_lock.exclusive``, as the
    timing stage does): no other process's timed runs are on the card for it to lengthen.
    On one thread it was most of a large point's evaluation (an H100 host of 16 CPUs,
    2026-12-06: 9-42 s for each of KernelBench's 6-12 GiB activations and norms, and as
    long again for the check of every timing request)."""
    try:
        return _oracle_at(op, sizes, dtype, ins, device, hold)
    except Exception as e:
        short = corr.out_of_memory(e)
        if device == "cpu" and short:
            raise
        if not short:  # (past the handler, the failed attempt's frames are released)
            failed = f"{type(e).__name__}: {e}"
    if not short:
        return _by_reference(op, sizes, dtype, ins, failed)
    import torch
    torch.cuda.empty_cache()
    back = next(iter(ins.values())).device if ins else device
    got = _sliced_on_device(op, sizes, dtype, ins, device, hold) if short else None
    if got is not None:
        return on_device_if_room(got, back)
    with threads.timed_work() if device_lock.held_alone() else contextlib.nullcontext():
        got = _oracle_at(op, sizes, dtype, {k: v.cpu() for k, v in ins.items()}, "cpu")
    return on_device_if_room(got, back)


# slices of a batch axis tried for an oracle the device had no room for whole, before the
# host computes it (``oracle_chunks``)
ORACLE_SLICES = (4, 16, 64)


def _sliced_on_device(op, sizes, dtype, ins, device, hold) -> dict | None:
    """The oracle a slice of a batch axis at a time on the device (gathered on the host),
    or None where the op has no such axis or the device has no room even for a slice."""
    import torch
    found = oracle_chunks.batch_dim(op)
    if found is None or sizes[found[0]] < 2:  # (one slice is the whole)
        return None
    dim, where = found
    for pieces in sorted({min(n, sizes[dim]) for n in ORACLE_SLICES}):
        try:
            return oracle_chunks.sliced_oracle(
                op, sizes, ins, dim, where, pieces,
                lambda at, part: _oracle_at(op, at, dtype, part, device, hold))
        except Exception as e:
            if not corr.out_of_memory(e):
                return None
        torch.cuda.empty_cache()
    return None


def on_device_if_room(tensors: dict, device) -> dict:
    """``tensors`` on ``device``, or where they are if it has no room for them."""
    try:
        return {k: v.to(device) for k, v in tensors.items()}
    except Exception as e:
        if not corr.out_of_memory(e):
            raise
    import torch
    torch.cuda.empty_cache()
    return dict(tensors)


def _by_reference(op: ir.Op, sizes: dict, dtype: str, ins: dict, failed: str) -> dict:
    """The spec's own float64 reference of ``ins``, on the host: the oracle where the
    baseline fails on float64 inputs. A baseline that makes a constant in float32
    (``x @ w.float()``) passes ``kdsl check``, which runs it on the spec's dtypes, and
    failed every evaluation at the bench point (a probe spec, 2026-12-07: "expected m1 and
    m2 to have the same dtype"). Only a failure here as well is the oracle's."""
    import torch

    from kdsl.reference import reference
    arrays = {k: (v.detach().double() if v.is_floating_point() else v.detach()).cpu().numpy()
              for k, v in ins.items()}
    try:
        got = reference(op, dict(sizes), arrays)
    except Exception as e:
        raise RuntimeError(f"the baseline failed on float64 inputs ({failed}), and so did "
                           f"the spec's reference ({type(e).__name__}: {e})") from None
    back = next(iter(ins.values())).device if ins else "cpu"
    out = {}
    for t in op.outputs:
        v = torch.from_numpy(np.ascontiguousarray(got[t.name]))
        out[t.name] = v.to(_judged_in(v.dtype, outs_dtype(op, t.name, dtype)))
    return on_device_if_room(out, back)


def _oracle_at(op: ir.Op, sizes: dict, dtype: str, ins: dict, device: str,
               hold=contextlib.nullcontext) -> dict:
    import torch
    with hold(), torch.no_grad():
        wide = {k: v.double() if v.is_floating_point() else v for k, v in ins.items()}
        got = baseline.outputs_of(op, baseline.baseline_callable(op, sizes, wide)())
        got = {k: v.to(_judged_in(v.dtype, outs_dtype(op, k, dtype))) for k, v in got.items()}
        corr.sync(device)
    return got


def oracle_seconds(op: ir.Op, case: cases.Case, device: str) -> float | None:
    """What computing this point's cached oracle (``oracle``) took: None where it failed or
    none is cached."""
    return _ORACLE_S.get((op.hash, device, tuple(case.sizes.items()), case.dtype, 0))


def outs_dtype(op: ir.Op, name: str, dtype: str):
    """The torch dtype of output ``name`` at the bench ``dtype``."""
    return dtypes.torch_dtype(op.dtype_of(name, dtype))


def _judged_in(ref_dtype, out_dtype):
    """The dtype a float output is compared in: float32 for a 16-bit output (its tolerances,
    1e-3 and wider, are far above float32's rounding), else float64. A 16-bit bench output
    of a GB was compared through float64 copies of 4 GB each, in the device lock."""
    import torch
    if not ref_dtype.is_floating_point:
        return ref_dtype
    return torch.float32 if out_dtype in (torch.bfloat16, torch.float16) else torch.float64


def _arg_output(op: ir.Op, name: str) -> bool:
    st = next(s for s in op.statements if s.target == name)
    return (isinstance(st.value, ir.Reduce) and st.value.op in ("argmax", "argmin")) or \
        (isinstance(st.value, ir.Collective) and st.value.op in ("argsort", "argtopk"))


# elements compared at a time: a float64 temporary of a whole bench output is a fresh
# allocation whose pages the CPU faults in one by one (ten of them per comparison of a 16M-
# element output took 0.48 s on the 2-core VM, against 0.03 s in chunks that stay in cache);
# on a GPU, chunks bound the comparison's memory beside the bench tensors
COMPARE_CHUNK = {"cpu": 1 << 18, "cuda": 1 << 25}


def close_on_device(op: ir.Op, dtype: str, outs: dict, ref: dict) -> tuple[bool | None, float]:
    """(all within tolerance?, max abs error), on the outputs' device (a reference kept on
    the host, where the device had no room for it, comes over a chunk at a time); None when
    only compare can tell."""
    worst = 0.0
    for t in op.outputs:
        g, r = outs[t.name], ref[t.name]
        if _arg_output(op, t.name) or tuple(g.shape) != tuple(r.shape):
            return None, worst
        chunk = COMPARE_CHUNK["cuda" if g.is_cuda else "cpu"]
        g, r = g.reshape(-1), r.reshape(-1)
        for at in range(0, g.numel(), chunk):
            ok, error = _close(op, dtype, g[at:at + chunk], r[at:at + chunk].to(g.device),
                               t.name)
            if not ok:
                return False, worst
            worst = max(worst, error)
    return True, worst


def _close(op: ir.Op, dtype: str, g, r, name: str = "") -> tuple[bool, float]:
    """One chunk of an output against the oracle's: (all close?, the largest finite error).
    The common case in a few passes: every element within a finite bound; the rest (an
    infinite or NaN reference, a failure) by the exact rule."""
    import torch
    if not (g.is_floating_point() or r.is_floating_point()):
        slack = int_slack(op, name)
        if not slack:
            return bool((g.long() == r.long()).all()), 0.0
        return bool(((g.double() - r.double()).abs() <= slack).all()), 0.0
    # the op's dtype's tolerance, else the output's own (an op whose first input, which
    # names its dtype, is a bool mask has no tolerance for 'bool': a KeyError here)
    from kdsl.compare import tolerance
    rtol, atol = tolerance(op, dtype, name)
    wide = _judged_in(r.dtype if r.is_floating_point() else g.dtype, g.dtype)
    gw, rw = g.to(wide), r.to(wide)
    diff = torch.sub(gw, rw).abs_()
    bound = rw.abs().mul_(rtol).add_(atol).nan_to_num_(nan=-1.0, posinf=-1.0)
    if bool((diff <= bound).all()):  # (a NaN difference is never <=)
        return True, float(diff.max()) if diff.numel() else 0.0
    # where the reference is infinite only the same infinity will do (inf <= inf would pass
    # anything)
    ok = (rw.isfinite() & (diff <= atol + rtol * rw.abs())) | (gw == rw) | \
        (gw.isnan() & rw.isnan())
    if not bool(ok.all()):
        return False, 0.0
    return True, float(torch.where(diff.isfinite(), diff, 0).max())


def bench_judge(op, case, ins, outs, ref, variant, device,
                pristine=None) -> tuple[str | None, float]:
    """Every element written, inputs intact, close to the oracle; the fast path on the device."""
    ok, error = (None, 0.0) if ref is None else close_on_device(op, case.dtype, outs, ref)
    if ok:
        message, _ = corr.judge(op, case.dtype, case.inputs, ins, outs, None, variant, device,
                                pristine)
        return message, error
    ref_np = None if ref is None else corr.to_numpy(ref)
    message, error = corr.judge(op, case.dtype, case.inputs, ins, outs, ref_np, variant,
                                device, pristine)
    if message is None or ref is None or \
            not any(float_roundings(op, t.name) for t in op.outputs):
        return message, error
    # a float output of a rounding: judged again by the spec's own math rounded either way
    # (``reference.cast_bounds``), on the host from the inputs the kernel read; only once an
    # element is off, as its three float64 passes are seconds at a bench point
    bounds = cast_bounds(op, case.sizes, corr.to_numpy(pristine or ins), case.dtype)
    if not bounds:
        return message, error
    return corr.judge(op, case.dtype, case.inputs, ins, outs, ref_np, variant, device,
                      pristine, bounds=bounds)


# ---- the stage -------------------------------------------------------------

@dataclass
class Timing:
    message: str | None
    time_ms: float | None = None
    baseline_ms: float | None = None
    baseline_name: str = ""
    artifacts: dict = field(default_factory=dict)


CUT_OVER_MS = 1000.0  # the slow cutoff applies only where warmup + reps would take this long


def measure(op: ir.Op, kernel, config, timer: Timer | None = None, bandwidth=None,
            baselines: dict | None = None, compile_fn=None) -> Timing:
    """Check and time ``kernel`` at the bench point, time the baseline, judge the floor.

    ``bandwidth`` is bytes/s, or a callable (device, nbytes) -> bytes/s; measured when None.

    Bench-size work on the GPU holds the device alone (``device_lock``), so no worker's
    timed runs share it with another's kernels. A bench point of at least
    ``config.exclusive_bench_bytes`` holds it for the whole stage: several workers' copies
    of such tensors would not fit one GPU. A smaller one takes the lock phase by phase,
    and draws its inputs and compiles the baseline between them, overlapping others.
    """
    device = config.device
    point = bench_point(op, device)
    if point is None or op.baseline is None:
        return Timing(f"op '{op.name}' declares no {'baseline' if point else 'bench point'} "
                      f"for {device}")
    dtype = bench_dtype(op, point, config.bench_dtype)
    phases: dict = {}  # where the stage's seconds go
    with _lap(phases, "draw"):
        case = bench_case(op, point, dtype)  # drawn once a process, outside the device lock
    arts: dict = {"bench": {"sizes": dict(case.sizes), "dtype": dtype},
                  "timing_phases_s": phases}
    whole = floor.allocated_bytes(op, case.sizes, dtype) >= config.exclusive_bench_bytes
    arts["device_lock"] = "stage" if whole else "phases"
    lock = functools.partial(device_lock.exclusive, device, arts)
    # the baseline is timed as the candidate is (``judged_baseline``) where both are real:
    # the default timer, torch.compile itself, and a candidate in a process of its own
    judge_baseline = timer is None and compile_fn is None and hasattr(kernel, "box") and \
        judges_baseline(device)
    timer = timer or default_timer(device)
    with lock() if whole else contextlib.nullcontext():
        return _measure_at(op, point, case, as_kernel(kernel, timer), config, timer, bandwidth,
                           BASELINES if baselines is None else baselines, compile_fn, arts,
                           contextlib.nullcontext if whole else lock, keep_inputs=whole,
                           judge_baseline=judge_baseline)


@contextlib.contextmanager
def _lap(phases: dict, name: str):
    """Adds the block's wall seconds to ``phases[name]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        phases[name] = round(phases.get(name, 0.0) + time.perf_counter() - start, 4)


class LocalKernel:
    """A kernel function run in this process, with the interface of ``sandbox.RemoteKernel``
    (tests, and tools that time a trusted function)."""

    def __init__(self, fn, timer: Timer):
        self.fn, self.timer = fn, timer

    def __call__(self, ins, outs, sizes):
        self.fn(ins, outs, sizes)

    def time(self, sets, sizes, warmup, reps, poisons, plan=None) -> list[float]:
        setup, run, finish = timed_calls.Calls(self.fn, sets, sizes, poisons,
                                               plan).sequential()
        samples = self.timer(run, warmup=warmup, reps=reps, setup=setup)
        finish()
        return samples

    walls = None  # no round trips to time: the function runs in this process


def as_kernel(kernel, timer: Timer):
    return kernel if hasattr(kernel, "time") else LocalKernel(kernel, timer)


# The judge's clock. A candidate's timed calls come in steps, a round trip each, and the
# judge times every step (``RemoteKernel.walls``), from before it wakes the process to the
# signal that stops it again (on a GPU, until the card has served what the process queued).
# Before any candidate code was loaded it measured what a step and its calls cost by
# themselves, as steps of calls of nothing (``trip_ms`` a step, ``call_ms`` a call: on a GPU
# the step's calls are queued behind one head start, a busy-wait of 0.5 ms that the step's
# cost takes in, and each call flushes L2), each the least of its probes on the CPU and
# their median on a GPU, at most ``sandbox.TRIP_SPREAD_MS`` above the least
# (``sandbox.step_costs``), the step's no more than the least (CPU) or the median (GPU) that
# the steps of the request left beside their claimed calls (``subtracted_trip_ms``). Each
# call's sample counts at least its share of its step's wall less exactly those
# measured costs, with no allowance beyond the probes' spread on a GPU (at most
# ``sandbox.TRIP_SPREAD_MS``): a process that forges its own timer (native code can
# reach anything in it) is then timed by the judge's clock, whose error is the step's own cost
# varying around its probed median, as likely up as down, and a call's own cost: the timer's
# flush and the step's head start, which a forged timer need not run and could spend
# working instead (with a head start a call, 1.15-1.21 ms a call on an H100, and
# ``judged_calls`` fed those probed costs gave a forger of 1.0 ms of work a call, claiming
# 0.05, 0.25 ms; with one a step, 0.09 ms a call and 1.41 ms a step, 2026-12-06). Only a
# smaller cost a call narrows that; the source guards keep candidates from native code and side streams
# meanwhile. An allowance was a gift: with
# 0.2 ms and 2% of the wall allowed, a kernel that did its real 0.11 ms of work and reported
# 0.002 ms was believed (a bound of 0) and accepted at 47x. The price is paid by honest kernels
# whose steps cost more than the probe's (waking a process that waited longer costs more: on
# the 2-core VM a step's own cost grew from 0.08 ms around a call of nothing to 0.37 ms around
# a 30 ms sleep): their figure rises by that excess over the calls of a step, 0.5% there.
# (On the CPU a step is one call on each input set: more calls would need more buffers, and
# a fast kernel cycling over 13 of them ran 4x slower than on two, its inputs no longer in
# cache: 0.45 against 0.11 ms. On a GPU, whose timer flushes L2 before every call, a fast
# kernel's step is made wider with copies of the sets, ``step_width``: the step's own cost,
# and what a forged timer could work through unclocked, are then shared by more calls.)
# The allowance, TRIP_SLACK_MS and WALL_SLACK of the wall, is for the verdict only: where the
# claimed median is under a CLOCK_RATIO-th of the allowed bounds' median, by more than
# CLOCK_SLACK_MS, the timer itself is contradicted: timed again, then a verdict. The figure
# never needs that verdict (the bound stands for every sample below it), so its slack is wide:
# on the 2-core VM honest kernels of 0.05 ms, two OpenMP threads each, read 1.3-1.5 ms a call
# on the judge's clock in 5 of 16 evaluations and 3 were rejected twice over with a slack of
# 0.5 ms; they keep the bound as their figure now.
TRIP_SLACK_MS = {"cpu": 0.2, "cuda": 0.2}
WALL_SLACK = 0.02
CLOCK_RATIO = 2.0
CLOCK_SLACK_MS = 2.0
# A request whose calls the judge's clock found far longer than the candidate's timer says,
# short of contradicting it, is timed again once, and the lower of the two judged figures
# kept: each is bounded by the judge's clock, so the lower is no less honest. On an H100
# (2026-12-05) a layer norm's and a GELU's steps took about 2 ms a call more than their
# 0.46 and 0.18 ms while other workers' processes ran out of the card's memory, and those
# figures stood. (ratio, ms) over the claimed median; none on the CPU, where the judge's
# clock over a fast kernel is that far above on two cores by itself, every time.
DISTURBED = {"cuda": (1.5, 0.5), "cpu": None}
# A disturbed or contradicted request is timed again after a pause, outside the device lock
# where the caller does not hold it for the whole stage: what lengthened its steps (another
# process starting, compiling or failing beside it) mostly lasts seconds. Back to back, on an
# H100 (2026-12-06 09:45, five workers), a layer norm and a GELU read 2.28 and 2.42 ms a call
# on the first request and 4.12 on the second, against 0.45 and 0.18 by their own timers.
# The candidate gains nothing from the pause: every call's inputs are new to it.
RETIME_PAUSE_S = {"cuda": 2.0, "cpu": 0.0}


# The figure is the median of the judged calls, but never below the step whose outputs were
# checked (``figure``): one step drawn at random, which pays that step's own noise. On an
# H100 (2026-12-06, one worker) KernelBench 88's checked step read 0.77 ms a call against a
# judged median of 0.31 (its own timer: 0.18); later that day 36's (RMS norm, one input set)
# read 7.11 against 5.71 (1.24x; its own timer 5.43) and stood at 1.5x. A request whose
# figure its checked step lifts this far above its median, (ratio, ms), is timed again once
# like a disturbed one, and the lower figure kept: each rests on a checked step of its own.
# On the CPU only a lift far beyond the judge's usual spread there: on the 2-core VM
# (2026-12-06) KernelBench 12's checked step read 9.85 and 9.35 ms a call in two of six
# evaluations against judged medians of 2.0 and 2.2 (its own timer: 1.2), the others 2.1-3.6.
LIFTED = {"cuda": (1.2, 0.05), "cpu": (2.0, 1.0)}


def lifted(figure_ms: float, judged: list[float], device: str) -> bool:
    """Whether a request's checked step lifted its figure far above its judged median."""
    bound = LIFTED.get(device)
    if bound is None or not judged:
        return False
    ratio, ms = bound
    median = statistics.median(judged)
    return figure_ms > max(ratio * median, median + ms)


def disturbed(clock: dict, claimed: list[float], device: str) -> bool:
    """Whether a request's judged calls read far above what the candidate's timer said."""
    bound = DISTURBED.get(device)
    seen = clock.get("judge_clock_ms")
    if bound is None or seen is None or not claimed:
        return False
    ratio, ms = bound
    median = statistics.median(claimed)
    return seen > max(ratio * median, median + ms)


def subtracted_trip_ms(kernel, device: str = "cpu") -> float:
    """A step's own cost, subtracted from each wall: the probes' (``sandbox.step_costs``),
    but never more than what this request's steps left beside what their calls claimed
    (``step_extras``): the least of them on the CPU, their median on a GPU, where the probes'
    median is subtracted too. A probe taken on a busy host reads high, and the excess was
    time the candidate worked unclocked; the request's own steps bound it from above (a
    timer that claims less only widens a step's extra, one that claims more only lowers its
    own bound). (The CPU keeps the least: with the median there, the test of ``kdsl
    compare`` on a small rmsnorm failed one re-measurement in one run of three, and in CI;
    the failure's cause was not found before it was put back.)"""
    extras = getattr(kernel, "step_extras", None)
    if not extras:
        return max(0.0, kernel.trip_ms)
    bound = statistics.median(extras) if device == "cuda" else min(extras)
    return max(0.0, min(kernel.trip_ms, bound))


def judged_calls(kernel, samples: list[float], device: str = "cpu"
                 ) -> tuple[list[float], dict, str | None]:
    """(each sample, never below its share of what the judge's clock shows its step took,
    less the step's and the call's measured costs; artifact; message if the clock, less an
    allowance, contradicts the candidate's timer). A kernel run in
    this process (``LocalKernel``) has no walls: its samples stand."""
    walls = getattr(kernel, "walls", None)
    if not walls or len(walls) != len(samples):
        return list(samples), {}, None
    shares = getattr(kernel, "shares", None) or [1] * len(walls)
    call_ms = getattr(kernel, "call_ms", 0.0)
    trip_ms = subtracted_trip_ms(kernel, device)
    floors = [max(0.0, (w - trip_ms) / n - call_ms) for w, n in zip(walls, shares)]
    believed = [max(s, f) for s, f in zip(samples, floors)]
    allow = trip_ms + TRIP_SLACK_MS[device]
    bounds = [max(0.0, (w * (1 - WALL_SLACK) - allow) / n - call_ms)
              for w, n in zip(walls, shares)]
    claimed, seen = statistics.median(samples), statistics.median(bounds)
    art = {"judge_clock_ms": round(statistics.median(floors), 5),
           "step_trip_ms": round(trip_ms, 4), "probed_trip_ms": round(kernel.trip_ms, 4),
           "step_call_ms": round(call_ms, 4), "calls_a_step": max(shares),
           "step_overhead_ms": round(statistics.median(
               w / n - s for w, n, s in zip(walls, shares, samples)), 4)}
    if believed != list(samples):
        art["claimed_ms"] = [round(x, 5) for x in samples]
    if seen > CLOCK_RATIO * claimed + CLOCK_SLACK_MS:
        return believed, art, (
            f"suspect: the candidate's process reported a median of {claimed:.4g} ms a call, "
            f"but on the judge's clock its calls took at least {seen:.4g} ms each (their "
            f"steps' round trips less {allow:.3g} ms and {WALL_SLACK:.0%}, a step's own "
            f"cost and more)")
    return believed, art, None


# while a point is timed its inputs and outputs are held several times over for each input
# set: in the judge the set's inputs, their pristine copy, the outputs and their kept
# snapshot; in the candidate's process a pristine copy of the varied inputs. Two sets, and
# the float64 oracle beside them, must fit in half the device's memory; where they do not
# (KernelBench 23's 6.4 GB softmax and 45's 17 GB pooling input ran out of an H200's 140 GB),
# one set is timed. Every call's inputs still differ (timed_calls varies them densely at
# each call), so no state kept between calls can serve an answer; one set only gives up the
# second draw of the random data.
SET_COPIES = 5
# On a GPU a small point gets up to GPU_SETS sets, their copies within GPU_SETS_BYTES. A
# step of timed calls is one call on each set (or on each buffer, where ``step_width``
# adds copies of the sets for a fast kernel), and what a step itself costs on the judge's
# clock beyond what its probes cost (the round trip's wake-ups) is shared by its calls:
# with one set a 3 ms relu read 0.81 ms a call over its own timer (H200), with two sets
# the GEMMs 0.12-0.86 ms (H200) and 0.02-0.25 ms (H100, polling); a step of two or four
# calls cost an H100 0.04-0.58 ms beyond its probes with a head start a call and 0.17-0.71
# sharing one (``bench/step_costs.py``, 2026-12-06, one run each), though sharing one made a
# step of four calls of a GELU take 1.9 ms of wall instead of 5.6. On the CPU every set
# costs a float64 oracle of its own at each check, on two cores: two sets.
# Each set is checked against a float64 oracle of its varied inputs at every timing
# request: the sets past two only where an oracle takes at most CHEAP_ORACLE_S (a bench-size
# convolution's took 14 s).
GPU_SETS = 4
GPU_SETS_BYTES = 2 << 30
CHEAP_ORACLE_S = 0.25


def input_sets(op: ir.Op, case: cases.Case, device: str) -> int:
    """Two input sets, alternating, where they fit (up to GPU_SETS on a GPU); one where
    two do not."""
    from .floor import allocated_bytes
    held = allocated_bytes(op, case.sizes, case.dtype)
    need = held * SET_COPIES * 2 + held * 2  # two sets, and the float64 oracle
    if need > device_memory(device) // 2:
        return 1
    if device != "cuda":
        return 2
    return max(2, min(GPU_SETS, GPU_SETS_BYTES // max(held * SET_COPIES, 1)))


def widen(op, case, dtype: str, device: str, pairs: list, call_ms: float,
          oracle_s: float | None, hold, timed_as=contextlib.nullcontext) -> bool:
    """``pairs`` (the request's buffers) grown to ``step_width.calls_a_step``'s width for a
    kernel of ``call_ms`` a call, under ``hold()`` and ``timed_as()`` (a phase's lap);
    whether it grew."""
    width = step_width.calls_a_step(device, call_ms, len(pairs),
                                    step_width.buffer_bytes(op, case.sizes, dtype),
                                    free_memory(device), oracle_s)
    if width <= len(pairs):
        return False
    with timed_as(), hold():
        pairs += step_width.more_buffers(op, case.sizes, dtype, device, pairs, width)
    return True


def free_memory(device: str) -> int:
    """Bytes of the GPU's memory free now (0 elsewhere: only a GPU's steps are widened)."""
    if device != "cuda":
        return 0
    import torch
    return torch.cuda.mem_get_info()[0]


@functools.lru_cache(maxsize=None)
def device_memory(device: str) -> int:
    """Bytes of memory of the device kernels run on (the GPU's, or the machine's RAM)."""
    if device == "cuda":
        import torch
        return torch.cuda.mem_get_info()[1]
    import os
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _measure_at(op, point, case, kernel, config, timer, bandwidth, cache, compile_fn, arts,
                hold, keep_inputs: bool = False, judge_baseline: bool = False) -> Timing:
    """``keep_inputs``: copy the inputs on the device before any run, for the checks that
    they stayed intact (a large point holds the GPU alone, so the copy fits; uploading a
    5 GB table again for each of two checks took 0.6-0.8 s apiece, in the lock)."""
    import torch
    device, dtype = config.device, case.dtype
    where = f"bench point {', '.join(f'{k}={v}' for k, v in case.sizes.items())}, {dtype}"
    # where the stage's seconds go (a large bench point's stage holds the device lock);
    # the phases that take the lock themselves include their wait, which lock_wait_s sums
    lap = functools.partial(_lap, arts.setdefault("timing_phases_s", {}))
    # every phase that runs bench-size kernels holds the GPU alone: another worker's
    # timed runs never share it with them; uploads share it with other sharers (the small
    # correctness cases), never with timed runs. torch.compile's first call takes no
    # lock (it compiles for seconds, then runs the baseline once at the bench size: that
    # one run can lengthen one batch of another's timed runs, which the median outvotes).
    # The price: a kernel that hangs only at the bench size holds the lock until its job's
    # time limit, and the others' waits count against theirs
    sets = []  # (case, ins, outs, pristine) for each input set
    nsets = input_sets(op, case, device)
    arts["input_sets"] = nsets
    variant = 0
    while variant < nsets:  # (nsets falls to two once the first oracle shows its cost)
        if variant:
            with lap("draw"):
                case = bench_case(op, point, dtype, variant)
        with lap("inputs"), device_lock.shared(device, arts):
            ins = corr.fresh_inputs(op, dtype, case.inputs, device, shared=True)
            # the inputs as uploaded, for the checks that the kernel left them intact: a
            # second upload, or, where the whole stage holds the GPU (a 5 GB table), a copy
            pristine = {k: v.clone() for k, v in ins.items()} if keep_inputs else \
                corr.fresh_inputs(op, dtype, case.inputs, device)
        with lap("first_run"), hold():  # compiled by the build already (its warm pass)
            outs = corr.alloc_outputs(op, case.sizes, dtype, device, variant, shared=True)
            if not variant:  # the other sets' outputs come from the timed runs alone
                kernel(ins, outs, dict(case.sizes))
                corr.sync(device)
        if not variant:
            with lap("oracle"):
                ref, note = oracle(op, case, device, hold, uploaded=pristine, waited=arts)
            if note:
                arts["bench_check"] = note
            took = oracle_seconds(op, case, device)
            if nsets > 2 and (took is None or took > CHEAP_ORACLE_S):
                nsets = arts["input_sets"] = 2
            with lap("check"), hold():
                message, error = bench_judge(op, case, ins, outs, ref, 0, device, pristine)
            arts["bench_max_error"] = error
            del ref
            if message:
                return Timing(f"wrong at the {where}: {message}", artifacts=arts)
        sets.append((case, ins, outs, pristine))
        variant += 1
    case = sets[0][0]
    poisons = [(t.name, op.dtype_of(t.name, dtype), 1) for t in op.outputs]
    pairs = [(ins, outs) for _, ins, outs, _ in sets]
    kept_outputs: dict = {}  # where each plan keeps the outputs it checks
    # at least one step (a call on each set) of timed calls only, so every set is checked
    # at one such step (``timed_calls.plan``): with none (one warm-up call and two reps over
    # two sets), the sets were checked at separate steps, one shared with the warm-up, and
    # a kernel that worked at part of a step was judged by its share of it (a review:
    # accepted at 23.5 ms of an honest 31)
    warmup_n, reps_n = whole_steps(config, len(pairs))

    def timed(warmup: int, reps: int):
        """Samples of one timing request, and its plan: fresh inputs for every call."""
        p = timed_calls.plan(op, case.sizes, dtype, [o for _, o in pairs], warmup, reps,
                             device, [pristine for *_, pristine in sets], kept_outputs)
        return kernel.time(pairs, case.sizes, warmup, reps, poisons, p), p

    def verified(p, check: bool) -> str | None:
        """The kept outputs against the oracle of their inputs; the inputs as edited."""
        with lap("check_again"), hold():
            return _verify(op, sets, pairs, p, device, where, hold) if check else \
                _advance(sets, pairs, p)

    def time_again(pause: bool = False):
        """A second full timing request, checked: (samples, plan, failure or None);
        after ``RETIME_PAUSE_S`` where ``pause``."""
        if pause:
            with lap("pause"):
                time.sleep(RETIME_PAUSE_S.get(device, 0.0))
        with lap("recheck"), hold(), torch.no_grad():
            again, p = timed(warmup_n, reps_n)
        return again, p, verified(p, check=True)

    with lap("baseline"):
        base = time_baseline(op, case, device, baseline_mode(config), config, timer, cache,
                             compile_fn, hold, waited=arts)
    if judge_baseline:
        with lap("baseline_judged"):
            base = judged_baseline(op, case, device, config, base, sets, hold, cache, arts)
        if base.own_ms is not None:
            arts.update(baseline_own_ms=round(base.own_ms, 5), baseline_clock=base.clock)
    for extra in config.also_baselines:
        if extra != baseline_mode(config):
            with lap(f"baseline_{extra}"):
                other = time_baseline(op, case, device, extra, config, timer, cache,
                                      compile_fn, hold, waited=arts)
            arts.setdefault("baselines_ms", {})[other.name] = other.ms
            if other.precision:
                arts.setdefault("baselines_precision", {})[other.name] = other.precision
    with lap("timed_runs"), hold(), torch.no_grad():
        # one timed run of each input set first: a kernel already far slower than the
        # baseline is ranked by them, instead of holding the device for warmup + reps more
        # runs of seconds each
        samples, probe = timed(0, len(pairs))
        cutoff, rest_ms = config.slow_cutoff, samples[0] * (warmup_n + reps_n)
        # (a cold single run of a fast kernel can be 10x a warm median: cut only where the
        # runs saved are worth a second of the device's time)
        cut = cutoff is not None and samples[0] > cutoff * base.ms and rest_ms > CUT_OVER_MS
    message = verified(probe, check=cut)
    warmup, checked_plan = 0, probe
    if not cut and message is None:
        # a fast kernel's steps made wider on a GPU (``step_width``), by the probe's calls
        # on the judge's clock alone (what the candidate claims could narrow them), or the
        # baseline's time where that is less (a candidate that slept through its probe)
        clock = judged_calls(kernel, samples, device)[1]
        per_call = min(clock.get("judge_clock_ms", statistics.median(samples)), base.ms)
        if widen(op, case, dtype, device, pairs, per_call, took, hold,
                 lambda: lap("more_buffers")):
            warmup_n, reps_n = whole_steps(config, len(pairs), step_width.TIMED_STEPS)
            arts["step_buffers"] = len(pairs)
        with lap("timed_runs"), hold(), torch.no_grad():
            samples, main = timed(warmup_n, reps_n)
        message = verified(main, check=True)
        warmup, checked_plan = warmup_n, main
    if cut:
        arts["reps_cut"] = (f"one timed run, {samples[0]:.4g} ms: over {cutoff:g}x the "
                            f"baseline's {base.ms:.4g} ms")
    if message:
        return Timing(message, artifacts=arts)
    claimed = list(samples)
    samples, clock, contradiction = judged_calls(kernel, samples, device)
    time_ms = figure(samples, checked_plan, warmup, arts)
    why = "disturbed" if disturbed(clock, claimed, device) else \
        "lifted" if lifted(time_ms, samples, device) else None
    if contradiction is None and why:
        arts["retimed"] = why
        again, p, message = time_again(pause=why == "disturbed")
        if message:
            return Timing(message, artifacts=arts)
        # (its own verdict: a contradicted second request is not kept, and never turns the
        # first, which stood, into a contradiction)
        again, clock2, contradicted = judged_calls(kernel, again, device)
        mine: dict = {}
        again_ms = figure(again, p, warmup_n, mine)
        arts["disturbed_ms"] = [round(time_ms, 5), round(again_ms, 5)]
        if contradicted:
            arts["disturbed_clock"] = contradicted
        elif again_ms < time_ms and not lifted(again_ms, again, device):
            # (a retime lifted in turn is not kept: a kernel that skips work at calls it
            # hopes are unchecked has a low median, is lifted every time, and would
            # otherwise get the lower of two single checked steps)
            samples, time_ms, clock = again, again_ms, clock2
            arts.update(mine)
    if contradiction:
        # re-checked before it is rejected: timed again after a pause. A busy host can
        # lengthen one request's round trips (a process starting on the same cores); a
        # timer that reports less than its calls take is contradicted every time
        again, p, message = time_again(pause=True)
        if message:
            return Timing(message, artifacts=arts)
        arts["clock_first"] = contradiction
        again, clock, contradiction = judged_calls(kernel, again, device)
        if contradiction is None:
            samples, time_ms = again, figure(again, p, warmup_n, arts)
    arts.update(clock)
    with lap("floor"):
        nbytes = bench_traffic_bytes(op, case)
        bw = _bandwidth(bandwidth, device, nbytes, hold)
        below = floor.verdict(time_ms, nbytes, bw, device)
        if below and bandwidth is None:  # rule out a slow copy by bad luck: measure again
            bw = copy_bandwidth(device, nbytes, fresh=True, hold=hold)
            below = floor.verdict(time_ms, nbytes, bw, device)
    if below:
        # re-checked before it is rejected: timed again on fresh inputs and checked again
        again, p, message = time_again()
        if message:
            return Timing(message, artifacts=arts)
        again = judged_calls(kernel, again, device)[0]
        arts["recheck_timings_ms"] = again
        below2 = floor.verdict(statistics.median(again), nbytes, bw, device)
        if below2 is None:  # the second measurement is believable: the first was not
            samples, time_ms, below = again, figure(again, p, warmup_n, arts), None
        else:
            below = f"{below}; timed again: {statistics.median(again):.4g} ms"
    arts.update(timings_ms=samples, floor_ms=floor.floor_ms(nbytes, bw, device), bytes=nbytes,
                bandwidth_gbs=bw / 1e9, suspect=below is not None or contradiction is not None)
    if base.note:
        arts["baseline_fallback"] = base.note
    if base.precision:
        arts.update(baseline_precision=base.precision, baseline_default_ms=base.default_ms)
    timing = Timing(None, time_ms, base.ms, base.name, arts)
    timing.message = contradiction or below
    return timing


def figure(samples: list[float], p, warmup: int, arts: dict) -> float:
    """The kernel's time: the median of its samples, but never below the fastest of the
    calls whose outputs were checked. A kernel honest on a fraction of its calls, at random
    (it cannot know which are checked), passes the checks only when it was honest at
    every checked call, and then those calls' times are the honest time: a median of
    cheap wrong calls around them is not believed."""
    median = statistics.median(samples)
    checked = [samples[c - warmup] for c in p.snap_at.values() if 0 <= c - warmup < len(samples)]
    if checked:
        arts["checked_calls_ms"] = [round(x, 5) for x in checked]
    return max(median, min(checked)) if checked else median


def _bandwidth(given, device: str, nbytes: int, hold) -> float:
    """``given`` bytes/s, or a callable (device, nbytes) -> bytes/s; measured when None."""
    if callable(given):
        return given(device, nbytes)
    return given if given is not None else copy_bandwidth(device, nbytes, hold=hold)


def _verify(op, sets, pairs, p, device, where, hold) -> str | None:
    """Each buffer's kept outputs against the float64 oracle of its inputs as they were at
    that call (buffer k holds input set k % len(sets)); then the inputs as they are now
    against what the plan made of them (``_advance``)."""
    for k, call in sorted(p.snap_at.items()):
        base = k % len(sets)
        c, _, _, pristine = sets[base]
        expected = timed_calls.expected_inputs(p, pristine, call)
        ref = oracle_of(op, c.sizes, c.dtype, expected, device)
        at = c
        # the host copies of the varied inputs cost a pass each: made where index outputs
        # are judged by them (ties), or to say what failed
        if p.changed and any(_arg_output(op, t.name) for t in op.outputs):
            at = _varied_case(c, expected, p.changed)
        message, _ = bench_judge(op, at, expected, p.snaps[k], ref, 1, device, expected)
        if message and p.changed and at is c:
            message, _ = bench_judge(op, _varied_case(c, expected, p.changed), expected,
                                     p.snaps[k], ref, 1, device, expected)
        del ref, expected
        if message:
            which = "" if not base else f" (input set {base + 1})"
            return f"wrong in a timed run at the {where}{which}: {message}"
    return _advance(sets, pairs, p)


def _varied_case(c, expected: dict, names: list) -> cases.Case:
    arrays = dict(c.inputs)  # (float64: numpy has no bfloat16)
    arrays.update(corr.to_numpy({n: expected[n] for n in names}))
    return cases.Case(c.shape, arrays)


def _advance(sets, pairs, p) -> str | None:
    """The inputs each buffer saw last must be exactly its set's pristine ones as the
    request's last call on it made them; then they are made pristine again, for the next
    request (which varies them from there)."""
    for k, (ins, _) in enumerate(pairs):
        pristine = sets[k % len(sets)][3]
        last = timed_calls.last_call(p, k)
        expected = pristine if last is None else timed_calls.expected_inputs(p, pristine, last)
        message = timed_calls.inputs_intact(ins, expected)
        if message:
            return f"{message} during the timed runs"
        timed_calls.restore(p, ins, pristine)
    return None
