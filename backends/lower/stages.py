"""Splitting an op into stages joined by scratch tensors.

A generator renders one op as one kernel well when every reduction it computes is
needed once per program: softmax's row maximum, a pooling window. It does not when a
statistic is broadcast over axes that become program axes (batch norm's mean over
(n, h, w) read by every (n, c, h, w): each program would recompute it), when a
reduction sits inside another's body (a loss averaging a per-row log-sum-exp), or when
a reduction to a few values would leave the GPU with a few programs. Staging fixes
all three the same way:

1. every reduction that is not the whole right side of its statement is hoisted into
   an intermediate of its own, indexed by what it reads of its context;
2. every statement whose right side is a reduction becomes a stage (a small op whose
   one output is a scratch tensor, f32, or i64 for argmax/argmin); the elementwise
   intermediates are inlined wherever they are read;
3. a reduction stage with too few output points at the bench sizes to fill the
   device is *peeled*: its outermost reduced indices become indices of a partial
   result, and a second stage combines the partials (``mean`` of equal-sized partial
   means is the mean; sum, max, min and prod combine as themselves);
4. the outputs' statements, reading the scratch tensors, are the last stage.

Each stage is a complete ``ir.Op`` (the op's dims, inputs and bench points, its own
outputs), so every generator renders it as it renders any op. Nothing here knows an
op by name or shape; the only size-dependent choice (how far to peel) is made from
the bench point and is data for the caller to override.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kdsl import ir
from kdsl.backends.base import Unsupported
from kdsl.backends.lower.rewrite import free_names, inline, rebuild, subst

PEELABLE = {"sum": "sum", "mean": "mean", "max": "max", "min": "min", "prod": "prod"}


@dataclass(frozen=True)
class Staged:
    """An op as stages: each an op of its own; ``scratch`` are the tensors between them."""
    op: ir.Op
    stages: tuple[ir.Op, ...]
    scratch: tuple[ir.Tensor, ...]
    peeled: bool = False  # some reduction was split into partials and their combination


def hoist_reductions(op: ir.Op) -> tuple[list[ir.Statement], dict[str, ir.Tensor]]:
    """The op's statements with every reduction that is not a statement's whole right
    side moved into an intermediate of its own (innermost first), and the intermediates'
    tensors (new and old)."""
    tensors = {t.name: t for t in op.tensors}
    out: list[ir.Statement] = []
    counter = [0]

    def hoist(e: ir.Expr, context: list[tuple[str, ir.Expr]], top: bool) -> ir.Expr:
        if isinstance(e, ir.Reduce):
            inner = context + [(r.name, _extent(r)) for r in e.indices]
            body = hoist(e.body, inner, False)
            e = dataclasses.replace(e, body=body)
            if top:
                return e
            free = free_names(e, op.dims)
            keep = [(n, ext) for n, ext in context if n in free]
            if None in (ext for _, ext in keep):
                raise Unsupported("a reduction nested in a range that does not start at 0")
            name = f"kd_r{counter[0]}"
            counter[0] += 1
            tensors[name] = ir.Tensor(name, "tmp", (_scratch_dtype(e),), None,
                                      tuple(ext for _, ext in keep))
            out.append(ir.Statement(name, tuple(n for n, _ in keep), e))
            return ir.Access(name, tuple(ir.Name(n) for n, _ in keep))
        if isinstance(e, (ir.Scan, ir.Collective)):
            return e  # their bodies stay with them
        return rebuild(e, lambda x: hoist(x, context, False))

    for st in op.statements:
        shape = tensors[st.target].shape
        context = list(zip(st.indices, shape))
        value = hoist(st.value, context, True)
        out.append(dataclasses.replace(st, value=value))
    return out, tensors


def split(op: ir.Op, bench: dict[str, int], min_programs: int = 1024,
          outputs_apart: bool = False) -> Staged:
    """``op`` as stages (see the module's docstring); with ``outputs_apart`` the outputs
    that are computed last get a stage each (outputs a single kernel cannot share: scans
    along different axes). Raises ``Unsupported`` when there is nothing to split."""
    statements, tensors = hoist_reductions(op)
    reductions = [st for st in statements if isinstance(st.value, ir.Reduce)]
    flipped = _scans_read_elsewhere(statements)
    if not reductions and not flipped and not (outputs_apart and len(op.outputs) > 1):
        raise Unsupported("no reduction to stage")
    operands = _computed_operands(statements, reductions) | flipped
    moments = dict(_moment_pairs(reductions))  # mean -> its variance
    paired = set(moments.values())
    groups: list[list[ir.Statement]] = []  # the statements of each stage, in order
    peeled = False
    for st in statements:
        if st in paired:
            continue  # computed with its mean
        if st in moments:
            parts = _peel_moments(st, moments[st], tensors, bench, min_programs)
            peeled = peeled or len(parts) > 1
            groups += parts
        elif st in reductions:
            parts = _split_long(st, tensors, bench, op) or \
                _peel(st, tensors, bench, min_programs, op)
            peeled = peeled or len(parts) > 1
            groups += [[p] for p in parts]
        elif st.target in operands:
            groups.append([st])
    produced = [st for g in groups for st in g]
    materialized = {st.target for st in produced}
    defs = {st.target: st for st in statements}
    outputs = [t.name for t in op.outputs]
    scratch = {name: dataclasses.replace(tensors[name], role="tmp")
               for name in materialized if name not in outputs}

    stages = []
    for group in groups:
        stages.append(_stage(op, f"{op.name}_s{len(stages)}", group, defs, materialized,
                             tensors, scratch))
    rest = [defs[n] for n in outputs if n not in materialized]
    for group in ([[st] for st in rest] if outputs_apart else [rest] if rest else []):
        stages.append(_stage(op, f"{op.name}_s{len(stages)}", group, defs, materialized,
                             tensors, scratch))
    return Staged(op, tuple(stages), tuple(scratch.values()), peeled=peeled)


def _computed_operands(statements, reductions) -> set[str]:
    """Elementwise intermediates read as a factor of a sum of products along its reduced
    indices (attention's probabilities times V): materialized, the sum is a contraction
    of two reads, which a generator can render as a GEMM."""
    defs = {st.target: st for st in statements}
    out: set[str] = set()
    for st in reductions:
        red = st.value
        if red.op not in ("sum", "mean"):
            continue
        reduced = {r.name for r in red.indices}
        along = [f for f in _factors(red.body) if free_names(f) & reduced]
        if len(along) < 2:  # not a contraction
            continue
        for f in along:
            if isinstance(f, ir.Access) and f.tensor in defs and \
                    not isinstance(defs[f.tensor].value, ir.Reduce) and \
                    any(free_names(s) & reduced for s in f.subscripts):
                out.add(f.tensor)
    return out


def _scans_read_elsewhere(statements) -> set[str]:
    """Scans read at a computed index (a reversed row, ``r[i, N - 1 - j]``): a scan runs
    along its own index, so another stage reads its result."""
    scans = {st.target for st in statements if isinstance(st.value, ir.Scan)}
    out = set()
    for st in statements:
        for n in ir.walk(st.value):
            if isinstance(n, ir.Access) and n.tensor in scans and \
                    not all(isinstance(s, ir.Name) for s in n.subscripts):
                out.add(n.tensor)
    return out


def _factors(e: ir.Expr) -> list[ir.Expr]:
    if isinstance(e, ir.Binary) and e.op == "*":
        return _factors(e.left) + _factors(e.right)
    return [e]


# a sum over one index this many times longer than the square root of its output points
# is split along that index (split-K): the partial sums fill the device, and each adds a
# chunk in f32 instead of one accumulator adding the whole range (a matrix-vector product
# over K = 1,048,576 was wrong at the bench point in f32 with one accumulator)
LONG_RATIO = 64
CHUNK = 8192


def _split_long(st: ir.Statement, tensors, bench, op) -> list[ir.Statement] | None:
    """[partials, their sum] of a long sum of products over one index k in 0..K, k read
    only as a subscript of the factors it touches: k = s * CHUNK + q, the factors padded
    with 0 past K, partial[F, s] = sum(q) ..., then target[F] = sum(s) partial[F, s].
    None where that does not apply or pay."""
    red = st.value
    if red.op != "sum" or len(red.indices) != 1 or not bench:
        return None
    r = red.indices[0]
    extent = _extent(r)
    length, points = _size((extent,), bench) if extent is not None else None, \
        _size(tensors[st.target].shape, bench)
    if length is None or points is None or length <= CHUNK or \
            length <= LONG_RATIO * points ** 0.5:
        return None
    for f in _factors(red.body):
        if r.name in free_names(f) and not (isinstance(f, ir.Access) and f.pad is None):
            return None  # a factor that a zero pad would not zero
    s, q = f"{r.name}_chunk", f"{r.name}_in"
    chunks = ir.Binary("//", ir.Binary("+", extent, ir.Num(CHUNK - 1)), ir.Num(CHUNK))
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
    tensors[name] = ir.Tensor(name, "tmp", ("f32",), None,
                              (chunks,) + tensors[st.target].shape)
    partial = ir.Statement(name, (s,) + st.indices, ir.Reduce(
        "sum", (ir.IndexRange(q, ir.Num(0), ir.Num(CHUNK)),), chunked(red.body)))
    combine = ir.Reduce("sum", (ir.IndexRange(s, ir.Num(0), chunks),),
                        ir.Access(name, (ir.Name(s),) + tuple(ir.Name(n) for n in st.indices)))
    return [partial, dataclasses.replace(st, value=combine)]


def _moment_pairs(reductions) -> list[tuple[ir.Statement, ir.Statement]]:
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


def _peel_moments(mean: ir.Statement, var: ir.Statement, tensors, bench, min_programs
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
        tensors[name] = ir.Tensor(name, "tmp", ("f32",), None,
                                  tensors[mean.target].shape + tuple(_extent(r) for r in peeled))
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
    points = _size(shape, bench)
    if points is None or points >= min_programs:
        return []
    peeled = []
    for r in _memory_order(red)[:-1]:
        if _extent(r) is None:
            break
        peeled.append(r)
        size = _size(tuple(_extent(p) for p in peeled), bench)
        if size is None or points * size >= min_programs:
            break
    return peeled


def _peel(st: ir.Statement, tensors, bench, min_programs, op) -> list[ir.Statement]:
    """The stage(s) computing one reduction statement: itself, or partials then their
    combination when its outputs would be too few programs at the bench sizes."""
    red: ir.Reduce = st.value
    peeled = _peel_indices(red, tensors[st.target].shape, bench, min_programs)
    if not peeled:
        return [st]
    rest = tuple(r for r in red.indices if r not in peeled)
    name = f"{st.target}_part"
    shape = tensors[st.target].shape + tuple(_extent(r) for r in peeled)
    tensors[name] = ir.Tensor(name, "tmp", ("f32",), None, shape)
    indices = st.indices + tuple(r.name for r in peeled)
    partial = ir.Statement(name, indices, dataclasses.replace(red, indices=rest))
    fresh = {r.name: ir.Name(f"{r.name}_p") for r in peeled}
    combine = ir.Reduce(PEELABLE[red.op],
                        tuple(dataclasses.replace(r, name=f"{r.name}_p") for r in peeled),
                        ir.Access(name, tuple(ir.Name(n) for n in st.indices)
                                  + tuple(fresh[r.name] for r in peeled)))
    return [partial, dataclasses.replace(st, value=combine)]


def _stage(op: ir.Op, name: str, own: list[ir.Statement], defs, materialized, tensors,
           scratch) -> ir.Op:
    """One stage as an op: ``own`` statements, the elementwise intermediates they read
    (inlined by the generator), every input of the op and the scratch tensors read."""
    need: list[ir.Statement] = []
    reads: set[str] = set()
    inputs = {t.name for t in op.inputs}

    def visit(e: ir.Expr) -> None:
        for n in ir.walk(e):
            if isinstance(n, ir.Access):
                if n.tensor in materialized or n.tensor in inputs:
                    reads.add(n.tensor)
                elif n.tensor in defs and defs[n.tensor] not in need:
                    visit(defs[n.tensor].value)
                    need.append(defs[n.tensor])
            elif isinstance(n, ir.Name) and n.name in inputs:  # segment_of(offsets, i)
                reads.add(n.name)
    for st in own:
        visit(st.value)
    targets = {st.target for st in own}
    outs = [dataclasses.replace(tensors[t], role="out") for t in sorted(targets)
            if t in scratch]
    outs += [t for t in op.outputs if t.name in targets]
    # only the inputs it reads: a stage's kernels are compiled once per dtype they see
    ins = [t for t in op.inputs if t.name in reads]
    ins += [dataclasses.replace(scratch[t], role="in")
            for t in sorted(reads - targets) if t in scratch]
    ins += [dataclasses.replace(t, role="in") for t in op.outputs
            if t.name in reads - targets]
    present = {t.name for t in ins + outs}
    every = tuple(_own_dtypes(op, t, present) for t in ins + outs)
    # the elementwise intermediates inlined: a stage is one statement an output, which
    # every generator's pattern matching (a contraction's operands, say) reads directly
    sub = dataclasses.replace(op, name=name, tensors=every + tuple(
        dataclasses.replace(tensors[st.target], role="tmp") for st in need),
        statements=tuple(need + own), baseline=None)
    inlined = inline(sub)
    return dataclasses.replace(sub, tensors=every, statements=tuple(
        inlined[t.name] for t in every if t.role == "out"))


def _own_dtypes(op: ir.Op, t: ir.Tensor, present: set[str]) -> ir.Tensor:
    """``t`` with a ``like`` of a tensor the stage does not have replaced by the dtypes
    that tensor declares (the op's one type variable either way)."""
    if t.like is None or t.like in present:
        return t
    holder = op.tensor(t.like)
    while holder.like is not None and holder.like not in present:
        holder = op.tensor(holder.like)
    if holder.like is not None:
        return dataclasses.replace(t, like=holder.like)
    return dataclasses.replace(t, like=None, dtypes=holder.dtypes)


def _scratch_dtype(e: ir.Reduce) -> str:
    return "i64" if e.op in ("argmax", "argmin") else "f32"


def _extent(r: ir.IndexRange) -> ir.Expr | None:
    """The extent of a bound index when it starts at 0 (a tensor can be indexed by it)."""
    if isinstance(r.lo, ir.Num) and r.lo.value == 0:
        return r.hi
    return None


def _size(shape, bench: dict[str, int]) -> int | None:
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


def recomputed(values, program_axes: dict[str, ir.Expr], bench, dims) -> bool:
    """Whether a fused kernel would compute a reduction again in programs that differ
    only along axes it does not read: ``values`` are (body, ranges) of the reductions,
    ``program_axes`` each program axis with its extent."""
    for body, ranges in values:
        free = free_names(body, dims)
        for lo, hi in ranges:
            free |= free_names(lo, dims) | free_names(hi, dims)
        for axis, extent in program_axes.items():
            if axis not in free and (_size((extent,), bench) or 2) > 1:
                return True
    return False


__all__ = ["Staged", "hoist_reductions", "split", "recomputed", "subst"]
