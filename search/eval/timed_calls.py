"""Inputs no timed call has seen before, and outputs checked at calls the candidate cannot
predict: what makes state kept between calls worthless.

Two input sets alternate, and before every timed call each input without a declared
domain (float or integer) is set to its pristine values times a factor drawn per element
and per call: for floats a power of two in {1/2, 1, 2} (exact in every float dtype), for
integers one of {1, 2, 3}. Every element may change at every call, and by enough to
reorder values, so an answer kept from an earlier call is wrong for the next one under
any key, and patching a kept answer where the inputs changed costs the whole
computation. (An edit of one element a call was beaten by kernels that compared every
input element with a kept copy and recomputed only the row the edit touched.)

The judge does all of this in its own process, between the calls: the candidate's process
is asked for one call at a time (``sandbox.RemoteKernel.time``) and is stopped between
them, so it never holds the factors, their seed, or which calls are kept; it cannot tell
a kept call from another before it is made, nor forge its inputs. The judge draws the
seed, the offsets of the window into each factor sequence and, for every set, one timed
call whose outputs it copies aside once that call has returned. It computes each set's
inputs as they were at that call, the float64 oracle of them, and compares; and the
inputs as they are after the last call must be exactly the pristine ones times the last
call's factors.

Inputs with a declared domain (indices, offsets, probabilities) keep their values: a
factor could leave the domain. Ops whose inputs all have domains keep the alternation
and the checked calls, without variation.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from kdsl import dtypes, ir
from kdsl.sizes import shape_of

from . import correctness as corr

WINDOW = 1 << 20   # factors per window: a larger input repeats the window along it
SPREAD = 1 << 12   # offsets of the window into its sequence


@dataclass
class CallPlan:
    """What one timing request does besides calling: varied inputs, outputs kept."""
    names: list = field(default_factory=list)      # the varied inputs
    seed: int = 0                                  # of the factor sequences
    offsets: list = field(default_factory=list)    # per call: the window's offset
    snap_at: dict = field(default_factory=dict)    # set index -> call index kept
    snaps: dict = field(default_factory=dict)      # set index -> output tensors (the copies)
    sequences: dict = field(default_factory=dict)  # name -> its factors, made once
    pristine: list = field(default_factory=list)   # per set: its inputs as uploaded


def varied_inputs(op: ir.Op, sizes: dict[str, int], dtype: str) -> list[str]:
    """The inputs without a declared domain, float or integer, of two elements or more."""
    names = []
    for t in op.inputs:
        if t.domain is not None or dtypes.kind(op.dtype_of(t.name, dtype)) not in ("float",
                                                                                     "int"):
            continue
        n = 1
        for d in shape_of(op, t.name, sizes):
            n *= d
        if n >= 2:
            names.append(t.name)
    return names


def plan(op: ir.Op, sizes: dict[str, int], dtype: str, outs: list[dict], warmup: int,
         reps: int, device: str, pristine: list[dict] | None = None,
         buffers: dict | None = None) -> CallPlan:
    """Factors for ``warmup + reps`` calls alternating over ``len(outs)`` sets, and for
    every set the call whose outputs are kept (a timed rep, not a warm-up), drawn from
    the OS. ``pristine``: each set's inputs as uploaded, where the judge keeps a copy
    (else ``calling`` copies the varied ones). ``buffers``: set index -> tensors to keep
    outputs in, shared by the plans of one timing stage (each plan's kept outputs are
    checked before the next plan's calls); filled here where missing."""
    rng = random.SystemRandom()
    calls = warmup + reps
    p = CallPlan(varied_inputs(op, sizes, dtype), rng.getrandbits(62),
                 [rng.randrange(SPREAD) for _ in range(calls)], pristine=list(pristine or []))
    # each set's outputs at one of its timed calls (a set never checked could be computed
    # wrong at every call: it would halve the median and pass half the time)
    for k in range(len(outs)):
        timed = [c for c in range(warmup, calls) if c % len(outs) == k] or \
            [c for c in range(calls) if c % len(outs) == k]
        if timed:
            p.snap_at[k] = rng.choice(timed)
            kept = {} if buffers is None else buffers
            if k not in kept:
                kept[k] = {t: v.new_empty(v.shape) for t, v in outs[k].items()}
            p.snaps[k] = kept[k]
    return p


def factors(seed: int, position: int, like) -> object:
    """The factor sequence of the ``position``-th varied input: ``WINDOW + SPREAD`` values in
    ``like``'s dtype on its device, the same in every process for the same seed."""
    import torch
    g = torch.Generator(device=like.device)
    g.manual_seed((seed + 7919 * position) % (1 << 63))
    draw = torch.randint(0, 3, (WINDOW + SPREAD,), generator=g, device=like.device)
    if like.is_floating_point():
        return torch.pow(2.0, (draw - 1).to(torch.float32)).to(like.dtype)  # 1/2, 1, 2
    return (draw + 1).to(like.dtype)  # 1, 2, 3


def vary(out, pristine, sequence, offset: int) -> None:
    """``out`` = ``pristine`` times the window of ``sequence`` at ``offset``, elementwise
    (the window repeated along an input larger than it)."""
    import torch
    src, dst = pristine.reshape(-1), out.view(-1)
    n = src.numel()
    m = min(n, WINDOW)
    window = sequence[offset:offset + m]
    whole = n // m * m
    torch.mul(src[:whole].view(-1, m), window, out=dst[:whole].view(-1, m))
    if whole < n:
        torch.mul(src[whole:], window[:n - whole], out=dst[whole:])


def sequence(p: CallPlan, name: str, like) -> object:
    """The factors of varied input ``name``, made once a plan."""
    if name not in p.sequences:
        p.sequences[name] = factors(p.seed, p.names.index(name), like)
    return p.sequences[name]


def expected_inputs(p: CallPlan, pristine: dict, call: int) -> dict:
    """A set's inputs as they were at ``call``, made again from its pristine ones."""
    expected = dict(pristine)
    for name in p.names:
        expected[name] = out = pristine[name].new_empty(pristine[name].shape)
        vary(out, pristine[name], sequence(p, name, pristine[name]), p.offsets[call])
    return expected


def restore(p: CallPlan, ins: dict, pristine: dict) -> None:
    """The varied inputs made pristine again, for the next request."""
    for name in p.names:
        ins[name].copy_(pristine[name])


def last_call(p: CallPlan, k: int, nsets: int) -> int | None:
    """The last call of set ``k`` in the request, None if it had none."""
    calls = [c for c in range(len(p.offsets)) if c % nsets == k]
    return calls[-1] if calls else None


def inputs_intact(ins: dict, expected: dict) -> str | None:
    for name, t in ins.items():
        changed = corr._differs(t, expected[name])  # noqa: SLF001 - the judge's own check
        if changed is not None:
            return (f"input '{name}' was modified by the kernel: {int(changed.sum())} of "
                    f"{changed.size} elements changed")
    return None


def calling(fn, sets: list, sizes: dict, poisons: list, p: CallPlan | None):
    """(setup, run, finish) over ``sets``, as the plan ``p`` says, all in the judge's
    process: ``setup()`` before each call keeps the previous call's outputs where the
    plan says, varies the next set's inputs and poisons its outputs, and returns that
    set's index; ``run()`` calls ``fn`` on it (``timing.LocalKernel``; a
    ``sandbox.RemoteKernel`` asks its candidate's process instead); ``finish()`` keeps
    the last call's outputs. The sets' inputs arrive pristine."""
    p = p or CallPlan()
    state = {"n": 0, "current": sets[0]}
    pristine = []
    for k, (ins, _) in enumerate(sets):
        kept = p.pristine[k] if k < len(p.pristine) else {}
        pristine.append({n: kept[n] if n in kept else ins[n].clone() for n in p.names})

    def keep(c: int) -> None:
        k = c % len(sets)
        if p.snap_at.get(k) == c:
            for t, v in p.snaps[k].items():
                v.copy_(sets[k][1][t])

    def setup() -> int:
        c = state["n"]
        state["n"] += 1
        if c:
            keep(c - 1)
        k = c % len(sets)
        state["current"] = sets[k]
        if c < len(p.offsets):
            for name in p.names:
                like = pristine[k][name]
                vary(sets[k][0][name], like, sequence(p, name, like), p.offsets[c])
        for t, dt, variant in poisons:
            corr.poison(sets[k][1][t], dt, variant)
        return k

    def run() -> None:
        ins, outs = state["current"]
        fn(ins, outs, dict(sizes))

    def finish() -> None:
        if state["n"]:
            keep(state["n"] - 1)

    return setup, run, finish
