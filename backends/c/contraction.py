"""Contractions read from index notation: which statements are a (batched) GEMM.

A statement ``T[out..] = f(sum(k..) X[..] * Y[..], ..)`` is a contraction when the sum
is its one reduction, its body is the product of two plain reads (every subscript an
output or reduced index, none twice in a read), every reduced index runs from 0 over a
size and is read by both factors, and f is elementwise (the epilogue: bias, activation,
a mask, a scale). The output indices then fall into four sets, whatever their names and
the order of the operands' axes:

- ``m``: read by one factor only (``a``, the factor whose rows the micro-kernel
  broadcasts), ``n``: read by the other only (``b``, the factor whose rows are vectors),
- ``batch``: read by both factors or by neither (one product per value),
- ``k``: the reduced indices.

``b`` is the factor that reads the output's last index where one does, so that the
vectors of the micro-kernel run along the output's contiguous axis. Both ``m`` and
``n`` must be non-empty: a dot product per output (cosine similarity) is no GEMM.
Nothing here knows an op's name or a shape; the renderer (``gemm``) reads only this.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdsl import dtypes, ir

from kdsl.backends.c.plan import free_names
from kdsl.backends.lower.rewrite import factors


@dataclass(frozen=True)
class Contraction:
    red: ir.Reduce
    a: ir.Access
    b: ir.Access
    batch: tuple[str, ...]
    m: tuple[str, ...]
    n: tuple[str, ...]
    k: tuple[str, ...]

    def names(self, access: ir.Access) -> tuple[str, ...]:
        return tuple(s.name for s in access.subscripts)


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
        names = [s.name if isinstance(s, ir.Name) else None for s in f.subscripts]
        if None in names or len(set(names)) != len(names) or not set(names) <= out | set(k):
            return None
    x, y = fs
    nx, ny = {s.name for s in x.subscripts}, {s.name for s in y.subscripts}
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
    return Contraction(red, x, y, batch, m, n, k)


def contractions(op: ir.Op) -> dict[str, Contraction]:
    """Every statement of ``op`` that is a contraction, by its target."""
    out = {}
    for st in op.statements:
        c = recognise(op, st)
        if c is not None:
            out[st.target] = c
    return out
