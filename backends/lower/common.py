"""A reduction written twice in one right side, or once where it does not depend on every
index of its statement, computed once.

Users inline: a GELU of a linear layer written in one statement reads the linear twice,
``y[b, o] = 0.5 * (sum(k) x[b, k] * w[o, k]) * (1 + erf((sum(k) x[b, k] * w[o, k]) /
sqrt(2)))``, and a loop nest rendered as written runs the contraction twice (the C kernel
of such a spec ran at 0.22x of torch, 0.55x with the linear as a statement of its own).
Each reduction that occurs more than once in a statement (equal up to the names of its
bound indices) and reads no index an enclosing reduction binds becomes an intermediate
over the statement's indices it reads, read where it stood: the generators then see the
contraction as a statement of its own (a GEMM where it is one).

A reduction written once but free of some of its statement's indices is computed again for
every value of those: an outsider's centring over a plane, ``y[b, h, w] = z[b, h, w] -
mean(i, j) z[b, i, j]``, ran as a loop nest that summed the whole plane for each of its
elements (0.54x of torch on the c backend against 3.63x with the mean a statement of its
own; a KernelBench level-2 model written that way, 0.04-0.3x). Such a reduction becomes an
intermediate too, except the form every generator already fuses, one reduced axis
broadcast along one missing index (a softmax's row sum: its row kernels compute it once a
row).
"""
from __future__ import annotations

import dataclasses
from collections import Counter

from kdsl import ir
from kdsl.backends.lower.rewrite import (free_names, rebuild, scratch_dtype, substitute,
                                        unique_name)


def common_reductions(op: ir.Op) -> ir.Op:
    """``op`` with each repeated reduction an intermediate; ``op`` itself where none is."""
    tensors, statements = list(op.tensors), []
    changed = False
    for st in op.statements:
        shape = dict(zip(st.indices, op.tensor(st.target).shape))
        seen = Counter(canonical(e) for e in _outer_reductions(st.value)
                       if free_names(e, op.dims) <= set(st.indices))
        repeated = [form for form, n in seen.items() if n > 1 or _recomputed(form, st, op)]
        if not repeated:
            statements.append(st)
            continue
        changed = True
        names = {}
        for k, form in enumerate(repeated):
            keep = [n for n in st.indices if n in free_names(form, op.dims)]
            name = unique_name(tensors, f"kd_c{k}_{st.target}")
            tensors.append(ir.Tensor(name, "tmp", (scratch_dtype(op, form),), None,
                                     tuple(shape[n] for n in keep)))
            statements.append(ir.Statement(name, tuple(keep), form))
            names[form] = ir.Access(name, tuple(ir.Name(n) for n in keep))

        def visit(e: ir.Expr) -> ir.Expr:
            if isinstance(e, ir.Reduce):  # (only the outer ones were counted: a copy
                return names.get(canonical(e), e)  # inside another may read its indices)
            if isinstance(e, (ir.Scan, ir.Collective)):
                return e
            return rebuild(e, visit)
        statements.append(dataclasses.replace(st, value=visit(st.value)))
    if not changed:
        return op
    return dataclasses.replace(op, tensors=tuple(tensors), statements=tuple(statements))


def _recomputed(form: ir.Reduce, st: ir.Statement, op: ir.Op) -> bool:
    """Whether a reduction written once would be computed again along statement indices it
    does not read, in a form no generator fuses (more than one reduced axis, or more than
    one index it does not read)."""
    missing = [n for n in st.indices if n not in free_names(form, op.dims)]
    return bool(missing) and not (len(form.indices) == 1 and len(missing) == 1)


def _outer_reductions(e: ir.Expr) -> list[ir.Reduce]:
    """The reductions of ``e`` not inside another reduction."""
    if isinstance(e, ir.Reduce):
        return [e]
    if isinstance(e, (ir.Scan, ir.Collective)):
        return []
    out: list[ir.Reduce] = []
    rebuild(e, lambda x: out.extend(_outer_reductions(x)) or x)
    return out


def canonical(e: ir.Expr, depth: int = 0) -> ir.Expr:
    """``e`` with the indices of each reduction renamed by position (``__c0_0``, ...), so
    that two copies written with different index names compare equal."""
    if isinstance(e, ir.Reduce):
        mapping, ranges = {}, []
        for k, r in enumerate(e.indices):
            new = f"__c{depth}_{k}"
            ranges.append(dataclasses.replace(
                r, name=new,
                lo=None if r.lo is None else substitute(r.lo, mapping),
                hi=None if r.hi is None else substitute(r.hi, mapping)))
            mapping[r.name] = ir.Name(new)
        body = canonical(substitute(e.body, mapping), depth + 1)
        return dataclasses.replace(e, indices=tuple(ranges), body=body)
    return rebuild(e, lambda x: canonical(x, depth))
