"""Unfolding a convolution's windowed factor into a dense matrix before the GEMM (im2col).

Read in place, a window ``x[b, c, oh * S + kh * D - P, ...]`` costs every element of a
tile its own address arithmetic and bounds checks; where the reduction has few channels
(3 input channels and 3x3x3 taps: K = 81) that integer work, not the multiply-adds, is the
kernel. Unfolded, the launcher first copies the window into a tensor indexed by the
factor's own indices, ``x_cols[b, oh, ow, c, kh, kw]`` (the reduction last, contiguous),
and the kernel reads it as a plain GEMM operand: no masks, runs of whole rows. The copy
is one torch ``as_strided`` gather of the padded input, inside the timed call; it holds
K / channels times the input, so it pays where K is small.

A factor unfolds when every subscript is affine in the contraction's indices with
coefficients of dims and non-negative numbers (``o * S + k * D - P``, a group's
``g * (CI // G) + c``): each index then has one stride in the padded input, and each
subscript's constant one offset. A guard (a transposed convolution's stride test), a
floor division of an index, or a negative coefficient leave the factor as it is.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kdsl import ir

from kdsl.backends.lower.rewrite import rebuild
from kdsl.backends.triton.dot_plan import Axis, Contraction

Linear = tuple[ir.Expr, dict[str, ir.Expr]]  # (constant, {index: coefficient})


@dataclass(frozen=True)
class Unfold:
    factor: ir.Access  # the windowed read, as the plan has it
    name: str  # the unfolded input the kernel reads instead
    axes: tuple[Axis, ...]  # its axes: the factor's other indices, then the reduced ones
    terms: tuple[Linear, ...]  # each subscript of the factor, as a linear form


def find(op: ir.Op, plan: Contraction) -> Unfold | None:
    """The one windowed factor of ``plan`` (read with a subscript mixing a tile index and a
    reduced one), where it unfolds; None otherwise."""
    tiled = {ax.name for ax in plan.m + plan.n}
    reduced = {ax.name for ax in plan.k}
    windowed = [(f, g) for f, g in ((plan.a, plan.a_guard), (plan.b, plan.b_guard))
                if any(_names(s) & tiled and _names(s) & reduced for s in f.subscripts)]
    if len(windowed) != 1 or plan.pairs:
        return None
    f, guard = windowed[0]
    if guard is not None or plan.a.tensor == plan.b.tensor or \
            (f.pad is not None and not isinstance(f.pad, ir.Num)):
        return None
    axes = {ax.name: ax for ax in plan.batch + plan.m + plan.n + plan.k}
    terms = [linear(s, set(axes)) for s in f.subscripts]
    if any(t is None or not all(_nonnegative(c) for c in t[1].values()) for t in terms):
        return None
    used = {name for _, coefs in terms for name in coefs}
    order = [ax for ax in plan.batch + plan.m + plan.n if ax.name in used] + \
        [ax for ax in plan.k if ax.name in used]
    if any(ax.lo != ir.Num(0) or ax.virtual for ax in order):
        return None
    taken = {t.name for t in op.tensors}
    name = next(n for n in (f"{f.tensor}_cols{i or ''}" for i in range(len(taken) + 1))
                if n not in taken)
    return Unfold(f, name, tuple(order), tuple(terms))


def linear(e: ir.Expr, indices: set[str]) -> Linear | None:
    """``e`` as constant + sum of coefficient * index, coefficients and constant free of
    ``indices``; None where an index is divided, negated or multiplied by an index."""
    if isinstance(e, ir.Num):
        return e, {}
    if isinstance(e, ir.Name):
        return (ir.Num(0), {e.name: ir.Num(1)}) if e.name in indices else (e, {})
    if not _names(e) & indices:
        return e, {}
    if isinstance(e, ir.Binary) and e.op in ("+", "-"):
        left, right = linear(e.left, indices), linear(e.right, indices)
        if left is None or right is None or (e.op == "-" and right[1]):
            return None
        coefs = dict(left[1])
        for name, c in right[1].items():
            coefs[name] = ir.Binary("+", coefs[name], c) if name in coefs else c
        return ir.Binary(e.op, left[0], right[0]), coefs
    if isinstance(e, ir.Binary) and e.op == "*":
        for scale, rest in ((e.left, e.right), (e.right, e.left)):
            if not _names(scale) & indices:
                inner = linear(rest, indices)
                if inner is None:
                    return None
                return ir.Binary("*", inner[0], scale), {
                    n: ir.Binary("*", c, scale) for n, c in inner[1].items()}
    return None


def _nonnegative(e: ir.Expr) -> bool:
    """Built of dims and non-negative numbers by +, * and // only."""
    if isinstance(e, ir.Num):
        return e.value >= 0
    if isinstance(e, ir.Name):
        return True
    if isinstance(e, ir.Binary) and e.op in ("+", "*", "//"):
        return _nonnegative(e.left) and _nonnegative(e.right)
    return False


