"""What a Triton program computes for an op: its axes, row values and stores.

A plan reads only the IR. The outputs' statements are inlined (see
``triton_ir``); then the output's indices become program axes:

- scalar axes: one value per program (decoded from ``program_id``);
- the row axis: tiled by ``BLOCK_R`` lanes (``[BLOCK_R, 1]`` values);
- the column: ``BLOCK_C`` lanes (``[1, BLOCK_C]``) that reductions, scans and
  collectives run along; for pointwise ops it is the output's last index, tiled
  across programs.

A reduction becomes a *row value* (``__rvN``), computed once per program row
before the outputs that read it. An output index that only appears inside
``segment_of(offsets, i)`` (jagged ops) is enumerated segment by segment: the
program axis is the segment ``__seg`` and ``i`` runs over
``offsets[__seg] .. offsets[__seg + 1]``, which covers every ``i`` exactly once
because offsets start at 0, end at the extent of ``i`` and never decrease.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdsl import ir

from kdsl.backends.base import Unsupported
from kdsl.backends.lower.rewrite import (Hoister, RowValue, contains, free_names, inline, is_static,
                        replace_segment_of, subst)

SEG = "__seg"
Range = tuple[ir.Expr, ir.Expr]  # [lo, hi)


@dataclass(frozen=True)
class Store:
    tensor: str
    indices: tuple[str, ...]
    value: ir.Expr
    inner: bool  # reads the column axis: stored once per column block


@dataclass(frozen=True)
class Fused:
    """Row values computed together in one looped pass (the 'online' strategy)."""
    pattern: str  # 'maxsum': max then sum(exp(F - max)); 'welford': mean then mean((F-mean)**2)
    first: str
    second: str


@dataclass(frozen=True)
class Group:
    """One collective (sort or top-k) shared by the outputs that read it."""
    family: str  # 'sort' (ascending, stable) | 'topk' (descending, lowest index first)
    body: ir.Expr  # over the row axes and '__k0'
    k: ir.Expr | None


@dataclass(frozen=True)
class Plan:
    kind: str  # 'pointwise' | 'rows' | 'collective'
    scalar_axes: tuple[tuple[str, ir.Expr], ...]  # (name, extent), outermost first
    row_axis: tuple[str, ir.Expr] | None
    inner: str | None  # the output index that the column axis enumerates
    column: Range | None
    row_values: tuple[RowValue, ...] = ()
    stores: tuple[Store, ...] = ()
    fused: tuple[Fused, ...] = ()
    groups: tuple[Group, ...] = ()
    store_groups: tuple[tuple[int, str], ...] = ()  # per store: (group, 'values'|'indices')

    static_column: bool = False  # reductions and the inner axis share one static range
    shared_column: bool = False  # ... share one range, static or not (a segment)

    @property
    def onepass(self) -> bool:
        """Whether the whole column can be one register tile."""
        return self.column is not None and self.kind != "pointwise" and self.static_column


def make_plan(op: ir.Op) -> Plan:
    stmts = inline(op)
    outs = [stmts[t.name] for t in op.outputs]
    main = max(outs, key=lambda s: len(s.indices))
    if any(isinstance(s.value, ir.Collective) for s in outs):
        return _collective_plan(op, outs, main)
    for s in outs:
        if contains(s.value, ir.Collective):
            raise Unsupported("a sort or top-k inside a larger expression")
        if any(isinstance(n, ir.Call) and n.fn in ("triu_row", "triu_col")
               for n in ir.walk(s.value)):
            raise Unsupported("triu_row/triu_col index builtins")

    shape = dict(zip(main.indices, op.tensor(main.target).shape))
    seg = _segment_index(op, main)
    values = {s.target: s.value for s in outs}
    column_of_inner = None
    if seg is not None:
        offsets, index = seg
        values = {k: replace_segment_of(v, offsets, index, SEG) for k, v in values.items()}
        shape[SEG] = ir.Binary("-", op.tensor(offsets).shape[0], ir.Num(1))
        column_of_inner = (ir.Access(offsets, (ir.Name(SEG),)),
                           ir.Access(offsets, (ir.Binary("+", ir.Name(SEG), ir.Num(1)),)))
    hoist = Hoister()
    values = {k: hoist(v) for k, v in values.items()}
    rvs = tuple(hoist.values)
    rv_names = {v.name for v in rvs}
    rv_free: set[str] = set()
    for v in rvs:
        names = free_names(v.body, op.dims) - set(v.indices)
        for lo, hi in v.ranges:
            names |= free_names(lo, op.dims) | free_names(hi, op.dims)
        rv_free |= names - rv_names
    scan_index = {n.index for v in values.values() for n in ir.walk(v) if isinstance(n, ir.Scan)}
    if len(scan_index) > 1:
        raise Unsupported("scans along different indices")

    lhs = list(main.indices)
    kind = "rows" if rvs or scan_index else "pointwise"
    if seg is not None and scan_index:
        raise Unsupported("a scan over a jagged index")
    if seg is not None:
        inner = seg[1]
        rows = [SEG if n == inner else n for n in lhs]
    elif scan_index:
        inner = scan_index.pop()
        rows = [n for n in lhs if n != inner]
    elif rvs:
        # an output index the reductions do not read is stored along the column, unless
        # its extent is 1 (a kept reduced dim): then it is a program axis of one
        free = [n for n in lhs if n not in rv_free and shape[n] != ir.Num(1)]
        inner = free[-1] if free else None
        rows = [n for n in lhs if n != inner]
    else:
        inner = lhs[-1] if lhs else None
        rows = lhs[:-1]
    if not rv_free <= set(rows):
        raise Unsupported(f"a reduction depends on {sorted(rv_free - set(rows))}, which is "
                          "bound by an enclosing reduction or is not a program axis")
    column = column_of_inner
    if inner is not None and column is None:
        column = (ir.Num(0), shape[inner])
    stores = tuple(_store(op, s, values[s.target], inner, rows, seg) for s in outs)

    axes = tuple((n, shape[n]) for n in rows)
    static = _static_column(op, rvs, column if inner is not None else None)
    shared = _shared_column(rvs, column if inner is not None else None) is not None
    if kind == "rows" and inner is None and rvs:
        column = _flat_range(rvs[0])
    return Plan(kind, axes[:-1], axes[-1] if axes else None, inner, column, rvs, stores,
                _fusable(rvs), static_column=static, shared_column=shared)


def _segment_index(op: ir.Op, main: ir.Statement):
    """(offsets, i) when the main output's index i is read through segment_of(offsets, i)."""
    found = set()
    for n in ir.walk(main.value):
        if isinstance(n, ir.Call) and n.fn == "segment_of" and isinstance(n.args[1], ir.Name):
            if n.args[1].name in main.indices:
                found.add((n.args[0].name, n.args[1].name))
    if not found:
        return None
    if len(found) > 1:
        raise Unsupported("segment_of over several offsets tensors or indices")
    offsets, index = found.pop()
    dom = op.tensor(offsets).domain
    extent = op.tensor(main.target).shape[main.indices.index(index)]
    if not isinstance(dom, ir.Offsets) or dom.total != extent:
        raise Unsupported(f"segment_of({offsets}, {index}): the offsets must end at the "
                          f"extent of '{index}'")
    return offsets, index


