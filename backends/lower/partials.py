"""Partial results: one reduction computed as partials and their combination.

The stage splitter (``stages``) calls these when a reduction, computed whole, would
leave the device idle or lose accuracy:

- *peeling*: the outer reduced indices become indices of a partial result, and a second
  stage combines the partials (``mean`` of equal-sized partial means is the mean; sum,
  max, min and prod combine as themselves);
- *moments*: a mean and the variance about it in one pass, peeled or not; peeled, the
  partial variances combine by the law of total variance;
- *split-K*: a sum of products far longer than its outputs, in chunks;
- *chunks*: any long one-index reduction to a few values (a vector to a scalar).

How far to peel and whether to split are the only size-dependent choices of the
lowering; both are made from the bench point.
"""
from __future__ import annotations

import dataclasses

from kdsl import ir
from kdsl.backends.lower.rewrite import factors, free_names, rebuild, subst

PEELABLE = {"sum": "sum", "mean": "mean", "max": "max", "min": "min", "prod": "prod"}


# a sum over one index this many times longer than the square root of its output points
# is split along that index (split-K): the partial sums fill the device, and each adds a
# chunk in f32 instead of one accumulator adding the whole range (a matrix-vector product
# over K = 1,048,576 was wrong at the bench point in f32 with one accumulator)
LONG_RATIO = 64
CHUNK = 8192
# a long reduction to a few values is cut in chunks of its length over the programs the
# device wants, within these bounds: one program walking a 32768-row mean in 4 chunks of
# 8192 was a loss's slowest stage, a row at a time with a gather each
SHORTEST_CHUNK = 256


def split_long(st: ir.Statement, tensors, bench, op) -> list[ir.Statement] | None:
    """[partials, their sum] of a long sum of products over one index k in 0..K, k read
    only as a subscript of the factors it touches: k = s * CHUNK + q, the factors padded
    with 0 past K, partial[F, s] = sum(q) ..., then target[F] = sum(s) partial[F, s].
    None where that does not apply or pay."""
    red = st.value
    if red.op != "sum" or len(red.indices) != 1 or not bench:
        return None
    r = red.indices[0]
    span = extent(r)
    length, points = size_at((span,), bench) if span is not None else None, \
        size_at(tensors[st.target].shape, bench)
    if length is None or points is None or length <= CHUNK or \
            length <= LONG_RATIO * points ** 0.5:
        return None
    for f in factors(red.body):
        if r.name in free_names(f) and not (isinstance(f, ir.Access) and f.pad is None):
            return None  # a factor that a zero pad would not zero
    s, q = f"{r.name}_chunk", f"{r.name}_in"
    chunks = ir.Binary("//", ir.Binary("+", span, ir.Num(CHUNK - 1)), ir.Num(CHUNK))
    at = ir.Binary("+", ir.Binary("*", ir.Name(s), ir.Num(CHUNK)), ir.Name(q))

    def chunked(e: ir.Expr) -> ir.Expr:
        if isinstance(e, ir.Access) and r.name in free_names(e):
            return dataclasses.replace(e, subscripts=tuple(subst(x, {r.name: at})
                                                           for x in e.subscripts),
                                       pad=ir.Num(0))
        return rebuild(e, chunked)
    # the chunk index outermost: each chunk's partials are one contiguous block, written
    # row by row like the output, and their sum reads rows of it along the output's rows
    name = f"{st.target}_part"
    tensors[name] = ir.Tensor(name, "tmp", (ir.scratch_float(tensors.values()),), None,
                              (chunks,) + tensors[st.target].shape)
    partial = ir.Statement(name, (s,) + st.indices, ir.Reduce(
        "sum", (ir.IndexRange(q, ir.Num(0), ir.Num(CHUNK)),), chunked(red.body)))
    combine = ir.Reduce("sum", (ir.IndexRange(s, ir.Num(0), chunks),),
                        ir.Access(name, (ir.Name(s),) + tuple(ir.Name(n) for n in st.indices)))
    return [partial, dataclasses.replace(st, value=combine)]


