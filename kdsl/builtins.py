"""Elementwise builtins: the one table every part of kdsl agrees on.

Each entry gives the arity, the result kind ('float', 'int', 'bool', or 'same'
as the widest argument) and the float64/int64 numpy meaning. Backends render
the same names; the reference here is their definition.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

MASK64 = (1 << 64) - 1


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer on the 64-bit pattern of ``x``; the result as int64."""
    z = np.asarray(x).astype(np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z.view(np.int64)


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x) if np.size(x) else np.asarray(x, float)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class Builtin:
    name: str
    arity: int
    result: str  # 'float' | 'int' | 'bool' | 'same'
    numpy: Callable
    doc: str


def _b(name, arity, result, fn, doc):
    return name, Builtin(name, arity, result, fn, doc)


ELEMENTWISE: dict[str, Builtin] = dict([
    _b("exp", 1, "float", np.exp, "e**x"),
    _b("log", 1, "float", np.log, "natural logarithm"),
    _b("log1p", 1, "float", np.log1p, "log(1 + x), exact near 0"),
    _b("expm1", 1, "float", np.expm1, "exp(x) - 1, exact near 0"),
    _b("sqrt", 1, "float", np.sqrt, "square root"),
    _b("rsqrt", 1, "float", lambda x: 1.0 / np.sqrt(x), "1/sqrt(x)"),
    _b("tanh", 1, "float", np.tanh, "hyperbolic tangent"),
    _b("erf", 1, "float", _erf, "error function"),
    _b("sigmoid", 1, "float", _sigmoid, "1/(1+exp(-x))"),
    _b("silu", 1, "float", lambda x: x * _sigmoid(x), "x*sigmoid(x)"),
    _b("relu", 1, "same", lambda x: np.maximum(x, 0), "max(x, 0)"),
    _b("abs", 1, "same", np.abs, "absolute value"),
    _b("floor", 1, "float", np.floor, "largest whole number not above x"),
    _b("ceil", 1, "float", np.ceil, "smallest whole number not below x"),
    _b("trunc", 1, "float", np.trunc, "x's whole part, toward 0"),
    _b("round", 1, "float", np.round, "nearest whole number, halves to even (torch.round)"),
    _b("min", 2, "same", np.minimum, "smaller of two"),
    _b("max", 2, "same", np.maximum, "larger of two"),
    _b("pow", 2, "float", np.power, "x**y"),
    _b("where", 3, "same", np.where, "where(cond, a, b)"),
    _b("hash64", 1, "int", splitmix64, "splitmix64 finalizer of an int64, as int64"),
])

# Casts: the target dtype's kind; the reference stays in float64/int64.
CASTS = {"f32": "float", "f16": "float", "bf16": "float", "f64": "float",
         "i32": "int", "i64": "int", "bool": "bool"}

# Index builtins whose semantics are defined once here; their arguments include
# tensors or dims, not only values.
#   segment_of(offsets, i): the b with offsets[b] <= i < offsets[b+1] (last such b)
#   triu_row(p, F), triu_col(p, F): row/column of the p-th entry of the strict upper
#   triangle of an F x F matrix, in row-major order (torch.triu_indices(F, F, 1)).
INDEX_BUILTINS = ("segment_of", "triu_row", "triu_col")

# The functions that round a float to a whole number: a value within a float's rounding of
# a step may land on either side of it (``compare``, ``reference.cast_bounds``).
ROUNDINGS = ("floor", "ceil", "trunc", "round")

CONSTANTS = {"inf": math.inf, "pi": math.pi}


def segment_of(offsets: np.ndarray, i: np.ndarray) -> np.ndarray:
    return np.searchsorted(offsets, i, side="right") - 1


def triu_pairs(f: int) -> tuple[np.ndarray, np.ndarray]:
    rows, cols = np.triu_indices(f, 1)
    return rows.astype(np.int64), cols.astype(np.int64)
