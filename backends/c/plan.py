"""Planning a C kernel from checked IR: inlining, fusion into loop groups, storage.

A *group* is a run of consecutive statements that share their leading left-side
indices (same extents): the group's parallel loops run over them once, and each
statement's remaining indices become inner loops in every iteration. A statement
joins the group only if every read of a tensor produced inside the group uses the
group's indices at those positions, so one iteration produces all it consumes.

Storage of an intermediate follows from the groups: read by a later group ->
``global`` (a full buffer); indexed only by the group's indices -> ``scalar``;
otherwise a per-thread ``row`` buffer over its remaining dims. Elementwise
intermediates may instead be inlined into their readers before grouping.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kdsl import ir
from kdsl.backends.lower.rewrite import substitute

SIMPLE_REDUCTIONS = ("sum", "max", "min", "prod", "mean", "argmax", "argmin")


@dataclass(frozen=True)
class StmtPlan:
    st: ir.Statement
    p: int                    # leading left-side indices that are the group's parallel loops
    inner: tuple[str, ...]    # the other left-side indices, in loop order (innermost last)


@dataclass(frozen=True)
class GroupPlan:
    stmts: tuple[StmtPlan, ...]
    extents: tuple[ir.Expr, ...]  # of the parallel indices

    @property
    def p(self) -> int:
        return len(self.extents)


@dataclass(frozen=True)
class Plan:
    op: ir.Op
    groups: tuple[GroupPlan, ...]
    storage: dict  # tensor name -> 'input' | 'output' | 'global' | 'scalar' | 'row'
    group_of: dict  # produced tensor -> group number
    contractions: dict = field(default_factory=dict)  # target -> Contraction, each alone
    scatters: dict = field(default_factory=dict)  # target -> lower.scatter.Scatter, each alone


# ---- expression utilities ----

def binders(e: ir.Expr) -> tuple[str, ...]:
    if isinstance(e, ir.Reduce):
        return tuple(r.name for r in e.indices)
    if isinstance(e, ir.Collective):
        return (e.index.name,)
    return ()


def free_names(e: ir.Expr) -> set[str]:
    """Names an expression reads from outside (indices, dims, constants)."""
    if isinstance(e, ir.Name):
        return {e.name}
    if isinstance(e, ir.Num):
        return set()
    if isinstance(e, ir.Reduce):
        out, bound = set(), set()
        for r in e.indices:
            out |= (free_names(r.lo) | free_names(r.hi)) - bound
            bound.add(r.name)
        return out | (free_names(e.body) - bound)
    if isinstance(e, ir.Collective):
        out = free_names(e.index.lo) | free_names(e.index.hi)
        if e.k is not None:
            out |= free_names(e.k)
        return out | (free_names(e.body) - {e.index.name})
    if isinstance(e, ir.Scan):
        return free_names(e.body) | {e.index}
    if isinstance(e, ir.Call) and e.fn == "segment_of":
        return free_names(e.args[1])
    out = set()
    for c in ir.operands(e):
        out |= free_names(c)
    return out


def is_elementwise(e: ir.Expr) -> bool:
    return not any(isinstance(n, (ir.Reduce, ir.Scan, ir.Collective)) for n in ir.walk(e))


def replace_reads(e: ir.Expr, tensor: str, fn) -> ir.Expr:
    """``e`` with every ``tensor[...]`` read replaced by ``fn(access)``."""
    if isinstance(e, ir.Access):
        e = dataclasses.replace(e, subscripts=tuple(replace_reads(s, tensor, fn)
                                                    for s in e.subscripts),
                                pad=None if e.pad is None else replace_reads(e.pad, tensor, fn))
        return fn(e) if e.tensor == tensor else e
    if isinstance(e, (ir.Num, ir.Name)):
        return e
    rec = lambda x: replace_reads(x, tensor, fn)  # noqa: E731
    if isinstance(e, ir.Unary):
        return dataclasses.replace(e, operand=rec(e.operand))
    if isinstance(e, ir.Binary):
        return dataclasses.replace(e, left=rec(e.left), right=rec(e.right))
    if isinstance(e, ir.Call):
        if e.fn == "segment_of":
            return dataclasses.replace(e, args=(e.args[0], rec(e.args[1])))
        return dataclasses.replace(e, args=tuple(rec(a) for a in e.args))
    if isinstance(e, ir.Scan):
        return dataclasses.replace(e, body=rec(e.body))
    if isinstance(e, ir.Reduce):
        return dataclasses.replace(e, indices=tuple(dataclasses.replace(r, lo=rec(r.lo), hi=rec(r.hi))
                                                    for r in e.indices), body=rec(e.body))
    if isinstance(e, ir.Collective):
        return dataclasses.replace(e, index=dataclasses.replace(e.index, lo=rec(e.index.lo),
                                                                hi=rec(e.index.hi)),
                                   k=None if e.k is None else rec(e.k), body=rec(e.body))
    raise AssertionError(e)


def reads(e: ir.Expr) -> set[str]:
    out = {n.tensor for n in ir.walk(e) if isinstance(n, ir.Access)}
    out |= {n.args[0].name for n in ir.walk(e) if isinstance(n, ir.Call) and n.fn == "segment_of"}
    return out


def all_binder_names(e: ir.Expr) -> set[str]:
    return {b for n in ir.walk(e) for b in binders(n)}


# ---- inlining ----

def inlinable(op: ir.Op) -> list[str]:
    """Intermediates whose value is elementwise and that are never read with a pad."""
    out = []
    for st in op.statements:
        t = op.tensor(st.target)
        if t.role != "tmp" or not is_elementwise(st.value):
            continue
        padded = any(isinstance(n, ir.Access) and n.tensor == t.name and n.pad is not None
                     for s in op.statements for n in ir.walk(s.value))
        outer = free_names(st.value) - set(st.indices)
        captured = any(outer & all_binder_names(s.value) for s in op.statements
                       if t.name in reads(s.value))
        if not padded and not captured:
            out.append(t.name)
    return out


def inline(op: ir.Op) -> ir.Op:
    """``op`` with every inlinable intermediate substituted into its readers."""
    names = set(inlinable(op))
    statements = list(op.statements)
    for name in [s.target for s in op.statements if s.target in names]:
        st = next(s for s in statements if s.target == name)

        def expand(access, st=st):
            return substitute(st.value, dict(zip(st.indices, access.subscripts)))
        statements = [dataclasses.replace(s, value=replace_reads(s.value, name, expand))
                      for s in statements if s is not st]
    tensors = tuple(t for t in op.tensors if t.name not in names)
    return dataclasses.replace(op, tensors=tensors, statements=tuple(statements))


# ---- grouping ----

def special_indices(st: ir.Statement) -> set[str]:
    """Left-side indices that must stay inner: scanned ones and collective outputs."""
    out = set()
    for n in ir.walk(st.value):
        if isinstance(n, ir.Scan):
            out.add(n.index)
        elif isinstance(n, ir.Collective):
            if n.op in ("sort", "argsort"):
                out.add(n.index.name)
            else:
                body = free_names(n.body)
                out |= {x for x in st.indices if x not in body}
    return out


def parallel_candidates(st: ir.Statement) -> tuple[str, ...]:
    special = special_indices(st)
    prefix = []
    for name in st.indices:
        if name in special:
            break
        prefix.append(name)
    if len(prefix) == len(st.indices) and len(prefix) >= 2:
        prefix.pop()
    return tuple(prefix)


def inner_order(st: ir.Statement, p: int) -> tuple[str, ...]:
    rest = list(st.indices[p:])
    special = [n for n in rest if n in special_indices(st)]
    return tuple([n for n in rest if n not in special] + special)


def _reads_in_iteration(e: ir.Expr, produced: set[str], lhs: tuple[str, ...], q: int,
                        shadow: frozenset = frozenset()) -> bool:
    """Every read of a ``produced`` tensor uses ``lhs[:q]`` (unshadowed) at positions < q."""
    if isinstance(e, ir.Access) and e.tensor in produced:
        for pos in range(q):
            s = e.subscripts[pos] if pos < len(e.subscripts) else None
            if not (isinstance(s, ir.Name) and s.name == lhs[pos] and s.name not in shadow):
                return False
    if isinstance(e, ir.Call) and e.fn == "segment_of" and e.args[0].name in produced:
        return False
    if isinstance(e, ir.Reduce):
        inner = set(shadow)
        for r in e.indices:
            if not (_reads_in_iteration(r.lo, produced, lhs, q, frozenset(inner)) and
                    _reads_in_iteration(r.hi, produced, lhs, q, frozenset(inner))):
                return False
            inner.add(r.name)
        return _reads_in_iteration(e.body, produced, lhs, q, frozenset(inner))
    if isinstance(e, ir.Collective):
        for x in (e.index.lo, e.index.hi, e.k):
            if x is not None and not _reads_in_iteration(x, produced, lhs, q, shadow):
                return False
        return _reads_in_iteration(e.body, produced, lhs, q, shadow | {e.index.name})
    return all(_reads_in_iteration(c, produced, lhs, q, shadow) for c in ir.operands(e))


def _extents(op: ir.Op, st: ir.Statement, names: tuple[str, ...]) -> tuple[ir.Expr, ...]:
    shape = op.tensor(st.target).shape
    return tuple(shape[st.indices.index(n)] for n in names)


def plan(op: ir.Op, fuse: bool = True, inline_tmps: bool = False, gemm: bool = False,
         conv: bool = False, scatter: bool = False) -> Plan:
    """Groups and storage; with ``gemm``, every contraction (``contraction.recognise``)
    is a group of its own, which the renderer writes as a packed GEMM; with ``conv``,
    likewise every convolution (``conv.recognise``), for the direct kernel; with
    ``scatter``, every sum over an indicator (``lower.scatter.match``), as a scatter-add."""
    if inline_tmps:
        op = inline(op)
    scattered = {}
    if scatter:
        from kdsl.backends.lower.scatter import scatters
        scattered = scatters(op)
    contracted = {}
    if gemm:
        from kdsl.backends.c.contraction import contractions
        contracted = {k: v for k, v in contractions(op).items() if k not in scattered}
    alone = dict(contracted)
    if conv:
        from kdsl.backends.c.conv import convolutions
        alone.update({k: v for k, v in convolutions(op).items() if k not in scattered})
    alone.update(scattered)
    raw: list[tuple[list[ir.Statement], tuple[ir.Expr, ...]]] = []
    for st in op.statements:
        ext = _extents(op, st, parallel_candidates(st))
        if fuse and raw and raw[-1][1] and ext and st.target not in alone and \
                not any(s.target in alone for s in raw[-1][0]):
            members, gext = raw[-1]
            q = 0
            while q < min(len(gext), len(ext)) and gext[q] == ext[q]:
                q += 1
            produced = {s.target for s in members}
            if q >= 1 and _reads_in_iteration(st.value, produced, st.indices, q):
                raw[-1] = (members + [st], gext[:q])
                continue
        raw.append(([st], ext))
    groups, group_of = [], {}
    for g, (members, ext) in enumerate(raw):
        p = len(ext)
        groups.append(GroupPlan(tuple(StmtPlan(s, p, inner_order(s, p)) for s in members), ext))
        for s in members:
            group_of[s.target] = g
    storage = {}
    for t in op.tensors:
        if t.role in ("in", "out"):
            storage[t.name] = {"in": "input", "out": "output"}[t.role]
            continue
        g = group_of[t.name]
        read_later = any(t.name in reads(s.st.value) for h in groups[g + 1:] for s in h.stmts)
        p = groups[g].p
        if read_later or p == 0 or t.name in alone:
            storage[t.name] = "global"
        else:
            storage[t.name] = "scalar" if len(t.shape) == p else "row"
    return Plan(op, tuple(groups), storage, group_of, contracted, scattered)


# ---- facts the search space depends on ----

def interchangeable(sp: StmtPlan, d: str | None = None) -> list[ir.Reduce]:
    """Top-level reductions of a statement that can run outside its innermost loop (or
    the loop of ``d``, another of its left-side indices).

    They depend on that index, their ranges do not, and the statement has no scan (a scan
    needs that index sequential)."""
    if d is None and not sp.inner or any(isinstance(n, ir.Scan) for n in ir.walk(sp.st.value)):
        return []
    d = d or sp.inner[-1]
    out = []

    def visit(e):
        if isinstance(e, ir.Reduce):
            if e.op in SIMPLE_REDUCTIONS and d in free_names(e) and \
                    not any(d in free_names(r.lo) | free_names(r.hi) for r in e.indices) and \
                    (e.op not in ("argmax", "argmin") or len(e.indices) == 1) and \
                    d not in binders(e) and e not in out:
                out.append(e)
            return
        if isinstance(e, (ir.Scan, ir.Collective)):
            return
        for c in ir.operands(e):
            visit(c)
    visit(sp.st.value)
    return out


def prefers_outer(sp: StmtPlan, red: ir.Reduce, d: str | None = None) -> bool:
    """The heuristic default: interchange when the innermost index moves along the last
    (contiguous) dim of something the reduction streams (a read that moves with its
    indices too), so the tile loop walks memory in order. A read the reduction does not
    move (a group norm's mean per group, inside its variance) is one value a tile lane:
    it gains nothing from the tile, and the streamed reads then gather across it."""
    d, bound = d or sp.inner[-1], set(binders(red))
    for n in ir.walk(red.body):
        if isinstance(n, ir.Access) and n.subscripts and d in free_names(n.subscripts[-1]) \
                and bound & set().union(*(free_names(s) for s in n.subscripts)):
            return True
    return False


def tiled_index(plan: Plan, g: GroupPlan) -> str | None:
    """The last parallel index of a group to run in tiles, with the group's reductions
    interchanged inside each tile, or None.

    A group of statements that have no loop of their own besides their reductions (a
    column's max and sum, ``m[j] = max(i) x[i, j]``) otherwise walks each reduction down
    a column, a strided read an element at a time; in tiles of ``j`` every step of the
    reduction reads a contiguous run of a row. Only where every statement's reductions
    can run outside that index and one of them streams along it, and what the group
    produces lives in memory (an intermediate kept per parallel point would need a tile of
    its own)."""
    if not g.p or any(sp.inner for sp in g.stmts):
        return None
    d = g.stmts[0].st.indices[g.p - 1]
    streams = False
    for sp in g.stmts:
        if sp.st.indices[g.p - 1] != d or plan.storage[sp.st.target] not in ("output", "global"):
            return None
        if any(isinstance(n, (ir.Scan, ir.Collective)) for n in ir.walk(sp.st.value)):
            return None
        reds = interchangeable(sp, d)
        top = [n for n in _top_reductions(sp.st.value)]
        if len(reds) != len(top):
            return None
        streams = streams or any(prefers_outer(sp, r, d) for r in reds)
    return d if streams else None


def _top_reductions(e: ir.Expr) -> list[ir.Reduce]:
    if isinstance(e, ir.Reduce):
        return [e]
    return [r for c in ir.operands(e) for r in _top_reductions(c)]
