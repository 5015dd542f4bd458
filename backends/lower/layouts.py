"""Operands of a contraction copied into the layout a loop-nest generator reads well.

A CPU contraction ``C[.., i, j] = sum(k) X[..] * Y[..]`` runs fastest as rows of updates
along C's last index j (``C[i, :] += X[i, k] * Y[k, :]``): every factor that j indexes
should have j as its last, contiguous subscript. A factor read with j elsewhere
(``B[j, k]``, B transposed) would be read with a stride on every step of the inner loop
(KernelBench's A^T B^T on two cores: 3.7 s against torch's 24 ms). Such a factor is first
copied into an intermediate whose subscripts put j last (``Bt[k, j] = B[j, k]``, one
pass over B), and the contraction reads that instead.

Only factors read by plain indices (a permutation of the tensor's axes) are copied.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from kdsl import ir
from kdsl.backends.lower.rewrite import factors, free_names

FLOATS = ("f32", "bf16", "f16", "f64")


def contiguous_operands(op: ir.Op, keep: Callable[[ir.Statement], bool] | None = None) -> ir.Op:
    """``op`` with every such factor read through a transposed copy; ``op`` itself when
    no factor needs one. Statements ``keep`` accepts are left as they are (a generator
    that packs their operands itself)."""
    tensors = {t.name: t for t in op.tensors}
    statements: list[ir.Statement] = []
    copies: dict[tuple, str] = {}
    for st in op.statements:
        red = st.value
        if not (isinstance(red, ir.Reduce) and red.op == "sum" and st.indices) or \
                (keep is not None and keep(st)):
            statements.append(st)
            continue
        fs = factors(red.body)
        if len(fs) < 2:
            # a plain sum is no contraction: no row updates read it, and a copy putting the
            # output's index last left the sum striding across it (an outsider's row sum,
            # y[i] = sum(j) x[i, j]: 349 ms against torch's 1.6 on the CPU)
            statements.append(st)
            continue
        last = st.indices[-1]
        reduced = {r.name for r in red.indices}
        new_body = red.body
        along = [f for f in fs if last in free_names(f)]
        outs = set(st.indices)
        shared = set.intersection(*(free_names(f) for f in along)) if along else set()
        if along and all(_ends_reduced(f, reduced) for f in along) and all(
                free_names(f) & outs <= shared for f in fs):
            # the factors that move along the output's last index all read along the sum,
            # and no other factor has an output index they lack (no M axis beside them: not
            # a GEMM): each output is a dot product of contiguous runs (a matrix-vector
            # product; a batch of row dot products, y[b] = sum(d) x1[b, d] * x2[b, d]; a
            # bilinear form), which a copy putting that index last would only read three
            # times over (an outsider's batched matvec at 0.42-0.46x of torch with the copy,
            # a row dot product at 0.11x, cosine similarity 0.18x)
            statements.append(st)
            continue
        for f in fs:
            order = _transposed_order(f, last, reduced, tensors)
            if order is None:
                continue
            key = (f.tensor, order)
            if key not in copies:
                name = f"kd_t{len(copies)}_{f.tensor}"
                src = tensors[f.tensor]
                idx = tuple(f"kd_a{p}" for p in range(len(src.shape)))
                # an intermediate holds floats as the checker types them
                kind = op.dtype_of(f.tensor, op.dtype_choices[0])
                tensors[name] = ir.Tensor(name, "tmp", (op.scratch_float,) if kind in FLOATS else
                                          (kind,), None, tuple(src.shape[p] for p in order))
                statements.append(ir.Statement(
                    name, tuple(idx[p] for p in order),
                    ir.Access(f.tensor, tuple(ir.Name(n) for n in idx))))
                copies[key] = name
            moved = ir.Access(copies[key], tuple(f.subscripts[p] for p in order))
            new_body = _replace(new_body, f, moved)
        statements.append(dataclasses.replace(st, value=dataclasses.replace(red, body=new_body))
                          if new_body is not red.body else st)
    if not copies:
        return op
    ordered = [t for t in op.tensors] + [tensors[n] for n in copies.values()]
    return dataclasses.replace(op, tensors=tuple(ordered), statements=tuple(statements))


def _transposed_order(f: ir.Expr, last: str, reduced: set[str], tensors):
    """The axis order that puts ``last`` at the end of factor ``f``, when ``f`` is an
    input read by distinct plain indices with ``last`` elsewhere than at the end."""
    if not isinstance(f, ir.Access) or f.pad is not None or f.tensor not in tensors or \
            tensors[f.tensor].role != "in":
        return None
    subs = f.subscripts
    if not all(isinstance(s, ir.Name) for s in subs):
        return None
    names = [s.name for s in subs]
    if len(set(names)) != len(names) or last not in names or names[-1] == last:
        return None
    if not any(n in reduced for n in names):
        return None
    at = names.index(last)
    return tuple(p for p in range(len(names)) if p != at) + (at,)


def _ends_reduced(f: ir.Expr, reduced: set[str]) -> bool:
    """Whether ``f`` is a read whose last subscript is a summed index."""
    return isinstance(f, ir.Access) and bool(f.subscripts) and \
        isinstance(f.subscripts[-1], ir.Name) and f.subscripts[-1].name in reduced


def _replace(e: ir.Expr, old: ir.Expr, new: ir.Expr) -> ir.Expr:
    if e is old:
        return new
    if isinstance(e, ir.Binary) and e.op == "*":
        return dataclasses.replace(e, left=_replace(e.left, old, new),
                                   right=_replace(e.right, old, new))
    return e
