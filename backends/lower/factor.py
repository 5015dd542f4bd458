"""A sum of products whose factors read different summed indices, summed factor by factor.

``y[b] = sum(o) (sum(k) x[b, k] * w[o, k]) * s`` is ``sum(k) x[b, k] * (sum(o) w[o, k]) *
s``: the factor that reads ``o`` does not read ``b``, so its sum over ``o`` is the same for
every ``b`` and is computed once, an intermediate ``c[k] = sum(o) w[o, k]``. Written as
the math reads (a GEMM, then a sum over its columns) it costs B x O x K products; summed
factor by factor, O x K + B x K. The same for any sum of a product in which some summed
index is read only by factors that leave out an index of the output (an outer product's
sum, a weighted sum of a GEMM's rows), where that halves the work at least.

Where no such index saves work, a product of three or more reads summed over several indices
is still contracted a pair at a time when that does no more products: a bilinear form
``sum(i, j) x[b, i] * A[i, j] * y[b, j]`` becomes a GEMM ``t[b, j] = sum(i) x[b, i] * A[i,
j]`` and a dot product of rows, each a form the generators tile, where the nest of all the
indices is none. The partial must hold no more elements than the op's largest tensor.

A sum inside a product inside a sum merges into one sum over both sets of indices first
(``sum(o) c * sum(k) g`` is ``sum(o, k) c * g``), and an intermediate holding a sum of a
product, read once by one statement at its own indices, is read through. Only sums: a
mean, a maximum or a sum over a range that depends on another index stays as written,
and so does a factor a division or a non-linear function holds.
"""
from __future__ import annotations

import dataclasses

from kdsl import ir
from kdsl.backends.lower.rewrite import (free_names, rebuild, scratch_dtype, unique_name,
                                        without_unread)


def factored_sums(op: ir.Op) -> ir.Op:
    """``op`` with each such sum summed factor by factor; ``op`` itself where there is none."""
    reads = _reads(op)
    tensors, statements = list(op.tensors), []
    defs = {st.target: st for st in op.statements}
    changed = False
    for st in op.statements:
        shape = dict(zip(st.indices, op.tensor(st.target).shape))
        extra: list[ir.Statement] = []

        def inlined(e: ir.Expr) -> ir.Expr:
            """``e``, or the sum of a product an intermediate read here once holds."""
            if isinstance(e, ir.Access) and e.tensor in defs and reads.get(e.tensor) == 1 \
                    and op.tensor(e.tensor).role == "tmp" and e.pad is None:
                d = defs[e.tensor]
                if isinstance(d.value, ir.Reduce) and d.value.op == "sum" and \
                        all(isinstance(s, ir.Name) for s in e.subscripts) and \
                        [s.name for s in e.subscripts] == list(d.indices) and \
                        not set(d.indices) & {r.name for r in d.value.indices}:
                    return d.value
            return e

        def visit(e: ir.Expr) -> ir.Expr:
            if isinstance(e, ir.Reduce) and e.op == "sum":
                found = _factored(op, st, shape, e, inlined, extra, tensors)
                if found is not None:
                    return found
            if isinstance(e, (ir.Reduce, ir.Scan, ir.Collective)):
                return e
            return rebuild(e, visit)

        value = visit(st.value)
        if extra:
            changed = True
        statements += extra + [dataclasses.replace(st, value=value)]
    if not changed:
        return op
    return without_unread(dataclasses.replace(op, tensors=tuple(tensors),
                                               statements=tuple(statements)))


def _reads(op: ir.Op) -> dict[str, int]:
    out: dict[str, int] = {}
    for st in op.statements:
        for n in ir.walk(st.value):
            if isinstance(n, ir.Access):
                out[n.tensor] = out.get(n.tensor, 0) + 1
    return out


def _static(r: ir.IndexRange, dims) -> bool:
    """``r`` is 0 .. an expression of the sizes alone (no index, no tensor read)."""
    return r.lo is not None and isinstance(r.lo, ir.Num) and r.lo.value == 0 and \
        r.hi is not None and not free_names(r.hi, dims) and \
        not any(isinstance(n, ir.Access) for n in ir.walk(r.hi))


