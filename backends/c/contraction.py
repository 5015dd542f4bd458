"""Contractions read from index notation: which statements are a (batched) GEMM.

A statement ``T[out..] = f(sum(k..) X[..] * Y[..], ..)`` is a contraction when the sum
is its one reduction, its body is the product of two plain reads (every subscript an
output or reduced index, none twice in a read, or a fixed coordinate: sizes and whole
numbers under + - * // %, like the 0 of a 1 x 1 kernel's ``w[co, ci, 0, 0]``), every
reduced index runs from 0 over a size and is read by both factors, and f is elementwise
(the epilogue: bias, activation, a mask, a scale). The output indices then fall into four
sets, whatever their names and the order of the operands' axes:

- ``m``: read by one factor only (``a``, the factor whose rows the micro-kernel
  broadcasts), ``n``: read by the other only (``b``, the factor whose rows are vectors),
- ``batch``: read by both factors or by neither (one product per value),
- ``k``: the reduced indices.

``b`` is the factor that reads the output's last index where one does, so that the
vectors of the micro-kernel run along the output's contiguous axis. Both ``m`` and
``n`` must be non-empty: a dot product per output (cosine similarity) is no GEMM.

Columns that no one flat index addresses, in ``b`` and in the output alike (a 1 x 1
convolution's ``(b, h, w)``: ``b`` sits apart from ``(h, w)`` in both), would cost a
division per index for every element packed and stored; their longest suffix that one
flat index does address stays ``n`` and the rest become batch indices, where that
suffix spans at least ``SPLIT_MIN_COLUMNS`` at the op's bench sizes (fewer would leave
the micro-kernel's tiles mostly padding).
Nothing here knows an op's name or a shape; the renderer (``gemm``) reads only this.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdsl import dtypes, ir
from kdsl.sizes import evaluate

from kdsl.backends.c.plan import free_names
from kdsl.backends.lower.rewrite import factors

SPLIT_MIN_COLUMNS = 128  # 4 micro-kernel tiles of 32: at most a fifth of them padding


@dataclass(frozen=True)
class Contraction:
    red: ir.Reduce
    a: ir.Access
    b: ir.Access
    batch: tuple[str, ...]
    m: tuple[str, ...]
    n: tuple[str, ...]
    k: tuple[str, ...]

    def names(self, access: ir.Access) -> tuple[str | None, ...]:
        """Each subscript's index, None where it is a fixed coordinate."""
        indices = set(self.batch + self.m + self.n + self.k)
        return tuple(s.name if isinstance(s, ir.Name) and s.name in indices else None
                     for s in access.subscripts)


def _float_tensor(op: ir.Op, name: str) -> bool:
    t = op.tensor(name)
    kinds = {dtypes.kind(t.dtypes[0])} if t.role == "tmp" else \
        {dtypes.kind(op.dtype_of(name, d)) for d in op.dtype_choices}
    return kinds == {"float"}


def recognise(op: ir.Op, st: ir.Statement) -> Contraction | None:
    """The statement as a contraction, or None when it is not one (see the module doc)."""
    nodes = list(ir.walk(st.value))
    if any(isinstance(n, (ir.Scan, ir.Collective)) for n in nodes):
        return None
    reds = [n for n in nodes if isinstance(n, ir.Reduce)]
    if len(reds) != 1 or reds[0].op != "sum":
        return None
    red = reds[0]
    out = set(st.indices)
    k = tuple(r.name for r in red.indices)
    if len(set(k)) != len(k) or out & set(k):
        return None
    dims = set(op.dims)
    for r in red.indices:
        if r.lo != ir.Num(0) or r.hi is None or not free_names(r.hi) <= dims:
            return None
    fs = factors(red.body)
    if len(fs) != 2:
        return None
    for f in fs:
        if not (isinstance(f, ir.Access) and f.pad is None and f.tensor != st.target
                and op.tensor(f.tensor).role != "out" and _float_tensor(op, f.tensor)):
            return None
        names = [s.name for s in f.subscripts
                 if isinstance(s, ir.Name) and s.name in out | set(k)]
        fixed = [s for s in f.subscripts if not (isinstance(s, ir.Name) and s.name in names)]
        if len(set(names)) != len(names) or not all(_size_expr(s, dims) for s in fixed):
            return None
    x, y = fs
    nx, ny = _indices(x, out | set(k)), _indices(y, out | set(k))
    if not set(k) <= nx & ny:
        return None
    last = st.indices[-1] if st.indices else None
    if last in nx and last not in ny:
        x, y, nx, ny = y, x, ny, nx
    m = tuple(i for i in st.indices if i in nx and i not in ny)
    n = tuple(i for i in st.indices if i in ny and i not in nx)
    batch = tuple(i for i in st.indices if i not in m and i not in n)
    if not m or not n:
        return None
    keep = _flat_columns(op, st, n, y)
    if keep != n:
        n = keep
        batch = tuple(i for i in st.indices if i not in m and i not in n)
    return Contraction(red, x, y, batch, m, n, k)


