"""Unfolding a convolution's windowed factor into a dense matrix before the GEMM (im2col).

Read in place, a window ``x[b, c, oh * S + kh * D - P, ...]`` costs every element of a
tile its own address arithmetic and bounds checks; where the reduction has few channels
(3 input channels and 3x3x3 taps: K = 81) that integer work, not the multiply-adds, is the
kernel. Unfolded, the launcher first copies each factor into a matrix indexed by the factor's
other indices and the whole reduction, flat and zero-padded to a multiple of 16
(``x_cols[b, oh, ow, (c, kh, kw)]``, ``w_cols[co, (c, kh, kw)]``), and the kernel is a
plain GEMM of the two: no masks, rows that start 64-byte aligned. Each copy is one
``as_strided`` view of the padded input copied into a zeroed matrix (the guards' plumbing:
``new_full``, ``narrow``, ``view``, ``copy_``), inside the timed call; the window's holds
K / channels times the input, so it pays where K is small.

The factors unfold when every subscript is affine in the contraction's indices with
coefficients of dims and non-negative numbers (``o * S + k * D - P``, a group's
``g * (CI // G) + c``): each index then has one stride in the padded input, and each
subscript's constant one offset; and the reduction is a sum (a mean would count the
padding). A guard (a transposed convolution's stride test), a floor division of an index,
or a negative coefficient leave the factors as they are.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kdsl import ir

from kdsl.backends.lower.rewrite import free_names, rebuild
from kdsl.backends.triton import dot_phases
from kdsl.backends.triton.dot_plan import Axis, Contraction

Linear = tuple[ir.Expr, dict[str, ir.Expr]]  # (constant, {index: coefficient})


K_ALIGN = 16  # the reduction's row, padded with zeros to a multiple of this: 16-byte loads


@dataclass(frozen=True)
class Operand:
    factor: ir.Access  # the read, as the plan has it
    name: str  # the unfolded input the kernel reads instead
    lead: tuple[Axis, ...]  # the factor's indices that are not reduced, in the plan's order
    terms: tuple[Linear, ...]  # each subscript of the factor, as a linear form


@dataclass(frozen=True)
class Unfold:
    operands: tuple[Operand, ...]  # both factors
    k: tuple[Axis, ...]  # the reduced axes, flattened in this order
    index: str  # the unfolded op's one reduced index
    padded: ir.Expr  # its extent: the reduction's size rounded up to K_ALIGN


def find(op: ir.Op, plan: Contraction) -> Unfold | None:
    """Both factors of ``plan`` unfolded, where one of them is a window (a subscript mixing
    a tile index and a reduced one) and both unfold; None otherwise."""
    tiled = {ax.name for ax in plan.m + plan.n}
    reduced = {ax.name for ax in plan.k}
    windowed = [f for f in (plan.a, plan.b)
                if any(free_names(s) & tiled and free_names(s) & reduced
                       for s in f.subscripts)]
    red = _reduce(op)
    if len(windowed) != 1 or plan.pairs or red is None or red.op != "sum" or \
            plan.a_guard is not None or plan.b_guard is not None or \
            plan.a.tensor == plan.b.tensor:
        return None
    axes = {ax.name: ax for ax in plan.batch + plan.m + plan.n + plan.k}
    if any(ax.lo != ir.Num(0) or ax.virtual for ax in axes.values()):
        return None
    taken = {t.name for t in op.tensors}
    operands = []
    for f in (plan.a, plan.b):
        if f.pad is not None and not isinstance(f.pad, ir.Num):
            return None
        terms = [linear(s, set(axes)) for s in f.subscripts]
        if any(t is None for t in terms):
            return None
        used = {name for _, coefs in terms for name in coefs}
        lead = tuple(ax for ax in plan.batch + plan.m + plan.n if ax.name in used)
        name = next(n for n in (f"{f.tensor}_cols{i or ''}" for i in range(len(taken) + 1))
                    if n not in taken)
        taken.add(name)
        operands.append(Operand(f, name, lead, tuple(terms)))
    index = next(n for n in (f"kk{i or ''}" for i in range(len(axes) + 1)) if n not in axes)
    size: ir.Expr = ir.Num(1)
    for ax in plan.k:
        size = ir.Binary("*", size, ax.extent)
    padded = ir.Binary("*", ir.Binary("//", ir.Binary("+", size, ir.Num(K_ALIGN - 1)),
                                      ir.Num(K_ALIGN)), ir.Num(K_ALIGN))
    return Unfold(tuple(operands), plan.k, index, padded)


def _reduce(op: ir.Op) -> ir.Reduce | None:
    found = [n for n in ir.walk(op.statements[0].value) if isinstance(n, ir.Reduce)]
    return found[0] if len(found) == 1 else None


def linear(e: ir.Expr, indices: set[str]) -> Linear | None:
    """``e`` as constant + sum of coefficient * index (``dot_phases.linear``), every
    coefficient built of dims and non-negative numbers by +, * and //; None otherwise (an
    index divided, multiplied by an index, or counted backwards)."""
    found = dot_phases.linear(e, indices)
    if found is None or not all(_nonnegative(c) for c in found[0].values()):
        return None
    return found[1], found[0]


def _nonnegative(e: ir.Expr) -> bool:
    if isinstance(e, ir.Num):
        return e.value >= 0
    if isinstance(e, ir.Name):
        return True
    if isinstance(e, ir.Binary) and e.op in ("+", "*", "//"):
        return _nonnegative(e.left) and _nonnegative(e.right)
    return False


def unfolded_op(op: ir.Op, u: Unfold) -> ir.Op:
    """``op`` (already split in groups) as the GEMM of the unfolded factors:
    ``sum(kk) x_cols[.., kk] * w_cols[.., kk]``, the padding's zeros adding nothing."""
    reads = {o.factor: ir.Access(o.name, tuple(ir.Name(ax.name) for ax in o.lead) +
                                 (ir.Name(u.index),)) for o in u.operands}
    red = _reduce(op)

    def swap(e: ir.Expr) -> ir.Expr:
        if isinstance(e, ir.Access) and e in reads:
            return reads[e]
        if e is red:
            return ir.Reduce("sum", (ir.IndexRange(u.index, ir.Num(0), u.padded),),
                             swap(red.body))
        return rebuild(e, swap)
    tensors = tuple(ir.Tensor(o.name, "in", (), o.factor.tensor,
                              tuple(ax.extent for ax in o.lead) + (u.padded,))
                    for o in u.operands)
    statements = tuple(dataclasses.replace(st, value=swap(st.value)) for st in op.statements)
    return dataclasses.replace(op, tensors=op.tensors + tensors, statements=statements)


