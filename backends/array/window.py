"""Stencil reads as strided views: ``x[b, c, o * S + k - P] pad(v)`` without a gather.

A subscript that is an affine form of static indices (non-negative scalar
coefficients, any constant) reads, for each combination of its indices, one
element of a single tensor dim: a strided view with one dim per index
(``rt.window``, ``as_strided``). Reads past either end take the pad value, or
the nearest element when the read is not padded (that is what the reference's
clipped reads give). The ``stencil`` gene chooses this or the general gather.
"""
from __future__ import annotations

from kdsl import ir

from kdsl.backends.array import analysis as aa


def affine(low, s: ir.Expr, env):
    """``s`` as (terms [(axis, coefficient code)], constant code), or None."""
    bound = set(env.axes)
    if not aa.free_names(s) & bound:
        v = low.ev(s, env)
        return ([], v.code) if v.scalar and v.kind == "int" else None
    if isinstance(s, ir.Name):
        ax = env.axes[s.name]
        return None if ax.dynamic else ([(ax, "1")], "0")
    if not isinstance(s, ir.Binary):
        return None
    if s.op in ("+", "-"):
        a, b = affine(low, s.left, env), affine(low, s.right, env)
        if a is None or b is None or (s.op == "-" and b[0]):  # -index needs a negative stride
            return None
        return a[0] + b[0], _combine(a[1], s.op, b[1])
    if s.op == "*":
        for scale, rest in ((s.left, s.right), (s.right, s.left)):
            if aa.free_names(scale) & bound or not _nonnegative(scale, low.op.dims):
                continue
            c, form = low.ev(scale, env), affine(low, rest, env)
            if form is not None and c.scalar and c.kind == "int":
                return [(ax, _combine(k, "*", c.code)) for ax, k in form[0]], \
                    _combine(form[1], "*", c.code)
    return None


def _combine(a: str, op: str, b: str) -> str:
    """``a op b`` with the 0s and 1s of building a form folded away."""
    if op == "*":
        return "0" if "0" in (a, b) else b if a == "1" else a if b == "1" else f"({a} * {b})"
    if b == "0":
        return a
    if a == "0":
        return b if op == "+" else f"(-{b})"
    return f"({a} {op} {b})"


def _nonnegative(e: ir.Expr, dims) -> bool:
    if isinstance(e, ir.Num):
        return isinstance(e.value, int) and e.value >= 0
    if isinstance(e, ir.Name):
        return e.name in dims
    return isinstance(e, ir.Binary) and e.op in ("+", "*", "//", "%") and \
        _nonnegative(e.left, dims) and _nonnegative(e.right, dims)


def render_window(low, e: ir.Access, info, env, slice_part):
    """The read as a window view (a Val), or None when it is no stencil (or the gene says
    gather). ``slice_part(s, p)`` gives the plain-slice part of a subscript, or None."""
    from kdsl.backends.array.gather import Part, _basic
    if low.genome.get("stencil", "window") != "window" or env.unchecked:
        return None
    pad = "None"
    if e.pad is not None:
        pv = low.coerce(low.ev(e.pad, env), info.kind)
        if not pv.scalar:
            return None
        pad = pv.code
    mentions = [n for s in e.subscripts for n in aa.free_names(s)]
    parts, windows = [], {}
    for p, s in enumerate(e.subscripts):
        part = slice_part(s, p)
        if part is not None:
            parts.append([part])
            continue
        form = affine(low, s, env)
        if form is None:
            return None
        terms, const = form
        names = [ax for ax, _ in terms]
        if not terms:
            if e.pad is not None:
                return None  # a padded constant subscript may be out of range
            parts.append([Part("scalar", const)])
            continue
        if len({ax.ident for ax in names}) != len(names) or any(
                mentions.count(n) != 1 for n in _names_of(s, env)):
            return None
        windows[p] = (terms, const)
        parts.append([Part("slice", ":", ax.pos) for ax in names])
    if not windows:
        return None
    code = info.var
    for p in sorted(windows, reverse=True):
        terms, const = windows[p]
        base = const
        for ax, k in terms:
            base = _combine(base, "+", _combine(k, "*", ax.lo))
        coefs = ", ".join(k for _, k in terms)
        extents = ", ".join(ax.extent for ax, _ in terms)
        code = f"rt.window({code}, {p}, {base}, ({coefs},), ({extents},), {pad})"
    view = type(info)(low.block.let(code), info.kind, info.shape)
    return _basic(low, view, [x for group in parts for x in group])


def _names_of(s: ir.Expr, env) -> list[str]:
    return sorted(aa.free_names(s) & set(env.axes))
