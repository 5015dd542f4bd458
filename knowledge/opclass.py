"""The class of an op, read from its IR; it picks which notes and learned priors apply.

Classes, tested in this order (the first that applies wins):

``sort``
    a statement uses a collective (sort, argsort, topk, argtopk).
``scan``
    a statement uses a scan (cumsum, cumprod), or a reduction whose range runs from or to
    an output index (``y[i, j] = sum(k in j .. N) x[i, k]``: a suffix sum written out).
``segment``
    the work depends on data: a reduction over a range whose bounds read a
    tensor (``i in offsets[b] .. offsets[b+1]``), ``segment_of``, an input
    declared as offsets, or a gather through an index tensor (``table[idx[i], d]``)
    inside a reduction or in an op with no reduction at all. A lone gather
    beside row reductions (cross-entropy's ``logits[i, target[i]]``) does not
    make an op a segment op.
``contraction``
    a sum whose body is a product of two different tensor reads that share a
    reduced index (matmul, convolution, pairwise dot products).
``row_reduction``
    any other reduction over a whole axis (some read subscripts a reduced
    index on its own: softmax, layernorm, cross-entropy).
``elementwise``
    everything else, including windowed reductions whose reduced index only
    appears offset by an output index (``x[o*S + k - P]``: pooling), since each
    output element then depends on a small neighbourhood only.
"""
from __future__ import annotations

from kdsl import ir

CLASSES = ("elementwise", "row_reduction", "contraction", "segment", "scan", "sort")
_CASTS = frozenset({"f32", "f16", "bf16", "f64", "i32", "i64", "bool"})


def _exprs(op: ir.Op):
    for s in op.statements:
        yield from ir.walk(s.value)


def _reads_tensor(e: ir.Expr) -> bool:
    return any(isinstance(x, ir.Access) for x in ir.walk(e))


def _is_gather(a: ir.Access) -> bool:
    """A read whose subscripts read a tensor (or locate a segment): data-dependent addressing."""
    return any(isinstance(x, ir.Access) or (isinstance(x, ir.Call) and x.fn == "segment_of")
               for s in a.subscripts for x in ir.walk(s))


def _data_dependent_range(r: ir.Reduce) -> bool:
    return any(b is not None and _reads_tensor(b) for ix in r.indices for b in (ix.lo, ix.hi))


def _running_range(r: ir.Reduce, op: ir.Op) -> bool:
    """A range bound that names an index, not only sizes, and reads no tensor: each output
    element sums a prefix or suffix of its row."""
    return any(b is not None and not _reads_tensor(b) and _names(b) - set(op.dims)
               for ix in r.indices for b in (ix.lo, ix.hi))


def _factors(e: ir.Expr) -> list[ir.Expr]:
    """The factors of a product, casts unwrapped: a[i,k] * f32(b[k,j]) -> [a[..], b[..]]."""
    while isinstance(e, ir.Call) and e.fn in _CASTS and len(e.args) == 1:
        e = e.args[0]
    if isinstance(e, ir.Binary) and e.op == "*":
        return _factors(e.left) + _factors(e.right)
    if isinstance(e, ir.Unary) and e.op == "neg":
        return _factors(e.operand)
    return [e]


def _names(e: ir.Expr) -> set[str]:
    return {x.name for x in ir.walk(e) if isinstance(x, ir.Name)}


def _is_contraction(r: ir.Reduce) -> bool:
    if r.op != "sum":
        return False
    reduced = {ix.name for ix in r.indices}
    reads = [f for f in _factors(r.body) if isinstance(f, ir.Access)]
    for i, a in enumerate(reads):
        for b in reads[i + 1:]:
            if a == b:
                continue  # x[i,j] * x[i,j] is a square, not a contraction
            shared = reduced & set().union(*map(_names, a.subscripts)) \
                & set().union(*map(_names, b.subscripts))
            if shared:
                return True
    return False


def _is_whole_axis(r: ir.Reduce) -> bool:
    """Some read subscripts a reduced index on its own (not ``o*S + k - P``)."""
    reduced = {ix.name for ix in r.indices}
    return any(isinstance(s, ir.Name) and s.name in reduced
               for x in ir.walk(r.body) if isinstance(x, ir.Access) for s in x.subscripts)


def op_class(op: ir.Op) -> str:
    """One of ``CLASSES`` for ``op`` (see the module docstring for the rules)."""
    exprs = list(_exprs(op))
    if any(isinstance(e, ir.Collective) for e in exprs):
        return "sort"
    reduces = [e for e in exprs if isinstance(e, ir.Reduce)]
    if any(isinstance(e, ir.Scan) for e in exprs) or any(_running_range(r, op) for r in reduces):
        return "scan"
    gather_in_reduce = any(isinstance(x, ir.Access) and _is_gather(x)
                           for r in reduces for x in ir.walk(r.body))
    gathers = any(isinstance(e, ir.Access) and _is_gather(e) for e in exprs)
    if (any(_data_dependent_range(r) for r in reduces)
            or any(isinstance(e, ir.Call) and e.fn == "segment_of" for e in exprs)
            or any(isinstance(t.domain, ir.Offsets) for t in op.inputs)
            or gather_in_reduce or (gathers and not reduces)):
        return "segment"
    if any(_is_contraction(r) for r in reduces):
        return "contraction"
    if any(_is_whole_axis(r) for r in reduces):
        return "row_reduction"
    return "elementwise"
