"""Judging an output against the float64 reference with the spec's tolerance.

Index outputs of argmax/argmin/argsort/argtopk are judged by what they point
at, so any correct choice among tied keys passes: the keys at the candidate's
indices must equal the keys at the reference's, and sort/topk indices must be
distinct within a row.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import dtypes, ir


@dataclass(frozen=True)
class Mismatch:
    output: str
    message: str

    def __str__(self) -> str:
        return f"{self.output}: {self.message}"


def _arg_key(op: ir.Op, st: ir.Statement):
    """(key tensor, its subscripts, the bound index, the distinct axis) when an arg output can
    be judged tie-tolerantly: the body is a plain read of an input by left-side indices and the
    bound one. The distinct axis is the output axis whose indices must differ (sort, topk)."""
    e = st.value
    if isinstance(e, ir.Reduce) and e.op in ("argmax", "argmin") and len(e.indices) == 1:
        index, body, distinct = e.indices[0].name, e.body, None
    elif isinstance(e, ir.Collective) and e.op in ("argsort", "argtopk"):
        index, body = e.index.name, e.body
        used = {n.name for n in ir.walk(body) if isinstance(n, ir.Name)}
        filled = index if e.op == "argsort" else next(n for n in st.indices if n not in used)
        distinct = st.indices.index(filled)
    else:
        return None
    if not isinstance(body, ir.Access) or body.pad is not None:
        return None
    if op.tensor(body.tensor).role != "in":
        return None
    subs = []
    for s in body.subscripts:
        if not isinstance(s, ir.Name):
            return None
        subs.append(s.name)
    if index not in subs or len(set(subs)) != len(subs):
        return None
    return body.tensor, subs, index, distinct


def _gather_keys(keys: np.ndarray, subs, index: str, lhs, idx: np.ndarray) -> np.ndarray:
    """keys[...] at the positions named by ``idx`` (an array over the left-side indices)."""
    grids = np.indices(idx.shape, sparse=True)
    where = {name: grids[p] for p, name in enumerate(lhs)}
    picks = []
    for name in subs:
        picks.append(np.clip(idx, 0, keys.shape[len(picks)] - 1) if name == index
                     else where[name])
    return keys[tuple(picks)]


def compare(op: ir.Op, dtype: str, got: dict[str, np.ndarray], ref: dict[str, np.ndarray],
            inputs: dict[str, np.ndarray], bounds: dict | None = None) -> Mismatch | None:
    """``bounds``: ``reference.cast_bounds`` of the case, which narrows an integer output's
    slack (``int_slack``) to the elements rounding could move; without it the slack holds
    at every element (a check with no float64 evaluation of its own, the spec's baseline
    against the reference)."""
    for t in op.outputs:
        r = np.asarray(ref[t.name])
        g = np.asarray(got.get(t.name)) if t.name in got else None
        if g is None:
            return Mismatch(t.name, "missing")
        if g.shape != r.shape:
            return Mismatch(t.name, f"shape {g.shape}, expected {r.shape}")
        st = next(s for s in op.statements if s.target == t.name)
        arg = _arg_key(op, st)
        if arg is not None:
            bad = _compare_indices(op, st, arg, g, r, inputs)
        elif r.dtype.kind in "iub":
            if g.dtype.kind in "iu" and r.dtype.kind in "iu" and g.dtype.itemsize < r.dtype.itemsize:
                # the reference's integers are int64; a narrower output wraps as torch's,
                # C's and Triton's arithmetic does (two int32 inputs' sum past 2**31)
                r = r.astype(g.dtype)
            bad = _compare_exact(g, r, int_slack(op, t.name), (bounds or {}).get(t.name))
        else:
            g = g.astype(np.float64)
            bad = _compare_close(g, r, *tolerance(op, dtype, t.name),
                                 rounded=rounds_to_infinity(op, dtype, t.name, g, r),
                                 envelope=(bounds or {}).get(t.name))
        if bad is not None:
            return Mismatch(t.name, bad)
    return None


def tolerance(op: ir.Op, dtype: str, output: str) -> tuple[float, float]:
    """(rtol, atol) for a float output: the op's dtype's entry, else the output's own dtype's
    (an integer dtype variable has no entry; the checker made every float dtype have one)."""
    if op.tolerance.exact:
        return (0.0, 0.0)
    covered = {name for name, _, _ in op.tolerance.table}
    for d in (dtype, op.dtype_of(output, dtype)):
        if d in covered:
            return op.tolerance.for_dtype(d)
    return (0.0, 0.0)


def _overflow(op: ir.Op, dtype: str, output: str) -> float:
    """The magnitude from which the output's dtype holds a value as an infinity."""
    return dtypes.OVERFLOW.get(op.dtype_of(output, dtype), float("inf"))


