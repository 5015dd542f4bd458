"""Inputs no timed call has seen before, and outputs checked at calls the candidate cannot
predict: what makes state kept between calls worthless.

The input sets (two, or one where two do not fit, or up to four for a small point on a
GPU) take turns, and before every timed call every input but offsets is redrawn from its
pristine values, element by element, with numbers drawn per element and per call that
the candidate never sees (``change``):

- a float without a domain: times a factor log-uniform in [1/2, 2), of either sign;
- an integer without a domain: its bits XORed with drawn bits (the same uniform
  distribution over the type); a bool: flipped where a drawn mask says;
- a value range ``lo .. hi``: moved by a drawn offset in [0, hi - lo), wrapped into the
  range (a uniform value stays uniform, every value stays in the range);
- a positive input: times a factor log-uniform in [1/2, 2) (integers: 1, 2 or 3).

So each call's inputs are new values, not the old ones moved: an answer kept from an
earlier call is wrong for the next one under any key, and no cheap edit of a kept answer
makes it right. (Each of these was beaten in turn: an edit of one element a call, by a
kernel recomputing only the row the edit touched; positive powers of two, by a product of
signs cached by the sign pattern; bounded inputs only rotated, by a sort cached by the
input's sum; rotated and mirrored, ``lo + hi - x`` being a negation in ``-1 .. 1``, by a
sort of magnitudes cached by a sign-blind sum, and by a sort patched in linear time from
the kept order, the transforms being exact and invertible; one window of numbers repeated
along a large input, by a column sum that learned once the ratios of elements a window
apart.) Each element's number combines two drawn sequences of coprime periods
(``draws``), so none repeats along an input. Offsets, whose elements are bound to each
other, keep their values.

The judge does all of this in its own process, between the calls: the candidate's process
is asked for one call at a time (``sandbox.RemoteKernel.time``) and is stopped between
them, so it never holds the factors, their seed, or which calls are kept; it cannot tell
a kept call from another before it is made, nor forge its inputs. The judge draws the
seed, each call's offsets into the drawn sequences and, for every set, one timed
call whose outputs it copies aside once that call has returned. It computes each set's
inputs as they were at that call, the float64 oracle of them, and compares; and the
inputs as they are after the last call must be exactly the pristine ones as the last
call redrew them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from kdsl import ir
from kdsl.sizes import shape_of

from . import correctness as corr

WINDOW = 1 << 20   # elements a window: a larger input is walked window by window
SPREAD = 1 << 12   # offsets of the window into its sequence


@dataclass
class CallPlan:
    """What one timing request does besides calling: varied inputs, outputs kept."""
    names: list = field(default_factory=list)      # the changed inputs
    bounds: dict = field(default_factory=dict)     # name -> (lo, hi) of its value range
    positive: list = field(default_factory=list)   # the positive ones
    seed: int = 0                                  # of the drawn sequences
    offsets: list = field(default_factory=list)    # per call: the first half's offset
    second: list = field(default_factory=list)     # per call: the second half's offset
    snap_at: dict = field(default_factory=dict)    # buffer -> the call whose outputs are kept
    snaps: dict = field(default_factory=dict)      # buffer -> output tensors (the copies)
    sequences: dict = field(default_factory=dict)  # name -> its factors, made once
    pristine: list = field(default_factory=list)   # per input set: its inputs as uploaded
    buffers: int = 1                               # input/output buffers the calls cycle
    bases: int = 1                                 # input sets (a buffer's is k % bases)

    @property
    def changed(self) -> list:
        """Every input changed between calls."""
        return self.names

    def buffer(self, call: int) -> int:
        return call % self.buffers

    def base(self, call: int) -> int:
        return self.buffer(call) % self.bases


def varied_inputs(op: ir.Op, sizes: dict[str, int], dtype: str) -> list[str]:
    """The inputs changed between calls: all but offsets (whose elements are bound to
    each other) and empty ones."""
    return [t.name for t in op.inputs if not isinstance(t.domain, ir.Offsets) and
            _any(op, t.name, sizes)]


def _any(op: ir.Op, name: str, sizes: dict[str, int]) -> bool:
    n = 1
    for d in shape_of(op, name, sizes):
        n *= d
    return n >= 1


def domain_bounds(op: ir.Op, name: str, sizes: dict[str, int]) -> tuple | None:
    """A value range's (lo, hi) at ``sizes`` (None: no value range)."""
    d = op.tensor(name).domain
    if not isinstance(d, ir.ValueRange):
        return None
    from kdsl.cases import domain_bound
    return (domain_bound(d.lo, sizes), domain_bound(d.hi, sizes))


