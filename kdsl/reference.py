"""The oracle: a numpy interpreter of checked IR, in float64 (int64 for integers).

A statement is evaluated over a grid of axes: one per left-side index, plus
one appended for every bound index (reduction, collective) while its body is
evaluated. Every array inside a scope has exactly as many dimensions as the
scope has axes, so broadcasting lines them up. Large statements are evaluated
in chunks of the first left-side index to bound memory.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import dtypes, ir
from .builtins import CASTS, CONSTANTS, ELEMENTWISE, ROUNDINGS, segment_of, triu_pairs
from .sizes import evaluate


# each scan along an axis; past cumsum and cumprod, the kinds the lowering writes
# (``backends/lower/scans.py``, ``numerics.py``), so that a rewritten op can be checked here
SCANS = {"cumsum": np.cumsum, "cumprod": np.cumprod, "cummax": np.maximum.accumulate,
         "cummin": np.minimum.accumulate, "logcumsumexp": np.logaddexp.accumulate}

CHUNK_ELEMENTS = 1 << 22


def decayed(x: np.ndarray, axis: int, c: float, dtype=None) -> np.ndarray:
    """``y[j] = c * y[j - 1] + x[j]`` along ``axis`` (the scan ``cumdecay``), in ``dtype``
    (float64 by default; the numpy generator's runtime keeps its kernel's)."""
    x = np.moveaxis(np.asarray(x), axis, 0)
    out = np.empty(x.shape, dtype=dtype or np.result_type(x, np.float64))
    acc = np.zeros(x.shape[1:], dtype=out.dtype)
    for n in range(x.shape[0]):
        acc = c * acc + x[n]
        out[n] = acc
    return np.moveaxis(out, 0, axis)


@dataclass
class _Scope:
    ndim: int
    bound: dict[str, np.ndarray]  # index name -> its values (ndim dims)
    mask: np.ndarray | bool  # False where a data-dependent index runs past its range


class Reference:
    """``nudge``: a relative step (negative: down) by which every float a cast truncates to
    an integer, or ``floor``, ``ceil``, ``trunc`` or ``round`` rounds, moves first
    (``cast_bounds``); 0 evaluates the math as written."""

    def __init__(self, op: ir.Op, sizes: dict[str, int], nudge: float = 0.0):
        self.op, self.sizes, self.nudge = op, sizes, nudge

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[str, np.ndarray] = {}
        for t in self.op.inputs:
            a = np.asarray(inputs[t.name])
            env[t.name] = a.astype(np.float64 if a.dtype.kind == "f" else
                                   np.bool_ if a.dtype.kind == "b" else np.int64)
        self.env = env
        with np.errstate(all="ignore"):
            for st in self.op.statements:
                env[st.target] = self.statement(st)
        return {t.name: env[t.name] for t in self.op.outputs}

    # ---- statements ----
    def statement(self, st: ir.Statement) -> np.ndarray:
        target = self.op.tensor(st.target)
        shape = tuple(evaluate(e, self.sizes) for e in target.shape)
        if not shape:  # a scalar: the block has one row, the tensor none
            return _canonical(self._eval_block(st, shape, 0, 1)).reshape(())
        rows = shape[0]
        if rows == 0:  # no rows: evaluate one to learn the dtype (float, int or bool)
            probe = _canonical(self._eval_block(st, (1,) + shape[1:], 0, 1))
            return np.zeros(shape, dtype=probe.dtype)
        per_row = max(int(np.prod(shape[1:], dtype=np.int64)) * self._inner_work(st.value), 1)
        chunk = rows if _touches_first_axis(st) else max(1, CHUNK_ELEMENTS // per_row)
        blocks = [_canonical(self._eval_block(st, shape, start, min(rows, start + chunk)))
                  for start in range(0, rows, chunk)]
        return np.concatenate(blocks, axis=0) if len(blocks) > 1 else np.ascontiguousarray(blocks[0])

    def _eval_block(self, st, shape, start, stop) -> np.ndarray:
        n = len(shape)
        bound = {}
        for p, name in enumerate(st.indices):
            lo, hi = (start, stop) if p == 0 else (0, shape[p])
            bound[name] = _axis(np.arange(lo, hi, dtype=np.int64), p, n)
        block = (stop - start,) + tuple(shape[1:])
        self.lhs = st.indices
        value = self.eval(st.value, _Scope(n, bound, True))
        return np.broadcast_to(value, block)

    def _inner_work(self, e: ir.Expr) -> int:
        """An upper bound on the elements a bound index multiplies a row by."""
        work = 1
        for node in ir.walk(e):
            ranges = node.indices if isinstance(node, ir.Reduce) else \
                (node.index,) if isinstance(node, ir.Collective) else ()
            for r in ranges:
                try:
                    work *= max(evaluate(r.hi, self.sizes) - evaluate(r.lo, self.sizes), 1)
                except Exception:
                    work *= max(max(self.sizes.values(), default=1), 1)
        return work

    # ---- expressions ----
    def eval(self, e: ir.Expr, sc: _Scope):
        if isinstance(e, ir.Num):
            return e.value
        if isinstance(e, ir.Name):
            if e.name in sc.bound:
                return sc.bound[e.name]
            if e.name in self.sizes:
                return self.sizes[e.name]
            return CONSTANTS[e.name]
        if isinstance(e, ir.Access):
            return self.access(e, sc)
        if isinstance(e, ir.Unary):
            v = self.eval(e.operand, sc)
            return np.logical_not(v) if e.op == "not" else np.negative(v)
        if isinstance(e, ir.Binary):
            return _binary(e.op, self.eval(e.left, sc), self.eval(e.right, sc))
        if isinstance(e, ir.Call):
            return self.call(e, sc)
        if isinstance(e, ir.Reduce):
            return self.reduce(e, sc)
        if isinstance(e, ir.Scan):
            return self.scan(e, sc)
        if isinstance(e, ir.Collective):
            return self.collective(e, sc)
        raise AssertionError(e)

    def access(self, e: ir.Access, sc: _Scope):
        data = self.env[e.tensor]
        subs = [np.asarray(self.eval(s, sc), dtype=np.int64) for s in e.subscripts]
        if e.pad is None:
            subs = [np.clip(s, 0, max(n - 1, 0)) for s, n in zip(subs, data.shape)]
            # Clipping only matters on masked-out lanes; the checker proved the rest in range.
            return data[tuple(subs)] if data.size else np.zeros(np.broadcast(*subs).shape,
                                                                data.dtype)
        inside = np.ones((), dtype=bool)
        for s, n in zip(subs, data.shape):
            inside = inside & (s >= 0) & (s < n)
        clipped = [np.clip(s, 0, max(n - 1, 0)) for s, n in zip(subs, data.shape)]
        values = data[tuple(clipped)] if data.size else np.zeros(np.broadcast(*subs).shape,
                                                                  data.dtype)
        return np.where(inside, values, self.eval(e.pad, sc))

    def call(self, e: ir.Call, sc: _Scope):
        if e.fn == "segment_of":
            return segment_of(self.env[e.args[0].name], np.asarray(self.eval(e.args[1], sc)))
        if e.fn in ("triu_row", "triu_col"):
            p = np.asarray(self.eval(e.args[0], sc), dtype=np.int64)
            rows, cols = triu_pairs(int(self.eval(e.args[1], sc)))
            table = rows if e.fn == "triu_row" else cols
            return table[np.clip(p, 0, max(len(table) - 1, 0))] if len(table) else p * 0
        args = [self.eval(a, sc) for a in e.args]
        if e.fn in CASTS:
            kind = CASTS[e.fn]
            a = np.asarray(args[0])
            if kind == "float":
                return a.astype(np.float64)
            if kind == "int":
                if a.dtype.kind != "f":
                    return a.astype(np.int64)
                if self.nudge and not _rounded(e.args[0]):  # (a rounding is nudged itself)
                    a = a + (np.abs(a) + CAST_ROUNDING_FLOOR) * self.nudge
                return np.trunc(a).astype(np.int64)
            return a != 0
        if e.fn in ROUNDINGS and self.nudge and np.asarray(args[0]).dtype.kind == "f" \
                and not _exact(e.args[0]):
            a = np.asarray(args[0], dtype=np.float64)
            args = [a + (np.abs(a) + CAST_ROUNDING_FLOOR) * self.nudge]
        return ELEMENTWISE[e.fn].numpy(*args)

    def _enter(self, r: ir.IndexRange, sc: _Scope) -> _Scope:
        """A scope with one more axis for index ``r``."""
        lo = np.asarray(self.eval(r.lo, sc), dtype=np.int64)
        hi = np.asarray(self.eval(r.hi, sc), dtype=np.int64)
        length = np.maximum(hi - lo, 0)
        extent = int(length.max()) if length.size else 0
        n = sc.ndim + 1
        steps = _axis(np.arange(extent, dtype=np.int64), n - 1, n)
        values = np.expand_dims(lo, -1) + steps if lo.ndim else lo + steps
        inside = steps < (np.expand_dims(length, -1) if length.ndim else length)
        mask = np.expand_dims(sc.mask, -1) & inside if np.ndim(sc.mask) else inside
        bound = {k: np.expand_dims(v, -1) if np.ndim(v) else v for k, v in sc.bound.items()}
        bound[r.name] = values
        return _Scope(n, bound, mask)

    def reduce(self, e: ir.Reduce, sc: _Scope):
        inner = sc
        for r in e.indices:
            inner = self._enter(r, inner)
        body = np.asarray(self.eval(e.body, inner))
        mask = inner.mask
        full = np.broadcast_shapes(np.shape(body), np.shape(mask))
        body = np.broadcast_to(body, full)
        axes = tuple(range(sc.ndim, inner.ndim))
        is_int = body.dtype.kind in "iub"
        if e.op == "sum":
            return np.where(mask, body, 0).sum(axis=axes)
        if e.op == "prod":
            return np.where(mask, body, 1).prod(axis=axes)
        if e.op == "mean":
            count = np.broadcast_to(mask, full).sum(axis=axes)
            return np.where(mask, body, 0).sum(axis=axes) / count
        if e.op in ("max", "min"):
            low = np.iinfo(np.int64).min if is_int else -np.inf
            ident = low if e.op == "max" else (np.iinfo(np.int64).max if is_int else np.inf)
            filled = np.where(mask, body, ident)
            # initial=: an empty range (an empty segment) reduces to the identity
            return filled.max(axis=axes, initial=ident) if e.op == "max" \
                else filled.min(axis=axes, initial=ident)
        # argmax / argmin over one index: the index value of the first extreme element
        ident = -np.inf if e.op == "argmax" else np.inf
        filled = np.where(mask, body.astype(np.float64), ident)
        pos = filled.argmax(axis=-1) if e.op == "argmax" else filled.argmin(axis=-1)
        values = np.broadcast_to(inner.bound[e.indices[0].name], full)
        return np.take_along_axis(values, pos[..., None], axis=-1)[..., 0]

    def scan(self, e: ir.Scan, sc: _Scope):
        axis = self.lhs.index(e.index)
        body = np.asarray(self.eval(e.body, sc))
        shape = np.broadcast_shapes(body.shape, sc.bound[e.index].shape)
        body = np.broadcast_to(body, shape)
        if e.op == "cumdecay":
            return decayed(body, axis, e.factor.value)
        return SCANS[e.op](body, axis=axis)

    def collective(self, e: ir.Collective, sc: _Scope):
        if e.op in ("sort", "argsort"):
            axis = self.lhs.index(e.index.name)
            body = np.asarray(self.eval(e.body, sc))
            body = np.broadcast_to(body, np.broadcast_shapes(body.shape,
                                                             sc.bound[e.index.name].shape))
            order = np.argsort(body, axis=axis, kind="stable")
            if e.op == "argsort":
                return order
            return np.take_along_axis(body, order, axis=axis)
        out_name = next(n for n in self.lhs if n not in
                        {x.name for x in ir.walk(e.body) if isinstance(x, ir.Name)})
        out_axis = self.lhs.index(out_name)
        k = int(self.eval(e.k, sc))
        inner = self._enter(e.index, sc)
        body = np.asarray(self.eval(e.body, inner))
        full = np.broadcast_shapes(body.shape, np.shape(inner.mask),
                                   np.shape(inner.bound[e.index.name]))
        body = np.broadcast_to(body, full)
        key = ~body if body.dtype.kind in "iu" else -body.astype(np.float64)
        order = np.argsort(key, axis=-1, kind="stable")[..., :k]
        if e.op == "topk":
            picked = np.take_along_axis(body, order, axis=-1)
        else:
            picked = np.take_along_axis(np.broadcast_to(inner.bound[e.index.name], full),
                                        order, axis=-1)
        picked = np.take(picked, 0, axis=out_axis) if picked.shape[out_axis] == 1 else picked
        return np.moveaxis(picked, -1, out_axis)


def _axis(values: np.ndarray, p: int, n: int) -> np.ndarray:
    shape = [1] * n
    shape[p] = len(values)
    return values.reshape(shape)


def _binary(op: str, a, b):
    if op == "+":
        return np.add(a, b)
    if op == "-":
        return np.subtract(a, b)
    if op == "*":
        return np.multiply(a, b)
    if op == "/":
        return np.true_divide(a, b)
    if op == "//":
        return np.floor_divide(a, b)
    if op == "%":
        return np.mod(a, b)
    if op == "**":
        return np.power(np.asarray(a, dtype=np.float64), b)
    if op == "and":
        return np.logical_and(a, b)
    if op == "or":
        return np.logical_or(a, b)
    return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
            "==": np.equal, "!=": np.not_equal}[op](a, b)


def _canonical(a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind == "f":
        return a.astype(np.float64)
    if a.dtype.kind == "b":
        return a.astype(np.bool_)
    return a.astype(np.int64)


def _touches_first_axis(st: ir.Statement) -> bool:
    """Scans and sorts along the first left-side index need the whole axis at once."""
    if not st.indices:
        return True
    first = st.indices[0]
    for node in ir.walk(st.value):
        if isinstance(node, ir.Scan) and node.index == first:
            return True
        if isinstance(node, ir.Collective):
            return True
    return False


def _rounded(e: ir.Expr) -> bool:
    """``e`` is a rounding's result: a whole number in any dtype, nothing to nudge."""
    return isinstance(e, ir.Call) and e.fn in ROUNDINGS