def _store(op, st: ir.Statement, value: ir.Expr, inner, rows, seg) -> Store:
    names = set(st.indices)
    need = set(rows) - {SEG}
    if inner is not None and inner in names:
        if seg is not None:
            need.add(seg[1])
        if names != need | {inner}:
            raise Unsupported(f"output '{st.target}' is indexed by {st.indices}, not by the "
                              f"program axes")
        return Store(st.target, st.indices, value, True)
    if seg is not None or names != set(rows):
        raise Unsupported(f"output '{st.target}' is indexed by {st.indices}, not by the "
                          f"program axes")
    if inner is not None and inner in free_names(value, op.dims):
        raise Unsupported(f"output '{st.target}' reads the column index")
    return Store(st.target, st.indices, value, False)


def _flat_range(v: RowValue) -> Range:
    return v.ranges[0] if len(v.ranges) == 1 else (ir.Num(0), flat_extent(v.ranges))


def flat_extent(ranges) -> ir.Expr:
    """The number of points of several ranges walked as one flattened column."""
    ext = None
    for lo, hi in ranges:
        e = ir.Binary("-", hi, lo)
        ext = e if ext is None else ir.Binary("*", ext, e)
    return ext


def _shared_column(rvs, column):
    """The ranges that all reductions (and the inner axis) share, or None."""
    ranges = {v.ranges for v in rvs}
    if column is not None:
        ranges.add((column,))
    if len(ranges) != 1:
        return None
    (only,) = ranges
    if len(only) > 1 and column is not None:
        return None
    return only