def rounds_to_infinity(op: ir.Op, dtype: str, output: str, g, r) -> np.ndarray:
    """Where ``g`` is the infinity the float64 reference ``r`` rounds to in the output's
    dtype (within the tolerance of its overflow threshold or past it, same sign)."""
    overflow = _overflow(op, dtype, output)
    if not np.isfinite(overflow):
        return np.zeros(np.shape(g), dtype=bool)
    rtol, atol = tolerance(op, dtype, output)
    with np.errstate(invalid="ignore", over="ignore"):
        near = np.abs(r) + atol + rtol * np.abs(r) >= overflow
    return near & np.isinf(g) & (np.sign(g) == np.sign(r))


def _worst(diff: np.ndarray) -> str:
    pos = np.unravel_index(int(np.nanargmax(diff)), diff.shape)
    return "[" + ", ".join(str(int(p)) for p in pos) + "]"


def int_slack(op: ir.Op, output: str) -> int:
    """How far an integer output may be from the reference: 1 where it converts a float
    value to an integer (``i32(x * 3.0)``), else 0. The reference computes the float in
    float64 and a kernel in its dtype, and a value within rounding of an integer boundary
    truncates to either side (-33.333332f * 3.0 is -100 in f32 and -99 in f64): judged
    exactly, no float32 kernel of such a spec could pass."""
    return 1 if float_casts(op, output) else 0


def float_casts(op: ir.Op, output: str) -> list[ir.Call]:
    """The casts of a float to an integer that ``output`` depends on (through its
    intermediates too)."""
    return _calls_on_floats(op, output, ("i32", "i64"))


def float_roundings(op: ir.Op, output: str) -> list[ir.Call]:
    """The roundings of a float (``floor``, ``ceil``, ``trunc``, ``round``) that ``output``
    depends on (through its intermediates too)."""
    from .builtins import ROUNDINGS
    return _calls_on_floats(op, output, ROUNDINGS)


def _calls_on_floats(op: ir.Op, output: str, fns) -> list[ir.Call]:
    defs = {st.target: st for st in op.statements}
    casts, seen, todo = [], set(), [output]
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        for n in ir.walk(defs[name].value):
            if isinstance(n, ir.Access):
                todo.append(n.tensor)
            if isinstance(n, ir.Call) and n.fn in fns and \
                    any(may_be_float(op, x) for x in n.args):
                casts.append(n)
    return casts


def may_be_float(op: ir.Op, e: ir.Expr) -> bool:
    """Whether ``e`` may hold a value that is not an integer (a float number or constant, a
    division, a mean, a float cast or function, a read of a float tensor)."""
    from .builtins import CASTS, ELEMENTWISE
    for n in ir.walk(e):
        if isinstance(n, ir.Num) and isinstance(n.value, float):
            return True
        if isinstance(n, ir.Name) and n.name in ("pi", "inf"):
            return True
        if isinstance(n, ir.Binary) and n.op == "/":
            return True
        if isinstance(n, ir.Reduce) and n.op == "mean":
            return True
        if isinstance(n, ir.Call) and (CASTS.get(n.fn) == "float" or (
                n.fn in ELEMENTWISE and ELEMENTWISE[n.fn].result == "float")):
            return True
        if isinstance(n, ir.Access):
            t = op.tensor(n.tensor)
            kinds = [t.dtypes[0]] if t.role == "tmp" else \
                [op.dtype_of(t.name, d) for d in op.dtype_choices]
            if any(k.startswith(("f", "bf")) for k in kinds):
                return True
    return False


def _compare_exact(g, r, slack: int = 0, bounds=None) -> str | None:
    if g.dtype.kind == "f":
        if not np.all(np.isfinite(g)) or not np.array_equal(g, np.round(g)):
            return "non-integer values in an integer output"
        g = g.astype(np.int64)
    wrong = g != r
    if slack and wrong.any():  # (in float64: no wrap near the integer limits)
        wrong &= np.abs(g.astype(np.float64) - r.astype(np.float64)) > slack
        if bounds is not None:  # and only where rounding could move the element (in
            lo, hi = (np.asarray(b).astype(np.int64) for b in bounds)  # int64; where a
            fits = (lo.astype(g.dtype) == lo) & (hi.astype(g.dtype) == hi)  # bound wraps
            g64 = g.astype(np.int64)  # in the output's dtype, the slack stands there)
            wrong |= (g != r) & fits & ((g64 < lo) | (g64 > hi))
    if not wrong.any():
        return None
    pos = tuple(int(p) for p in np.argwhere(wrong)[0])
    return (f"{int(wrong.sum())} of {wrong.size} elements differ; first at "
            f"[{', '.join(map(str, pos))}]: got {g[pos]}, expected {r[pos]}")


