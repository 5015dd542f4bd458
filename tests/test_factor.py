"""Sums of products summed factor by factor (``lower.factor``): a GEMM's columns summed
(``sum(o) (sum(k) x[b, k] * w[o, k])``) becomes ``sum(k) x[b, k] * c[k]`` with ``c[k] =
sum(o) w[o, k]`` computed once, written with an intermediate or inline; a depthwise then
pointwise convolution, where merging the sums would do more work, stays as written; a product
of three reads summed over two indices (a bilinear form) is contracted a pair at a time where
the partial fits; the c and numpy kernels are correct, on forms that broke this rewrite and
``lower.common``'s too."""
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

op bilinear_form
  dims B, N, K
  in  x: f32 [B, N]
  in  A: f32 [N, K]
  in  y: f32 [B, K]
  out z: f32 [B]
  z[b] = sum(i, j) x[b, i] * A[i, j] * y[b, j]
  baseline torch.einsum('bi,ij,bj->b', x, A, y)
  tolerance f32(rtol=2e-3, atol=1e-2)
  test  B in 1..16, N in 1..40, K in 1..40
  bench B=512, N=256, K=256

op bilinear_layer
  dims B, I, J, O
  in  u: f32 [B, I]
  in  v: f32 [B, J]
  in  w: f32 [O, I, J]
  out y: f32 [B, O]
  y[b, o] = sum(i, j) 0.5 * u[b, i] * w[o, i, j] * v[b, j]
  baseline 0.5 * torch.nn.functional.bilinear(u, v, w)
  tolerance f32(rtol=2e-3, atol=1e-2)
  test  B in 1..8, I in 1..24, J in 1..24, O in 1..6
  bench B=64, I=128, J=128, O=64
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


def test_a_product_of_three_reads_is_contracted_a_pair_at_a_time():
    # as much work either way, but each step a contraction of two reads (a GEMM, then a
    # row's dot product) where the nest of all four indices is none
    op = factored_sums(OP["bilinear_form"])
    first, last = op.statements
    assert isinstance(first.value, ir.Reduce) and len(first.value.indices) == 1
    assert {a.tensor for a in ir.walk(first.value) if isinstance(a, ir.Access)} in \
        ({"x", "A"}, {"A", "y"})
    assert len(last.value.indices) == 1
    layer = factored_sums(OP["bilinear_layer"])
    assert len(layer.statements) == 2 and layer.statements[0].indices[:2] == ("b", "o")


def test_a_pair_contracted_first_only_where_its_partial_fits_the_ops_memory():
    # the partial t[b, o, j] would hold B x O x J elements, 64 times the weight here
    op = spec.parse_text(OPS.replace("bench B=64, I=128, J=128, O=64",
                                     "bench B=8192, I=128, J=128, O=64"), "t.kspec").ops
    layer = next(o for o in op if o.name == "bilinear_layer")
    assert factored_sums(layer) is layer


@pytest.mark.parametrize("name", sorted(OP))
@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_factored_kernels_are_correct(name, backend):
    op = OP[name]
    assert factored_sums(op) is not op
    assert_default_kernel_correct(op, backend)


# forms an adversarial pass found the rewrites getting wrong (each fixed): integer sums in
# a float32 intermediate, a range read from a tensor, a summed index shadowing an output
# index, a user intermediate named as the rewrite names its own
TRICKY = """
op int_sum
  dims B, K, O
  in  x: i64 [B, K] in 0 .. 1000
  in  w: i64 [O, K] in 0 .. 100000000
  out y: i64 [B]
  y[b] = sum(o, k) x[b, k] * w[o, k]
  baseline (x @ w.T).sum(1)
  tolerance exact
  test  B in 1..5, K in 1..7, O in 1..6
  bench B=128, K=256, O=256

op range_read_from_a_tensor
  dims B, K, O
  in  x: f32 [B, K]
  in  w: f32 [O, K]
  in  n: i64 [] in 0 .. K
  out y: f32 [B]
  y[b] = sum(o, k in 0 .. n[]) x[b, k] * w[o, k]
  baseline (x[:, :int(n)] @ w[:, :int(n)].T).sum(1)
  tolerance f32(rtol=1e-3, atol=1e-3)
  test  B in 1..5, K in 1..7, O in 1..6
  bench B=128, K=256, O=256

op shadowed_output_index
  dims B, K, O, P
  in  x: f32 [B, K]
  in  w: f32 [O, K]
  in  z: f32 [B, P]
  out y: f32 [B, P]
  y[b, k] = z[b, k] * sum(o, k) x[b, k] * w[o, k]
  baseline z * (x @ w.sum(0)).unsqueeze(1)
  tolerance f32(rtol=1e-3, atol=1e-3)
  test  B in 1..5, K in 1..7, O in 1..6, P in 1..9
  bench B=128, K=256, O=256, P=4

op name_taken
  dims B, K, O
  in  x: f32 [B, K]
  in  w: f32 [O, K]
  out y: f32 [B]
  out z: f32 [B]
  kd_f0_y[b] = x[b, 0] * 3.0
  y[b] = sum(o, k) x[b, k] * w[o, k]
  z[b] = y[b] + kd_f0_y[b] + sum(o) (sum(k) x[b, k] * w[o, k])
  baseline ((x @ w.T).sum(1), 2 * (x @ w.T).sum(1) + 3 * x[:, 0])
  tolerance f32(rtol=1e-3, atol=1e-3)
  test  B in 1..5, K in 1..7, O in 1..6
  bench B=128, K=256, O=256

op repeated_int_max
  dims M, N
  in  x: i64 [M, N] in 0 .. 1000000000000
  out y: i64 [M]
  y[i] = (max(j) x[i, j]) + (max(j) x[i, j])
  baseline 2 * x.max(1).values
  tolerance exact
  test  M in 1..5, N in 1..7
  bench M=128, N=256

op copy_inside_a_rebinding
  dims M, N
  in  x: f32 [M, N]
  out y: f32 [M]
  y[i] = (sum(j) x[i, j] pad(0)) + (sum(j) x[i, j] pad(0)) + max(i in 0 .. M + 100) (sum(j) x[i, j] pad(0))
  baseline 2 * x.sum(1) + torch.clamp(x.sum(1).max(), min=0.0)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  M in 1..5, N in 1..7
  bench M=128, N=256
"""
TRICKY_OPS = {o.name: o for o in spec.parse_text(TRICKY, "tricky.kspec").ops}


@pytest.mark.parametrize("name", sorted(TRICKY_OPS))
@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_forms_the_rewrites_once_got_wrong(name, backend):
    assert_default_kernel_correct(TRICKY_OPS[name], backend)