def plan(op: ir.Op, sizes: dict[str, int], dtype: str, outs: list[dict], warmup: int,
         reps: int, device: str, pristine: list[dict] | None = None,
         buffers: dict | None = None) -> CallPlan:
    """Factors for ``warmup + reps`` calls cycling over the ``len(outs)`` input/output
    buffers, and for every buffer the call whose outputs are kept (a timed rep, not a
    warm-up), drawn from the OS. ``pristine``: each input set's inputs as uploaded
    (buffer k holds set k % len(pristine)); without it every buffer is a set of its own
    and ``Calls`` copies its varied inputs. ``buffers``: buffer -> tensors to keep
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
    names = varied_inputs(op, sizes, dtype)
    bounds = {n: domain_bounds(op, n, sizes) for n in names}
    p = CallPlan(names, {n: b for n, b in bounds.items() if b is not None},
                 [n for n in names if isinstance(op.tensor(n).domain, ir.Positive)],
                 rng.getrandbits(62), offsets, [rng.randrange(SPREAD) for _ in range(calls)],
                 pristine=list(pristine or []),
                 buffers=len(outs), bases=len(pristine) if pristine else len(outs))
    # each buffer's outputs at one of its timed calls (a set never checked could be computed
    # wrong at every call: it would halve the median and pass half the time), all of them
    # at one step (a call on each buffer, one round trip on the judge's clock) drawn among
    # the steps of timed calls. A step's calls share its wall: checked at calls drawn set by
    # set, a kernel that worked at one call of each step of two, at random, passed whenever
    # the draws fell on worked calls and was given half its honest time (a review: 3 of 6
    # accepted); a step checked whole was worked whole, and its share is the honest time
    n = p.buffers
    whole = [s for s in range(calls // n) if s * n >= warmup]
    if whole:
        s = rng.choice(whole)
        chosen = {p.buffer(c): c for c in range(s * n, s * n + n)}
    else:  # (no step of timed calls only: each buffer at one of its calls)
        chosen = {}
        for k in range(n):
            timed = [c for c in range(warmup, calls) if p.buffer(c) == k] or \
                [c for c in range(calls) if p.buffer(c) == k]
            if timed:
                chosen[k] = rng.choice(timed)
    for k, c in sorted(chosen.items()):
        p.snap_at[k] = c
        kept = {} if buffers is None else buffers
        if k not in kept:
            kept[k] = {t: v.new_empty(v.shape) for t, v in outs[k].items()}
        p.snaps[k] = kept[k]
    return p


def draws(seed: int, position: int, like, kind: str, bounds: tuple | None = None) -> tuple:
    """The ``position``-th changed input's two sequences, drawn on ``like``'s device, the
    same in every process for the same seed: the first ``WINDOW + SPREAD`` long, the
    second ``2 * WINDOW - 1 + SPREAD`` (read at a period of ``WINDOW - 1``). An element's
    number combines one of each (``combine``), so it repeats only past ``WINDOW * (WINDOW -
    1)`` elements, and two calls' numbers are no shifted copies of each other: with one
    sequence of period ``WINDOW``, the ratios of elements ``WINDOW`` apart stayed the same
    at every call, and a column sum learned them once and read a sixteenth of its input
    (accepted at 2-3x where honest kernels read 1.0x). ``kind``: 'factor' (each half
    log-uniform in [1/2 ** 0.5, 2 ** 0.5), either sign; their product in [1/2, 2)),
    'positive' (the same, positive; integers 1, 2 or 3), 'bits' (an integer type's whole
    range, or a bool's), 'offset' (fractions of ``hi - lo`` of ``bounds``; integers in
    0 .. hi - lo - 1)."""
    import torch
    g = torch.Generator(device=like.device)
    g.manual_seed((seed + 7919 * position) % (1 << 63))
    dev = like.device

    def half(n: int):
        if kind == "positive" and not like.is_floating_point():
            return torch.randint(1, 4, (n,), generator=g, device=dev, dtype=like.dtype)
        if kind in ("factor", "positive"):
            f = torch.pow(2.0, torch.rand(n, generator=g, device=dev) - 0.5)
            if kind == "factor":
                f = f * (1 - 2 * torch.randint(0, 2, (n,), generator=g, device=dev))
            return f
        if kind == "bits":
            if like.dtype == torch.bool:
                return torch.randint(0, 2, (n,), generator=g, device=dev).bool()
            info = torch.iinfo(like.dtype)
            return torch.randint(info.min, info.max, (n,), generator=g, device=dev,
                                 dtype=like.dtype)
        lo, hi = bounds
        if like.is_floating_point():
            wide = torch.float64 if like.dtype == torch.float64 else torch.float32
            return torch.rand(n, generator=g, device=dev, dtype=wide)
        return torch.randint(0, max(int(hi) - int(lo), 1), (n,), generator=g, device=dev,
                             dtype=like.dtype)
    return half(WINDOW + SPREAD), half(2 * WINDOW - 1 + SPREAD)


def combine(kind: str, like, bounds, a, b):
    """One element's number from its two halves (see ``draws``)."""
    import torch
    if kind in ("factor", "positive"):
        return (a * b).to(like.dtype)
    if kind == "bits":
        return torch.bitwise_xor(a, b)
    lo, hi = bounds
    if like.is_floating_point():
        return torch.frac(a + b) * (hi - lo)
    return (a + b) % max(int(hi) - int(lo), 1)


