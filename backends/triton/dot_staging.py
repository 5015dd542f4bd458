"""Staging a contraction's factors in a layout whose reduced axis is innermost (K-major).

A convolution written over NCHW tensors reads its input as ``x[b, c, oh + kh, ow + kw]``
and its weight as ``w[co, c, kh, kw]``: with the taps run as scalars (``K_SCALAR``), the
tile's K lanes walk the channel ``c``, which in memory is a whole plane apart (x) or a tap
count apart (w). Such a tile loads one element at a time, and its f32 operands reach the
tensor cores only through a transposition (Hopper's TF32 MMAs read both operands K-major).

Staged, the launcher copies such a factor once per call into the permutation of its axes
that puts that subscript last (``x.permute(0, 2, 3, 1).contiguous()``, channels-last), and
the kernel reads the copy: the op is rewritten so that the tensor's shape and every read of
it follow the permutation, and the tile's addresses come out of the same code as before.
The copy is one pass over the factor, inside the timed call.

A factor is staged only when the subscript holding the innermost tiled K index moves with
that index alone, one element per lane (``c``, or ``g * (CI // G) + c``: nothing from the
M or N tiles, nor another tiled K index), and is not already last.
"""
from __future__ import annotations

import dataclasses

from kdsl import ir

from kdsl.backends.lower.rewrite import free_names, rebuild
from kdsl.backends.triton import dot_phases
from kdsl.backends.triton.dot_plan import Axis, Contraction


def permutations(op: ir.Op, plan: Contraction, k_inner: list[Axis]
                 ) -> dict[str, tuple[int, ...]]:
    """{input tensor: the order of its axes with the K lane's subscript moved last}; none
    for a subscript followed only by axes of extent 1 (already innermost in memory)."""
    if not k_inner or plan.pairs:
        return {}
    lane, others = _lane(plan, k_inner)
    out: dict[str, tuple[int, ...]] = {}
    for f in (plan.a, plan.b):
        if f.tensor == plan.target:
            continue
        at = _lane_subscript(f, lane, others)
        if at is None or all(e == ir.Num(1) for e in op.tensor(f.tensor).shape[at + 1:]):
            continue
        order = tuple(p for p in range(len(f.subscripts)) if p != at) + (at,)
        if out.get(f.tensor, order) != order:  # one tensor read two ways: leave it
            return {}
        out[f.tensor] = order
    return out


def k_major(op: ir.Op, plan: Contraction, k_inner: list[Axis], staged: bool) -> bool:
    """Does every factor read its K lane innermost: as it lies, or (``staged``) once
    ``permutations`` has moved it there?"""
    if not k_inner or plan.pairs:
        return False
    lane, others = _lane(plan, k_inner)
    moved = permutations(op, plan, k_inner) if staged else {}
    for f in (plan.a, plan.b):
        if f.tensor == plan.target or f.tensor in moved:
            continue
        at = _lane_subscript(f, lane, others)
        if at is None or not all(e == ir.Num(1) for e in op.tensor(f.tensor).shape[at + 1:]):
            return False
    return True


def row_dim(tensor: str) -> str:
    """The dim an aligned factor's rows span (``aligned_op``): set by the launcher."""
    return f"ROW_{tensor}"


def k_major_factors(op: ir.Op, plan: Contraction, k_inner: list[Axis]) -> list[str]:
    """The factors (inputs) whose innermost subscript is the K lane: their rows are what a
    tile's K lanes walk, and worth aligning (``aligned_op``). Not a tensor read anywhere
    with a pad value: its bounds checks read its shape, and the copy's padding is zeros."""
    if not k_inner or plan.pairs:
        return []
    padded = {n.tensor for st in op.statements for n in ir.walk(st.value)
              if isinstance(n, ir.Access) and n.pad is not None}
    lane, others = _lane(plan, k_inner)
    out = []
    for f in (plan.a, plan.b):
        if f.tensor == plan.target or f.tensor in out or f.tensor in padded or \
                op.tensor(f.tensor).role != "in":
            continue
        if _lane_subscript(f, lane, others) == len(f.subscripts) - 1:
            out.append(f.tensor)
    return out


def aligned_op(op: ir.Op, names: list[str]) -> tuple[ir.Op, dict[str, ir.Expr]]:
    """``op`` with each named tensor's rows spanning a dim of their own (``row_dim``), which
    the launcher sets to the row length of the copy it hands the kernel: the tensor's own
    where that is a whole number of 16 elements, else rounded up, the copy zero-filled.
    Triton knows an integer argument divisible by 16 to be so, and a row stride so known
    lets a tile load 16 bytes at a time and the copy engine take the tensor; a GEMM over
    K = 2949 (KernelBench 08) read its rows one element at a time. Only the addresses
    change: every range is the sums' and the output's, never a factor's shape. Returns the
    op and {tensor: its rows' own length}."""
    rows = {n: op.tensor(n).shape[-1] for n in names if op.tensor(n).shape}
    if not rows:
        return op, {}
    tensors = tuple(dataclasses.replace(t, shape=t.shape[:-1] + (ir.Name(row_dim(t.name)),))
                    if t.name in rows else t for t in op.tensors)
    return dataclasses.replace(op, tensors=tensors,
                               dims=op.dims + tuple(row_dim(n) for n in rows)), rows


def _lane(plan: Contraction, k_inner: list[Axis]) -> tuple[str, set[str]]:
    """(the K lane: the innermost tiled reduction index, the other tiled indices)."""
    return k_inner[-1].name, {ax.name for ax in plan.m + plan.n + tuple(k_inner[:-1])}


def _lane_subscript(f: ir.Access, lane: str, others: set[str]) -> int | None:
    """The position of the subscript that is ``lane`` plus terms free of tiled indices."""
    for p, s in enumerate(f.subscripts):
        if lane in free_names(s):
            found = dot_phases.linear(s, others | {lane})
            return p if found is not None and found[0] == {lane: ir.Num(1)} else None
    return None


def staged_op(op: ir.Op, orders: dict[str, tuple[int, ...]]) -> ir.Op:
    """``op`` with each named tensor's axes in ``orders``' order, every read of it alike."""
    if not orders:
        return op
    tensors = tuple(dataclasses.replace(t, shape=tuple(t.shape[p] for p in orders[t.name]))
                    if t.name in orders else t for t in op.tensors)
    statements = tuple(dataclasses.replace(st, value=_permuted(st.value, orders))
                       for st in op.statements)
    return dataclasses.replace(op, tensors=tensors, statements=statements)


def _permuted(e: ir.Expr, orders) -> ir.Expr:
    e = rebuild(e, lambda x: _permuted(x, orders))
    if isinstance(e, ir.Access) and e.tensor in orders:
        return dataclasses.replace(e, subscripts=tuple(e.subscripts[p] for p in orders[e.tensor]))
    return e
