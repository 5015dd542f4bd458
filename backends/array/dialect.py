"""What differs between numpy and torch code: a small spelling table.

``array_lowering`` walks the IR once; a ``Dialect`` spells the few primitives
whose names or signatures differ (casts, transposes, einsum, builtins). The
rendered module names its dtypes ``F`` (compute float), ``W`` (float64),
``I`` (int64) and ``B`` (bool), and imports its runtime helpers as ``rt``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

DTYPE = {"float": "F", "int": "I", "bool": "B"}

_NAME = re.compile(r"[A-Za-z_][\w.]*")


@dataclass(frozen=True)
class Val:
    """A rendered value: code, kind, and the grid positions it varies along."""
    code: str
    kind: str                       # 'float' | 'int' | 'bool'
    deps: frozenset = frozenset()
    scalar: bool = False            # a Python number, not an array


def atom(code: str) -> str:
    """``code`` safe to index or call a method on: a name, a parenthesized group, or
    either followed by calls, subscripts and attributes stays as it is; anything else
    is wrapped."""
    m = _NAME.match(code)
    i = m.end() if m else (_close(code, 0) if code[:1] == "(" else -1)
    while 0 < i < len(code):
        if code[i] in "([":
            i = _close(code, i)
        elif code[i] == "." and (m := _NAME.match(code, i + 1)):
            i = m.end()
        else:
            break
    return code if 0 < i == len(code) else f"({code})"


def _close(code: str, start: int) -> int:
    """The index after the bracket group opening at ``start`` (-1 if unbalanced)."""
    depth = 0
    for i in range(start, len(code)):
        depth += 1 if code[i] in "([" else -1 if code[i] in ")]" else 0
        if depth == 0:
            return i + 1
    return -1


def subscript(code: str, items: list[str]) -> str:
    """``code[items]``, with trailing full slices dropped."""
    while items and items[-1] == ":":
        items = items[:-1]
    return f"{atom(code)}[{', '.join(items)}]" if items else code


def fold_subscript(code: str, items: list[str]) -> str | None:
    """``code[items]`` as one subscript when ``code`` is ``x[...]`` made of slices and
    unit-dim insertions and ``items`` drops exactly those unit dims and keeps the rest
    (``x[None, a:b, None][:, :, 0]`` is ``x[None, a:b]``); None otherwise."""
    base, inner = split_subscript(code)
    if inner is None or len(inner) > len(items):
        return None
    inner = inner + [":"] * (len(items) - len(inner))
    kept = []
    for a, b in zip(inner, items):
        if a == "None" and b in ("0", ":"):
            kept += [] if b == "0" else ["None"]
        elif _is_slice(a) and b == ":":
            kept.append(a)
        else:
            return None
    return subscript(base, kept)


def _is_slice(item: str) -> bool:
    depth = 0
    for ch in item:
        depth += 1 if ch in "([" else -1 if ch in ")]" else 0
        if depth == 0 and ch == ":":
            return True
    return False


def split_subscript(code: str) -> tuple[str, list[str] | None]:
    """``X[a, b]`` -> (X, ['a', 'b']) when ``code`` ends in a subscript of X."""
    if not code.endswith("]"):
        return code, None
    depth, cuts = 0, []
    for i in range(len(code) - 1, -1, -1):
        depth += 1 if code[i] in ")]" else -1 if code[i] in "([" else 0
        if depth == 1 and code[i] == ",":
            cuts.append(i)
        if depth == 0:
            base = code[:i]
            if not base or atom(base) != base:
                return code, None
            bounds = [i] + cuts[::-1] + [len(code) - 1]
            return base, [code[a + 1:b].strip() for a, b in zip(bounds, bounds[1:])]
    return code, None


class Dialect:
    """Spellings shared by both dialects; subclasses override what differs."""
    name = ""
    xp = ""             # the array module's name in rendered code
    dev = ""            # extra argument of helpers that allocate (torch: ', dev')

    def header(self, precision: str) -> list[str]:
        raise NotImplementedError

    def prologue(self) -> list[str]:
        return []

    def cast(self, code: str, dtype: str) -> str:
        raise NotImplementedError

    def transpose(self, code: str, perm: list[int]) -> str:
        raise NotImplementedError

    def einsum(self, spec: str, operands: list[str], optimize: bool) -> str:
        raise NotImplementedError

    def flip(self, code: str, dims: list[int]) -> str:
        """``code`` read in reverse along ``dims``."""
        raise NotImplementedError

    def ufunc(self, fn: str, args: list[Val]) -> str:
        raise NotImplementedError

    def where(self, cond: str, a: str, b: str) -> str:
        return f"{self.xp}.where({cond}, {a}, {b})"

    def axis(self, lo: str, hi: str, pos: int, nd: int) -> str:
        return f"rt.axis({lo}, {hi}, {pos}, {nd}{self.dev})"

    def lift(self, value: str, dtype: str, nd: int) -> str:
        return f"rt.full({(1,) * nd}, {value}, {dtype}{self.dev})"

    def full(self, shape: str, value: str, dtype: str) -> str:
        return f"rt.full({shape}, {value}, {dtype}{self.dev})"

    def empty(self, shape: str, dtype: str) -> str:
        return f"rt.empty({shape}, {dtype}{self.dev})"
