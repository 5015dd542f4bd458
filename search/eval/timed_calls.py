"""Inputs no timed call has seen before, and outputs checked at a call the candidate cannot
predict: what makes state kept between calls worthless.

Two input sets alternate, and before every timed call one element of the set's editable
input (its smallest floating input without a declared domain) is overwritten with
another element's value. An answer kept from an earlier call, under any key that does
not read every element, is then wrong for the call it is served to. The judge draws the
edits and one call among the timed reps whose outputs the candidate's process copies
aside (into tensors the judge owns) before the next call; which call is the judge's
secret, so a kernel cannot compute honestly only where it will be checked.
The judge replays the edits on its pristine copies, computes the float64 oracle for the
inputs as they were at that call, and compares; and the inputs as they are after the
last call must be the pristine ones with every edit, nothing else changed.

Ops without an editable input keep the alternation and the checked call, without edits.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from kdsl import dtypes, ir
from kdsl.sizes import shape_of

from . import correctness as corr


@dataclass
class CallPlan:
    """What one timing request does besides calling: edits before calls, outputs kept."""
    name: str | None                               # the edited input (None: no edits)
    edits: list = field(default_factory=list)      # per call: (dst, src) flat indices, or None
    snap_at: dict = field(default_factory=dict)    # set index -> call index kept
    snaps: dict = field(default_factory=dict)      # set index -> output tensors (the copies)

    def wire(self) -> dict:
        """As the candidate's process receives it: call index -> where to copy the outputs."""
        return {"name": self.name, "edits": self.edits,
                "snap": {c: self.snaps[k] for k, c in self.snap_at.items()}}


def editable_input(op: ir.Op, sizes: dict[str, int], dtype: str) -> str | None:
    """The smallest floating input without a declared domain, of two elements or more."""
    best = None
    for t in op.inputs:
        if t.domain is not None or dtypes.kind(op.dtype_of(t.name, dtype)) != "float":
            continue
        n = 1
        for d in shape_of(op, t.name, sizes):
            n *= d
        if n >= 2 and (best is None or n < best[0]):
            best = (n, t.name)
    return best and best[1]


def plan(op: ir.Op, sizes: dict[str, int], dtype: str, outs: list[dict], warmup: int,
         reps: int, device: str) -> CallPlan:
    """Edits for ``warmup + reps`` calls alternating over ``len(outs)`` sets, and the call of
    each set whose outputs are kept (a timed rep, not a warm-up), drawn from the OS."""
    rng = random.SystemRandom()
    name = editable_input(op, sizes, dtype)
    calls = warmup + reps
    p = CallPlan(name)
    if name is not None:
        n = 1
        for d in shape_of(op, name, sizes):
            n *= d
        p.edits = [(rng.randrange(n), rng.randrange(n)) for _ in range(calls)]
    else:
        p.edits = [None] * calls
    # one set's outputs, at one of its timed calls: which set and which call are both the
    # judge's secret (each more would cost one more float64 oracle at the bench size)
    k = rng.randrange(len(outs))
    timed = [c for c in range(warmup, calls) if c % len(outs) == k] or \
        [c for c in range(calls) if c % len(outs) == k]
    if timed:
        p.snap_at[k] = rng.choice(timed)
        p.snaps[k] = {t: v.clone() for t, v in outs[k].items()}
    return p


def apply(tensor, edit) -> None:
    """One edit, in place: the element at ``dst`` takes the value at ``src`` (flat)."""
    if edit is not None:
        flat = tensor.view(-1)
        dst, src = edit
        flat[dst] = flat[src]


def replay(p: CallPlan, k: int, nsets: int, pristine: dict, upto: int | None = None) -> None:
    """Apply to ``pristine`` (in place) the edits set ``k``'s calls got, through ``upto``."""
    if p.name is None:
        return
    for c, edit in enumerate(p.edits):
        if upto is not None and c > upto:
            break
        if c % nsets == k:
            apply(pristine[p.name], edit)


def inputs_intact(ins: dict, expected: dict) -> str | None:
    for name, t in ins.items():
        changed = corr._differs(t, expected[name])  # noqa: SLF001 - the judge's own check
        if changed is not None:
            return (f"input '{name}' was modified by the kernel: {int(changed.sum())} of "
                    f"{changed.size} elements changed")
    return None


def calling(fn, sets: list, sizes: dict, poisons: list, wire: dict | None):
    """(setup, run, finish) for a timer over ``sets``, as the plan ``wire`` says: ``setup``
    before each call keeps the previous call's outputs where asked, edits the next set's
    input and poisons its outputs; ``finish`` keeps the last call's. The candidate's
    process runs this for the judge; ``timing.LocalKernel`` runs it in-process."""
    wire = wire or {"name": None, "edits": [], "snap": {}}
    state = {"n": 0, "current": sets[0]}

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
        if wire["name"] is not None and c < len(wire["edits"]):
            apply(sets[k][0][wire["name"]], wire["edits"][c])
        for t, dt, variant in poisons:
            corr.poison(sets[k][1][t], dt, variant)

    def run() -> None:
        ins, outs = state["current"]
        fn(ins, outs, dict(sizes))

    def finish() -> None:
        if state["n"]:
            keep(state["n"] - 1)

    return setup, run, finish
