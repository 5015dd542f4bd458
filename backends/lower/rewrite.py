"""Expression rewriting for the Triton generators: substitution, inlining, hoisting.

Everything here is pure IR -> IR. Bound indices are renamed to fresh names
whenever an expression is substituted, so a substitution never captures a name;
hoisted reductions are renamed canonically (``__k0``, ``__k1``) so that two
copies of the same reduction compare equal and are computed once.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Callable

from kdsl import ir
from kdsl.builtins import CONSTANTS

from kdsl.backends.base import Unsupported

_fresh = itertools.count()


def fresh(prefix: str = "__b") -> str:
    return f"{prefix}{next(_fresh)}"


def rebuild(e: ir.Expr, f: Callable[[ir.Expr], ir.Expr]) -> ir.Expr:
    """``e`` with ``f`` applied to each direct sub-expression."""
    if isinstance(e, ir.Access):
        pad = None if e.pad is None else f(e.pad)
        return dataclasses.replace(e, subscripts=tuple(f(s) for s in e.subscripts), pad=pad)
    if isinstance(e, ir.Unary):
        return dataclasses.replace(e, operand=f(e.operand))
    if isinstance(e, ir.Binary):
        return dataclasses.replace(e, left=f(e.left), right=f(e.right))
    if isinstance(e, ir.Call):
        if e.fn == "segment_of":  # the first argument names a tensor, not a value
            return dataclasses.replace(e, args=(e.args[0], f(e.args[1])))
        return dataclasses.replace(e, args=tuple(f(a) for a in e.args))
    if isinstance(e, ir.Reduce):
        rs = tuple(dataclasses.replace(r, lo=f(r.lo), hi=f(r.hi)) for r in e.indices)
        return dataclasses.replace(e, indices=rs, body=f(e.body))
    if isinstance(e, ir.Scan):
        return dataclasses.replace(e, body=f(e.body))
    if isinstance(e, ir.Collective):
        index = e.index if e.index.lo is None else \
            dataclasses.replace(e.index, lo=f(e.index.lo), hi=f(e.index.hi))
        return dataclasses.replace(e, index=index, k=None if e.k is None else f(e.k),
                                   body=f(e.body))
    return e


def subst(e: ir.Expr, mapping: dict[str, ir.Expr]) -> ir.Expr:
    """Replace free ``Name`` occurrences; bound indices are renamed fresh first."""
    if not mapping:
        return e
    if isinstance(e, ir.Name):
        return mapping.get(e.name, e)
    if isinstance(e, ir.Reduce):
        rs, inner = [], dict(mapping)
        for r in e.indices:
            new = fresh()
            # a later range may read an earlier index: it sees the renamed one
            rs.append(dataclasses.replace(r, name=new, lo=subst(r.lo, inner),
                                          hi=subst(r.hi, inner)))
            inner[r.name] = ir.Name(new)
        return dataclasses.replace(e, indices=tuple(rs), body=subst(e.body, inner))
    if isinstance(e, ir.Scan):
        target = mapping.get(e.index, ir.Name(e.index))
        if not isinstance(target, ir.Name):
            raise Unsupported(f"a scan over '{e.index}' is read at a computed index")
        return dataclasses.replace(e, index=target.name, body=subst(e.body, mapping))
    if isinstance(e, ir.Collective):
        if e.op in ("sort", "argsort"):
            target = mapping.get(e.index.name, ir.Name(e.index.name))
            if not isinstance(target, ir.Name):
                raise Unsupported(f"a sort along '{e.index.name}' is read at a computed index")
            index = dataclasses.replace(e.index, name=target.name, lo=subst(e.index.lo, mapping),
                                        hi=subst(e.index.hi, mapping))
            return dataclasses.replace(e, index=index, body=subst(e.body, mapping))
        new = fresh()
        inner = dict(mapping)
        inner[e.index.name] = ir.Name(new)
        index = dataclasses.replace(e.index, name=new, lo=subst(e.index.lo, mapping),
                                    hi=subst(e.index.hi, mapping))
        return dataclasses.replace(e, index=index, k=subst(e.k, mapping),
                                   body=subst(e.body, inner))
    return rebuild(e, lambda x: subst(x, mapping))


def substitute(e: ir.Expr, names: dict[str, ir.Expr]) -> ir.Expr:
    """``e`` with free index names replaced; binders shadow, so a bound name is left alone
    (unlike ``subst``, bound indices keep their names: for generators that name loops
    after them)."""
    if not names:
        return e
    if isinstance(e, ir.Name):
        return names.get(e.name, e)
    if isinstance(e, ir.Num):
        return e
    if isinstance(e, ir.Access):
        pad = None if e.pad is None else substitute(e.pad, names)
        return dataclasses.replace(e, subscripts=tuple(substitute(s, names) for s in e.subscripts),
                                   pad=pad)
    if isinstance(e, ir.Unary):
        return dataclasses.replace(e, operand=substitute(e.operand, names))
    if isinstance(e, ir.Binary):
        return dataclasses.replace(e, left=substitute(e.left, names),
                                   right=substitute(e.right, names))
    if isinstance(e, ir.Call):
        if e.fn == "segment_of":  # its first argument names a tensor, not an index
            return dataclasses.replace(e, args=(e.args[0], substitute(e.args[1], names)))
        return dataclasses.replace(e, args=tuple(substitute(a, names) for a in e.args))
    if isinstance(e, ir.Reduce):
        inner, ranges = dict(names), []
        for r in e.indices:
            ranges.append(subst_range(r, inner))
            inner.pop(r.name, None)
        return dataclasses.replace(e, indices=tuple(ranges), body=substitute(e.body, inner))
    if isinstance(e, ir.Scan):
        return dataclasses.replace(e, body=substitute(e.body, names))
    if isinstance(e, ir.Collective):
        k = None if e.k is None else substitute(e.k, names)
        index = subst_range(e.index, names)
        inner = {n: v for n, v in names.items() if n != e.index.name}
        return dataclasses.replace(e, index=index, k=k, body=substitute(e.body, inner))
    raise AssertionError(e)


def subst_range(r: ir.IndexRange, names) -> ir.IndexRange:
    if r.lo is None:
        return r
    return dataclasses.replace(r, lo=substitute(r.lo, names), hi=substitute(r.hi, names))


def free_names(e: ir.Expr, dims: tuple[str, ...] = ()) -> set[str]:
    """Index (and row-value) names ``e`` reads that it does not bind itself."""
    if isinstance(e, ir.Name):
        return set() if e.name in dims or e.name in CONSTANTS else {e.name}
    if isinstance(e, ir.Reduce):
        out, bound = set(), set()
        for r in e.indices:
            out |= (free_names(r.lo, dims) | free_names(r.hi, dims)) - bound
            bound.add(r.name)
        return out | (free_names(e.body, dims) - bound)
    if isinstance(e, ir.Collective) and e.op in ("topk", "argtopk"):
        out = free_names(e.index.lo, dims) | free_names(e.index.hi, dims) | free_names(e.k, dims)
        return out | (free_names(e.body, dims) - {e.index.name})
    out: set[str] = set()
    if isinstance(e, ir.Scan):
        out.add(e.index)
    if isinstance(e, ir.Collective):
        out.add(e.index.name)
    if isinstance(e, ir.Call) and e.fn == "segment_of":
        return out | free_names(e.args[1], dims)
    rebuild(e, lambda x: out.update(free_names(x, dims)) or x)
    return out


def inline(op: ir.Op) -> dict[str, ir.Statement]:
    """Each output's statement with every tensor defined by a statement inlined."""
    defs = {st.target: st for st in op.statements}
    memo: dict[str, ir.Expr] = {}

    def expand(e: ir.Expr) -> ir.Expr:
        e = rebuild(e, expand)
        if isinstance(e, ir.Access) and e.tensor in defs:
            st = defs[e.tensor]
            if e.pad is not None:
                raise Unsupported(f"a padded read of the computed tensor '{e.tensor}'")
            if st.target not in memo:
                memo[st.target] = expand(st.value)
            return subst(memo[st.target], dict(zip(st.indices, e.subscripts)))
        return e

    return {t.name: dataclasses.replace(defs[t.name], value=expand(defs[t.name].value))
            for t in op.outputs}


