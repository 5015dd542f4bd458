"""Interval arithmetic on concrete sizes: the range of values an expression can take.

The checker uses it to prove every read in bounds (or padded); ``None`` means
"could be anything". Intervals are closed: (lo, hi) with lo <= value <= hi.
"""
from __future__ import annotations

from typing import Callable, Optional

from . import ir

Interval = Optional[tuple[float, float]]

MAX_INT_BITS = 4096  # the most bits integer arithmetic in a spec may reach (see ``int_bits``)
MAX_EXPONENT = 64  # as in size arithmetic: a larger power of an integer is not evaluated
WORD_BITS = 64  # a dim, an index or an integer tensor's value


def _combine(a: Interval, b: Interval, fn: Callable) -> Interval:
    if a is None or b is None:
        return None
    vals = [fn(x, y) for x in a for y in b]
    return (min(vals), max(vals))


def int_bits(e: ir.Expr) -> int:
    """An upper bound on the bits of the integers ``e`` can reach, when each name, read and
    call result holds 64 bits: products add bits, powers multiply them. Size and interval
    arithmetic evaluate integers exactly, so a bound past ``MAX_INT_BITS`` (``(N ** 64) **
    64``, a long product of large literals) would cost time and memory without limit; the
    checker refuses it (``too_large``) before evaluating anything."""
    if isinstance(e, ir.Num):
        return max(int(e.value).bit_length() if isinstance(e.value, int) else 0, 1)
    if isinstance(e, ir.Unary):
        return int_bits(e.operand)
    if isinstance(e, ir.Binary):
        a, b = int_bits(e.left), int_bits(e.right)
        if e.op in ("+", "-"):
            return max(a, b) + 1
        if e.op == "*":
            return a + b
        if e.op == "**":
            k = e.right.value if isinstance(e.right, ir.Num) and isinstance(e.right.value, int) \
                else MAX_EXPONENT
            return a * min(max(k, 1), MAX_EXPONENT)
        return max(a, b)  # // % comparisons and/or: no larger than an operand
    bits = WORD_BITS
    for child in ir.operands(e) + _bounds(e):
        bits = max(bits, int_bits(child))
    return bits


def too_large(e: ir.Expr) -> ir.Expr | None:
    """The outermost sub-expression of ``e`` whose ``int_bits`` pass ``MAX_INT_BITS``, or None."""
    if int_bits(e) <= MAX_INT_BITS:
        return None
    for child in _children(e):
        inner = too_large(child)
        if inner is not None:
            return inner
    return e


def _bounds(e: ir.Expr) -> list:
    ranges = e.indices if isinstance(e, ir.Reduce) else \
        (e.index,) if isinstance(e, ir.Collective) else ()
    out = [x for r in ranges for x in (r.lo, r.hi) if x is not None]
    if isinstance(e, ir.Collective) and e.k is not None:
        out.append(e.k)
    return out


def _children(e: ir.Expr) -> list:
    if isinstance(e, ir.Unary):
        return [e.operand]
    if isinstance(e, ir.Binary):
        return [e.left, e.right]
    return ir.operands(e) + _bounds(e)


def union(a: Interval, b: Interval) -> Interval:
    if a is None or b is None:
        return None
    return (min(a[0], b[0]), max(a[1], b[1]))


class IntervalEval:
    """Evaluates intervals under one size assignment.

    ``index`` maps index names to intervals; ``tensor`` maps tensor names to the
    interval of their values (None when unknown).
    """

    def __init__(self, sizes: dict[str, int], index: dict[str, Interval],
                 tensor: Callable[[str], Interval], tensor_len: Callable[[str], int]):
        self.sizes, self.index, self.tensor, self.tensor_len = sizes, index, tensor, tensor_len

    def of(self, e: ir.Expr) -> Interval:
        if isinstance(e, ir.Num):
            return (e.value, e.value)
        if isinstance(e, ir.Name):
            if e.name in self.index:
                return self.index[e.name]
            if e.name in self.sizes:
                v = self.sizes[e.name]
                return (v, v)
            return None
        if isinstance(e, ir.Access):
            t = self.tensor(e.tensor)
            return t if e.pad is None else union(t, self.of(e.pad))
        if isinstance(e, ir.Unary):
            a = self.of(e.operand)
            return None if a is None or e.op != "neg" else (-a[1], -a[0])
        if isinstance(e, ir.Binary):
            return self._binary(e)
        if isinstance(e, ir.Call):
            return self._call(e)
        if isinstance(e, ir.Reduce):
            return self._reduce(e)
        if isinstance(e, ir.Collective):
            if e.op in ("argsort", "argtopk"):
                return self._extent(e.index)
            return self._bound(e.index, lambda: self.of(e.body))
        return None

    def _binary(self, e: ir.Binary) -> Interval:
        a, b = self.of(e.left), self.of(e.right)
        if e.op == "+":
            return _combine(a, b, lambda x, y: x + y)
        if e.op == "-":
            return _combine(a, b, lambda x, y: x - y)
        if e.op == "*":
            return _combine(a, b, lambda x, y: x * y)
        if e.op == "//" and b is not None and b[0] > 0:
            return _combine(a, b, lambda x, y: x // y)
        if e.op == "%" and b is not None and b[0] > 0:
            return (0, b[1] - 1)
        return None

    def _call(self, e: ir.Call) -> Interval:
        args = e.args
        if e.fn in ("min", "max") and len(args) == 2:
            a, b = self.of(args[0]), self.of(args[1])
            return _combine(a, b, min if e.fn == "min" else max)
        if e.fn == "where" and len(args) == 3:
            return union(self.of(args[1]), self.of(args[2]))
        if e.fn in ("i64", "i32") and len(args) == 1:
            return self.of(args[0])
        if e.fn == "relu" and len(args) == 1:
            a = self.of(args[0])
            return None if a is None else (max(a[0], 0), max(a[1], 0))
        if e.fn == "segment_of" and args and isinstance(args[0], ir.Name):
            return (0, self.tensor_len(args[0].name) - 2)
        if e.fn in ("triu_row", "triu_col") and len(args) == 2:
            f = self.of(args[1])
            if f is None:
                return None
            return (0, f[1] - 2) if e.fn == "triu_row" else (1, f[1] - 1)
        return None

    def _extent(self, r: ir.IndexRange) -> Interval:
        lo, hi = self.of(r.lo), self.of(r.hi)
        if lo is None or hi is None:
            return None
        return (lo[0], hi[1] - 1)

    def _bound(self, r: ir.IndexRange, inner: Callable[[], Interval]) -> Interval:
        saved = self.index.get(r.name)
        self.index[r.name] = self._extent(r)
        try:
            return inner()
        finally:
            if saved is None:
                self.index.pop(r.name, None)
            else:
                self.index[r.name] = saved

    def _reduce(self, e: ir.Reduce) -> Interval:
        if e.op in ("argmax", "argmin") and len(e.indices) == 1:
            return self._extent(e.indices[0])
        if e.op not in ("max", "min"):
            return None

        def inner(k=0):
            if k == len(e.indices):
                return self.of(e.body)
            return self._bound(e.indices[k], lambda: inner(k + 1))
        return inner()