def _windowed(dst, src, halves: tuple, offsets: tuple, join, step) -> None:
    """``step(src part, numbers, dst part)`` over ``src`` flattened, a ``WINDOW`` of
    elements at a time: the first half's window at the call's first offset, the second's
    at its second offset moved one element further each window (``WINDOW - 1`` is
    ``WINDOW``'s neighbour, so the pair repeats only after ``WINDOW * (WINDOW - 1)``)."""
    src, dst = src.reshape(-1), dst.view(-1)
    a, b = halves
    oa, ob = offsets
    for r, start in enumerate(range(0, src.numel(), WINDOW)):
        m = min(WINDOW, src.numel() - start)
        sb = ob + r % (WINDOW - 1)
        step(src[start:start + m], join(a[oa:oa + m], b[sb:sb + m]), dst[start:start + m])


def _multiply(a, w, out) -> None:
    import torch
    torch.mul(a, w, out=out)


def _xor(a, w, out) -> None:
    import torch
    torch.bitwise_xor(a, w, out=out)


def _wrap(bounds: tuple):
    """Moving a value-range element by its offset, wrapped into ``lo .. hi`` (a window at
    a time: its temporaries stay a window's size, not the input's)."""
    import torch
    lo, hi = bounds

    def step(a, w, out) -> None:
        if out.is_floating_point():
            v = a.to(w.dtype) + w
            v = torch.where(v > hi, v - (hi - lo), v).clamp(lo, hi)
        else:
            v = (a - int(lo) + w) % max(int(hi) - int(lo), 1) + int(lo)
        out.copy_(v)
    return step


def kind_of(p: CallPlan, name: str, like) -> str:
    """How changed input ``name`` is redrawn (see ``draws``)."""
    if name in p.bounds:
        return "offset"
    if name in p.positive:
        return "positive"
    return "factor" if like.is_floating_point() else "bits"


def change(p: CallPlan, name: str, out, pristine, call: int) -> None:
    """Input ``name`` as the plan has it at ``call``: its pristine values redrawn element by
    element with the call's window of its sequence (the module doc)."""
    kind = kind_of(p, name, pristine)
    step = _wrap(p.bounds[name]) if kind == "offset" else \
        _xor if kind == "bits" else _multiply
    bounds = p.bounds.get(name)
    _windowed(out, pristine, sequence(p, name, pristine),
              (p.offsets[call], p.second[call] if p.second else 0),
              lambda a, b: combine(kind, pristine, bounds, a, b), step)


def sequence(p: CallPlan, name: str, like) -> object:
    """The drawn numbers of changed input ``name``, made once a plan."""
    if name not in p.sequences:
        p.sequences[name] = draws(p.seed, p.names.index(name), like, kind_of(p, name, like),
                                  p.bounds.get(name))
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
        k = self.p.buffer(c)
        if self.p.snap_at.get(k) == c:
            for t, v in self.p.snaps[k].items():
                v.copy_(self.sets[k][1][t])

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