def _names(e: ir.Expr) -> set[str]:
    return {n.name for n in ir.walk(e) if isinstance(n, ir.Name)}


def unfolded_op(op: ir.Op, u: Unfold) -> ir.Op:
    """``op`` (already split in groups) reading ``u.name[axes...]`` for the window."""
    cols = ir.Tensor(u.name, "in", (), u.factor.tensor, tuple(ax.extent for ax in u.axes))
    read = ir.Access(u.name, tuple(ir.Name(ax.name) for ax in u.axes))

    def swap(e: ir.Expr) -> ir.Expr:
        if e == u.factor:
            return read
        return rebuild(e, swap)
    statements = tuple(dataclasses.replace(st, value=swap(st.value)) for st in op.statements)
    return dataclasses.replace(op, tensors=op.tensors + (cols,), statements=statements)


def launcher_code(u: Unfold, host) -> tuple[str, str]:
    """(the launcher's unfolding function, the line in ``kernel`` that calls it); ``host``
    renders a dim expression as Python over ``sizes``."""
    fn = f"_unfold_{u.name}"
    position = {ax.name: v for v, ax in enumerate(u.axes)}
    consts = ", ".join(host(c) for c, _ in u.terms)
    coefs = ", ".join("[" + ", ".join(f"({position[n]}, {host(c)})" for n, c in cs.items()) + "]"
                      for _, cs in u.terms)
    shape = ", ".join(f"max({host(ax.extent)}, 0)" for ax in u.axes)
    pad = 0.0 if u.factor.pad is None else float(u.factor.pad.value)
    code = f'''def {fn}(x, sizes):
    """{u.factor.tensor} unfolded: its window gathered into [{", ".join(ax.name for ax in u.axes)}]
    (one as_strided view of the padded input, copied)."""
    consts = [{consts}]  # each subscript's constant
    coefs = [{coefs}]  # each subscript's (unfolded axis, coefficient) terms
    shape = [{shape}]
    lo = [max(0, -c) for c in consts]
    hi = [max(0, c + sum(k * (shape[v] - 1) for v, k in cs) - (n - 1))
          for c, cs, n in zip(consts, coefs, x.shape)]
    if any(lo) or any(hi):
        widths = [w for a in reversed(range(x.dim())) for w in (lo[a], hi[a])]
        x = torch.nn.functional.pad(x, widths, value={pad!r})
    x = x.contiguous()
    strides = [0] * len(shape)
    for cs, st in zip(coefs, x.stride()):
        for v, k in cs:
            strides[v] += k * st
    offset = sum((c + low) * st for c, low, st in zip(consts, lo, x.stride()))
    return x.as_strided(shape, strides, offset).contiguous()
'''
    return code, f'    inputs = dict(inputs, {u.name}={fn}(inputs["{u.factor.tensor}"], sizes))\n'
