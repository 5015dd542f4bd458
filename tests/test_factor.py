"""Sums of products summed factor by factor (``lower.factor``): a GEMM's columns summed
(``sum(o) (sum(k) x[b, k] * w[o, k])``) becomes ``sum(k) x[b, k] * c[k]`` with ``c[k] =
sum(o) w[o, k]`` computed once, written with an intermediate or inline; a depthwise then
pointwise convolution, where merging the sums would do more work, stays as written; the c
and numpy kernels are correct."""
from __future__ import annotations

import pytest

from default_kernels import assert_default_kernel_correct
from kdsl import ir, spec
from kdsl.backends.lower.factor import factored_sums

from fake_backend import SPECS

OPS = """
op gemm_column_sum
  dims B, K, O
  in  x: f32 [B, K]
  in  w: f32 [O, K]
  out y: f32 [B, 1]
  t[b, o] = sum(k) x[b, k] * w[o, k]
  y[b, z] = sum(o) t[b, o] / 2 * 1.5
  baseline torch.sum(torch.matmul(x, w.T) / 2, dim=1, keepdim=True) * 1.5
  tolerance f32(rtol=1e-3, atol=1e-3)
  test  B in 1..12, K in 1..40, O in 1..40
  bench B=128, K=512, O=512

op outer_sum
  dims M, N, B
  in  x: f32 [B, M]
  in  v: f32 [N]
  out y: f32 [B]
  y[b] = sum(i, j) x[b, i] * v[j] * (1.0 / N)
  baseline x.sum(dim=1) * v.sum() / v.shape[0]
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  M in 1..40, N in 1..40, B in 1..8
  bench M=512, N=512, B=512
"""
OP = {o.name: o for o in spec.parse_text(OPS, "t.kspec").ops}


def test_the_columns_of_a_gemm_are_summed_before_the_product():
    op = factored_sums(OP["gemm_column_sum"])
    first, last = op.statements
    assert first.indices == ("k",) and isinstance(first.value, ir.Reduce)
    assert [r.name for r in first.value.indices] == ["o"]
    assert [r.name for r in last.value.indices] == ["k"]
    assert "t" not in {t.name for t in op.tensors}  # read through, then dropped


def test_more_work_factored_stays_as_written():
    op = spec.load(SPECS / "kernelbench" / "level1" /
                   "86_conv_depthwise_separable_2d.kspec").ops[0]
    assert factored_sums(op) is op
    gemm = spec.load(SPECS / "matmul.kspec").ops[0]
    assert factored_sums(gemm) is gemm


@pytest.mark.parametrize("name", sorted(OP))
@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_factored_kernels_are_correct(name, backend):
    op = OP[name]
    assert factored_sums(op) is not op
    assert_default_kernel_correct(op, backend)
