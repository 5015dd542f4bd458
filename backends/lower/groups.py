"""Grouped output axes: an output index read as ``co // E`` splits into (group, member).

A grouped convolution (or any op whose reads select a block by ``i // E``) writes
``y[b, co, ...]`` and reads ``x[b, co // E * CIG + c, ...]`` and ``w[co, c, ...]``.
Read as it stands, ``co`` indexes both factors of the product, so a GEMM generator
must treat it as a batch axis, one program per output channel. Writing
``co = g * E + j`` (``g`` in ``0 .. ext // E``, ``j`` in ``0 .. E``) and simplifying
``(g * E + j) // E`` to ``g`` and ``(g * E + j) % E`` to ``j`` leaves ``g`` on
both factors (a batch axis, the group) and ``j`` on one (a tile axis, the channel
in its group). The output is viewed with the axis split in two: for a contiguous
tensor the element addresses are the same, provided ``E`` divides the extent,
which the split records as a condition a launcher checks (``Split.exact``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kdsl import ir

from kdsl.backends.lower.rewrite import rebuild, substitute


@dataclass(frozen=True)
class Split:
    op: ir.Op
    # (extent, block) pairs: the rewrite is exact only where block divides extent
    exact: tuple[tuple[ir.Expr, ir.Expr], ...]


def split_groups(op: ir.Op, proven: bool = False) -> Split:
    """``op`` with each grouped output axis split; ``op`` itself when none is. With
    ``proven``, only axes whose block divides the extent by the spec's own word: the extent
    a multiple of the block as written, or ``A // B`` blocks of ``A`` with ``A % B == 0``
    among the spec's conditions (a generator without a kernel for the uneven case asks)."""
    if len(op.statements) != 1:
        return Split(op, ())
    st = op.statements[0]
    target = op.tensor(st.target)
    if target.role != "out" or any(r is not None for r in st.ranges):
        return Split(op, ())
    indices, shape, value, exact = list(st.indices), list(target.shape), st.value, []
    taken = _names(value) | set(op.dims) | set(indices)
    pos = 0
    while pos < len(indices):
        name = indices[pos]
        block = _group_block(value, name, op.dims)
        if block is None or proven and not _divides(block, shape[pos], op):
            pos += 1
            continue
        g, j = _fresh(f"{name}_g", taken), _fresh(f"{name}_j", taken)
        taken |= {g, j}
        whole = ir.Binary("+", ir.Binary("*", ir.Name(g), block), ir.Name(j))
        value = _simplify(substitute(value, {name: whole}), g, j, block)
        exact.append((shape[pos], block))
        indices[pos:pos + 1] = [g, j]
        shape[pos:pos + 1] = [ir.Binary("//", shape[pos], block), block]
        pos += 2
    if not exact:
        return Split(op, ())
    new_target = dataclasses.replace(target, shape=tuple(shape))
    tensors = tuple(new_target if t.name == target.name else t for t in op.tensors)
    new_st = dataclasses.replace(st, indices=tuple(indices), value=value, ranges=())
    return Split(dataclasses.replace(op, tensors=tensors, statements=(new_st,)), tuple(exact))


def _group_block(value: ir.Expr, name: str, dims) -> ir.Expr | None:
    """The ``E`` of a read of ``name // E`` (E built from dims and numbers only), if any."""
    for n in ir.walk(value):
        if isinstance(n, ir.Binary) and n.op == "//" and n.left == ir.Name(name) \
                and _is_dim_expr(n.right, dims):
            return n.right
    return None


def _divides(block: ir.Expr, extent: ir.Expr, op: ir.Op) -> bool:
    """Does ``block`` divide ``extent`` whatever the sizes the spec admits?"""
    if isinstance(extent, ir.Binary) and extent.op == "*" and block in (extent.left, extent.right):
        return True
    conditions = op.test.conditions if op.test is not None else ()

    def said(divisor):
        return ir.Binary("==", ir.Binary("%", extent, divisor), ir.Num(0)) in conditions
    return said(block) or (isinstance(block, ir.Binary) and block.op == "//"
                           and block.left == extent and said(block.right))


def _is_dim_expr(e: ir.Expr, dims) -> bool:
    for n in ir.walk(e):
        if isinstance(n, ir.Name) and n.name not in dims:
            return False
        if not isinstance(n, (ir.Name, ir.Num, ir.Binary, ir.Unary)):
            return False
    return True


def _simplify(e: ir.Expr, g: str, j: str, block: ir.Expr) -> ir.Expr:
    """``(g * E + j) // E`` -> ``g`` and ``(g * E + j) % E`` -> ``j``: exact for 0 <= j < E."""
    whole = ir.Binary("+", ir.Binary("*", ir.Name(g), block), ir.Name(j))
    if isinstance(e, ir.Binary) and e.op in ("//", "%") and e.left == whole \
            and e.right == block:
        return ir.Name(g) if e.op == "//" else ir.Name(j)
    return rebuild(e, lambda c: _simplify(c, g, j, block))


def _names(e: ir.Expr) -> set[str]:
    out = set()
    for n in ir.walk(e):
        if isinstance(n, ir.Name):
            out.add(n.name)
        if isinstance(n, ir.Reduce):
            out |= {r.name for r in n.indices}
    return out


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name
