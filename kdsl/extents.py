"""Range inference beyond plain subscripts, for the checker.

When no tensor is read with an index plainly (``x[i]``), the checker takes its
range from a subscript affine in it, ``c * u + r`` (u then runs over the dim's
size divided by c) or ``D - 1 - u`` (a flip), and an intermediate's index from
the statements that read it. Only ``+``, ``-``, unary minus and a product by a
size (dims and integers) keep a subscript affine: a division, a call or a read
of another tensor does not. Each function takes the checker (``ck``) for what
it knows: the tensors so far, the sampled sizes and the intervals of values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from . import ir
from .intervals import IntervalEval
from .show import format_expr
from .sizes import evaluate

ZERO = ir.Num(0)
ONE = ir.Num(1)
_SIZE_ARITH = ("+", "-", "*", "//", "%", "**")


@dataclass(frozen=True)
class Why:
    """Why a use of an index did not give its range: ``what`` it was and what is wrong."""
    loc: ir.Loc
    what: str


def affine_extent(ck, name: str, expr: ir.Expr, scope: dict, around=()):
    """The range of ``u`` from a subscript ``c * u + r`` of a dim of size D, where c is a
    positive size dividing D and r spans 0 .. c - 1 (from the ranges known so far, in
    ``scope``, and the explicit ranges around the read): u in 0 .. D // c; or from
    ``D - 1 - u`` (a flip): u in 0 .. D. (extent, origin) from the first such subscript
    that fits, else the ``Why`` of the first that did not, or None."""
    why = None
    for node, bound in reads(expr, around):
        t = ck.tensors.get(node.tensor)
        if t is None or isinstance(t.domain, ir.Offsets) or \
                any(r.name == name for r in bound):  # shadowed: another index
            continue
        for p, sub in enumerate(node.subscripts[:len(t.shape)]):
            form = affine(sub, name, ck.op.dims)
            if form is not None:
                got = _solve(ck, name, form, t, p, sub, scope, bound)
                if isinstance(got, tuple):
                    return got
                why = why or got
    return why


def _solve(ck, u: str, form, t: ir.Tensor, p: int, sub: ir.Expr, scope: dict, bound):
    sign, c, r = form
    d = t.shape[p]
    what = f"subscript {p} of '{t.name}' ({format_expr(sub)})"
    why = lambda text: Why(first_use(sub, u).loc, f"{what}: {text}")  # noqa: E731
    if sign < 0:
        if not (c == ONE and is_size(r, ck.op.dims) and
                ck._same_extent(r, ir.Binary("-", d, ONE))):
            return why(f"a subscript falling with '{u}' must read the dim backwards, as "
                       f"{format_expr(d)} - 1 - {u}")
        return d, f"dim {p} of {t.name}, backwards"
    ext = quotient(d, c)
    for sizes in ck.samples:
        where = ", ".join(f"{k}={v}" for k, v in sizes.items())
        step, size = evaluate(c, sizes), evaluate(d, sizes)
        if step < 1:
            return why(f"the step {format_expr(c)} of '{u}' is {step} at {where}")
        if size % step:
            return why(f"the dim's size {_valued(d, size)} is not a multiple of the step "
                       f"{_valued(c, step)} of '{u}' at {where}")
        if evaluate(ext, sizes) != size // step:
            ext = ir.Binary("//", d, c)
        span = _interval(ck, r, scope, bound, sizes)
        if span is None:
            return why(f"the rest {format_expr(r)} has no known range (an index in it needs "
                       f"an explicit range, like k in 0 .. N)")
        if span != (0, step - 1):
            return why(f"the rest {format_expr(r)} spans {int(span[0])} .. {int(span[1])}, "
                       f"not 0 .. {step - 1} (the step {format_expr(c)} of '{u}' less one), "
                       f"at {where}")
    return ext, f"dim {p} of {t.name} in steps of {format_expr(c)}"


def _interval(ck, r: ir.Expr, scope: dict, bound, sizes):
    """The values ``r`` takes at ``sizes``, its indices over their known ranges."""
    ev = IntervalEval(sizes, {}, lambda name: ck._value_interval(name, sizes),
                      lambda name: evaluate(ck.tensors[name].shape[0], sizes))
    for name, idx in scope.items():
        ev.index[name] = ev._extent(ir.IndexRange(name, idx.lo, idx.hi))
    out = []
    ck._with_ranges(tuple(b for b in bound if b.lo is not None), ev,
                    lambda: out.append(ev.of(r)))
    return out[0]


def from_readers(ck, st: ir.Statement, p: int):
    """Left-side index p of an intermediate, from the statements after it that read it:
    when every read subscripts that dim with a plain index, the first whose range is known
    (a left-side index of a declared tensor, a declared or explicit range, or one a read of
    a known tensor gives) gives it: (extent, origin), or None."""
    after = ck.op.statements[[s is st for s in ck.op.statements].index(True) + 1:]
    found = None
    for reader in after:
        for node, bound in reads(reader.value):
            if node.tensor != st.target or p >= len(node.subscripts):
                continue
            sub = node.subscripts[p]
            if not isinstance(sub, ir.Name):
                return None
            found = found or _reader_range(ck, sub.name, reader, bound)
    return found


def _reader_range(ck, v: str, reader: ir.Statement, bound):
    inner = [b for b in bound if b.name == v]
    if inner and inner[-1].lo is not None:
        r = inner[-1]
        explicit = r.lo == ZERO and is_size(r.hi, ck.op.dims)
        return (r.hi, f"the range of {v} where {reader.target} reads it") if explicit else None
    if not inner and v in reader.indices:
        q = reader.indices.index(v)
        if reader.ranges and reader.ranges[q] is not None:
            return reader.ranges[q].hi, f"the declared range of {v} in {reader.target}"
        target = ck.tensors.get(reader.target)
        if target is not None and target.role != "tmp" and q < len(target.shape):
            return target.shape[q], f"dim {q} of {reader.target}, which reads it"
    # else a plain read of a tensor known by now, as the reader's own check infers it (a
    # wrong pick fails there: every plain read is matched against its index's extent)
    for node in ir.walk(reader.value):
        t = ck.tensors.get(node.tensor) if isinstance(node, ir.Access) else None
        if t is not None and not isinstance(t.domain, ir.Offsets):
            for k, sub in enumerate(node.subscripts[:len(t.shape)]):
                if isinstance(sub, ir.Name) and sub.name == v:
                    return t.shape[k], f"dim {k} of {t.name}, read with it"
    # else the reader is an intermediate itself, whose index takes its range from the
    # statements that read it in turn (a convolution, its activation, then the output:
    # c -> r -> y); every step is a later statement, so this ends
    if not inner and v in reader.indices and ck.tensors.get(reader.target) is None:
        got = from_readers(ck, reader, reader.indices.index(v))
        if got is not None:
            return got[0], f"{got[1]}, through {reader.target}"
    return None


# ---- taking subscripts apart ----------------------------------------------------------

def is_size(e: ir.Expr, dims) -> bool:
    """Built from dims and integers only (no index, no tensor, no float)."""
    return all(isinstance(n, ir.Num) and isinstance(n.value, int)
               or isinstance(n, ir.Name) and n.name in dims
               or isinstance(n, ir.Binary) and n.op in _SIZE_ARITH
               or isinstance(n, ir.Unary) and n.op == "neg" for n in ir.walk(e))


def affine(e: ir.Expr, u: str, dims) -> tuple[int, ir.Expr, ir.Expr] | None:
    """(sign, c, r) with ``e == sign * c * u + r``, c a size and r free of u; None when
    ``e`` is not of that form (u absent, twice, or under anything but + - and * by a size)."""
    if isinstance(e, ir.Name) and e.name == u:
        return 1, ONE, ZERO
    if isinstance(e, ir.Unary) and e.op == "neg":
        f = affine(e.operand, u, dims)
        return None if f is None else (-f[0], f[1], _join("-", ZERO, f[2]))
    if not (isinstance(e, ir.Binary) and e.op in ("+", "-", "*")):
        return None
    in_left, in_right = _uses(e.left, u), _uses(e.right, u)
    if in_left == in_right:
        return None
    inner, other = (e.left, e.right) if in_left else (e.right, e.left)
    f = affine(inner, u, dims)
    if f is None:
        return None
    sign, c, r = f
    if e.op == "*":
        if not is_size(other, dims):
            return None
        return sign, _join("*", c, other), _join("*", r, other)
    if in_left:
        return sign, c, _join(e.op, r, other)
    return (sign if e.op == "+" else -sign), c, _join(e.op, other, r)


def quotient(d: ir.Expr, c: ir.Expr) -> ir.Expr:
    """``d // c``, written ``X`` when c is ``d // X`` (the caller checks that they agree)."""
    if c == ONE:
        return d
    if isinstance(c, ir.Binary) and c.op == "//" and c.left == d:
        return c.right
    return ir.Binary("//", d, c)


