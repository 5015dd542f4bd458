"""The plan of correctness cases: which shapes, dtypes and seeds a candidate is run on.

Fresh cases from each seed (drawn from the OS at each evaluation unless the config names
them) and the spec's edge sizes (every dim at its smallest, and at
an awkward size), each within ``max_case_elements``; and, whatever that limit says, the
upper ends of every test range and domain for each dtype (``cases.upper_shapes``): a
kernel wrong only at sizes the limit would drop (softmax above N=4096, a bag of 2,000
rows) fails here.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from kdsl import cases, ir, sizes as size_math
from kdsl.sizes import edge_values, ranges, valid


@dataclass(frozen=True)
class Planned:
    shape: cases.Shape
    seed: int


def elements(op: ir.Op, sizes: dict[str, int]) -> int:
    return size_math.elements(op, sizes)


def chosen_dtypes(op: ir.Op, wanted: tuple[str, ...] | None) -> tuple[str, ...]:
    """The op's dtypes restricted to ``wanted``; all of them when it declares none of those."""
    if wanted is None:
        return op.dtype_choices
    return tuple(d for d in op.dtype_choices if d in wanted) or op.dtype_choices


def smallest_shapes(op: ir.Op, dts) -> list[cases.Shape]:
    """Per dtype, every dim at its smallest: what is checked, whatever its size, when no
    case fits ``max_case_elements`` (an imported module's fixed weights, 8192 x 8192, make
    its every case larger): a budget chooses among cases, it never leaves none."""
    if op.test is None:
        return []
    low = {d: lo for d, (lo, hi) in ranges(op).items()}
    if not valid(op, low):
        return []
    return [cases.Shape(dict(low), dt, "edge-size", 100) for dt in dts]


def edge_shapes(op: ir.Op, dts, max_elements: int) -> list[cases.Shape]:
    """Per dtype: every dim at its smallest, and every dim at an awkward size (p±1, a prime)."""
    if op.test is None:
        return []
    rs = ranges(op)
    low = {d: lo for d, (lo, hi) in rs.items()}
    cap = max(2, int(round(max_elements ** (1.0 / max(len(rs), 1)) / 2)))
    awkward = {}
    for d, (lo, hi) in rs.items():
        odd = [v for v in edge_values(lo, hi) if v <= cap and v & (v - 1)] or [lo]
        awkward[d] = max(odd)
    out = []
    for dt in dts:
        for k, sizes in enumerate((low, awkward)):
            if valid(op, sizes) and elements(op, sizes) <= max_elements and \
                    not any(s.sizes == sizes and s.dtype == dt for s in out):
                out.append(cases.Shape(dict(sizes), dt, "edge-size", 100 + k))
    return out


def upper_shapes(op: ir.Op, dts, max_elements: int, interpreted: bool = False
                 ) -> list[cases.Shape]:
    """The upper ends for each dtype, within the larger of ``max_case_elements`` and
    ``cases.UPPER_CASE_ELEMENTS`` (a budget only a dim of millions reaches). Every dim
    large at once ('all', a million elements) is left out where the kernel runs in the
    Triton interpreter (a sort of 200 rows of 2,048 there takes minutes): that is a
    development check on the CPU, not a verdict anything is timed by."""
    shapes = cases.upper_shapes(op, dts, max(cases.UPPER_CASE_ELEMENTS, max_elements))
    return [s for s in shapes if not (interpreted and s.label == "all")]


def case_seeds(config) -> tuple[int, ...]:
    """The config's seeds, or as many drawn from the OS as it asks: fixed seeds told which
    shapes and values every evaluation checks, and a kernel computing those alone (and
    anything at all elsewhere) was accepted."""
    if config.seeds is not None:
        return tuple(config.seeds)
    rng = random.SystemRandom()
    return tuple(rng.randrange(1, 1 << 31) for _ in range(config.drawn_seeds))


def plan(op: ir.Op, config, interpreted: bool = False) -> list[Planned]:
    dts = chosen_dtypes(op, config.dtypes)
    seeds = case_seeds(config)
    first = seeds[0] if seeds else 0
    out = []
    for n, seed in enumerate(seeds):
        # the first seed's shapes are the ranges' ends and edges; the others' are drawn
        # anywhere in the ranges: ends and edges alone are a short list a kernel can know
        # (a softmax wrong wherever N % 4 == 2 passed every plan of fixed styles)
        styles = cases.STYLES if n == 0 else ("random",)
        for s in cases.shapes(op, seed, config.cases_per_dtype, dts, styles):
            if elements(op, s.sizes) <= config.max_case_elements:
                out.append(Planned(s, seed))
    seen = {(tuple(p.shape.sizes.items()), p.shape.dtype) for p in out}
    for s in (*edge_shapes(op, dts, config.max_case_elements),
              *upper_shapes(op, dts, config.max_case_elements, interpreted)):
        key = (tuple(s.sizes.items()), s.dtype)
        if key not in seen:
            seen.add(key)
            out.append(Planned(s, first))
    return out or [Planned(s, first) for s in smallest_shapes(op, dts)]
