"""The spec's text: dims, inputs, outputs, statements, baseline, tolerance, test and bench.

Test ranges: every dynamic dim from torch.export's lower bound (raised until every tensor
of the graph is non-empty) to its bench value, capped so the largest tensor of the graph
stays small: ``kdsl check`` runs the float64 reference on every case, on two cores.
"""
from __future__ import annotations

from . import symbolic

TEST_ELEMENTS = 1 << 17  # the largest tensor of the graph at the top of the test ranges
TEST_DIM_MAX = 64


def test_ranges(shapes: list, lower: dict, bench: dict) -> dict:
    """symbol -> (lo, hi)."""
    syms = list(bench)
    lo = {s: max(int(lower.get(s, 1)), 1) for s in syms}
    for _ in range(10000):  # raise the lower ends until every tensor is non-empty
        bad = [e for shape in shapes for e in shape if e.free_symbols and symbolic.evaluate(e, lo) < 1]
        if not bad:
            break
        for s in bad[0].free_symbols:
            lo[s] += 1
    hi = {s: max(lo[s], min(bench[s], TEST_DIM_MAX)) for s in syms}
    for _ in range(200):
        biggest = max((_numel(shape, hi) for shape in shapes), default=1)
        if biggest <= TEST_ELEMENTS:
            break
        wide = [s for s in syms if hi[s] > lo[s]]
        if not wide:
            break
        s = max(wide, key=lambda s: hi[s])
        hi[s] = max(lo[s], hi[s] // 2)
    return {s: (lo[s], hi[s]) for s in syms}


def _numel(shape, values) -> int:
    n = 1
    for e in shape:
        n *= max(symbolic.evaluate(e, values), 0)
    return n


_KIND_TYPE = {"f": "f32", "i": "i64", "b": "bool"}


def render(name: str, source: str, emitted, printer, ranges: dict, bench: dict,
           baseline: str, tolerance: str) -> str:
    dims = emitted.dims
    lines = [f"# Imported by `kdsl import` from {source}: torch.export to core ATen, each op",
             "# mapped to index notation; the baseline replays the traced ATen graph.",
             f"op {name}"]
    if dims:
        lines.append(f"  dims {', '.join(dims.values())}")
    for t in emitted.inputs:
        shape = ", ".join(printer(s) for s in t.shape)
        domain = f" {t.domain}" if t.domain else ""
        lines.append(f"  in  {t.name}: {_KIND_TYPE[t.dtype]} [{shape}]{domain}")
    for out, shape, kind in emitted.outputs:
        lines.append(f"  out {out}: {_KIND_TYPE[kind]} [{', '.join(printer(s) for s in shape)}]")
    for st in emitted.statements:
        lines.append(f"  {st.text}")
    lines.append(f"  baseline {baseline}")
    lines.append(f"  tolerance {tolerance}")
    if dims:
        lines.append("  test  " + ", ".join(f"{dims[s]} in {lo}..{hi}"
                                            for s, (lo, hi) in ranges.items()))
        lines.append("  bench " + ", ".join(f"{dims[s]}={bench[s]}" for s in dims) + ", dtype=f32")
    else:
        lines.append("  bench dtype=f32")
    return "\n".join(lines) + "\n"


def tolerance(emitted) -> str:
    if all(kind != "f" for _, _, kind in emitted.outputs):
        return "exact"
    text = " ".join(st.text for st in emitted.statements)
    if emitted.contraction and "rsqrt(" in text:
        # a contraction's f32 rounding, divided by a small batch's standard deviation
        return "f32(rtol=1e-2, atol=1e-2)"
    if emitted.contraction or emitted.scan:
        return "f32(rtol=2e-3, atol=2e-3)"
    return "f32(rtol=1e-4, atol=1e-5)"