def chunk_length(length: int, min_programs: int) -> int:
    """The chunk of a ``length``-long reduction cut for ``min_programs`` programs: a power
    of two from SHORTEST_CHUNK to CHUNK."""
    want = -(-length // max(min_programs, 1))
    return min(CHUNK, max(SHORTEST_CHUNK, 1 << (want - 1).bit_length()))


def chunked(st: ir.Statement, tensors, bench, min_programs) -> list[ir.Statement] | None:
    """[partials, their combination] of a reduction over one long index whose outputs are
    too few to fill the device (a sum of a vector to a scalar would be one program): the
    index's range cut in chunks of L (``chunk_length``), partial[s, F] over k in s * L ..
    min(s * L + L, K), then the partials combined (a mean as a sum of partial sums over
    K). None where that does not apply."""
    red = st.value
    if red.op not in PEELABLE or len(red.indices) != 1 or not bench:
        return None
    r = red.indices[0]
    span = extent(r)
    length = size_at((span,), bench) if span is not None else None
    points = size_at(tensors[st.target].shape, bench)
    if length is None or points is None or points >= min_programs or length < 4 * CHUNK:
        return None
    size = chunk_length(length, min_programs)
    s = f"{r.name}_chunk"
    chunks = ir.Binary("//", ir.Binary("+", span, ir.Num(size - 1)), ir.Num(size))
    start = ir.Binary("*", ir.Name(s), ir.Num(size))
    stop = ir.Call("min", (ir.Binary("+", start, ir.Num(size)), span))
    whole = "sum" if red.op == "mean" else red.op
    name = f"{st.target}_part"
    tensors[name] = ir.Tensor(name, "tmp", (ir.scratch_float(tensors.values()),), None, (chunks,) + tensors[st.target].shape)
    partial = ir.Statement(name, (s,) + st.indices, ir.Reduce(
        whole, (dataclasses.replace(r, lo=start, hi=stop),), red.body))
    combined: ir.Expr = ir.Reduce(whole, (ir.IndexRange(s, ir.Num(0), chunks),), ir.Access(
        name, (ir.Name(s),) + tuple(ir.Name(n) for n in st.indices)))
    if red.op == "mean":
        combined = ir.Binary("/", combined, span)
    return [partial, dataclasses.replace(st, value=combined)]


def moment_pairs(reductions) -> list[tuple[ir.Statement, ir.Statement]]:
    """(mean, variance) statements over the same indices and ranges, the variance being
    the mean of (E - mean)**2 for the mean's own body E: one pass computes both."""
    pairs = []
    for a in reductions:
        if a.value.op != "mean":
            continue
        for b in reductions:
            ra, rb = a.value.indices, b.value.indices
            if b is a or b.value.op != "mean" or len(b.indices) != len(a.indices) or \
                    len(ra) != len(rb) or \
                    any((x.lo, x.hi) != (y.lo, y.hi) for x, y in zip(ra, rb)):
                continue
            names = {y.name: ir.Name(x.name) for x, y in zip(ra, rb)}
            names.update({bi: ir.Name(ai) for ai, bi in zip(a.indices, b.indices)})
            diff = ir.Binary("-", a.value.body,
                             ir.Access(a.target, tuple(ir.Name(n) for n in a.indices)))
            if subst(b.value.body, names) in (ir.Binary("**", diff, ir.Num(2)),
                                              ir.Binary("*", diff, diff)):
                pairs.append((a, b))
                break
    return pairs


def peel_moments(mean: ir.Statement, var: ir.Statement, tensors, bench, min_programs
                  ) -> list[list[ir.Statement]]:
    """The stages of a (mean, variance) pair: both in one stage (one pass, Welford's
    update in a row kernel); or, peeled, partial means and variances in one stage, then
    their combination: the mean of the means, and the mean of the partial variances plus
    the partials' squared distance to it (the law of total variance, equal counts)."""
    red: ir.Reduce = mean.value
    peeled = _peel_indices(red, tensors[mean.target].shape, bench, min_programs)
    if not peeled:
        return [[mean, var]]
    rest = tuple(r for r in red.indices if r not in peeled)
    keep = tuple(ir.Name(n) for n in mean.indices)
    fresh = tuple(ir.Name(f"{r.name}_p") for r in peeled)
    parts = {}
    for st in (mean, var):
        name = f"{st.target}_part"
        tensors[name] = ir.Tensor(name, "tmp", (ir.scratch_float(tensors.values()),), None,
                                  tensors[mean.target].shape + tuple(extent(r) for r in peeled))
        parts[st.target] = name
    index = mean.indices + tuple(r.name for r in peeled)
    whole = tuple(ir.Name(n) for n in index)
    body = subst(var.value.body, {y.name: ir.Name(x.name) for x, y in
                                  zip(red.indices, var.value.indices)} |
                 {bi: ir.Name(ai) for ai, bi in zip(mean.indices, var.indices)})
    part_mean = ir.Statement(parts[mean.target], index, dataclasses.replace(red, indices=rest))
    body = _read_as(body, mean.target, ir.Access(parts[mean.target], whole))
    part_var = ir.Statement(parts[var.target], index, ir.Reduce("mean", rest, body))
    over = tuple(dataclasses.replace(r, name=f.name) for r, f in zip(peeled, fresh))
    m = ir.Access(parts[mean.target], keep + fresh)
    combined_mean = dataclasses.replace(mean, value=ir.Reduce("mean", over, m))
    spread = ir.Binary("-", m, ir.Access(mean.target, tuple(ir.Name(n) for n in var.indices)))
    combined_var = dataclasses.replace(var, value=ir.Reduce("mean", over, ir.Binary(
        "+", ir.Access(parts[var.target], tuple(ir.Name(n) for n in var.indices) + fresh),
        ir.Binary("**", spread, ir.Num(2)))))
    if var.indices != mean.indices:  # the combination reads the mean at the var's indices
        combined_var = dataclasses.replace(combined_var, value=subst(
            combined_var.value, {a: ir.Name(b) for a, b in zip(mean.indices, var.indices)}))
    return [[part_mean, part_var], [combined_mean, combined_var]]


def _read_as(e: ir.Expr, tensor: str, new: ir.Access) -> ir.Expr:
    """``e`` with its reads of ``tensor`` (at the statement's own indices) made ``new``."""
    if isinstance(e, ir.Access) and e.tensor == tensor:
        return new
    return rebuild(e, lambda x: _read_as(x, tensor, new))


def _peel_indices(red: ir.Reduce, shape, bench, min_programs) -> list[ir.IndexRange]:
    """The outer reduced indices to make indices of partial results, so that output points
    times partials reach ``min_programs`` at the bench sizes; [] when none need be."""
    if red.op not in PEELABLE or len(red.indices) < 2 or not bench:
        return []
    points = size_at(shape, bench)
    if points is None or points >= min_programs:
        return []
    peeled = []
    for r in _memory_order(red)[:-1]:
        if extent(r) is None:
            break
        peeled.append(r)
        size = size_at(tuple(extent(p) for p in peeled), bench)
        if size is None or points * size >= min_programs:
            break
    return peeled


def peel(st: ir.Statement, tensors, bench, min_programs, op) -> list[ir.Statement]:
    """The stage(s) computing one reduction statement: itself, or partials then their
    combination when its outputs would be too few programs at the bench sizes."""
    red: ir.Reduce = st.value
    peeled = _peel_indices(red, tensors[st.target].shape, bench, min_programs)
    if not peeled:
        return [st]
    rest = tuple(r for r in red.indices if r not in peeled)
    name = f"{st.target}_part"
    shape = tensors[st.target].shape + tuple(extent(r) for r in peeled)
    tensors[name] = ir.Tensor(name, "tmp", (ir.scratch_float(tensors.values()),), None, shape)
    indices = st.indices + tuple(r.name for r in peeled)
    partial = ir.Statement(name, indices, dataclasses.replace(red, indices=rest))
    fresh = {r.name: ir.Name(f"{r.name}_p") for r in peeled}
    combine = ir.Reduce(PEELABLE[red.op],
                        tuple(dataclasses.replace(r, name=f"{r.name}_p") for r in peeled),
                        ir.Access(name, tuple(ir.Name(n) for n in st.indices)
                                  + tuple(fresh[r.name] for r in peeled)))
    return [partial, dataclasses.replace(st, value=combine)]


def extent(r: ir.IndexRange) -> ir.Expr | None:
    """The extent of a bound index when it starts at 0 (a tensor can be indexed by it)."""
    if isinstance(r.lo, ir.Num) and r.lo.value == 0:
        return r.hi
    return None


def size_at(shape, bench: dict[str, int]) -> int | None:
    from kdsl.sizes import NotASize, evaluate
    total = 1
    try:
        for e in shape:
            total *= max(int(evaluate(e, bench)), 1)
    except (NotASize, KeyError, TypeError):
        return None
    return total


def _memory_order(red: ir.Reduce) -> list[ir.IndexRange]:
    """The reduced indices, outermost in memory first: by where they subscript the
    widest tensor the body reads (indices it does not subscript directly go last)."""
    accesses = [n for n in ir.walk(red.body) if isinstance(n, ir.Access)]
    if not accesses:
        return list(red.indices)
    widest = max(accesses, key=lambda a: len(a.subscripts))
    where = {}
    for p, s in enumerate(widest.subscripts):
        for n in free_names(s):
            where.setdefault(n, p)
    return sorted(red.indices, key=lambda r: where.get(r.name, len(widest.subscripts)))

