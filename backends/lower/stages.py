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
3. a reduction computed whole that would leave the device idle or lose accuracy is
   computed as partials and their combination (``partials``: peeling, a mean and its
   variance in one pass, split-K);
4. an elementwise factor of a sum of products is materialized, so that the sum is a
   contraction of two reads (a GEMM); a scan read at a computed index is materialized;
   a sort or top-k read by another statement is materialized, in one stage with the
   sorts and top-ks of the same values (a router's top-k weights and their indices);
5. the outputs' statements, reading the scratch tensors, are the last stage (or one
   stage an output, where they cannot share a kernel).

Each stage is a complete ``ir.Op`` (the op's dims, inputs and bench points, its own
outputs), so every generator renders it as it renders any op. Nothing here knows an
op by name or shape; the size-dependent choices (how far to peel, whether to split a
sum) are made from the bench point.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kdsl import ir
from kdsl.backends.base import Unsupported
from kdsl.backends.lower.partials import (chunked, extent, moment_pairs, peel, peel_moments,
                                          size_at, split_long)
from kdsl.backends.lower.rewrite import factors, free_names, inline, rebuild


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
            inner = context + [(r.name, extent(r)) for r in e.indices]
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
            tensors[name] = ir.Tensor(name, "tmp", (_scratch_dtype(op, e),), None,
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


def hoist_outer_invariant(op: ir.Op) -> ir.Op:
    """``op`` with each reduction in a statement's right side (not the whole of it, not
    inside another reduction) that does not read an output index while it reads a later
    one moved into an intermediate of its own: a loop nest in the output's order would
    otherwise compute it again at every value of the index it does not read
    (``y[b, c, l] = e[b, c, l] / sum(c) e[b, c, l]``, a softmax over the middle axis, summed
    C times over; the C nest ran it at 0.24x of torch). ``op`` itself where there is none."""
    tensors = list(op.tensors)
    statements: list[ir.Statement] = []
    counter = [0]
    for st in op.statements:
        shape = dict(zip(st.indices, op.tensor(st.target).shape))
        extra: list[ir.Statement] = []

        def visit(e: ir.Expr, top: bool) -> ir.Expr:
            if isinstance(e, ir.Reduce):
                free = free_names(e, op.dims)
                read = [n in free for n in st.indices]
                skipped = [k for k, r in enumerate(read) if not r]
                if top or not skipped or not any(read[skipped[0] + 1:]):
                    return e
                keep = [n for n in st.indices if n in free]
                name = f"kd_h{counter[0]}_{st.target}"
                counter[0] += 1
                tensors.append(ir.Tensor(name, "tmp", (_scratch_dtype(op, e),), None,
                                         tuple(shape[n] for n in keep)))
                extra.append(ir.Statement(name, tuple(keep), e))
                return ir.Access(name, tuple(ir.Name(n) for n in keep))
            if isinstance(e, (ir.Scan, ir.Collective)):
                return e
            return rebuild(e, lambda x: visit(x, False))
        value = visit(st.value, True)
        statements += extra + [dataclasses.replace(st, value=value)]
    if counter[0] == 0:
        return op
    return dataclasses.replace(op, tensors=tuple(tensors), statements=tuple(statements))


def split(op: ir.Op, bench: dict[str, int], min_programs: int = 1024,
          outputs_apart: bool = False, whole: frozenset = frozenset()) -> Staged:
    """``op`` as stages (see the module's docstring); with ``outputs_apart`` the outputs
    that are computed last get a stage each (outputs a single kernel cannot share: scans
    along different axes); the reductions that compute the tensors named in ``whole`` a
    stage each, as they are (never peeled nor joined: a generator renders them whole, a
    scatter-add). Raises ``Unsupported`` when there is nothing to split."""
    statements, tensors = hoist_reductions(op)
    reductions = [st for st in statements if isinstance(st.value, ir.Reduce)]
    flipped = _scans_read_elsewhere(statements) | _padded_reads(statements)
    sorted_together = _collectives_read(statements)
    if not reductions and not flipped and not sorted_together and \
            not (outputs_apart and len(op.outputs) > 1):
        raise Unsupported("no reduction to stage")
    operands = _computed_operands(statements, reductions) | flipped
    moments = dict(moment_pairs(reductions))  # mean -> its variance
    paired = set(moments.values())
    groups: list[list[ir.Statement]] = []  # the statements of each stage, in order
    peeled = False
    for st in statements:
        if st in paired:
            continue  # computed with its mean
        if st.target in sorted_together:
            if sorted_together[st.target]:  # (empty: in the stage of the first)
                groups.append(sorted_together[st.target])
            continue
        if st in moments:
            parts = peel_moments(st, moments[st], tensors, bench, min_programs)
            peeled = peeled or len(parts) > 1
            groups += parts
        elif st in reductions and st.target in whole:
            groups.append([st])
        elif st in reductions:
            parts = split_long(st, tensors, bench, op) or \
                chunked(st, tensors, bench, min_programs) or \
                peel(st, tensors, bench, min_programs, op)
            peeled = peeled or len(parts) > 1
            if len(parts) == 1 and groups and _same_rows(groups[-1], st, tensors):
                groups[-1].append(st)  # one pass over the rows computes both
                continue
            groups += [[p] for p in parts]
        elif st.target in operands:
            groups.append([st])
    produced = [st for g in groups for st in g]
    materialized = {st.target for st in produced}
    defs = {st.target: st for st in statements}
    outputs = [t.name for t in op.outputs]
    # in the order computed, not a set's: the rendered source is the same in every process
    scratch = {st.target: dataclasses.replace(tensors[st.target], role="tmp")
               for st in produced if st.target not in outputs}

    stages = []
    for group in groups:
        stages.append(_stage(op, f"{op.name}_s{len(stages)}", group, defs, materialized,
                             tensors, scratch))
    rest = [defs[n] for n in outputs if n not in materialized]
    for group in ([[st] for st in rest] if outputs_apart else [rest] if rest else []):
        stages.append(_stage(op, f"{op.name}_s{len(stages)}", group, defs, materialized,
                             tensors, scratch))
    return Staged(op, tuple(stages), tuple(scratch.values()), peeled=peeled)


def _same_rows(group: list[ir.Statement], st: ir.Statement, tensors) -> bool:
    """Whether reduction ``st`` can join the stage of ``group``, a stage of whole
    reductions: the same output axes (names and extents) and the same reduced ranges, every
    read of the group's results at the row's own indices, and a read of those results or of
    a tensor element the group reads too. Then one program a row
    computes them all, one pass over the data (a log-sum-exp's maximum and its sum of
    exponentials, before the loss averages them), not a kernel each that reads the data
    again."""
    if not isinstance(st.value, ir.Reduce):
        return False
    own = {g.target for g in group}
    for g in group:
        if not isinstance(g.value, ir.Reduce) or g.indices != st.indices or \
                tensors[g.target].shape != tensors[st.target].shape or \
                g.value.op in ("argmax", "argmin") or st.value.op in ("argmax", "argmin") or \
                [(r.name, r.lo, r.hi) for r in g.value.indices] != \
                [(r.name, r.lo, r.hi) for r in st.value.indices]:
            return False
    row = tuple(ir.Name(i) for i in st.indices)
    for n in ir.walk(st.value):
        if isinstance(n, ir.Access) and n.tensor in own and tuple(n.subscripts) != row:
            return False
    if any(isinstance(n, ir.Access) and n.tensor in own for n in ir.walk(st.value)):
        return True
    # or independent of them but reading one of their reads (a triplet loss's two distances
    # both read the anchor): one pass reads it once
    theirs = {(n.tensor, n.subscripts) for g in group for n in ir.walk(g.value)
              if isinstance(n, ir.Access)}
    return any(isinstance(n, ir.Access) and (n.tensor, n.subscripts) in theirs
               for n in ir.walk(st.value))


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
        along = [f for f in factors(red.body) if free_names(f) & reduced]
        if len(along) < 2:  # not a contraction
            continue
        for f in along:
            if isinstance(f, ir.Access) and f.tensor in defs and \
                    not isinstance(defs[f.tensor].value, ir.Reduce) and \
                    any(free_names(s) & reduced for s in f.subscripts):
                out.add(f.tensor)
    return out


def _collectives_read(statements) -> dict[str, list[ir.Statement]]:
    """Sorts and top-ks that another statement reads (a softmax over a router's top-k
    logits): a sort stands alone on its right side, so its result is a stage's output,
    not an expression inlined where it is read. Each maps to its stage: every sort and
    top-k over the same values and range (``topk`` and ``argtopk`` of one row), once, in
    the stage of the first; the others map to an empty list."""
    defs = [st for st in statements if isinstance(st.value, ir.Collective)]
    read = {n.tensor for st in statements for n in ir.walk(st.value)
            if isinstance(n, ir.Access)}
    out: dict[str, list[ir.Statement]] = {}
    for st in defs:
        if st.target not in read or st.target in out:
            continue
        key = _sorted_values(st)
        same = [o for o in defs if _sorted_values(o) == key and o.indices == st.indices]
        for o in same:
            out[o.target] = []
        out[same[0].target] = same
    return out


def _sorted_values(st: ir.Statement):
    e = st.value
    return (e.index.name, e.index.lo, e.index.hi, e.k, e.body)


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


def _padded_reads(statements) -> set[str]:
    """Elementwise intermediates read with a pad (a pool over a scaled input, ``t[i, o * 2
    + k - 1] pad(-inf)``): a padded read is of memory, so they are materialized (a
    generator inlining them would have to pad an expression)."""
    computed = {st.target for st in statements
                if not isinstance(st.value, (ir.Reduce, ir.Scan, ir.Collective))}
    return {n.tensor for st in statements for n in ir.walk(st.value)
            if isinstance(n, ir.Access) and n.pad is not None and n.tensor in computed}


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


def _scratch_dtype(op: ir.Op, e: ir.Reduce) -> str:
    return "i64" if e.op in ("argmax", "argmin") else op.scratch_float


def recomputed(values, program_axes: dict[str, ir.Expr], bench, dims) -> bool:
    """Whether a fused kernel would compute a reduction again in programs that differ
    only along axes it does not read: ``values`` are (body, ranges) of the reductions,
    ``program_axes`` each program axis with its extent."""
    for body, ranges in values:
        free = free_names(body, dims)
        for lo, hi in ranges:
            free |= free_names(lo, dims) | free_names(hi, dims)
        for axis, length in program_axes.items():
            if axis not in free and (size_at((length,), bench) or 2) > 1:
                return True
    return False


__all__ = ["Staged", "hoist_reductions", "split", "recomputed"]
