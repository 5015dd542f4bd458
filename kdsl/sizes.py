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


# ---- the upper ends of the test ranges ---------------------------------------

def elements(op: ir.Op, sizes: dict[str, int]) -> int:
    """The elements of every input and output at ``sizes``: what a case costs to run."""
    total = 0
    for t in (*op.inputs, *op.outputs):
        n = 1
        for e in t.shape:
            n *= max(evaluate(e, sizes), 0)
        total += n
    return total


def smallest(lo: int, hi: int) -> int:
    """The least size of a range that is not 0 (a dim of 0 empties the case), else ``lo``."""
    return lo if lo >= 1 or hi < 1 else 1


def _solved(op: ir.Op, fixed) -> dict[str, tuple[int, ir.Expr]]:
    """Dims that an equality condition gives from the others: ``D == e`` or ``c * D == e``
    (D = e // c where c divides e), except the ``fixed`` ones."""
    out = {}
    for cond in op.test.conditions if op.test else ():
        if not (isinstance(cond, ir.Binary) and cond.op == "=="):
            continue
        for side, other in ((cond.left, cond.right), (cond.right, cond.left)):
            coef, name = 1, side
            if isinstance(side, ir.Binary) and side.op == "*":
                for a, b in ((side.left, side.right), (side.right, side.left)):
                    if isinstance(a, ir.Num) and isinstance(a.value, int) and a.value > 0:
                        coef, name = a.value, b
            if isinstance(name, ir.Name) and name.name in op.dims and name.name not in fixed \
                    and name.name not in out and \
                    name.name not in {n.name for n in ir.walk(other) if isinstance(n, ir.Name)}:
                out[name.name] = (coef, other)
                break
    return out


def _derive(sizes: dict[str, int], solved) -> dict[str, int] | None:
    """``sizes`` with the solved dims filled in (None where an equality has no integer
    solution or a solved dim depends on one not known yet after as many rounds as dims)."""
    sizes = dict(sizes)
    for _ in range(len(solved) + 1):
        pending = False
        for d, (coef, e) in solved.items():
            try:
                v = evaluate(e, sizes)
            except NotASize:
                pending = True
                continue
            if v % coef:
                return None
            sizes[d] = v // coef
        if not pending:
            return sizes
    return None


BFS_LIMIT = 400  # assignments tried near the smallest sizes before random starting points
RANDOM_TRIES = 400  # random assignments tried for valid starting points


def _shape_dims(op: ir.Op) -> set[str]:
    return {n.name for t in op.tensors for e in t.shape for n in ir.walk(e)
            if isinstance(n, ir.Name)}


def extreme(op: ir.Op, fixed: dict[str, int], budget: int) -> dict[str, int] | None:
    """Sizes with the ``fixed`` dims at their given values and every other dim as small as
    the test conditions allow, within ``budget`` elements, or None. Small: a shape dim at
    its least size that is not 0 (``smallest``), any other (a padding) at its range's start.

    First breadth first over which of the other dims leave their small size (at most two),
    each for one of a few values conditions tend to need: its range's ends and
    next-to-ends, and the fixed values (``K <= N`` wants N = K); else from random valid
    assignments, each dim lowered while the conditions hold. Dims an equality solves
    (``LO == L + 2 * P - KW + 1``) are computed, not searched."""
    rs = ranges(op)
    solved = _solved(op, fixed)
    free = [d for d in rs if d not in fixed and d not in solved]
    shaped = _shape_dims(op)
    start = {d: smallest(*rs[d]) if d in shaped else rs[d][0] for d in free}
    alts = {}
    for d in free:
        lo, hi = rs[d]
        near = {lo, lo + 1, hi - 1, hi} | {v for v in fixed.values() if lo <= v <= hi}
        alts[d] = sorted(v for v in near if lo <= v <= hi and v != start[d])

    def check(sizes):
        sizes = _derive(sizes, solved)
        if sizes is None or any(not lo <= sizes[d] <= hi for d, (lo, hi) in rs.items()):
            return None
        sizes = {d: sizes[d] for d in op.dims}
        return sizes if valid(op, sizes) else None

    tried = 0
    for depth in range(min(len(free), 2) + 1):
        best = None
        for moved in _subsets(free, depth):
            for values in _product([alts[d] for d in moved]):
                tried += 1
                sizes = check({**fixed, **start, **dict(zip(moved, values))})
                if sizes is not None and elements(op, sizes) <= budget and \
                        (best is None or elements(op, sizes) < elements(op, best)):
                    best = sizes
                if tried > BFS_LIMIT:
                    break
        if best is not None:
            return best
    rng = random.Random(f"kdsl-upper:{op.hash}:{sorted(fixed.items())}")
    best = None
    for _ in range(RANDOM_TRIES):
        drawn = {d: min(max(int(round(2 ** rng.uniform(0, max(rs[d][1], 1).bit_length()))),
                            rs[d][0]), rs[d][1]) for d in free}
        sizes = check({**fixed, **drawn})
        if sizes is None:
            continue
        sizes = _lowered(sizes, free, start, rs, check)
        if elements(op, sizes) <= budget and \
                (best is None or elements(op, sizes) < elements(op, best)):
            best = sizes
    return best


def _lowered(sizes: dict[str, int], free: list[str], start: dict, rs: dict, check) -> dict:
    """``sizes`` with each free dim lowered, one at a time, while the conditions hold."""
    changed = True
    while changed:
        changed = False
        for d in free:
            lo = rs[d][0]
            for v in sorted({start[d], lo, lo + 1, sizes[d] // 2, sizes[d] - 1}):
                if lo <= v < sizes[d]:
                    got = check({**sizes, d: v})
                    if got is not None:
                        sizes, changed = got, True
                        break
    return sizes


def _subsets(items: list, k: int):
    if k == 0:
        yield ()
        return
    for i, x in enumerate(items):
        for rest in _subsets(items[i + 1:], k - 1):
            yield (x,) + rest


def _product(lists: list[list]):
    if not lists:
        yield ()
        return
    for v in lists[0]:
        for rest in _product(lists[1:]):
            yield (v,) + rest


def upper(op: ir.Op, dims: tuple[str, ...], budget: int) -> dict[str, int] | None:
    """Sizes with ``dims`` together as large as their ranges, the conditions and ``budget``
    elements allow, and the other dims small (``extreme``), or None.

    The dims take their maximum where a case fits; a few steps below it where the conditions
    rule the maximum out (LO == (L + 2P - KW) // S + 1 may not reach its range's end).
    Where the maximum alone would pass ``budget`` (a dim of 10^8 elements), the largest
    value that fits is found by bisection: a case of that many elements would cost every
    evaluation more than the rest of its cases together, and the bench point, which is
    checked against the float64 oracle, covers the large sizes."""
    rs = ranges(op)
    for step in (0, 1, 2, 3, 4, 6, 8, 12, 16, 32):
        fixed = {d: max(rs[d][1] - step, rs[d][0]) for d in dims}
        got = extreme(op, fixed, budget)
        if got is not None:
            return got
        if extreme(op, fixed, 1 << 62) is not None:
            break  # valid, but too large: bisect below
    lo_t, hi_t = 0, max(rs[d][1] - rs[d][0] for d in dims)
    found = None
    while lo_t < hi_t:  # the largest fraction of the ranges that fits the budget
        mid = (lo_t + hi_t + 1) // 2
        fixed = {d: rs[d][0] + min(mid, rs[d][1] - rs[d][0]) for d in dims}
        got = extreme(op, fixed, budget)
        if got is not None:
            found, lo_t = got, mid
        else:
            hi_t = mid - 1
    return found
