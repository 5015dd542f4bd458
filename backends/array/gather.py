"""Reads ``t[subscripts] pad(v)``: slices where the IR allows them, gathers otherwise.

A subscript that is a bound index over a static range (optionally shifted by
a constant, or subtracted from one: a reversed read, a flip) becomes a slice, so
the read is a view (numpy's flip is one too; torch's copies, without an index
array); the rest are index arrays. When the index arrays sit together between leading and trailing
slices (numpy and torch place their broadcast dims there), the read stays one
indexing expression whose result is already in grid order. Index arrays that
may leave the tensor are clipped: those of padded reads (the pad is selected
where they are out of range) and those that vary along a data-dependent
range, whose lanes past the range are masked later but still read.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdsl import ir

from kdsl.backends.array import analysis as aa
from kdsl.backends.array.dialect import Val, subscript
from kdsl.backends.array.window import render_window


@dataclass
class Part:
    kind: str                 # 'slice' | 'scalar' | 'array'
    code: str = ""            # slice text ('a:b' or ':'), scalar code, or array code
    pos: int = -1             # slices: the grid position
    val: Val | None = None    # arrays
    clip: bool = False
    axis: object = None       # slices: the Axis, and a constant shift
    shift: str = ""
    flip: bool = False        # slices: read in reverse, index ``shift - axis``


def render_access(low, e: ir.Access, env) -> Val:
    info = low.tensors[e.tensor]
    padded = e.pad is not None or env.unchecked
    mentions = [n for s in e.subscripts for n in aa.free_names(s)]
    if any(not isinstance(s, ir.Name) and aa.free_names(s) & set(env.axes) for s in e.subscripts):
        v = render_window(low, e, info, env,
                          lambda s, p: _slice(low, s, p, info, env, padded, mentions))
        if v is not None:
            return v
    parts = []
    for p, s in enumerate(e.subscripts):
        part = _slice(low, s, p, info, env, padded, mentions)
        if part is None:
            v = low.coerce(low.ev(s, env), "int")
            if v.scalar and not padded:
                part = Part("scalar", v.code)
            else:
                clip = padded or bool(v.deps & env.masked)
                clip = clip and not _in_domain(low.op, s, info, p)
                part = Part("array", val=low.lift(v) if v.scalar else v, clip=clip)
        parts.append(part)
    if not any(x.kind == "array" for x in parts):
        return _basic(low, info, parts)
    return _gather(low, e, info, parts, env)


def _slice(low, s, p, info, env, padded, mentions) -> Part | None:
    """A slice when ``s`` is an index (plus a constant) that no other subscript mentions."""
    if isinstance(s, ir.Name) and mentions.count(s.name) == 1 and s.name in env.axes:
        ax = env.axes[s.name]
        # (a padded read may run past its dim where its index runs over a longer one)
        in_range = not padded or (ax.lhs and ax.dim_expr == info.shape[p]) or \
            (ax.lo_expr == ir.Num(0) and ax.hi_expr == info.shape[p])
        if not ax.dynamic and in_range:
            full = ax.lo == "0" and ax.hi_expr is not None and ax.hi_expr == info.shape[p]
            return Part("slice", ":" if full else f"{ax.lo}:{ax.hi}", ax.pos, axis=ax)
    if padded or not (isinstance(s, ir.Binary) and s.op in ("+", "-")):
        return None
    reversed_read = _reversed(low, s, env, mentions)
    if reversed_read is not None:
        return reversed_read
    name, const = (s.left, s.right) if isinstance(s.left, ir.Name) else (s.right, s.left)
    if not isinstance(name, ir.Name) or (s.op == "-" and name is not s.left):
        return None
    if mentions.count(name.name) != 1 or name.name not in env.axes or \
            env.axes[name.name].dynamic:
        return None
    c = low.ev(const, env)
    if not (c.scalar and c.kind == "int"):
        return None
    ax = env.axes[name.name]
    shift = c.code if s.op == "+" else f"(-{c.code})"
    return Part("slice", f"{ax.lo} + {shift}:{ax.hi} + {shift}", ax.pos, axis=ax, shift=shift)


def _reversed(low, s: ir.Binary, env, mentions) -> Part | None:
    """``c - i`` (``c`` free of the grid's indices, ``i`` a static index no other subscript
    mentions): the slice of the indices it reads, to be read in reverse (``_basic``). A
    suffix scan (``sum(k in j .. N)``, run as a flip, a scan and a flip) read its flips as
    gathers: KernelBench 91 on numpy took 474 ms against eager's 17."""
    name = s.right
    if s.op != "-" or not isinstance(name, ir.Name) or name.name not in env.axes or \
            mentions.count(name.name) != 1 or aa.free_names(s.left) & set(env.axes):
        return None
    ax = env.axes[name.name]
    c = low.ev(s.left, env)
    if ax.dynamic or not (c.scalar and c.kind == "int"):
        return None
    return Part("slice", f"{c.code} - ({ax.hi}) + 1:{c.code} - ({ax.lo}) + 1", ax.pos, axis=ax,
                shift=c.code, flip=True)


