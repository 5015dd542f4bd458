"""Range inference beyond plain subscripts, for the checker.

When no tensor is read with an index plainly (``x[i]``), the checker takes its
range from a subscript affine in it, ``c * u + r`` (u then runs over the dim's
size divided by c) or ``D - 1 - u`` (a flip), and an intermediate's index from
the statements that read it; failing those, a left-side index from a subscript
whose r spans more than a step: the windows that fit, as a convolution's or a
pool's output has them, (D - lo - hi - 1) // c + 1 for r in lo .. hi (lo 0, or
below it on a padded read). Only ``+``, ``-``, unary minus and a product by a
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
    for form, t, p, node, bound in _affine_reads(ck, name, expr, around):
        got = _solve(ck, name, form, t, p, node.subscripts[p], scope, bound)
        if isinstance(got, tuple):
            return got
        why = why or got
    return why


def window_extent(ck, name: str, expr: ir.Expr, scope: dict):
    """The range of a left-side index ``u`` from the first subscript ``c * u + r`` whose r
    spans more than a step: the windows that fit (``_windows``), or None. The last resort
    for a left-side index, after its plain reads, the exact affine forms and its readers."""
    for form, t, p, node, bound in _affine_reads(ck, name, expr, ()):
        if form[0] > 0:
            got = _windows(ck, name, form, t, p, node, expr, scope, bound)
            if got is not None:
                return got
    return None


def _affine_reads(ck, name: str, expr: ir.Expr, around):
    """(form, tensor, dim, read, ranges bound around it) of each subscript affine in
    ``name``, of a tensor known by now, where ``name`` is not shadowed."""
    for node, bound in reads(expr, around):
        t = ck.tensors.get(node.tensor)
        if t is None or isinstance(t.domain, ir.Offsets) or \
                any(r.name == name for r in bound):  # shadowed: another index
            continue
        for p, sub in enumerate(node.subscripts[:len(t.shape)]):
            form = affine(sub, name, ck.op.dims)
            if form is not None:
                yield form, t, p, node, bound


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


def _windows(ck, u: str, form, t: ir.Tensor, p: int, node: ir.Access, expr: ir.Expr,
             scope: dict, bound):
    """(extent, origin) of ``u`` from ``c * u + r`` where r spans lo .. hi beyond a step: the
    windows that fit the dim, (D - lo - hi - 1) // c + 1, as torch sizes a convolution's
    output (a padded read's lo below 0 is its padding, and it pads the far end as much:
    symmetric; a strided read only where padded). Only where r's bounds are sums of sizes
    and of indices with known ranges, a reduction's inferred from the statement (a
    convolution's taps, from its weight), and at least one window fits; else None. A
    convolution written with its output an intermediate, ``c[b, o, l] = sum(i, k)
    x[b, i, l + k] * w[o, i, k]``, then activated and pooled, was refused: its positions
    never index a tensor plainly."""
    _, c, r = form
    d = t.shape[p]
    if any(b.name == u for b in bound):
        return None
    ranges = {name: (idx.lo, idx.hi) for name, idx in scope.items()}
    known = []
    for b in bound:  # innermost last: a later binding of a name hides an earlier one
        rng = (b.lo, b.hi) if b.lo is not None else _implicit(ck, b, expr, scope)
        if rng is None or not all(is_size(e, ck.op.dims) for e in rng):
            # (a range of data, or of another index: no window of sizes)
            if _uses(r, b.name):
                return None
            continue
        ranges[b.name] = rng
        known.append(ir.IndexRange(b.name, rng[0], rng[1]))
    span = _span(r, ranges, ck.op.dims)
    if span is None:
        return None
    lo, hi = span
    padded = node.pad is not None
    if c != ONE and not padded and names_in(c) & (names_in(lo) | names_in(hi)):
        # (an unpadded strided read whose window is sized by its step, a group's channels
        # ``g * (C // G) + 2 * k`` for k in 0 .. C // G, is a group split written wrong,
        # not a convolution: the exact rule's error stands. A convolution's taps are sized
        # apart from its stride: ``oh * S + kh`` for kh in 0 .. K has torch's floor,
        # (H - K) // S + 1, and a strided convolution only reduced afterwards, its output
        # read by no statement that would give its range, was refused)
        return None
    ext = ir.Binary("+", ir.Binary("//", ir.Binary(
        "-", ir.Binary("-", d, _join("+", lo, hi)), ONE), c), ONE)
    wider = False
    for sizes in ck.samples:
        step = evaluate(c, sizes)
        low, high = evaluate(lo, sizes), evaluate(hi, sizes)
        seen = _interval(ck, r, scope, tuple(known), sizes)
        if step < 1 or seen is None or seen != (low, high) or \
                (low != 0 if not padded else low > 0) or evaluate(ext, sizes) < 1:
            return None
        wider = wider or high - low >= step
    if not wider:  # (r within one step everywhere: the exact rule's, and its error)
        return None
    return ext, f"the windows of {format_expr(r)} that fit dim {p} of {t.name}"


def _implicit(ck, b: ir.IndexRange, expr: ir.Expr, scope: dict):
    """(0, extent) of a reduction's index ``b``, bound without a range, from the plain reads
    of it in the body of the reduction that binds it; None if none gives it, if another
    reduction of the statement binds the same name (a read of either could be taken for
    the other's: a statement summing ``v[k]`` beside a convolution over ``w[k]`` sized
    the convolution's window by v), or while it is being inferred."""
    binders = [e for e in ir.walk(expr) if isinstance(e, ir.Reduce)
               and any(i.name == b.name for i in e.indices)]
    if len(binders) != 1 or not any(i is b for i in binders[0].indices):
        return None
    busy = ck.__dict__.setdefault("_windows_inferring", set())
    if b.name in busy:
        return None
    busy.add(b.name)
    try:
        got = ck._infer_extent(b.name, binders[0].body, scope)
    finally:
        busy.discard(b.name)
    return (ZERO, got[0]) if isinstance(got, tuple) else None


def _span(e: ir.Expr, ranges: dict, dims):
    """(least, greatest) of ``e`` as size expressions, its indices over ``ranges`` (name ->
    (lo, hi), hi exclusive); None unless ``e`` is sizes and indices under + - and * by a
    size."""
    if isinstance(e, ir.Name) and e.name in ranges:
        lo, hi = ranges[e.name]
        return lo, _join("-", hi, ONE)
    if is_size(e, dims):
        return e, e
    if isinstance(e, ir.Unary) and e.op == "neg":
        inner = _span(e.operand, ranges, dims)
        return None if inner is None else (_join("-", ZERO, inner[1]), _join("-", ZERO, inner[0]))
    if not isinstance(e, ir.Binary):
        return None
    if e.op == "*":
        for size, rest in ((e.left, e.right), (e.right, e.left)):
            if is_size(size, dims):
                inner = _span(rest, ranges, dims)
                # (a size is not negative: the checker's sizes are)
                return None if inner is None else (_join("*", inner[0], size),
                                                   _join("*", inner[1], size))
        return None
    if e.op not in ("+", "-"):
        return None
    a, b = _span(e.left, ranges, dims), _span(e.right, ranges, dims)
    if a is None or b is None:
        return None
    if e.op == "+":
        return _join("+", a[0], b[0]), _join("+", a[1], b[1])
    return _join("-", a[0], b[1]), _join("-", a[1], b[0])


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


def names_in(e: ir.Expr) -> set[str]:
    """The names ``e`` reads (indices, dims, constants)."""
    return {n.name for n in ir.walk(e) if isinstance(n, ir.Name)}


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
