"""The C backend's float sums stay accurate when they are long: the default kernel of a
sum over a million terms, over a nest of loops, or down long columns a tile at a time,
errs like a short sum (blocks summed apart, then added), and a reduction whose streamed reads do not follow the output's
innermost index is not interchanged around it (a group norm's variance)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from kdsl import spec
from kdsl.backends import get
from kdsl.backends.c import plan as c_plan

BACKEND = get("c")
pytestmark = pytest.mark.skipif(not BACKEND.available(), reason="no C compiler")

OPS = """
op long_sum
  dims M, N
  in  x: f32 [M, N]
  out s: f32 [M]
  s[i] = sum(j) x[i, j]
  baseline x.sum(1)
  tolerance f32(rtol=1e-6, atol=1e-6)
  test M in 1..4, N in 1..300
  bench M=2, N=1048576

op nest_mean
  dims M, H, W
  in  x: f32 [M, H, W]
  out s: f32 [M]
  s[i] = mean(h, w) x[i, h, w]
  baseline x.mean((1, 2))
  tolerance f32(rtol=1e-6, atol=1e-6)
  test M in 1..4, H in 1..30, W in 1..30
  bench M=2, H=1024, W=1024

op long_column_sum
  dims M, N
  in  x: f32 [M, N]
  out s: f32 [N]
  s[j] = sum(i) x[i, j]
  baseline x.sum(0)
  tolerance f32(rtol=1e-6, atol=1e-6)
  test M in 1..300, N in 1..4
  bench M=262144, N=16

op col_sum
  dims B, M, N
  in  x: f32 [B, N, M]
  out s: f32 [B, M]
  s[b, i] = sum(j) x[b, j, i]
  baseline x.sum(1)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test B in 1..3, M in 1..4, N in 1..30
  bench B=2, M=2, N=16

op group_var
  dims N, C, G, L
  in  x: f32 [N, C, L]
  out v: f32 [N, G]
  mu[n, g] = mean(k in 0 .. C // G, l) x[n, g * (C // G) + k, l]
  v[n, g] = mean(k in 0 .. C // G, l) (x[n, g * (C // G) + k, l] - mu[n, g]) ** 2
  baseline x.reshape(x.shape[0], G, -1).var(-1, unbiased=False)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test N in 1..3, C in 1..16, G in 1..4, L in 1..20 where C % G == 0
  bench N=2, C=16, G=4, L=64
"""


def ops() -> dict:
    return {op.name: op for op in spec.parse_text(OPS, "<test_c_precision>").ops}


def run_default(op, inputs: dict, out_shape: tuple, sizes: dict) -> np.ndarray:
    built = BACKEND.build(op, BACKEND.render(op, BACKEND.space(op, "cpu").default(), "cpu"),
                          "cpu")
    out = torch.full(out_shape, float("nan"))
    built.fn(inputs, {"s": out}, sizes)
    return out.numpy().astype(np.float64)


def test_a_million_term_sum_errs_like_a_short_one():
    # 0.1 a million times: a float accumulator of 8 or 16 lanes, each adding 65,536 of them,
    # ends about 1e-4 off; blocks of 1024 summed apart end within a few ulp
    x = torch.full((2, 1 << 20), 0.1)
    got = run_default(ops()["long_sum"], {"x": x}, (2,), {"M": 2, "N": 1 << 20})
    want = x.double().sum(1).numpy()
    assert np.all(np.abs(got - want) <= 2e-6 * np.abs(want)), (got, want)


def test_a_sum_over_a_nest_of_loops_errs_like_a_short_one():
    x = torch.full((2, 1024, 1024), 0.1) + torch.arange(1024.0).reshape(1, 1024, 1) * 1e-4
    got = run_default(ops()["nest_mean"], {"x": x}, (2,), {"M": 2, "H": 1024, "W": 1024})
    want = x.double().mean((1, 2)).numpy()
    assert np.all(np.abs(got - want) <= 2e-6 * np.abs(want)), (got, want)


def test_a_long_sum_down_columns_in_tiles_errs_like_a_short_one():
    # each lane of a tile sums its column: 262,144 tenths serially in float ended 2.5e-3
    # off; in blocks of 128 rows, the partials added in double, about 1e-6 (equal terms:
    # every rounding of a block leans one way)
    x = torch.full((1 << 18, 16), 0.1)
    got = run_default(ops()["long_column_sum"], {"x": x}, (16,), {"M": 1 << 18, "N": 16})
    want = x.double().sum(0).numpy()
    assert np.all(np.abs(got - want) <= 1e-5 * np.abs(want)), (got, want)


def test_a_read_the_reduction_does_not_move_does_not_pick_the_tile():
    op = ops()["group_var"]
    p = c_plan.plan(op, True, False)
    sp = next(s for g in p.groups for s in g.stmts if s.st.target == "v")
    reds = c_plan.interchangeable(sp)
    assert reds, "the variance's reduction can be interchanged"
    assert not any(c_plan.prefers_outer(sp, r) for r in reds)
    # a reduction that streams along the innermost output index still prefers the tile
    sp = c_plan.plan(ops()["col_sum"], True, False).groups[0].stmts[0]
    assert any(c_plan.prefers_outer(sp, r) for r in c_plan.interchangeable(sp))