def _exact(e: ir.Expr) -> bool:
    """``e`` is a value no kernel computes with an error of its own: a read, a number, or a
    cast of one (``round(x)`` of a stored 2.5 is 2 in every dtype; nudged, it would let a
    kernel rounding halves away from zero pass)."""
    if isinstance(e, ir.Call) and e.fn in CASTS and len(e.args) == 1:
        return _exact(e.args[0])
    return isinstance(e, (ir.Access, ir.Num, ir.Name))


# How far a kernel's float may be from the float64 value a cast truncates, relative to its
# magnitude: a few rounding steps of the case's dtype (-33.333332f * 3.0 is -100 in f32,
# -99.999996 in f64; torch computes ``x * 3.0`` of an f16 ``x`` in f16), the float32 figure
# where the dtype is not a float's. Near zero, as near the smallest normal float32.
CAST_ROUNDING = {"f64": 2.0 ** -48, "f32": 2.0 ** -19, "f16": 2.0 ** -9, "bf16": 2.0 ** -6}
CAST_ROUNDING_FLOOR = 2.0 ** -100


def cast_bounds(op: ir.Op, sizes: dict[str, int], inputs: dict[str, np.ndarray],
                dtype: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """For each integer output that casts a float (``compare.int_slack``), the least and
    greatest value each element takes when every such float moves by its rounding either
    way (``CAST_ROUNDING``): an element may be off the reference only where rounding could
    carry its float across an integer, not everywhere (a kernel off by one at every element
    of ``i32(x * 256.0)`` passed under a slack of one for the whole output).

    The same for each float output of one ``floor``, ``ceil``, ``trunc`` or ``round`` of a
    float (``compare.float_roundings``): a fake quantization ``round(x / 0.05) * 0.05`` in
    float32 lands a whole step from the float64 reference where ``x / 0.05`` is within
    rounding of a half (15 of 16.7 million elements of a normal draw), and no float32
    kernel of it could pass at every element otherwise.

    Only where the output depends on one such cast, of a float computed elementwise: a
    float32 sum's error grows with its terms, not with its result, so a correct kernel
    summing in another order than the reference truncated ``i32(sum(k) x[i, k])`` to the
    other integer where terms cancelled (223.0015 summed to 222.9993), and two casts nudged
    together miss one rounding up while the other does not. Such outputs keep the slack at
    every element."""
    from kdsl.backends.lower.numerics import stable_exponentials
    from kdsl.compare import float_casts, float_roundings, int_slack
    names = [t.name for t in op.outputs if int_slack(op, t.name)
             and _one_elementwise(op, float_casts(op, t.name))]
    floats = [t.name for t in op.outputs if not float_casts(op, t.name)
              and _one_elementwise(op, float_roundings(op, t.name))
              and dtypes.kind(op.dtype_of(t.name, dtype)) == "float"]
    if not names and not floats:
        return {}
    stable = stable_exponentials(op)
    step = CAST_ROUNDING.get(dtype, CAST_ROUNDING["f32"])
    runs = [Reference(stable, sizes, n * step).run(inputs) for n in (-1, 0, 1)]
    out = {n: (np.minimum(np.minimum(runs[0][n], runs[1][n]), runs[2][n]),
               np.maximum(np.maximum(runs[0][n], runs[1][n]), runs[2][n])) for n in names}
    # a float output's two other values, not the interval between them: a value between
    # two steps is no rounding of anything (``compare._compare_close``)
    out.update({n: (runs[0][n], runs[2][n]) for n in floats})
    return out


def _one_elementwise(op: ir.Op, casts: list[ir.Call]) -> bool:
    """Whether ``casts`` (an output's casts of a float to an integer, or its roundings of a
    float) is exactly one, whose float reads no reduction, scan or collective (through
    intermediates too)."""
    defs = {st.target: st for st in op.statements}

    def reduced(e: ir.Expr, seen: set) -> bool:
        for n in ir.walk(e):
            if isinstance(n, (ir.Reduce, ir.Scan, ir.Collective)):
                return True
            if isinstance(n, ir.Access) and n.tensor in defs and n.tensor not in seen:
                if reduced(defs[n.tensor].value, seen | {n.tensor}):
                    return True
        return False

    return len(casts) == 1 and not any(reduced(a, set()) for a in casts[0].args)


def reference(op: ir.Op, sizes: dict[str, int], inputs: dict[str, np.ndarray]):
    """Outputs of ``op`` on ``inputs`` (float64 / int64 / bool arrays), its exponentials in
    the forms that do not overflow (``lower.numerics``: the same math, shifted by the
    largest exponent): a log-sum-exp written as the math reads over inputs of 800 is 800
    and more, not the infinity float64's ``exp`` reaches past 709, which failed every
    kernel and torch's own ``logsumexp``."""
    from kdsl.backends.lower.numerics import stable_exponentials
    return Reference(stable_exponentials(op), sizes).run(inputs)
