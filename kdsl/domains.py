"""Checks of input domains: what the case generator must be able to draw from.

A value range's bounds are numbers or size expressions; offsets describe a 1-D
integer tensor and end at a size; no domain is empty at a size where its tensor
has elements. Anything else would fail later, while drawing inputs.
"""
from __future__ import annotations

from . import dtypes, ir
from .sizes import NotASize, evaluate


def _kinds(op: ir.Op, t: ir.Tensor) -> set[str]:
    return {dtypes.kind(op.dtype_of(t.name, d)) for d in op.dtype_choices}


def domain_errors(op: ir.Op) -> list[tuple[ir.Loc, str]]:
    """(location, message) for every malformed domain of ``op``'s inputs."""
    out: list[tuple[ir.Loc, str]] = []
    dims = set(op.dims)
    for t in op.inputs:
        d = t.domain
        if d is None:
            continue
        kinds = _kinds(op, t)
        if isinstance(d, ir.Offsets):
            if len(t.shape) != 1 or kinds != {"int"}:
                out.append((t.loc, f"offsets(...) describe a 1-D integer tensor, but '{t.name}' "
                                   f"is not one"))
            bounds = (d.total,)
        else:
            if "bool" in kinds:
                out.append((t.loc, f"'{t.name}' holds bools; a domain needs numbers"))
            bounds = (d.lo, d.hi) if isinstance(d, ir.ValueRange) else ()
        for e in bounds:
            if isinstance(e, ir.Num) and isinstance(d, ir.ValueRange):
                continue  # a literal bound, integer or float
            names = [n for n in ir.walk(e) if isinstance(n, ir.Name) and n.name not in dims]
            if names:
                out.append((names[0].loc, f"domain of '{t.name}' uses '{names[0].name}', "
                                          "which is not a dim"))
                continue
            try:
                evaluate(e, {x: 1 for x in dims})
            except NotASize as err:
                out.append((getattr(err.node, "loc", t.loc), f"domain of '{t.name}': {err.why}"))
    return out


def _value(e: ir.Expr, sizes: dict[str, int]):
    return e.value if isinstance(e, ir.Num) else evaluate(e, sizes)


def empty_domain_errors(op: ir.Op, samples: list[dict[str, int]]) -> list[tuple[ir.Loc, str]]:
    """Value ranges with nothing to draw at a sampled size where the tensor is not empty."""
    out = []
    for t in op.inputs:
        if not isinstance(t.domain, ir.ValueRange):
            continue
        integer = _kinds(op, t) == {"int"}
        for s in samples:
            if any(evaluate(e, s) == 0 for e in t.shape):
                continue
            lo, hi = _value(t.domain.lo, s), _value(t.domain.hi, s)
            if lo >= hi if integer else lo > hi:
                where = ", ".join(f"{k}={v}" for k, v in s.items())
                out.append((t.loc, f"domain of '{t.name}' is empty: {lo}..{hi} at {where}"))
                break
    return out