def factors(e: ir.Expr) -> list[ir.Expr]:
    """The factors of a product, flattened: ``a * (b * c)`` is [a, b, c]."""
    if isinstance(e, ir.Binary) and e.op == "*":
        return factors(e.left) + factors(e.right)
    return [e]


def contains(e: ir.Expr, kind) -> bool:
    return any(isinstance(n, kind) for n in ir.walk(e))


def replace_segment_of(e: ir.Expr, offsets: str, index: str, name: str) -> ir.Expr:
    """``segment_of(offsets, index)`` -> ``Name(name)``; any other use is unsupported."""
    if isinstance(e, ir.Call) and e.fn == "segment_of":
        arg = e.args[1]
        if e.args[0].name == offsets and isinstance(arg, ir.Name) and arg.name == index:
            return ir.Name(name)
        raise Unsupported("segment_of is used other than as segment_of(offsets, i) of an "
                          "output index i")
    return rebuild(e, lambda x: replace_segment_of(x, offsets, index, name))


@dataclasses.dataclass(frozen=True)
class RowValue:
    """A hoisted reduction: one value per program row, over canonical indices ``__kN``."""
    name: str
    op: str
    indices: tuple[str, ...]
    ranges: tuple[tuple[ir.Expr, ir.Expr], ...]
    body: ir.Expr


