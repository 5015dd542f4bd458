"""Bound indices in array code: reductions, segment reductions, scans, collectives.

A bound index opens one grid position (``Lowering.depth_pos``). A static range
is a plain axis; a data-dependent one (``i in offsets[b] .. offsets[b+1]``) is
padded to its longest instance and masked, as the reference does, unless the
``segment`` gene is 'flat' and the range is a segment of an offsets input:
then the body is evaluated once per element of the flat axis and reduced per
segment (numpy ``reduceat``, torch ``index_add_`` / ``scatter_reduce``).
"""
from __future__ import annotations

from kdsl import ir

from kdsl.backends.array import analysis as aa
from kdsl.backends.array.dialect import Val, atom, subscript
from kdsl.backends.array.lowering import IMAX, IMIN, Axis, Env
from kdsl.backends.base import Unsupported

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def identity(op: str, kind: str) -> str:
    if op in ("sum", "mean"):
        return "0"
    if op == "prod":
        return "1"
    low = op in ("max", "argmax")
    if kind == "float":
        return "(-math.inf)" if low else "math.inf"
    return str(IMIN) if low else str(IMAX)


def bind_range(low, r: ir.IndexRange, env: Env) -> tuple[Axis, Val]:
    """The axis of bound index ``r`` at the next depth, and its first value."""
    pos = low.depth_pos[env.depth]
    lo = low.coerce(low.ev(r.lo, env.bounds()), "int")
    hi = low.coerce(low.ev(r.hi, env.bounds()), "int")
    if lo.scalar and hi.scalar:
        ext = low.block.let(f"max({hi.code} - {lo.code}, 0)")
        return Axis(pos, lo.code, hi.code, ext, lo_expr=r.lo, hi_expr=r.hi), lo
    length = low.let(f"rt.nonneg({hi.code} - {lo.code})", "int", lo.deps | hi.deps)
    ext = low.block.let(f"rt.extent({length.code})")
    steps = low.let(low.d.axis("0", ext, pos, low.nd), "int", {pos})
    values = steps if lo.code == "0" else \
        low.let(f"({lo.code} + {steps.code})", "int", lo.deps | {pos})
    mask = low.let(f"({steps.code} < {length.code})", "bool", length.deps | {pos})
    return Axis(pos, None, None, ext, mask=mask, values=values), lo


def reduce(low, e: ir.Reduce, env: Env) -> Val:
    seg = aa.segment_pattern(low.op, e)
    if seg is not None and low.genome.get("segment", "flat") != "mask":
        sax = env.axes.get(seg[1])
        if sax is not None and not sax.dynamic and e.indices[0].name != seg[1]:
            return _segment(low, e, env, seg[0], seg[1], sax)
    inner, axes, los = env, [], []
    for r in e.indices:
        ax, lo = bind_range(low, r, inner)
        inner = inner.bind(r.name, ax)
        axes.append(ax)
        los.append(lo)
    masks = [ax.mask for ax in axes if ax.dynamic]
    contract = low.genome.get("contract", "einsum")
    if e.op == "sum" and not masks and contract != "broadcast":
        v = _contract_first(low, e, inner, axes) if contract == "contract_first" else None
        v = v if v is not None else _einsum(low, e, inner, axes)
        if v is not None:
            return v
    body = low.ev(e.body, inner)
    kind = "float" if e.op == "mean" else "int" if body.kind == "bool" else body.kind
    if e.op in ("argmax", "argmin"):
        kind = "int"
        if body.kind != "float":  # the reference compares integer keys as float64
            body = body if not body.scalar else low.lift(body)
            body = low.let(low.d.cast(body.code, "W"), "float", body.deps)
    else:
        body = low.coerce(body, kind)
    mask_deps = frozenset().union(*(m.deps for m in masks))
    positions = {ax.pos: ax.extent for ax in axes}
    body = low.expand(body, {p: n for p, n in positions.items() if p not in mask_deps})
    mask = None
    if masks:
        mask = masks[0].code if len(masks) == 1 else \
            low.block.let(" & ".join(m.code for m in masks))
    where = tuple(sorted(positions))
    axes_code = f"({', '.join(map(str, where))},)"
    deps = (body.deps | mask_deps) - set(positions)

    def filled(fill: str) -> str:
        return low.d.where(mask, body.code, fill) if mask else body.code

    if e.op == "sum":
        code = f"rt.rsum({filled('0')}, {axes_code})"
    elif e.op == "prod":
        code = f"rt.rprod({filled('1')}, {axes_code})"
    elif e.op in ("max", "min"):
        ident = identity(e.op, body.kind)
        code = f"rt.r{e.op}({filled(ident)}, {axes_code}, {ident})"
    elif e.op == "mean":
        count = f"rt.count({mask}, {body.code}, {axes_code}, {low.dt['float']})" if mask else \
            " * ".join(ax.extent for ax in axes)
        code = f"(rt.rsum({filled('0')}, {axes_code}) / {atom(count)})"
    else:
        pos = f"rt.{e.op}({filled(identity(e.op, 'float'))}, {where[0]})"
        code = pos if los[0].code == "0" else f"({los[0].code} + {pos})"
        deps |= los[0].deps
    return low.let(code, kind, deps)


