"""Sums over one-hot indicators as scatter-adds: histograms, bincount, embedding backward.

A statement ``T[.., c, ..] = sum(i..) f1 * f2 * ..`` where a factor is an equality
indicator ``(e == c)`` between an output index ``c`` and an expression ``e`` of the
summed indices (and of T's other indices) adds each tuple's term to one element along
``c``: the one at ``c = e``. Evaluated densely, for every ``c``, it costs N x C (an
outsider's bincount, ``h[c] = sum(i) (idx[i] == c)``, ran at 0.02x of torch on the
CPU); as a scatter it costs N: for each tuple, ``T[.., e, ..] += rest``, and nothing
where ``e`` is outside ``c``'s range (there the indicator is 0 for every ``c``).

An indicator is a factor ``e == c`` (either side), a cast of one (``f32(e == c)``), or a
conjunct of the condition of ``where(cond, v, 0)``; a second indicator on the same ``c``
is the condition ``e2 == e`` on the first's ``e``. ``c`` must appear nowhere else: not in
the rest of the body, not in a range, not in another key. Several output indices may be
keyed (a 2-D histogram); the others are looped (``outer`` before the first keyed
position, and any a summed range reads; ``inner`` the rest), so each term lands in one
element. A matching sum that is only part of a right side (``h[c] = sum(i) .. / N``) is
first moved into an intermediate of its own (``scatter_form``).

Numerics: a float sum accumulated by scatter adds in another order than the dense loop
(by tuple, not by element); integer counts are exact either way. Nothing here knows an
op by name; an op without the pattern is returned as it is.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kdsl import dtypes, ir
from kdsl.builtins import CASTS, ELEMENTWISE

from kdsl.backends.lower.rewrite import factors, free_names, rebuild

ZEROS = (ir.Num(0), ir.Num(0.0))


@dataclass(frozen=True)
class Scatter:
    """``T = 0; for each tuple of loops: if every keyed key is in range, T[keys] += value``.

    ``keys`` has one entry per position of the target: the key expression where
    ``keyed``, else ``Name`` of the looped output index. ``loops`` run outer first; the
    ``outer`` ones are output indices (disjoint slices of T: iterations of them never
    write the same element). ``reduce`` is the original sum (its kind is the
    accumulator's)."""
    target: str
    keys: tuple[ir.Expr, ...]
    keyed: tuple[bool, ...]
    outer: tuple[ir.IndexRange, ...]
    summed: tuple[ir.IndexRange, ...]
    inner: tuple[ir.IndexRange, ...]
    value: ir.Expr
    reduce: ir.Reduce

    @property
    def loops(self) -> tuple[ir.IndexRange, ...]:
        return self.outer + self.summed + self.inner


# ---- kinds (the checker's rules) ---------------------------------------------------

def kind(op: ir.Op, e: ir.Expr, dtype: str | None = None) -> str | None:
    """'float', 'int' or 'bool': what ``e`` evaluates to for the op's dtype ``dtype`` (by
    default the same for every dtype the op takes, else None)."""
    if dtype is None:
        kinds = {kind(op, e, d) for d in op.dtype_choices}
        return kinds.pop() if len(kinds) == 1 else None
    rec = lambda x: kind(op, x, dtype)  # noqa: E731
    if isinstance(e, ir.Num):
        return "int" if isinstance(e.value, int) else "float"
    if isinstance(e, ir.Name):
        return "float" if e.name in ("inf", "pi") else "int"
    if isinstance(e, ir.Access):
        t = op.tensor(e.tensor)
        return dtypes.kind(t.dtypes[0] if t.role == "tmp" else op.dtype_of(t.name, dtype))
    if isinstance(e, ir.Unary):
        return "bool" if e.op == "not" else _widen(rec(e.operand), "int")
    if isinstance(e, ir.Binary):
        if e.op in ("<", "<=", ">", ">=", "==", "!=", "and", "or"):
            return "bool"
        a, b = rec(e.left), rec(e.right)
        if e.op == "/" or "float" in (a, b):
            return "float"
        return "int"
    if isinstance(e, ir.Call):
        if e.fn in CASTS:
            return CASTS[e.fn]
        if e.fn in ("segment_of", "triu_row", "triu_col", "hash64"):
            return "int"
        b = ELEMENTWISE[e.fn]
        if b.result != "same":
            return b.result
        kinds = {rec(a) for a in (e.args[1:] if e.fn == "where" else e.args)}
        return "float" if "float" in kinds else "int" if "int" in kinds else "bool"
    if isinstance(e, ir.Reduce):
        if e.op in ("argmax", "argmin"):
            return "int"
        if e.op == "mean":
            return "float"
        return _widen(rec(e.body), "int")
    if isinstance(e, ir.Scan):
        return _widen(rec(e.body), "int")
    return rec(e.body) if e.op in ("sort", "topk") else "int"


def _widen(k: str | None, least: str) -> str | None:
    return least if k == "bool" else k


# ---- the pattern ---------------------------------------------------------------------

def match(op: ir.Op, st: ir.Statement) -> Scatter | None:
    """The scatter form of ``st`` when its whole right side is a sum over an indicator."""
    red = st.value
    if not isinstance(red, ir.Reduce) or red.op != "sum" or not st.indices:
        return None
    if any(r is not None for r in st.ranges) or len(set(st.indices)) != len(st.indices):
        return None
    if any(isinstance(n, (ir.Scan, ir.Collective)) for n in ir.walk(red.body)):
        return None
    summed = [r.name for r in red.indices]
    if set(summed) & set(st.indices) or len(set(summed)) != len(summed):
        return None  # a summed index that shadows an output index
    keys: dict[str, ir.Expr] = {}
    rest: list[ir.Expr] = []
    for f in factors(red.body):
        found = _indicators(f, set(st.indices))
        if found is None:
            rest.append(f)
            continue
        pairs, residual = found
        for c, e in pairs:
            if c in keys:  # a second indicator on c: its key must equal the first's
                rest.append(ir.Binary("==", e, keys[c]))
            else:
                keys[c] = e
        if residual is not None:
            rest.append(residual)
    if not keys:
        return None
    looped = [n for n in st.indices if n not in keys]
    allowed = set(summed) | set(looped) | set(op.dims)
    for c, e in keys.items():
        names = free_names(e, op.dims)
        if not names <= allowed or any(isinstance(n, ir.Reduce) for n in ir.walk(e)):
            return None
        if kind(op, e) != "int":
            return None
    value = _product(rest)
    elsewhere = free_names(value, op.dims)
    for r in red.indices:
        elsewhere |= free_names(r.lo, op.dims) | free_names(r.hi, op.dims)
    for e in keys.values():
        elsewhere |= free_names(e, op.dims)
    if elsewhere & set(keys):
        return None
    shape = op.tensor(st.target).shape
    first = min(st.indices.index(c) for c in keys)
    ranged = set()
    for r in red.indices:
        ranged |= free_names(r.lo, op.dims) | free_names(r.hi, op.dims)
    outer, inner = [], []
    for p, n in enumerate(st.indices):
        if n in keys:
            continue
        r = ir.IndexRange(n, ir.Num(0), shape[p])
        (outer if p < first or n in ranged else inner).append(r)
    return Scatter(st.target,
                   tuple(keys.get(n, ir.Name(n)) for n in st.indices),
                   tuple(n in keys for n in st.indices),
                   tuple(outer), red.indices, tuple(inner), value, red)


def _indicators(f: ir.Expr, outputs: set[str]):
    """([(c, e)], what the factor is where they hold, None for 1) of a factor that holds
    indicators on output indices; None for any other factor."""
    pair = _equality(f, outputs)
    if pair is not None:
        return [pair], None
    if isinstance(f, ir.Call) and f.fn in CASTS and f.fn != "bool" and len(f.args) == 1:
        inner = [_indicators(x, outputs) for x in factors(f.args[0])]
        if not any(x is not None for x in inner):
            return None
        pairs, rest = [], []
        for x, found in zip(factors(f.args[0]), inner):
            if found is None:
                rest.append(x)
            else:
                pairs += found[0]
                rest += [found[1]] if found[1] is not None else []
        return pairs, (dataclasses.replace(f, args=(_product(rest),)) if rest else None)
    if isinstance(f, ir.Call) and f.fn == "where" and f.args[2] in ZEROS:
        cond, then = f.args[0], f.args[1]
        pairs, others = [], []
        for x in _conjuncts(cond):
            pair = _equality(x, outputs)
            (pairs.append(pair) if pair is not None else others.append(x))
        if not pairs:
            return None
        if not others:
            return pairs, then
        guard = others[0]
        for x in others[1:]:
            guard = ir.Binary("and", guard, x)
        return pairs, dataclasses.replace(f, args=(guard, then, f.args[2]))
    return None


def _equality(e: ir.Expr, outputs: set[str]):
    if not (isinstance(e, ir.Binary) and e.op == "=="):
        return None
    for c, other in ((e.right, e.left), (e.left, e.right)):
        if isinstance(c, ir.Name) and c.name in outputs and c.name not in free_names(other):
            return c.name, other
    return None


def _conjuncts(e: ir.Expr) -> list[ir.Expr]:
    if isinstance(e, ir.Binary) and e.op == "and":
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]