class Hoister:
    """Replaces every reduction by ``Name(__rvN)``, innermost first, deduplicated."""

    def __init__(self):
        self.values: list[RowValue] = []

    def __call__(self, e: ir.Expr) -> ir.Expr:
        e = rebuild(e, self)
        if not isinstance(e, ir.Reduce):
            return e
        own = [r.name for r in e.indices]
        canon = {n: ir.Name(f"__k{p}") for p, n in enumerate(own)}
        ranges = []
        for r in e.indices:
            if free_names(r.lo) & set(own) or free_names(r.hi) & set(own):
                raise Unsupported("a reduction range reads another index of the same reduction")
            ranges.append((r.lo, r.hi))
        body = subst(e.body, canon)
        indices = tuple(f"__k{p}" for p in range(len(own)))
        if len(own) > 1 and e.op in ("argmax", "argmin"):
            raise Unsupported(f"{e.op} over several indices")
        for v in self.values:
            if (v.op, v.indices, v.ranges, v.body) == (e.op, indices, tuple(ranges), body):
                return ir.Name(v.name)
        v = RowValue(f"__rv{len(self.values)}", e.op, indices, tuple(ranges), body)
        self.values.append(v)
        return ir.Name(v.name)


def is_static(e: ir.Expr, dims: tuple[str, ...]) -> bool:
    """Only numbers and dims: the same for every program."""
    return not free_names(e, dims) and not contains(e, ir.Access)


def without_unread(op: ir.Op) -> ir.Op:
    """``op`` without the intermediates nothing reads any more."""
    statements = list(op.statements)
    while True:
        read = {n.tensor for st in statements for n in ir.walk(st.value)
                if isinstance(n, ir.Access)}
        read |= {n.args[0].name for st in statements for n in ir.walk(st.value)
                 if isinstance(n, ir.Call) and n.fn == "segment_of"
                 and isinstance(n.args[0], ir.Name)}
        dead = [st for st in statements
                if op.tensor(st.target).role == "tmp" and st.target not in read]
        if not dead:
            break
        statements = [st for st in statements if st not in dead]
    kept = {st.target for st in statements}
    tensors = tuple(t for t in op.tensors if t.role != "tmp" or t.name in kept)
    return dataclasses.replace(op, tensors=tensors, statements=tuple(statements))


def unique_name(tensors, base: str) -> str:
    """``base``, or ``base`` with a suffix, so that no tensor of ``tensors`` has the name (a
    user may name an intermediate as a rewrite would)."""
    taken = {t.name for t in tensors}
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name


def scratch_dtype(op: ir.Op, e: ir.Expr) -> str:
    """The dtype of an intermediate holding ``e``: int64 where its value is an integer
    (float32 rounded sums of large integers), else the op's float scratch dtype."""
    from kdsl.compare import may_be_float
    return op.scratch_float if may_be_float(op, e) else "i64"