def _einsum(low, e: ir.Reduce, inner: Env, axes: list[Axis]) -> Val | None:
    """sum over a product of arrays as one einsum (BLAS when numpy's optimize is on)."""
    factors = aa.product_factors(e.body)
    if len(factors) < 2:
        return None
    vals = [low.ev(f, inner) for f in factors]
    if not any(v.kind == "float" for v in vals):
        return None
    vals = [low.coerce(v, "float") for v in vals]
    arrays = [v for v in vals if not v.scalar]
    if len(arrays) < 2:
        return None
    reduced = {ax.pos for ax in axes}
    union = frozenset().union(*(v.deps for v in arrays))
    out = sorted(union - reduced)
    specs, operands = [], []
    for v in arrays:
        specs.append("".join(_LETTERS[p] for p in sorted(v.deps)))
        idx = [":" if p in v.deps else "0" for p in range(low.nd)]
        operands.append(low.block.index(v.code, idx))
    spec = ",".join(specs) + "->" + "".join(_LETTERS[p] for p in out)
    code = low.d.einsum(spec, operands, low.genome.get("optimize", True))
    if len(out) < low.nd:
        code += "[" + ", ".join(":" if p in out else "None" for p in range(low.nd)) + "]"
    extra = [v.code for v in vals if v.scalar] + \
        [ax.extent for ax in axes if ax.pos not in union]
    if extra:
        code = f"({code} * {' * '.join(extra)})"
    return low.let(code, "float", out)


def _contract_first(low, e: ir.Reduce, inner: Env, axes: list[Axis]) -> Val | None:
    """sum over a product of reads, contracted over whole tensor dims before the gathers.

    ``sum(d) x[b, r[p], d] * x[b, c[p], d]`` becomes ``G = einsum(x, x)`` over (b, f, g)
    and then ``G[b, r[p], c[p]]``: one batched matmul instead of two gathers the size
    of the product. None where a factor is not a plain read (pads, reduced indices in a
    gather), or nothing is gathered (the plain einsum is the same)."""
    reduced = {ax.pos for ax in axes}
    fresh = iter(_LETTERS[low.nd:])
    operands, specs, gathers, scalars, seen = [], [], [], [], {}
    for f in aa.product_factors(e.body):
        if not isinstance(f, ir.Access):
            v = low.ev(f, inner)
            if not v.scalar:
                return None
            scalars.append(v.code)
            continue
        info = low.tensors[f.tensor]
        if f.pad is not None or info.kind != "float":
            return None
        mentions = [n for s in f.subscripts for n in aa.free_names(s)]
        items, labels = [], ""
        for p, s in enumerate(f.subscripts):
            ax = inner.axes.get(s.name) if isinstance(s, ir.Name) else None
            if ax is not None and not ax.dynamic and mentions.count(s.name) == 1:
                full = ax.lo == "0" and ax.hi_expr == info.shape[p]
                items.append(":" if full else f"{ax.lo}:{ax.hi}")
                labels += _LETTERS[ax.pos]
                seen[ax.pos] = ax
                continue
            v = low.coerce(low.ev(s, inner), "int")
            if v.scalar:
                items.append(v.code)
                continue
            label = next(fresh, None)
            if label is None or v.deps & (reduced | inner.masked):
                return None
            items.append(":")
            labels += label
            gathers.append(v)
        operands.append(subscript(info.var, items))
        specs.append(labels)
    if not gathers or len(operands) < 2:
        return None
    kept = sorted(set(seen) - reduced)
    out = "".join(_LETTERS[p] for p in kept) + "".join(_LETTERS[low.nd + k]
                                                       for k in range(len(gathers)))
    code = low.d.einsum(",".join(specs) + "->" + out, operands, low.genome.get("optimize", True))
    index = [low.axis_values(seen[p]).code if seen[p].lo == "0" else
             f"({low.axis_values(seen[p]).code} - {seen[p].lo})" for p in kept]
    index += [g.code for g in gathers]
    code = f"{code}[{', '.join(index)}]"
    extra = scalars + [ax.extent for ax in axes if ax.pos not in seen]
    if extra:
        code = f"({code} * {' * '.join(extra)})"
    deps = frozenset(kept).union(*(g.deps for g in gathers))
    return low.let(code, "float", deps)


