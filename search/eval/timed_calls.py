"""Inputs no timed call has seen before, and outputs checked at calls the candidate cannot
predict: what makes state kept between calls worthless.

The input sets (two, or one where two do not fit, or up to four for a small point on a
GPU) take turns, and before every timed call each input without a declared
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

An input whose declared domain bounds each element (a value range, ``positive``: indices,
probabilities, bounded floats) is not scaled, which could leave the domain: its pristine
values are rotated instead, by a whole number of elements drawn per call (1 .. n - 1),
so every value stays in the domain and moves. (Without it, an op whose inputs all had
domains kept the same inputs at every timed call, and an answer kept by their contents
was right at every checked call.) Offsets, whose elements are bound to each other, keep
their values.
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
    names: list = field(default_factory=list)      # the varied inputs (scaled)
    rolled: list = field(default_factory=list)     # the inputs rotated (bounded domains)
    seed: int = 0                                  # of the factor sequences
    offsets: list = field(default_factory=list)    # per call: the window's offset
    snap_at: dict = field(default_factory=dict)    # set index -> call index kept
    snaps: dict = field(default_factory=dict)      # set index -> output tensors (the copies)
    sequences: dict = field(default_factory=dict)  # name -> its factors, made once
    pristine: list = field(default_factory=list)   # per input set: its inputs as uploaded
    buffers: int = 1                               # input/output buffers the calls cycle
    bases: int = 1                                 # input sets (a buffer's is k % bases)

    @property
    def changed(self) -> list:
        """Every input changed between calls, scaled or rotated."""
        return self.names + self.rolled

    def shift(self, name: str, call: int, n: int) -> int:
        """How far rotated input ``name`` (``n`` elements) is rotated at ``call``: 1 .. n-1,
        from the plan's seed and the call's offset (distinct calls, distinct offsets)."""
        k = self.rolled.index(name)
        return 1 + (self.seed // 7 + self.offsets[call] * 1_000_003 + 7919 * k) % (n - 1)

    def buffer(self, call: int) -> int:
        return call % self.buffers

    def base(self, call: int) -> int:
        return self.buffer(call) % self.bases


def varied_inputs(op: ir.Op, sizes: dict[str, int], dtype: str) -> list[str]:
    """The inputs without a declared domain, float or integer, of two elements or more."""
    return [t.name for t in op.inputs if t.domain is None and _several(op, t.name, sizes)
            and dtypes.kind(op.dtype_of(t.name, dtype)) in ("float", "int")]


def rolled_inputs(op: ir.Op, sizes: dict[str, int]) -> list[str]:
    """The inputs whose domain bounds each element (a value range, ``positive``), of two
    elements or more: rotated between calls, which keeps every value in the domain."""
    return [t.name for t in op.inputs if isinstance(t.domain, (ir.ValueRange, ir.Positive))
            and _several(op, t.name, sizes)]


def _several(op: ir.Op, name: str, sizes: dict[str, int]) -> bool:
    n = 1
    for d in shape_of(op, name, sizes):
        n *= d
    return n >= 2


def plan(op: ir.Op, sizes: dict[str, int], dtype: str, outs: list[dict], warmup: int,
         reps: int, device: str, pristine: list[dict] | None = None,
         buffers: dict | None = None) -> CallPlan:
    """Factors for ``warmup + reps`` calls cycling over the ``len(outs)`` input/output
    buffers, and for every input set the call whose outputs are kept (a timed rep, not a
    warm-up), drawn from the OS. ``pristine``: each input set's inputs as uploaded
    (buffer k holds set k % len(pristine)); without it every buffer is a set of its own
    and ``Calls`` copies its varied inputs. ``buffers``: set index -> tensors to keep
    outputs in, shared by the plans of one timing stage (each plan's kept outputs are
    checked before the next plan's calls); filled here where missing."""
    rng = random.SystemRandom()
    calls = warmup + reps
    # each call's window at an offset no other call of the request has: two calls of a set
    # at one offset got the same inputs, and an answer kept by their contents was served
    # (drawn with replacement, two of a set's calls met about once in two hundred
    # requests of ten calls)
    offsets = rng.sample(range(SPREAD), calls) if calls <= SPREAD else \
        [rng.randrange(SPREAD) for _ in range(calls)]
    p = CallPlan(varied_inputs(op, sizes, dtype), rolled_inputs(op, sizes),
                 rng.getrandbits(62), offsets,
                 pristine=list(pristine or []),
                 buffers=len(outs), bases=len(pristine) if pristine else len(outs))
    # each set's outputs at one of its timed calls (a set never checked could be computed
    # wrong at every call: it would halve the median and pass half the time), all of them
    # at one step (a call on each buffer, one round trip on the judge's clock) drawn among
    # the steps of timed calls. A step's calls share its wall: checked at calls drawn set by
    # set, a kernel that worked at one call of each step of two, at random, passed whenever
    # the draws fell on worked calls and was given half its honest time (a review: 3 of 6
    # accepted); a step checked whole was worked whole, and its share is the honest time
    n = p.buffers
    whole = [s for s in range(calls // n) if s * n >= warmup]
    chosen = {}
    if whole and n == p.bases:
        s = rng.choice(whole)
        chosen = {p.base(c): c for c in range(s * n, s * n + n)}
    else:
        for b in range(p.bases):
            timed = [c for c in range(warmup, calls) if p.base(c) == b] or \
                [c for c in range(calls) if p.base(c) == b]
            if timed:
                chosen[b] = rng.choice(timed)
    for b, c in sorted(chosen.items()):
        p.snap_at[b] = c
        kept = {} if buffers is None else buffers
        if b not in kept:
            kept[b] = {t: v.new_empty(v.shape) for t, v in outs[b].items()}
        p.snaps[b] = kept[b]
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


def roll(out, pristine, shift: int) -> None:
    """``out`` = ``pristine`` rotated by ``shift`` elements (flattened)."""
    src, dst = pristine.reshape(-1), out.view(-1)
    n = src.numel()
    dst[:n - shift].copy_(src[shift:])
    dst[n - shift:].copy_(src[:shift])


def change(p: CallPlan, name: str, out, pristine, call: int) -> None:
    """Input ``name`` as the plan has it at ``call``: scaled or rotated."""
    if name in p.rolled:
        roll(out, pristine, p.shift(name, call, pristine.numel()))
    else:
        vary(out, pristine, sequence(p, name, pristine), p.offsets[call])


def sequence(p: CallPlan, name: str, like) -> object:
    """The factors of varied input ``name``, made once a plan."""
    if name not in p.sequences:
        p.sequences[name] = factors(p.seed, p.names.index(name), like)
    return p.sequences[name]


def expected_inputs(p: CallPlan, pristine: dict, call: int) -> dict:
    """A set's inputs as they were at ``call``, made again from its pristine ones."""
    expected = dict(pristine)
    for name in p.changed:
        expected[name] = out = pristine[name].new_empty(pristine[name].shape)
        change(p, name, out, pristine[name], call)
    return expected


def restore(p: CallPlan, ins: dict, pristine: dict) -> None:
    """The varied inputs made pristine again, for the next request."""
    for name in p.changed:
        ins[name].copy_(pristine[name])


def last_call(p: CallPlan, k: int) -> int | None:
    """The last call on buffer ``k`` in the request, None if it had none."""
    calls = [c for c in range(len(p.offsets)) if p.buffer(c) == k]
    return calls[-1] if calls else None


def inputs_intact(ins: dict, expected: dict) -> str | None:
    for name, t in ins.items():
        changed = corr._differs(t, expected[name])  # noqa: SLF001 - the judge's own check
        if changed is not None:
            return (f"input '{name}' was modified by the kernel: {int(changed.sum())} of "
                    f"{changed.size} elements changed")
    return None


class Calls:
    """The judge's side of one timing request over the buffers ``sets`` ((inputs, outputs)
    pairs), as the plan ``p`` says, all in the judge's process: ``prepare(c)`` varies the
    inputs of call ``c``'s buffer and poisons its outputs, ``keep(c)`` copies its outputs
    aside if the plan checks that call. ``sequential()`` gives a timer's (setup, run,
    finish) for calls made one after another here (``timing.LocalKernel``); a
    ``sandbox.RemoteKernel`` prepares a step's calls, asks the candidate's process for
    them, then keeps. The buffers' inputs arrive pristine."""

    def __init__(self, fn, sets: list, sizes: dict, poisons: list, p: CallPlan | None):
        self.fn, self.sets, self.sizes, self.poisons = fn, sets, sizes, poisons
        self.p = p or CallPlan(buffers=len(sets), bases=len(sets))
        self.pristine = []
        for k, (ins, _) in enumerate(sets):
            base = k % self.p.bases
            kept = self.p.pristine[base] if base < len(self.p.pristine) else {}
            self.pristine.append({n: kept[n] if n in kept else ins[n].clone()
                                  for n in self.p.changed})
        self.n = 0

    def prepare(self, c: int) -> int:
        k = self.p.buffer(c)
        ins, outs = self.sets[k]
        if c < len(self.p.offsets):
            for name in self.p.changed:
                change(self.p, name, ins[name], self.pristine[k][name], c)
        for t, dt, variant in self.poisons:
            corr.poison(outs[t], dt, variant)
        return k

    def keep(self, c: int) -> None:
        b = self.p.base(c)
        if self.p.snap_at.get(b) == c:
            for t, v in self.p.snaps[b].items():
                v.copy_(self.sets[self.p.buffer(c)][1][t])

    def sequential(self):
        state = {"current": self.sets[0]}

        def setup() -> int:
            c = self.n
            self.n += 1
            if c:
                self.keep(c - 1)
            k = self.prepare(c)
            state["current"] = self.sets[k]
            return k

        def run() -> None:
            ins, outs = state["current"]
            self.fn(ins, outs, dict(self.sizes))

        def finish() -> None:
            if self.n:
                self.keep(self.n - 1)

        return setup, run, finish