def _flat_columns(op: ir.Op, st: ir.Statement, n: tuple[str, ...],
                  y: ir.Access) -> tuple[str, ...]:
    """``n``, or its longest suffix that one flat index addresses in ``y`` and the output
    where the whole does not (see the module doc)."""
    out = ir.Access(st.target, tuple(ir.Name(i) for i in st.indices))
    flat = [s for s in range(len(n), 0, -1)
            if all(_consecutive(op, st, n[-s:], a) for a in (y, out))]
    if not flat or flat[0] == len(n):
        return n
    suffix = n[-flat[0]:]
    point = ([p for p in op.bench if p.device == "cpu"] or list(op.bench) or [None])[0]
    if point is None:
        return n
    shape = op.tensor(st.target).shape
    try:
        columns = 1
        for i in suffix:
            columns *= evaluate(shape[st.indices.index(i)], point.size_dict())
    except Exception:  # an extent the sizes cannot give: keep the flat columns
        return n
    return suffix if columns >= SPLIT_MIN_COLUMNS else n


def _consecutive(op: ir.Op, st: ir.Statement, names: tuple[str, ...],
                 access: ir.Access) -> bool:
    """One flat index addresses the output indices ``names`` in ``access``."""
    subs = [s.name if isinstance(s, ir.Name) else None for s in access.subscripts]
    out = op.tensor(st.target).shape
    return flat_run(subs, op.tensor(access.tensor).shape, names,
                    lambda i: out[st.indices.index(i)])


def flat_run(subs: list, shape: tuple, names, extent) -> bool:
    """``names`` are consecutive axes of a tensor of ``shape`` read with subscripts
    ``subs`` (an index's name, else None), in order, each after the first as long as
    ``extent(name)``: one flat index addresses them."""
    if any(subs.count(i) != 1 for i in names):
        return False
    pos = [subs.index(i) for i in names]
    if pos != list(range(pos[0], pos[0] + len(pos))):
        return False
    return all(shape[p] == extent(i) for p, i in zip(pos[1:], names[1:]))


def _size_expr(e: ir.Expr, dims: set[str]) -> bool:
    """A fixed coordinate: sizes and whole numbers under + - * // % and negation (what the
    kernel computes once; a read like ``sel[0]`` or a call like ``max(T - 2, 0)`` is not)."""
    if isinstance(e, ir.Num):
        return float(e.value).is_integer()
    if isinstance(e, ir.Name):
        return e.name in dims
    if isinstance(e, ir.Unary):
        return e.op == "neg" and _size_expr(e.operand, dims)
    if isinstance(e, ir.Binary):
        return e.op in ("+", "-", "*", "//", "%") and _size_expr(e.left, dims) and \
            _size_expr(e.right, dims)
    return False


def _indices(access: ir.Access, indices: set[str]) -> set[str]:
    return {s.name for s in access.subscripts if isinstance(s, ir.Name) and s.name in indices}


def contractions(op: ir.Op) -> dict[str, Contraction]:
    """Every statement of ``op`` that is a contraction, by its target."""
    out = {}
    for st in op.statements:
        c = recognise(op, st)
        if c is not None:
            out[st.target] = c
    return out
