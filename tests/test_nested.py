"""A matrix product written inside another reduction (``lower.nested``): a GEMM's rows
summed through an activation, averaged with a bias, or maximised, as a level-2 model writes
them, is computed as an intermediate of its own, which the C backend runs as its packed GEMM
(a dot product per output pair before: 0.28-0.42x of eager); forms that are not a matrix
product, or whose intermediate has no size of dims alone, stay as written."""
from __future__ import annotations

import pytest

from default_kernels import assert_default_kernel_correct
from kdsl import ir, spec
from kdsl.backends import get
from kdsl.backends.lower.nested import nested_contractions

TEXT = """
op sum_of_gemm
  dims M, N, K
  in  x: f32 [M, K]
  in  w: f32 [N, K]
  out y: like x [M]
  y[i] = sum(j) sigmoid(sum(k) x[i, k] * w[j, k])
  baseline torch.sigmoid(x @ w.T).sum(1)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  M in 1..40, N in 1..40, K in 1..100
  bench M=256, N=512, K=512

op mean_gemm_bias
  dims M, N, K
  in  x: f32 [M, K]
  in  w: f32 [N, K]
  in  b: f32 [N]
  out y: like x [M, 1]
  y[i, 0] = mean(j) ((sum(k) x[i, k] * w[j, k]) + b[j])
  baseline (x @ w.T + b).mean(1, keepdim=True)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  M in 1..40, N in 1..40, K in 1..100
  bench M=256, N=512, K=512

op max_gemm
  dims M, N, K
  in  x: f32 [M, K]
  in  w: f32 [K, N]
  out y: like x [M]
  y[i] = max(j) (sum(k) w[k, j] * x[i, k])
  baseline (x @ w).max(1).values
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  M in 1..40, N in 1..40, K in 1..100
  bench M=256, N=512, K=512

op row_norms_summed
  dims M, N, K
  in  x: f32 [M, N, K]
  out y: like x [M]
  y[i] = sum(j) sqrt(sum(k) x[i, j, k] * x[i, j, k])
  baseline x.square().sum(2).sqrt().sum(1)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  M in 1..8, N in 1..8, K in 1..30
  bench M=64, N=64, K=64

op causal_gemm
  dims M, K
  in  x: f32 [M, K]
  in  w: f32 [M, K]
  out y: like x [M]
  y[i] = sum(j in 0 .. i + 1) sigmoid(sum(k) x[i, k] * w[j, k])
  baseline torch.sigmoid(x @ w.T).tril().sum(1)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  M in 1..30, K in 1..40
  bench M=64, K=64
"""
OPS = {o.name: o for o in spec.parse_text(TEXT, "nested.kspec").ops}
TAKEN = ("sum_of_gemm", "mean_gemm_bias", "max_gemm")


@pytest.mark.parametrize("name", TAKEN)
def test_a_product_inside_a_reduction_becomes_a_gemm_statement(name):
    op = nested_contractions(OPS[name])
    first = op.statements[0]
    assert first.target.startswith("kd_mm") and first.indices == ("i", "j")
    assert isinstance(first.value, ir.Reduce) and first.value.op == "sum"
    source = get("c").render(OPS[name], get("c").space(OPS[name], "cpu").default(), "cpu")
    assert "kg_" in source  # the packed GEMM's micro-kernel


@pytest.mark.parametrize("name", ["row_norms_summed", "causal_gemm"])
def test_forms_that_are_not_a_gemm_stay_as_written(name):
    # a sum of one tensor's squares has no N side; a range up to i has no size of dims alone
    assert nested_contractions(OPS[name]) is OPS[name]


@pytest.mark.parametrize("name", TAKEN + ("causal_gemm",))
@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_default_kernels_stay_correct(name, backend):
    assert_default_kernel_correct(OPS[name], backend, cases_per_dtype=2)