def _factored(op, st, shape, e: ir.Reduce, inlined, extra, tensors) -> ir.Expr | None:
    """``e`` (a sum) summed factor by factor, with its partial sums added to ``extra``,
    where that does at most half the work of the sums as written (at the first bench
    point: a merged sum that an intermediate held was computed once, not at every index of
    the sum reading it)."""
    size = _sizer(op)
    if size is None:
        return None
    ranges = list(e.indices)
    out = _volume(size, op.tensor(st.target).shape)
    per_term = out * _volume(size, [r.hi for r in ranges])  # the outer sum's terms
    written = per_term
    fs = []
    outer = [f for f in _factors(e.body)]
    for k, f0 in enumerate(outer):
        f = inlined(f0)
        others = set(st.indices).union(*(free_names(g, op.dims) for g in outer[:k] + outer[k + 1:]))
        inner = {r.name for r in f.indices} if isinstance(f, ir.Reduce) else set()
        if isinstance(f, ir.Reduce) and f.op == "sum" and \
                not inner & ({r.name for r in ranges} | others) and \
                all(_static(r, op.dims) for r in f.indices):
            work = _volume(size, [r.hi for r in f.indices])
            if f is f0:  # summed inside this sum: again at each of its terms
                written += per_term * work
            else:  # an intermediate's: once for each of its elements
                written += _volume(size, op.tensor(f0.tensor).shape) * work
            ranges += list(f.indices)
            fs += [inlined(g) for g in _factors(f.body)]
        else:
            fs.append(f)
    if not all(_static(r, op.dims) for r in ranges) or len(fs) < 2:
        return None
    if any(isinstance(n, (ir.Reduce, ir.Scan, ir.Collective)) for f in fs for n in ir.walk(f)):
        return None
    names = [r.name for r in ranges]
    outside = set(st.indices)
    if outside & set(names):
        return None  # a summed index shadows one of the output's
    extents = {x.name: x.hi for x in ranges}
    # (products, r, reading, rest, keep, dims, remaining): partial sums that keep every
    # output index
    chained = []
    for r in ranges:
        reading = [f for f in fs if r.name in free_names(f, op.dims)]
        rest = [f for f in fs if r.name not in free_names(f, op.dims)]
        if not reading or not rest:
            continue
        kept = set().union(*(free_names(f, op.dims) for f in reading)) - {r.name}
        if not kept <= outside | set(names):
            continue  # reading an index bound elsewhere
        keep = [n for n in st.indices if n in kept] + [n for n in names if n in kept]
        remaining = tuple(x for x in ranges if x.name != r.name)
        dims = [shape[n] if n in shape else extents[n] for n in keep]
        factored = _volume(size, dims) * size(r.hi) + \
            out * _volume(size, [x.hi for x in remaining])
        if not (outside - kept):  # shared by no output index: no work saved by itself
            # (counted in products: the nest makes len(fs) - 1 of them a term)
            products = _volume(size, dims) * size(r.hi) * (len(reading) - 1) + \
                out * _volume(size, [x.hi for x in remaining]) * len(rest)
            if len(reading) > 1 and _contracts(rest, remaining, op.dims) and \
                    products <= written * (len(fs) - 1) and \
                    _volume(size, dims) <= _largest(op, size):
                chained.append((products, r, reading, rest, keep, dims, remaining))
            continue
        if 2 * factored > written:
            continue
        return _split(op, st, r, reading, rest, keep, dims, remaining, extra, tensors)
    if chained:
        # a product of three or more factors summed over two or more indices, no less work
        # contracted a pair at a time (``x[b, i] * A[i, j] * y[b, j]`` as ``t[b, j] =
        # sum(i) x[b, i] * A[i, j]`` then ``sum(j) t[b, j] * y[b, j]``): each step is a
        # contraction of two reads, which the generators tile as a GEMM; in one nest of
        # all the indices no generator does
        _, *best = min(chained, key=lambda c: c[0])
        return _split(op, st, *best, extra, tensors)
    return None


def _split(op, st, r, reading, rest, keep, dims, remaining, extra, tensors) -> ir.Expr:
    """The sum over ``r`` of the factors ``reading`` it as an intermediate (a statement added
    to ``extra``), and the sum over the ``remaining`` indices of the ``rest`` times it."""
    partial = ir.Reduce("sum", (r,), _product(reading))
    name = unique_name(tensors, f"kd_f{len(extra)}_{st.target}")
    tensors.append(ir.Tensor(name, "tmp", (scratch_dtype(op, partial),), None, tuple(dims)))
    extra.append(ir.Statement(name, tuple(keep), partial))
    body = _product(rest + [ir.Access(name, tuple(ir.Name(n) for n in keep))])
    return ir.Reduce("sum", remaining, body) if remaining else body


def _contracts(rest: list[ir.Expr], remaining, dims) -> bool:
    """Some factor of ``rest`` reads an index still summed: what is left is a contraction."""
    summed = {x.name for x in remaining}
    return any(free_names(f, dims) & summed for f in rest)


def _largest(op: ir.Op, size) -> int:
    """The most elements any of the op's inputs and outputs holds: an intermediate no
    bigger adds no more memory than the op's own tensors use."""
    return max(_volume(size, t.shape) for t in op.tensors if t.role != "tmp")


def _sizer(op: ir.Op):
    """A function giving an extent's value at the op's first bench point; None without one."""
    if not op.bench:
        return None
    from kdsl.sizes import NotASize, evaluate
    sizes = op.bench[0].size_dict()

    def size(e: ir.Expr) -> int:
        try:
            return max(int(evaluate(e, sizes)), 1)
        except (NotASize, KeyError, ValueError, ZeroDivisionError):
            return 1
    return size


def _volume(size, extents) -> int:
    n = 1
    for e in extents:
        n *= size(e)
    return n


def _factors(e: ir.Expr) -> list[ir.Expr]:
    """The factors of a product, flattened, a division ``a / b`` as ``a * (1 / b)``."""
    if isinstance(e, ir.Binary) and e.op == "*":
        return _factors(e.left) + _factors(e.right)
    if isinstance(e, ir.Binary) and e.op == "/":
        return _factors(e.left) + [ir.Binary("/", ir.Num(1.0), e.right)]
    return [e]


def _product(fs: list[ir.Expr]) -> ir.Expr:
    out = fs[0]
    for f in fs[1:]:
        out = ir.Binary("*", out, f)
    return out