def _in_domain(op: ir.Op, s: ir.Expr, info, p: int) -> bool:
    """``s`` reads an input declared ``in 0..N`` where N is this dim: in range on every lane."""
    if not isinstance(s, ir.Access) or s.pad is not None:
        return False
    t = op.tensor(s.tensor)
    d = t.domain
    return t.role == "in" and isinstance(d, ir.ValueRange) and d.lo == ir.Num(0) \
        and d.hi == info.shape[p]


def _basic(low, info, parts) -> Val:
    """Slices and integers only: a view, transposed and padded with unit dims to the grid."""
    positions = [x.pos for x in parts if x.kind == "slice"]
    if positions == sorted(positions):
        items, queue = [], list(parts)
        for q in range(low.nd):
            if q in positions:
                while queue:
                    x = queue.pop(0)
                    items.append(x.code)
                    if x.kind == "slice":
                        break
            else:
                items.append("None")
        items += [x.code for x in queue]
        while items and items[-1] == ":":
            items.pop()
        code = f"{info.var}[{', '.join(items)}]" if items else info.var
    else:
        code = subscript(info.var, [x.code for x in parts])
        perm = sorted(range(len(positions)), key=lambda k: positions[k])
        code = subscript(low.d.transpose(code, perm),
                         [":" if q in positions else "None" for q in range(low.nd)])
    flipped = [x.pos for x in parts if x.kind == "slice" and x.flip]
    if flipped:  # (the view's dims are the grid's now)
        code = low.d.flip(code, flipped)
    return low.let(code, info.kind, positions)


def _gather(low, e: ir.Access, info, parts, env) -> Val:
    parts = [_as_array(low, x) if x.kind == "slice" and x.flip else x for x in parts]
    adjacent = _adjacent(parts, low.nd)
    if adjacent is None:
        parts = [_as_array(low, x) if x.kind == "slice" else x for x in parts]
        squeeze = ()
    else:
        squeeze = adjacent
    inside = []
    deps = set()
    items = []
    for p, x in enumerate(parts):
        if x.kind == "scalar":
            x = Part("array", val=low.lift(Val(x.code, "int", scalar=True)))
        if x.kind == "slice":
            deps.add(x.pos)
            items.append(x)
            continue
        code = x.val.code
        deps |= x.val.deps
        if x.clip:
            n = f"{info.var}.shape[{p}]"
            if e.pad is not None:
                inside.append(f"({code} >= 0) & ({code} < {n})")
            code = low.block.let(f"rt.clip({code}, {n})")
        if squeeze:
            code = low.block.index(code, ["0" if q in squeeze else ":" for q in range(low.nd)])
        items.append(Part("array", code))
    if any(x.clip for x in parts if x.kind == "array"):
        index = ", ".join(_slice_object(x.code) if x.kind == "slice" else x.code for x in items)
        code = f"rt.take({info.var}, ({index},))"
    else:
        code = f"{info.var}[{', '.join(x.code for x in items)}]"
    value = low.let(code, info.kind, deps)
    if e.pad is None or not inside:
        return value
    pad = low.coerce(low.ev(e.pad, env), info.kind)
    cond = low.block.let(" & ".join(f"({c})" for c in inside))
    return low.let(low.d.where(cond, value.code, pad.code), info.kind, deps | pad.deps)


def _adjacent(parts, nd: int):
    """Grid positions of the slices when index arrays are contiguous and the result of one
    indexing expression is in grid order; None otherwise."""
    kinds = ["slice" if x.kind == "slice" else "array" for x in parts]
    first = kinds.index("array")
    last = len(kinds) - 1 - kinds[::-1].index("array")
    if "slice" in kinds[first:last + 1]:
        return None
    lead = [x.pos for x in parts[:first]]
    tail = [x.pos for x in parts[last + 1:]]
    sliced = set(lead) | set(tail)
    rest = sorted(set(range(nd)) - sliced)
    if lead + rest + tail != list(range(nd)):
        return None
    for x in parts[first:last + 1]:
        if x.kind == "array" and x.val.deps & sliced:
            return None
    return frozenset(sliced)


def _as_array(low, x: Part) -> Part:
    v = low.axis_values(x.axis)
    if x.flip:
        v = low.let(f"({x.shift} - {v.code})", "int", v.deps)
    elif x.shift:
        v = low.let(f"({v.code} + {x.shift})", "int", v.deps)
    return Part("array", val=v)


def _slice_object(text: str) -> str:
    if text == ":":
        return "slice(None)"
    lo, hi = text.split(":")
    return f"slice({lo}, {hi})"