def _static_column(op, rvs, column) -> bool:
    """All reductions (and the inner axis) share one static range."""
    only = _shared_column(rvs, column)
    return only is not None and all(is_static(lo, op.dims) and is_static(hi, op.dims)
                                    for lo, hi in only)


def _fusable(rvs: tuple[RowValue, ...]) -> tuple[Fused, ...]:
    out, used = [], set()
    for a in rvs:
        for b in rvs:
            if a.name in used or b.name in used or a is b or a.ranges != b.ranges:
                continue
            diff = ir.Binary("-", a.body, ir.Name(a.name))
            if a.op == "max" and b.op == "sum" and b.body == ir.Call("exp", (diff,)):
                out.append(Fused("maxsum", a.name, b.name))
            elif a.op == "mean" and b.op == "mean" and b.body in (
                    ir.Binary("**", diff, ir.Num(2)), ir.Binary("*", diff, diff)):
                out.append(Fused("welford", a.name, b.name))
            else:
                continue
            used |= {a.name, b.name}
    return tuple(out)


def _collective_plan(op: ir.Op, outs, main) -> Plan:
    groups: list[Group] = []
    refs = []
    axis = None
    for st in outs:
        e = st.value
        if not isinstance(e, ir.Collective):
            raise Unsupported("an op mixing sorts with other outputs")
        if contains(e.body, ir.Reduce) or contains(e.body, ir.Scan):
            raise Unsupported("a sort or top-k of a reduction")
        if e.op in ("sort", "argsort"):
            family, out_axis, k = "sort", e.index.name, None
        else:
            family = "topk"
            out_axis = next(n for n in st.indices if n not in free_names(e.body, op.dims))
            k = e.k
        body = subst(e.body, {e.index.name: ir.Name("__k0")})
        rng = (e.index.lo, e.index.hi)
        rows = [n for n in st.indices if n != out_axis]
        if axis is None:
            axis = (tuple(rows), out_axis, rng)
        elif axis != (tuple(rows), out_axis, rng):
            raise Unsupported("sorts over different axes")
        if not free_names(body, op.dims) <= set(rows) | {"__k0"}:
            raise Unsupported("a sort body reads an index that is not a row axis")
        if not (is_static(rng[0], op.dims) and is_static(rng[1], op.dims)):
            raise Unsupported("a sort over a data-dependent range")
        g = Group(family, body, k)
        if g not in groups:
            groups.append(g)
        refs.append((groups.index(g), "indices" if e.op.startswith("arg") else "values"))
    rows, out_axis, rng = axis
    shape = dict(zip(main.indices, op.tensor(main.target).shape))
    axes = tuple((n, shape[n]) for n in rows)
    stores = tuple(Store(st.target, st.indices, st.value, True) for st in outs)
    return Plan("collective", axes[:-1], axes[-1] if axes else None, out_axis, rng,
                stores=stores, groups=tuple(groups), store_groups=tuple(refs),
                static_column=True)
