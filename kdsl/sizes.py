"""Size arithmetic: dim expressions evaluated on concrete sizes, and size sampling.

A dim expression is an ``ir.Expr`` over dim names and integers using
+ - * // % ** and comparisons (for test conditions).
"""
from __future__ import annotations

import random
from functools import lru_cache

from . import ir

SIZE_OPS = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b if b else 0, "%": lambda a, b: a % b if b else 0,
    "**": lambda a, b: a ** b if 0 <= b <= 64 else 0,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
    "and": lambda a, b: a and b, "or": lambda a, b: a or b,
}


class NotASize(Exception):
    def __init__(self, node, why: str):
        self.node, self.why = node, why


def evaluate(expr: ir.Expr, sizes: dict[str, int]) -> int:
    """The integer value of a dim expression; NotASize for anything else."""
    if isinstance(expr, ir.Num):
        if not isinstance(expr.value, int):
            raise NotASize(expr, "sizes are integers")
        return expr.value
    if isinstance(expr, ir.Name):
        if expr.name not in sizes:
            raise NotASize(expr, f"'{expr.name}' is not a dim")
        return sizes[expr.name]
    if isinstance(expr, ir.Binary) and expr.op in SIZE_OPS:
        return int(SIZE_OPS[expr.op](evaluate(expr.left, sizes), evaluate(expr.right, sizes)))
    if isinstance(expr, ir.Unary) and expr.op == "neg":
        return -evaluate(expr.operand, sizes)
    if isinstance(expr, ir.Unary) and expr.op == "not":
        return int(not evaluate(expr.operand, sizes))
    raise NotASize(expr, "only dims, integers and + - * // % ** belong in a size")


def shape_of(op: ir.Op, tensor: str, sizes: dict[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(e, sizes) for e in op.tensor(tensor).shape)


def valid(op: ir.Op, sizes: dict[str, int]) -> bool:
    """Sizes satisfy the test conditions and give every tensor a non-negative shape."""
    if op.test is not None:
        for cond in op.test.conditions:
            if not evaluate(cond, sizes):
                return False
    for t in op.tensors:
        if any(evaluate(e, sizes) < 0 for e in t.shape):
            return False
    return True


@lru_cache(maxsize=256)  # sampling asks for the same ranges' edges on every draw
def _primes_in(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(n for n in range(max(lo, 2), min(hi, lo + 2000) + 1)
                 if all(n % p for p in range(2, int(n ** 0.5) + 1)))


def edge_values(lo: int, hi: int) -> list[int]:
    """Sizes that break kernels: the ends, 1, primes, non-powers of two, off-by-ones."""
    vals = {lo, hi}
    if lo <= 1 <= hi:
        vals.add(1)
    primes = _primes_in(lo, hi)
    if primes:
        vals.update({primes[-1], primes[len(primes) // 2]})
    for p in (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096):
        for v in (p - 1, p + 1):
            if lo <= v <= hi:
                vals.add(v)
    return sorted(vals)


def ranges(op: ir.Op) -> dict[str, tuple[int, int]]:
    assert op.test is not None
    return {r.dim: (evaluate(r.lo, {}), evaluate(r.hi, {})) for r in op.test.ranges}


def sample(op: ir.Op, rng: random.Random, style: str, tries: int = 200) -> dict[str, int] | None:
    """One size assignment in the test ranges. ``style``: 'low', 'high', 'edge', 'one', 'random'.

    'random' draws log-uniformly, so small and large sizes both appear. Assignments
    that violate the conditions are redrawn (mixing in random draws); None if none fits.
    """
    rs = ranges(op)
    for attempt in range(tries):
        s = style if attempt < tries // 4 else "random"
        sizes = {}
        for dim, (lo, hi) in rs.items():
            if s == "low":
                v = lo if attempt == 0 else rng.randint(lo, min(hi, lo + attempt))
            elif s == "high":
                v = hi if attempt == 0 else rng.randint(max(lo, hi - attempt), hi)
            elif s == "edge":
                v = rng.choice(edge_values(lo, hi))
            elif s == "one":  # size 1 where a range starts at 0 ('low' has 0 there)
                v = 1 if lo < 1 <= hi else rng.choice(edge_values(lo, hi))
            else:
                v = int(round(2 ** rng.uniform(0, (max(hi, 1)).bit_length()))) if hi > lo else lo
                v = min(max(v, lo), hi)
            sizes[dim] = v
        if valid(op, sizes):
            return sizes
    return None


def corners(op: ir.Op) -> list[dict[str, int]]:
    """Deterministic assignments for static checks: range corners, edges and a few draws."""
    rng = random.Random(0)
    out = []
    for style in ("low", "high", "edge", "edge", "random", "random", "random", "random"):
        s = sample(op, rng, style)
        if s is not None and s not in out:
            out.append(s)
    return out