def reads(e: ir.Expr, bound: tuple[ir.IndexRange, ...] = ()) \
        -> Iterator[tuple[ir.Access, tuple[ir.IndexRange, ...]]]:
    """Every read in ``e`` with the ranges bound around it, innermost last (sort and argsort
    run along a left-side index and bind nothing)."""
    if isinstance(e, ir.Access):
        yield e, bound
    inner = bound
    if isinstance(e, ir.Reduce):
        inner = bound + e.indices
    elif isinstance(e, ir.Collective) and e.op in ("topk", "argtopk"):
        inner = bound + (e.index,)
    for child in ir.operands(e):
        yield from reads(child, inner if child is getattr(e, "body", None) else bound)


def first_use(e: ir.Expr, u: str) -> ir.Name | None:
    return next((n for n in ir.walk(e) if isinstance(n, ir.Name) and n.name == u), None)


def _uses(e: ir.Expr, u: str) -> bool:
    return first_use(e, u) is not None


def _join(op: str, a: ir.Expr, b: ir.Expr) -> ir.Expr:
    """``a op b`` without the zeros and ones that taking a subscript apart leaves."""
    if op == "*":
        if a == ZERO or b == ZERO:
            return ZERO
        return b if a == ONE else a if b == ONE else ir.Binary("*", a, b)
    if b == ZERO:
        return a
    if a == ZERO:
        return b if op == "+" else ir.Unary("neg", b)
    return ir.Binary(op, a, b)


def _valued(e: ir.Expr, value: int) -> str:
    """``C // G = 4``; a number alone."""
    return str(value) if isinstance(e, ir.Num) else f"{format_expr(e)} = {value}"