def _segment(low, e: ir.Reduce, env: Env, off_name: str, s: str, sax: Axis) -> Val:
    r = e.indices[0]
    off = low.tensors[off_name].var
    seg = low.block.let(f"rt.segments({off}, {sax.lo}, {sax.hi})")
    starts, lengths, base, top = (low.block.let(f"{seg}[{k}]") for k in range(4))
    pos = low.depth_pos[env.depth]
    flat = Axis(pos, base, top, f"({top} - {base})")
    body_expr = e.body
    if s in aa.free_names(e.body):  # inside segment s, s is the segment of the element
        body_expr = aa.substitute(e.body, {s: ir.Call("segment_of", (ir.Name(off_name),
                                                                     ir.Name(r.name)))})
    body = low.ev(body_expr, env.bind(r.name, flat))
    kind = "float" if e.op == "mean" else "int" if body.kind == "bool" else body.kind
    body = low.expand(low.coerce(body, kind), {pos: flat.extent})
    ident = identity(e.op, kind)
    method = low.genome.get("segment", "flat")
    code = (f"rt.segment_reduce({e.op!r}, {body.code}, {starts}, {lengths}, {pos}, {sax.pos}, "
            f"{ident}, {method!r})")
    return low.let(code, kind, (body.deps - {pos}) | {sax.pos})


# the scans the lowering writes whose values are floats whatever their body's kind
FLOAT_SCANS = ("cumdecay", "logcumsumexp")


def scan(low, e: ir.Scan, env: Env) -> Val:
    ax = low.lhs_axes[e.index]
    body = low.ev(e.body, env)
    body = low.coerce(body, "int") if body.kind == "bool" else body
    if e.op in FLOAT_SCANS:  # (a decay or a log-sum-exp of integers is no integer)
        body = low.coerce(body, "float")
    body = low.expand(body, {ax.pos: ax.extent})
    factor = "" if e.factor is None else f", {e.factor.value!r}"
    return low.let(f"rt.{e.op}({body.code}, {ax.pos}{factor})", body.kind,
                   body.deps | {ax.pos})


def collective(low, e: ir.Collective, env: Env) -> Val:
    if e.op in ("sort", "argsort"):
        ax = low.lhs_axes[e.index.name]
        body = low.expand(low.ev(e.body, env), {ax.pos: ax.extent})
        kind = "int" if e.op == "argsort" else body.kind
        return low.let(f"rt.{e.op}({body.code}, {ax.pos})", kind, body.deps | {ax.pos})
    used = {n.name for n in ir.walk(e.body) if isinstance(n, ir.Name)}
    out_name = next(n for n in low.lhs_axes if n not in used)
    q = low.lhs_axes[out_name].pos
    ax, lo = bind_range(low, e.index, env)
    if ax.dynamic:
        raise Unsupported(f"{e.op} over a data-dependent range")
    body = low.ev(e.body, env.bind(e.index.name, ax))
    body = low.expand(body, {ax.pos: ax.extent})
    k = low.coerce(low.ev(e.k, env), "int")
    method = low.genome.get("select", "sort")
    pair = low.block.let(f"rt.topk({body.code}, {k.code}, {ax.pos}, {method!r})")
    if e.op == "topk":
        code, kind = f"{pair}[0]", body.kind
    else:
        code, kind = (f"{pair}[1]" if lo.code == "0" else f"({lo.code} + {pair}[1])"), "int"
    return low.let(f"rt.swap({code}, {ax.pos}, {q})", kind, (body.deps - {ax.pos}) | {q})


def index_builtin(low, e: ir.Call, env: Env) -> Val:
    if e.fn == "segment_of":
        off = low.tensors[e.args[0].name].var
        i = low.coerce(low.ev(e.args[1], env), "int")
        i = low.lift(i) if i.scalar else i
        return low.let(f"rt.segment_of({off}, {i.code})", "int", i.deps)
    p = low.coerce(low.ev(e.args[0], env), "int")
    p = low.lift(p) if p.scalar else p
    f = low.ev(e.args[1], env)
    if not f.scalar:
        raise Unsupported(f"{e.fn} needs a size (not a tensor value) as its second argument")
    which = 0 if e.fn == "triu_row" else 1
    return low.let(f"rt.triu({p.code}, {f.code}, {which})", "int", p.deps)
