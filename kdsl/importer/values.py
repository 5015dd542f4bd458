"""Tensors of the traced graph as index-notation values.

A ``Value`` knows its shape (sympy sizes) and how to read one element at given index
expressions (``at``). Stored tensors (inputs, emitted statements) read as ``name[...]``;
views (permute, reshape, slice, expand, ...) only rewrite the indices, so they fold into
the reads of whoever uses them; elementwise values inline their expression. Which values
become statements is the emitter's decision (``kind``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import sympy

VIEW, ELEMENTWISE, COMPUTE = "view", "elementwise", "compute"


@dataclass
class Value:
    shape: tuple          # sympy size expressions
    dtype: str            # 'f' float, 'i' integer, 'b' bool
    read: Callable        # (indices: tuple[str, ...]) -> element expression text
    kind: str = ELEMENTWISE
    # (indices, pad) -> an access text with ``pad(v)`` that may run out of range, or None
    # when this value is not a plain re-indexing of a stored tensor
    padded: Callable | None = None
    origin: str | None = None  # the input this value re-indexes, if it is a view of one
    notes: dict = field(default_factory=dict)

    def at(self, idx) -> str:
        return self.read(tuple(idx))

    @property
    def rank(self) -> int:
        return len(self.shape)


def stored(name: str, shape, dtype: str, origin: str | None = None) -> Value:
    def read(idx):
        return f"{name}[{', '.join(idx)}]"

    def padded(idx, pad):
        return f"{name}[{', '.join(idx)}] pad({pad})"
    return Value(tuple(sympy.sympify(s) for s in shape), dtype, read, VIEW, padded, origin)


def reindexed(src: Value, shape, mapping: Callable, one_to_one: bool = False) -> Value:
    """A view of ``src``: ``mapping`` takes this view's indices to ``src``'s. A one-to-one
    mapping that only moves, drops or fixes indices keeps padded reads possible."""
    padded = None
    if one_to_one and src.padded is not None:
        padded = partial(_padded_through, src, mapping)
    return Value(tuple(shape), src.dtype, lambda idx: src.read(mapping(idx)), VIEW, padded,
                 src.origin, src.notes)


def _padded_through(src: Value, mapping: Callable, idx, pad) -> str:
    return src.padded(mapping(idx), pad)


def number(v) -> str:
    """A Python scalar as kspec text."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v) if v >= 0 else f"({v})"
    v = float(v)
    if v != v:  # the language has no NaN literal; inf - inf is one in IEEE arithmetic
        return "(inf - inf)"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "(-inf)"
    text = repr(v)
    if "e" not in text and "." not in text:
        text += ".0"
    return text if v >= 0 else f"({text})"


def constant(shape, dtype: str, v) -> Value:
    text = number(v)
    return Value(tuple(shape), dtype, lambda idx: text, ELEMENTWISE)
