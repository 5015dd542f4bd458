"""Attention recognised from the IR's structure: scores from a contraction, a softmax of
them along the keys, and a sum over the keys of the probabilities times a second operand.

    y[.., i, e] = sum(j) softmax_j(score(sum(d) Q[.., i, d] * K[.., j, d], i, j)) * V[.., j, e]

where the softmax is ``exp(s - max(j) s) / sum(j) exp(s - max(j) s)`` (as intermediates or
inlined: the op's output is read with every intermediate inlined, and bound indices are
compared up to renaming) and ``score`` is any elementwise function of the contraction, of
dims and numbers (a ``/ sqrt(D)``), of inputs read at batch, row and key indices (a bias)
and of those indices themselves (a causal mask). Batch-like axes are those every operand
and the output share. Nothing here knows an op by name or shape: ``match`` is None where
the op is anything else, and then a fused attention kernel is simply not offered.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kdsl import ir
from kdsl.backends.base import Unsupported
from kdsl.backends.lower.rewrite import factors, free_names, inline, rebuild

DOT = "__kd_dot"  # the contraction's place in ``Attention.score``
FLOATS = ("f32", "f16", "bf16")  # what tl.dot multiplies (f64 has no tensor-core path)


@dataclass(frozen=True)
class Attention:
    q: ir.Access  # Q[.., i, d]: the scores' row operand
    k: ir.Access  # K[.., j, d]
    v: ir.Access  # V[.., j, e]
    out: str  # y[.., i, e]
    batch: tuple[str, ...]  # axes every operand and the output share, in the output's order
    row: str  # i
    key: str  # j
    red: str  # d: the scores' contraction
    col: str  # e: the output's own axis
    extents: dict  # every axis above -> its extent (a size expression)
    score: ir.Expr  # the scores over (batch, row, key), the contraction as Name(DOT)
    dtypes: tuple[str, ...]  # the operands' dtype, per the op's dtype choices


def match(op: ir.Op) -> Attention | None:
    """The attention pattern of ``op``, or None."""
    try:
        return _match(op)
    except Unsupported:  # an inlining the IR cannot do (a padded read of an intermediate)
        return None


def _match(op: ir.Op) -> Attention | None:
    if len(op.outputs) != 1:
        return None
    st = inline(op)[op.outputs[0].name]
    red = st.value
    if not (isinstance(red, ir.Reduce) and red.op == "sum" and len(red.indices) == 1):
        return None
    key = red.indices[0].name
    fs = factors(red.body)
    if len(fs) != 2 or key in st.indices or len(set(st.indices)) != len(st.indices):
        return None
    for v, probs in (fs, fs[::-1]):
        found = _probabilities(probs, red.indices[0])
        if found is not None and _is_read(op, v):
            break
    else:
        return None
    score, contraction = found
    d = contraction.indices[0].name
    q, k = _operands(op, contraction.body, key)
    if q is None:
        return None
    out_axes, names = set(st.indices), [_names(a) for a in (q, k, v)]
    batch = tuple(n for n in st.indices if all(n in a for a in names))
    rows = set(names[0]) - set(batch) - {d}
    cols = set(names[2]) - set(batch) - {key}
    if len(rows) != 1 or len(cols) != 1:
        return None
    row, col = rows.pop(), cols.pop()
    want = {"q": set(batch) | {row, d}, "k": set(batch) | {key, d},
            "v": set(batch) | {key, col}, "y": set(batch) | {row, col}}
    if [set(x) for x in names] + [out_axes] != [want["q"], want["k"], want["v"], want["y"]] \
            or d in out_axes or len({row, key, col, d}) != 4:
        return None
    extents = _extents(op, [(q, names[0]), (k, names[1]), (v, names[2]),
                            (ir.Access(st.target, tuple(map(ir.Name, st.indices))), st.indices)])
    if extents is None or not _full(red.indices[0], extents) or \
            not _full(contraction.indices[0], extents):
        return None
    if not _elementwise(op, score, set(batch) | {row, key}):
        return None
    dts = [tuple(op.dtype_of(t.tensor, c) for c in op.dtype_choices) for t in (q, k, v)]
    if dts[0] != dts[1] or dts[0] != dts[2] or any(x not in FLOATS for x in dts[0]):
        return None  # tl.dot wants its operands of one float type
    return Attention(q, k, v, st.target, batch, row, key, d, col, extents, score, dts[0])


def _probabilities(e: ir.Expr, keys: ir.IndexRange):
    """(score, contraction) where ``e`` is exp(s - max(key) s) / sum(key) exp(s - max s)
    along the range ``keys`` (the maximum and the sum over exactly the keys the output sums:
    the kernel normalises over those); None otherwise."""
    key = keys.name
    if not (isinstance(e, ir.Binary) and e.op == "/"):
        return None
    num, den = e.left, e.right
    if not (isinstance(den, ir.Reduce) and den.op == "sum" and len(den.indices) == 1
            and _same_range(den.indices[0], keys)):
        return None
    if key in free_names(den.body) or canon(den.body, {den.indices[0].name: key}) != canon(num):
        return None  # the denominator sums the numerator along the keys
    if not (isinstance(num, ir.Call) and num.fn == "exp" and isinstance(num.args[0], ir.Binary)
            and num.args[0].op == "-"):
        return None
    s, m = num.args[0].left, num.args[0].right
    if not (isinstance(m, ir.Reduce) and m.op == "max" and len(m.indices) == 1
            and _same_range(m.indices[0], keys)) or \
            key in free_names(m.body) or canon(m.body, {m.indices[0].name: key}) != canon(s):
        return None  # the maximum of the same scores along the keys
    dots = [n for n in ir.walk(s) if isinstance(n, ir.Reduce)]
    if len(dots) != 1 or dots[0].op != "sum" or len(dots[0].indices) != 1:
        return None
    return _replace(s, dots[0], ir.Name(DOT)), dots[0]


def _operands(op: ir.Op, body: ir.Expr, key: str):
    """(the row operand, the key operand) of a contraction's body: two reads, the second
    the one at the key index."""
    fs = factors(body)
    if len(fs) != 2 or not all(_is_read(op, f) for f in fs):
        return None, None
    reads_key = [key in _names(f) for f in fs]
    if reads_key.count(True) != 1:
        return None, None
    return (fs[1], fs[0]) if reads_key[0] else (fs[0], fs[1])


def _is_read(op: ir.Op, e: ir.Expr) -> bool:
    """A read of an input at distinct plain index names (no pad)."""
    if not (isinstance(e, ir.Access) and e.pad is None and
            any(t.name == e.tensor and t.role == "in" for t in op.tensors)):
        return False
    names = [s.name for s in e.subscripts if isinstance(s, ir.Name)]
    return len(names) == len(e.subscripts) == len(set(names)) and \
        len(e.subscripts) == len(op.tensor(e.tensor).shape)


def _names(a: ir.Access) -> tuple[str, ...]:
    return tuple(s.name for s in a.subscripts if isinstance(s, ir.Name))


def _extents(op: ir.Op, reads) -> dict | None:
    """Each axis's extent, from every tensor it indexes: None where two tensors disagree
    (their shapes compared as expressions)."""
    out: dict = {}
    for access, names in reads:
        for n, ext in zip(names, op.tensor(access.tensor).shape):
            if out.setdefault(n, ext) != ext:
                return None
    return out


def _same_range(r: ir.IndexRange, keys: ir.IndexRange) -> bool:
    return r.lo == keys.lo and r.hi == keys.hi


def _full(r: ir.IndexRange, extents: dict) -> bool:
    """A reduction over a whole axis (0 .. its extent)."""
    return r.name in extents and r.lo == ir.Num(0) and r.hi == extents[r.name]


def _elementwise(op: ir.Op, score: ir.Expr, axes: set[str]) -> bool:
    """The score around the contraction is elementwise: no reduction, scan or collective;
    reads of inputs at those axes only; index names among them."""
    inputs = {t.name for t in op.inputs}
    for n in ir.walk(score):
        if isinstance(n, (ir.Reduce, ir.Scan, ir.Collective)):
            return False
        if isinstance(n, ir.Access):
            if n.tensor not in inputs or n.pad is not None or \
                    not all(isinstance(s, ir.Name) and s.name in axes for s in n.subscripts):
                return False
        if isinstance(n, ir.Call) and n.fn in ("segment_of", "triu_row", "triu_col"):
            return False
        if isinstance(n, ir.Name) and n.name not in op.dims and n.name != DOT and \
                n.name not in axes and n.name not in ("inf", "pi"):
            return False
    return sum(isinstance(n, ir.Name) and n.name == DOT for n in ir.walk(score)) == 1


def _replace(e: ir.Expr, old: ir.Expr, new: ir.Expr) -> ir.Expr:
    if e is old:
        return new
    return rebuild(e, lambda x: _replace(x, old, new))


def canon(e: ir.Expr, names: dict[str, str] | None = None) -> ir.Expr:
    """``e`` with free names renamed by ``names`` and bound indices renamed in order of
    appearance: two expressions equal up to the names of their bound indices compare
    equal."""
    counter = [0]

    def go(x: ir.Expr, env: dict[str, str]) -> ir.Expr:
        if isinstance(x, ir.Name):
            return ir.Name(env.get(x.name, x.name))
        if isinstance(x, ir.Reduce):
            inner, rs = dict(env), []
            for r in x.indices:
                new = f"__c{counter[0]}"
                counter[0] += 1
                rs.append(dataclasses.replace(
                    r, name=new, lo=None if r.lo is None else go(r.lo, inner),
                    hi=None if r.hi is None else go(r.hi, inner)))
                inner[r.name] = new
            return dataclasses.replace(x, indices=tuple(rs), body=go(x.body, inner))
        if isinstance(x, (ir.Scan, ir.Collective)):
            return x  # (never part of a match: ``_elementwise`` refuses them)
        return rebuild(x, lambda y: go(y, env))
    return go(e, dict(names or {}))


__all__ = ["Attention", "DOT", "match", "canon"]