def _compare_close(g, r, rtol, atol, rounded=None, envelope=None) -> str | None:
    """Each element within ``atol + rtol * |r|`` of the float64 reference; the elements
    ``rounded`` (``rounds_to_infinity``) pass too: there the output dtype's infinity is the
    reference rounded to that dtype (``exp(100.0)`` in float32), what torch and any correct
    kernel store. So does an element within the tolerance of either of ``envelope``'s two
    arrays (``reference.cast_bounds``: what the reference takes where a rounding's float
    moves down or up by its dtype's rounding), which are the reference itself but where a
    rounding could go either way."""
    ref_nan, got_nan = np.isnan(r), np.isnan(g)
    if (got_nan & ~ref_nan).any():
        pos = tuple(int(p) for p in np.argwhere(got_nan & ~ref_nan)[0])
        return f"NaN at [{', '.join(map(str, pos))}] where the reference is {r[pos]:.6g}"
    if (ref_nan & ~got_nan).any():
        pos = tuple(int(p) for p in np.argwhere(ref_nan & ~got_nan)[0])
        return f"{g[pos]:.6g} at [{', '.join(map(str, pos))}] where the reference is NaN"
    ok = ref_nan | (g == r)  # equal infinities pass
    if rounded is not None:
        ok |= rounded
    with np.errstate(invalid="ignore"):
        for other in envelope or ():
            other = np.asarray(other, dtype=np.float64)
            ok |= np.abs(g - other) <= atol + rtol * np.abs(other)
        diff = np.where(ok, 0.0, np.abs(g - r))
        allowed = atol + rtol * np.abs(np.where(np.isfinite(r), r, 0.0))
        excess = np.where(ok, -1.0, diff - allowed)
    excess = np.where(np.isnan(excess), np.inf, excess)
    if not (excess > 0).any():
        return None
    pos = np.unravel_index(int(np.argmax(excess)), excess.shape)
    n_bad = int((excess > 0).sum())
    return (f"{n_bad} of {excess.size} elements outside rtol={rtol:g} atol={atol:g}; worst at "
            f"[{', '.join(str(int(p)) for p in pos)}]: got {g[pos]:.6g}, expected {r[pos]:.6g} "
            f"(error {diff[pos]:.3g}, allowed {allowed[pos]:.3g})")


def _compare_indices(op, st, arg, g, r, inputs) -> str | None:
    tensor, subs, index, distinct = arg
    keys = np.asarray(inputs[tensor])
    # int64 keys stay integers: as float64, neighbours above 2**53 would compare equal
    keys = keys.astype(np.float64 if keys.dtype.kind == "f" else np.int64)
    g = g.astype(np.int64) if g.dtype.kind == "f" else g
    extent = keys.shape[subs.index(index)]
    if (g < 0).any() or (g >= extent).any():
        pos = tuple(int(p) for p in np.argwhere((g < 0) | (g >= extent))[0])
        return f"index {g[pos]} at [{', '.join(map(str, pos))}] is outside 0..{extent}"
    lhs = st.indices
    want = _gather_keys(keys, subs, index, lhs, r)
    have = _gather_keys(keys, subs, index, lhs, g)
    wrong = ~((want == have) | (np.isnan(want) & np.isnan(have)))
    if wrong.any():
        pos = tuple(int(p) for p in np.argwhere(wrong)[0])
        fmt = ".6g" if keys.dtype.kind == "f" else "d"
        return (f"index {g[pos]} at [{', '.join(map(str, pos))}] points at {have[pos]:{fmt}}, "
                f"expected a key equal to {want[pos]:{fmt}} (index {r[pos]})")
    if distinct is not None and g.shape[distinct] > 1:
        dup = (np.diff(np.sort(g, axis=distinct), axis=distinct) == 0).any(axis=distinct)
        if dup.any():
            row = tuple(int(p) for p in np.argwhere(dup)[0])
            return f"row {list(row)} repeats an index"
    return None
