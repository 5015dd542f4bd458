"""A sum that selects one term by an equality (a one-hot product), rewritten as that term.

``sum(j) where(j == t[i], x[i, j], 0)`` is ``x[i, t[i]]`` where ``t[i]`` lies in ``j``'s
range, and 0 elsewhere: users write a cross-entropy's picked logit, or a gather, that
way, and rendered as written it walks the whole row for one element (an extra pass over a
[B, C] input). The key must not move with ``j`` (nor with the sum's other indices); the
other indices of the sum stay a sum. Only the ``where`` form is rewritten: with the
product form, ``(j == t[i]) * x[i, j]``, a non-finite term elsewhere in the row makes the
sum NaN, and the read would not.
"""
from __future__ import annotations

import dataclasses

from kdsl import ir
from kdsl.backends.lower.rewrite import free_names, rebuild, subst


def selections_as_reads(op: ir.Op) -> ir.Op:
    """``op`` with every selecting sum read directly; ``op`` itself when there is none."""
    changed = False

    def visit(e: ir.Expr) -> ir.Expr:
        nonlocal changed
        e = rebuild(e, visit)
        found = _selection(e)
        if found is None:
            return e
        changed = True
        return found

    statements = [dataclasses.replace(st, value=visit(st.value)) for st in op.statements]
    return dataclasses.replace(op, statements=tuple(statements)) if changed else op


def _selection(e: ir.Expr) -> ir.Expr | None:
    if not (isinstance(e, ir.Reduce) and e.op == "sum" and isinstance(e.body, ir.Call)
            and e.body.fn == "where" and len(e.body.args) == 3):
        return None
    cond, term, other = e.body.args
    if not (isinstance(other, ir.Num) and other.value == 0):
        return None
    if not (isinstance(cond, ir.Binary) and cond.op == "=="):
        return None
    bound = {r.name for r in e.indices}
    for index, key in ((cond.left, cond.right), (cond.right, cond.left)):
        if not (isinstance(index, ir.Name) and index.name in bound):
            continue
        if free_names(key) & bound:
            continue
        r = next(r for r in e.indices if r.name == index.name)
        if r.lo is None or r.hi is None or free_names(r.lo) & bound or free_names(r.hi) & bound:
            continue
        rest = tuple(x for x in e.indices if x.name != index.name)
        if any(x.lo is None or x.hi is None or index.name in free_names(x.lo) | free_names(x.hi)
               for x in rest):
            continue
        picked = subst(term, {index.name: key})
        value = dataclasses.replace(e, indices=rest, body=picked) if rest else picked
        inside = ir.Binary("and", ir.Binary("<=", r.lo, key), ir.Binary("<", key, r.hi))
        return ir.Call("where", (inside, value, other))
    return None