def _product(fs: list[ir.Expr]) -> ir.Expr:
    if not fs:
        return ir.Num(1)
    out = fs[0]
    for f in fs[1:]:
        out = ir.Binary("*", out, f)
    return out


# ---- the rewrite ------------------------------------------------------------------

def scatters(op: ir.Op) -> dict[str, Scatter]:
    """Every statement of ``op`` whose right side is a scatter-able sum, by target."""
    out = {}
    for st in op.statements:
        sc = match(op, st)
        if sc is not None:
            out[st.target] = sc
    return out


def scatter_form(op: ir.Op) -> ir.Op:
    """``op`` with each scatter-able sum that is only part of a right side (not inside
    another reduction, scan or collective) moved into an intermediate of its own, indexed
    by the output indices it reads; ``op`` itself where there is none."""
    tensors = list(op.tensors)
    statements: list[ir.Statement] = []
    counter = [0]
    for st in op.statements:
        if any(r is not None for r in st.ranges) or match(op, st) is not None:
            statements.append(st)
            continue
        shape = dict(zip(st.indices, op.tensor(st.target).shape))
        extra: list[ir.Statement] = []

        def visit(e: ir.Expr) -> ir.Expr:
            if isinstance(e, ir.Reduce):
                if e.op != "sum":
                    return e
                keep = tuple(n for n in st.indices if n in free_names(e, op.dims))
                k = kind(op, e)
                trial = ir.Statement("", keep, e)
                if not keep or k is None or match(_with(op, keep, shape), trial) is None:
                    return e
                name = f"kd_sc{counter[0]}_{st.target}"
                counter[0] += 1
                tensors.append(ir.Tensor(name, "tmp", (op.scratch_float if k == "float" else "i64",),
                                         None, tuple(shape[n] for n in keep)))
                extra.append(ir.Statement(name, keep, e))
                return ir.Access(name, tuple(ir.Name(n) for n in keep))
            if isinstance(e, (ir.Scan, ir.Collective)):
                return e
            return rebuild(e, visit)
        value = visit(st.value)
        statements += extra + [dataclasses.replace(st, value=value) if extra else st]
    if counter[0] == 0:
        return op
    return dataclasses.replace(op, tensors=tuple(tensors), statements=tuple(statements))


def _with(op: ir.Op, keep: tuple[str, ...], shape: dict) -> ir.Op:
    """``op`` with a target named "" of the given indices' extents (to match a trial)."""
    t = ir.Tensor("", "tmp", ("f32",), None, tuple(shape[n] for n in keep))
    return dataclasses.replace(op, tensors=op.tensors + (t,))
