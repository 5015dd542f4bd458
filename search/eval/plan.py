"""The plan of correctness cases: which shapes, dtypes and seeds a candidate is run on.

Fresh cases from each seed, the spec's edge sizes (every dim at its smallest, and at
an awkward size), each within ``max_case_elements``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kdsl import cases, ir
from kdsl.sizes import edge_values, ranges, shape_of, valid


@dataclass(frozen=True)
class Planned:
    shape: cases.Shape
    seed: int


def elements(op: ir.Op, sizes: dict[str, int]) -> int:
    return sum(int(np.prod(shape_of(op, t.name, sizes), dtype=np.int64))
               for t in (*op.inputs, *op.outputs))


def chosen_dtypes(op: ir.Op, wanted: tuple[str, ...] | None) -> tuple[str, ...]:
    """The op's dtypes restricted to ``wanted``; all of them when it declares none of those."""
    if wanted is None:
        return op.dtype_choices
    return tuple(d for d in op.dtype_choices if d in wanted) or op.dtype_choices


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


def plan(op: ir.Op, config) -> list[Planned]:
    dts = chosen_dtypes(op, config.dtypes)
    out = []
    for seed in config.seeds:
        for s in cases.shapes(op, seed, config.cases_per_dtype, dts):
            if elements(op, s.sizes) <= config.max_case_elements:
                out.append(Planned(s, seed))
    seen = {(tuple(p.shape.sizes.items()), p.shape.dtype) for p in out}
    for s in edge_shapes(op, dts, config.max_case_elements):
        if (tuple(s.sizes.items()), s.dtype) not in seen:
            out.append(Planned(s, config.seeds[0] if config.seeds else 0))
    return out
