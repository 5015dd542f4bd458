"""Inputs no timed call has seen before, and outputs checked at calls the candidate cannot
predict: what makes state kept between calls worthless.

The input sets (two, or one where two do not fit, or up to four for a small point on a
GPU) take turns, and before every timed call each input without a declared
domain is set to its pristine values times a factor drawn per element and per call: for
floats a signed power of two in {±1/2, ±1, ±2} (exact in every float dtype), for integers
one of {±1, ±2, ±3}; a bool input is flipped where a drawn mask says. Every element may
change at every call, in magnitude and in sign, so an answer kept from an earlier call is
wrong for the next one under any key, even one blind to order or to magnitudes (a sort
keyed by its input's sum, a product of signs keyed by the sign pattern, both served from
a cache before signs moved), and patching a kept answer where the inputs changed costs
the whole computation. (An edit of one element a call was beaten by kernels that
compared every input element with a kept copy and recomputed only the row the edit
touched.)

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
probabilities, bounded floats) is not scaled by a signed factor, which could leave the
domain: its pristine values are rotated by a whole number of elements drawn per call and
per input (1 .. n - 1), then, for a value range, a drawn subset of them mirrored in the
range (``lo + hi - x``, ``lo + hi - 1 - x`` for integers: the same distribution, other
values), and a positive input scaled by {1/2, 1, 2} (integers {1, 2, 3}). Every value
stays in the domain and the values themselves change, not only their places. (Without
it, an op whose inputs all had domains kept the same inputs at every timed call; rotated
only, they kept the same values, and a sort of a bounded vector keyed by its sum was
served from a cache at 50x, as was a loss over two rotated inputs whose shifts differed
by a constant.) Offsets, whose elements are bound to each other, keep their values.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from kdsl import ir
from kdsl.sizes import shape_of

from . import correctness as corr

WINDOW = 1 << 20   # factors per window: a larger input repeats the window along it
SPREAD = 1 << 12   # offsets of the window into its sequence


@dataclass
class CallPlan:
    """What one timing request does besides calling: varied inputs, outputs kept."""
    names: list = field(default_factory=list)      # the varied inputs (scaled)
    rolled: list = field(default_factory=list)     # the inputs rotated (bounded domains)
    bounds: dict = field(default_factory=dict)     # rolled name -> (lo, hi) of its value
                                                   # range, None for a positive one
    shifts: dict = field(default_factory=dict)     # rolled name -> its shift at each call
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
        """How far rotated input ``name`` (``n`` elements) is rotated at ``call``: drawn per
        input and per call (two inputs' shifts drawn from one sequence moved together, and
        a loss of two rotated inputs had one answer per set); 0 for a single element."""
        return self.shifts[name][call] % n if n > 1 else 0

    def buffer(self, call: int) -> int:
        return call % self.buffers

    def base(self, call: int) -> int:
        return self.buffer(call) % self.bases


def varied_inputs(op: ir.Op, sizes: dict[str, int], dtype: str) -> list[str]:
    """The inputs without a declared domain (float, integer or bool) with an element."""
    return [t.name for t in op.inputs if t.domain is None and _any(op, t.name, sizes)]


def rolled_inputs(op: ir.Op, sizes: dict[str, int]) -> list[str]:
    """The inputs whose domain bounds each element (a value range, ``positive``) with an
    element: rotated, mirrored or scaled between calls, each value kept in the domain."""
    return [t.name for t in op.inputs if isinstance(t.domain, (ir.ValueRange, ir.Positive))
            and _any(op, t.name, sizes)]


def _any(op: ir.Op, name: str, sizes: dict[str, int]) -> bool:
    n = 1
    for d in shape_of(op, name, sizes):
        n *= d
    return n >= 1


def domain_bounds(op: ir.Op, name: str, sizes: dict[str, int]) -> tuple | None:
    """A value range's (lo, hi) at ``sizes`` (None: a positive domain)."""
    d = op.tensor(name).domain
    if not isinstance(d, ir.ValueRange):
        return None
    from kdsl.cases import domain_bound
    return (domain_bound(d.lo, sizes), domain_bound(d.hi, sizes))


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
    rolled = rolled_inputs(op, sizes)
    p = CallPlan(varied_inputs(op, sizes, dtype), rolled,
                 {n: domain_bounds(op, n, sizes) for n in rolled},
                 {n: [rng.getrandbits(62) for _ in range(calls)] for n in rolled},
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


def factors(seed: int, position: int, like, signed: bool = True) -> object:
    """The factor sequence of the ``position``-th changed input: ``WINDOW + SPREAD`` values
    in ``like``'s dtype on its device, the same in every process for the same seed: for
    floats {1/2, 1, 2}, for integers {1, 2, 3}, each of either sign where ``signed``; for
    bools a mask of the elements flipped."""
    import torch
    g = torch.Generator(device=like.device)
    g.manual_seed((seed + 7919 * position) % (1 << 63))
    n = WINDOW + SPREAD
    if like.dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g, device=like.device).bool()
    draw = torch.randint(0, 6 if signed else 3, (n,), generator=g, device=like.device)
    sign, size = 1 - 2 * (draw // 3), draw % 3
    if like.is_floating_point():
        return (sign * torch.pow(2.0, (size - 1).to(torch.float32))).to(like.dtype)
    return (sign * (size + 1)).to(like.dtype)


def mirror_mask(seed: int, position: int, like) -> object:
    """Which elements of a value-range input are mirrored: ``WINDOW + SPREAD`` bools."""
    import torch
    return factors(seed, position, torch.empty(0, dtype=torch.bool, device=like.device))


def _windowed(dst, src, sequence, offset: int, step) -> None:
    """``step(src part, window part, dst part)`` over ``src`` flattened, the window of
    ``sequence`` at ``offset`` repeated along an input larger than it."""
    src, dst = src.reshape(-1), dst.view(-1)
    n = src.numel()
    if n == 0:
        return
    m = min(n, WINDOW)
    window = sequence[offset:offset + m]
    whole = n // m * m
    step(src[:whole].view(-1, m), window, dst[:whole].view(-1, m))
    if whole < n:
        step(src[whole:], window[:n - whole], dst[whole:])


def _multiply(a, w, out) -> None:
    import torch
    torch.mul(a, w, out=out)


def _flip(a, w, out) -> None:
    import torch
    torch.logical_xor(a, w, out=out)


def vary(out, pristine, sequence, offset: int) -> None:
    """``out`` = ``pristine`` times the window of ``sequence`` at ``offset``, elementwise
    (flipped where it says, for bools)."""
    import torch
    _windowed(out, pristine, sequence, offset,
              _flip if pristine.dtype == torch.bool else _multiply)


def mirror(out, bounds: tuple, mask, offset: int) -> None:
    """``out``'s elements where the window of ``mask`` says reflected in the value range
    ``bounds``: ``lo + hi - x`` (floats, clamped to the range against rounding) or
    ``lo + hi - 1 - x`` (integers, whose range excludes ``hi``), in place."""
    import torch
    lo, hi = bounds
    floats = out.is_floating_point()
    total = lo + hi if floats else int(lo) + int(hi) - 1

    def step(a, w, o) -> None:
        m = torch.where(w, total - a, a)
        if floats:
            m = m.clamp(lo, hi)
        o.copy_(m)
    _windowed(out, out, mask, offset, step)


def roll(out, pristine, shift: int) -> None:
    """``out`` = ``pristine`` rotated by ``shift`` elements (flattened)."""
    src, dst = pristine.reshape(-1), out.view(-1)
    n = src.numel()
    dst[:n - shift].copy_(src[shift:])
    dst[n - shift:].copy_(src[:shift])


def change(p: CallPlan, name: str, out, pristine, call: int) -> None:
    """Input ``name`` as the plan has it at ``call``: scaled (signs too) or flipped; or,
    with a domain, rotated then mirrored in its range or scaled by positive factors."""
    if name not in p.rolled:
        vary(out, pristine, sequence(p, name, pristine), p.offsets[call])
        return
    roll(out, pristine, p.shift(name, call, pristine.numel()))
    if p.bounds.get(name) is not None:
        mirror(out, p.bounds[name], sequence(p, name, pristine), p.offsets[call])
    else:
        _windowed(out, out, sequence(p, name, pristine), p.offsets[call], _multiply)


def sequence(p: CallPlan, name: str, like) -> object:
    """The factors (or the mirror mask) of changed input ``name``, made once a plan."""
    if name not in p.sequences:
        if name in p.rolled:
            position = len(p.names) + p.rolled.index(name)
            p.sequences[name] = mirror_mask(p.seed, position, like) \
                if p.bounds.get(name) is not None else \
                factors(p.seed, position, like, signed=False)
        else:
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
