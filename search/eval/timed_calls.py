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

The factors are a window, at an offset drawn per call, into a random sequence made from
a seed in the candidate's process and again in the judge's (the same generator on the
same device), so nothing the candidate could alter is shared for them. The judge draws
the seed, the offsets and, for every set, one timed call whose outputs the candidate's
process copies aside (into tensors the judge owns) before the next call; which call is
the judge's secret, so a kernel cannot compute honestly only where it will be checked.
The judge computes each set's inputs as they were at that call, the float64 oracle of
them, and compares; and the inputs as they are after the last call must be exactly the
pristine ones times the last call's factors.

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
    sequences: dict = field(default_factory=dict)  # name -> its factors, made once (judge)

    def wire(self) -> dict:
        """As the candidate's process receives it: call index -> where to copy the outputs."""
        return {"names": list(self.names), "seed": self.seed, "offsets": list(self.offsets),
                "snap": {c: self.snaps[k] for k, c in self.snap_at.items()}}


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
         reps: int, device: str) -> CallPlan:
    """Factors for ``warmup + reps`` calls alternating over ``len(outs)`` sets, and for
    every set the call whose outputs are kept (a timed rep, not a warm-up), drawn from
    the OS."""
    rng = random.SystemRandom()
    calls = warmup + reps
    p = CallPlan(varied_inputs(op, sizes, dtype), rng.getrandbits(62),
                 [rng.randrange(SPREAD) for _ in range(calls)])
    # each set's outputs at one of its timed calls (a set never checked could be computed
    # wrong at every call: it would halve the median and pass half the time)
    for k in range(len(outs)):
        timed = [c for c in range(warmup, calls) if c % len(outs) == k] or \
            [c for c in range(calls) if c % len(outs) == k]
        if timed:
            p.snap_at[k] = rng.choice(timed)
            p.snaps[k] = {t: v.clone() for t, v in outs[k].items()}
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


def inputs_at(wire: dict, ins: dict, pristine: dict, call: int, sequences: dict) -> None:
    """``ins`` set to what the plan makes them at ``call`` (the candidate's side)."""
    for name in wire["names"]:
        vary(ins[name], pristine[name], sequences[name], wire["offsets"][call])


def expected_inputs(p: CallPlan, pristine: dict, call: int) -> dict:
    """The judge's own copy of a set's inputs as they were at ``call``."""
    expected = dict(pristine)
    for i, name in enumerate(p.names):
        if name not in p.sequences:
            p.sequences[name] = factors(p.seed, i, pristine[name])
        expected[name] = pristine[name].clone()
        vary(expected[name], pristine[name], p.sequences[name], p.offsets[call])
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


def calling(fn, sets: list, sizes: dict, poisons: list, wire: dict | None):
    """(setup, run, finish) for a timer over ``sets``, as the plan ``wire`` says: ``setup``
    before each call keeps the previous call's outputs where asked, varies the next set's
    inputs and poisons its outputs; ``finish`` keeps the last call's. The candidate's
    process runs this for the judge; ``timing.LocalKernel`` runs it in-process. The sets'
    inputs arrive pristine; their pristine values are copied here once."""
    wire = wire or {"names": [], "seed": 0, "offsets": [], "snap": {}}
    state = {"n": 0, "current": sets[0]}
    names = wire["names"]
    pristine = [{n: ins[n].clone() for n in names} for ins, _ in sets]
    sequences = {n: factors(wire["seed"], i, sets[0][0][n]) for i, n in enumerate(names)}

    def keep(c: int) -> None:
        kept = wire["snap"].get(c)
        if kept is not None:
            outs = sets[c % len(sets)][1]
            for t, v in kept.items():
                v.copy_(outs[t])

    def setup() -> None:
        c = state["n"]
        state["n"] += 1
        if c:
            keep(c - 1)
        k = c % len(sets)
        state["current"] = sets[k]
        if names and c < len(wire["offsets"]):
            inputs_at(wire, sets[k][0], pristine[k], c, sequences)
        for t, dt, variant in poisons:
            corr.poison(sets[k][1][t], dt, variant)

    def run() -> None:
        ins, outs = state["current"]
        fn(ins, outs, dict(sizes))

    def finish() -> None:
        if state["n"]:
            keep(state["n"] - 1)

    return setup, run, finish