def launcher_code(u: Unfold, host) -> tuple[str, str]:
    """(the launcher's unfolding functions, the line in ``kernel`` that calls them);
    ``host`` renders a dim expression as Python over ``sizes``."""
    code, calls = [], []
    for o in u.operands:
        fn = f"_unfold_{o.name}"
        axes = o.lead + u.k
        position = {ax.name: v for v, ax in enumerate(axes)}
        consts = ", ".join(host(c) for c, _ in o.terms)
        coefs = ", ".join("[" + ", ".join(f"({position[n]}, {host(c)})" for n, c in cs.items())
                          + "]" for _, cs in o.terms)
        shape = ", ".join(f"max({host(ax.extent)}, 0)" for ax in axes)
        pad = 0.0 if o.factor.pad is None else float(o.factor.pad.value)
        code.append(f'''def {fn}(x, sizes):
    """{o.factor.tensor} unfolded into [{", ".join(ax.name for ax in o.lead)}, the reduction
    ({", ".join(ax.name for ax in u.k)}) flat, zero-padded to {K_ALIGN}]: an as_strided
    view of the framed input, copied."""
    consts = [{consts}]  # each subscript's constant
    coefs = [{coefs}]  # each subscript's (unfolded axis, coefficient) terms
    shape = [{shape}]
    lo = [max(0, -c) for c in consts]
    hi = [max(0, c + sum(k * (shape[v] - 1) for v, k in cs) - (n - 1))
          for c, cs, n in zip(consts, coefs, x.shape)]
    if any(lo) or any(hi):  # the input inside a frame of the pad value
        framed = x.new_full([n + a + b for n, a, b in zip(x.shape, lo, hi)], {pad!r})
        inner = framed
        for axis, (n, a) in enumerate(zip(x.shape, lo)):
            inner = inner.narrow(axis, a, n)
        inner.copy_(x)
        x = framed
    x = x.contiguous()
    strides = [0] * len(shape)
    for cs, st in zip(coefs, x.stride()):
        for v, k in cs:
            strides[v] += k * st
    # (as_strided counts from the storage's start: the tensor may be a view into a buffer)
    offset = x.storage_offset() + sum((c + low) * st
                                      for c, low, st in zip(consts, lo, x.stride()))
    lead, reduced = shape[:{len(o.lead)}], 1
    for n in shape[{len(o.lead)}:]:
        reduced *= n
    # the gather: every window position's taps copied into its row, the rest of it zeros
    cols = x.new_zeros(lead + [{host(u.padded)}])
    cols.narrow({len(o.lead)}, 0, reduced).view(shape).copy_(x.as_strided(shape, strides, offset))
    return cols
''')
        calls.append(f'{o.name}={fn}(inputs["{o.factor.tensor}"], sizes)')
    return "\n\n".join(code), f"    inputs = dict(inputs, {', '.join(calls)})\n"
