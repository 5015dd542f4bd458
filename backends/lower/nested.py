"""Matrix products written inside another reduction, computed as intermediates of their own.

A model's layer reduced right away is written as the math reads: a GEMM's rows summed
through an activation, ``y[i] = sum(j) sigmoid(sum(k) x[i, k] * w[j, k])``, or averaged
with a bias, ``mean(j) ((sum(k) x[i, k] * w[j, k]) + b[j])``. A loop nest over the
statement computes the inner sum as one dot product per ``(i, j)``, reading ``x``'s row and
``w``'s row again for each: the multiply-adds of a GEMM at the speed of a matrix-vector
product, with no blocking (a level-2 probe: 0.28-0.42x of eager where the same GEMM written
as its own statement ran at 1.4-3x). Here such an inner sum becomes a statement of its own,
``kd_mm0[i, j] = sum(k) x[i, k] * w[j, k]``, which the generators recognise as a contraction
(the C backend's packed GEMM), and the outer reduction reads it.

An inner sum is taken when it is a product of two reads, each reading a summed index, each
reading an index of the context (the statement's or an enclosing reduction's) the other
does not (the GEMM's M and N), every context index it reads has a range from 0 to a size
of dims alone, and its intermediate at the first bench point holds at most
``MAX_ELEMENTS`` values. ``op`` itself where there is none.
"""
from __future__ import annotations

import dataclasses

from kdsl import ir
from kdsl.backends.lower.partials import extent, size_at
from kdsl.backends.lower.rewrite import free_names, rebuild, scratch_dtype, unique_name

MAX_ELEMENTS = 1 << 26  # an intermediate's values at the bench point (256 MiB of f32)


def nested_contractions(op: ir.Op) -> ir.Op:
    """``op`` with each matrix product inside another reduction as an intermediate."""
    bench = dict(op.bench[0].sizes) if op.bench else None
    tensors, statements = list(op.tensors), []
    taken = 0
    for st in op.statements:
        extra: list[ir.Statement] = []
        context = dict(zip(st.indices, op.tensor(st.target).shape))

        def visit(e: ir.Expr, ctx: dict, under: bool) -> ir.Expr:
            if isinstance(e, (ir.Scan, ir.Collective)):
                return e  # their bodies stay with them
            if not isinstance(e, ir.Reduce):
                return rebuild(e, lambda x: visit(x, ctx, under))
            inner = {**ctx, **{r.name: extent(r) for r in e.indices}}
            e = dataclasses.replace(e, body=visit(e.body, inner, True))
            keep = _product_indices(op, e, ctx) if under else None
            if keep is None or not _fits(op, keep, ctx, bench):
                return e
            name = unique_name(tensors, f"kd_mm{len(extra)}_{st.target}")
            tensors.append(ir.Tensor(name, "tmp", (scratch_dtype(op, e),), None,
                                     tuple(ctx[k] for k in keep)))
            extra.append(ir.Statement(name, tuple(keep), e))
            return ir.Access(name, tuple(ir.Name(k) for k in keep))

        value = visit(st.value, context, False)
        taken += len(extra)
        statements += extra + [dataclasses.replace(st, value=value) if extra else st]
    if not taken:
        return op
    return dataclasses.replace(op, tensors=tuple(tensors), statements=tuple(statements))


def _product_indices(op: ir.Op, e: ir.Reduce, ctx: dict) -> list[str] | None:
    """The context indices a GEMM-shaped sum reads, in the context's order (None: not one)."""
    if e.op != "sum" or not isinstance(e.body, ir.Binary) or e.body.op != "*":
        return None
    a, b = e.body.left, e.body.right
    if not (isinstance(a, ir.Access) and isinstance(b, ir.Access)) or \
            a.pad is not None or b.pad is not None:
        return None
    summed = {r.name for r in e.indices}
    if any(r.lo is None or not (isinstance(r.lo, ir.Num) and r.lo.value == 0)
           for r in e.indices):
        return None
    fa, fb = free_names(a, op.dims), free_names(b, op.dims)
    if not (fa & summed and fb & summed):
        return None
    outer = free_names(e, op.dims)
    if not outer <= set(ctx) or not (fa - fb - summed) or not (fb - fa - summed):
        return None
    return [k for k in ctx if k in outer]


def _fits(op: ir.Op, keep: list[str], ctx: dict, bench) -> bool:
    """Every kept index ranges over a size of dims alone, the intermediate not too large."""
    if any(ctx[k] is None for k in keep) or bench is None:
        return False
    n = size_at(tuple(ctx[k] for k in keep), bench)
    return n is not None and n <= MAX_ELEMENTS
