"""A spec declaring f64 asks for float64's precision: its intermediates are typed f64 (the
checker and every lowering pass's scratch), the numpy and torch kernels compute its floats
in float64 whatever their precision gene (a ``f32 | f64`` op renders one variant each), and
the c kernel's f64 function is compiled with float meaning double and libm's math (the
Triton interpreter runs one such op in ``test_backend_triton``). Every kernel is held to
rtol 1e-10, which float32 arithmetic misses by three orders."""
from __future__ import annotations

import pytest

from default_kernels import assert_default_kernel_correct
from kdsl import spec
from kdsl.backends import get

TEXT = """
op gemm_softmax64
  dims M, N
  in  x: {dtypes} [M, N]
  in  w: like x [N, N]
  out y: like x [M, N]
  out z: like x [M]
  h[i, k] = sum(j) x[i, j] * w[j, k]
  m[i] = max(j) h[i, j]
  e[i, j] = exp(h[i, j] - m[i])
  y[i, j] = e[i, j] / sum(j) e[i, j]
  z[i] = sum(j) x[i, j] * x[i, j] / N
  baseline (torch.softmax(x @ w, dim=-1), (x * x).sum(-1) / x.shape[1])
  tolerance {tolerances}
  test  M in 1..12, N in 1..300
  bench M=64, N=128, dtype={bench}
"""
TIGHT = "f64(rtol=1e-10, atol=1e-12)"


def _op(dtypes: str = "f64", tolerances: str = TIGHT):
    text = TEXT.format(dtypes=dtypes, tolerances=tolerances, bench=dtypes.split(" | ")[-1])
    return spec.parse_text(text, "f64.kspec").ops[0]


def test_intermediates_of_an_f64_op_are_f64():
    op = _op()
    assert {t.name: t.dtypes for t in op.tensors if t.role == "tmp"} == \
        {"h": ("f64",), "m": ("f64",), "e": ("f64",)}
    mixed = _op("f32 | f64", "f32(rtol=1e-4, atol=1e-5) " + TIGHT)
    assert all(t.dtypes == ("f64",) for t in mixed.tensors if t.role == "tmp")
    narrow = _op("f32 | bf16", "f32(rtol=1e-5, atol=1e-6) bf16(rtol=2e-2, atol=2e-2)")
    assert all(t.dtypes == ("f32",) for t in narrow.tensors if t.role == "tmp")


@pytest.mark.parametrize("backend", ["numpy", "torch", "c"])
@pytest.mark.parametrize("dtypes", ["f64", "f32 | f64"])
def test_kernels_compute_f64_in_float64(backend, dtypes):
    tolerances = TIGHT if dtypes == "f64" else "f32(rtol=1e-4, atol=1e-5) " + TIGHT
    assert_default_kernel_correct(_op(dtypes, tolerances), backend)


FORMS = """
op math64
  dims N
  in  x: f64 [N]
  out y: f64 [N]
  y[i] = erf(x[i]) + tanh(x[i]) * sigmoid(x[i]) + silu(x[i]) + pow(abs(x[i]), 1.7) + x[i] % 0.3 + x[i] // 0.7 + log1p(abs(x[i])) + expm1(x[i] / 4) + rsqrt(abs(x[i]) + 1) + max(x[i], 0.1) + relu(x[i]) + pi * 0.1
  baseline torch.erf(x) + torch.tanh(x) * torch.sigmoid(x) + F.silu(x) + torch.pow(x.abs(), 1.7) + torch.remainder(x, 0.3) + torch.floor_divide(x, 0.7) + torch.log1p(x.abs()) + torch.expm1(x / 4) + torch.rsqrt(x.abs() + 1) + torch.clamp(x, min=0.1) + torch.relu(x) + math.pi * 0.1
  tolerance f64(rtol=1e-10, atol=1e-10)
  test  N in 1..3000
  bench N=4096

op sort64
  dims M, N
  in  x: f64 [M, N]
  out y: f64 [M, N]
  y[i, j] = sort(j) x[i, j]
  baseline torch.sort(x, dim=1).values
  tolerance f64(rtol=1e-10, atol=1e-10)
  test  M in 1..8, N in 1..300
  bench M=64, N=512

op conv64
  dims B, C, O, L, K
  in  x: f64 [B, C, L]
  in  w: f64 [O, C, K]
  out y: f64 [B, O, L - K + 1]
  y[b, o, l] = sum(c, k) x[b, c, l + k] * w[o, c, k]
  baseline F.conv1d(x, w)
  tolerance f64(rtol=1e-10, atol=1e-10)
  test  B in 1..3, C in 1..8, O in 1..8, L in 4..40, K in 1..4 where K <= L
  bench B=8, C=32, O=32, L=512, K=3
"""


@pytest.mark.parametrize("name", ["math64", "sort64", "conv64"])
@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_math_sorts_and_convolutions_in_float64(backend, name):
    """The c kernel's libm math, its sort helpers keyed by double and its convolution (the
    direct micro-kernel is float's, so the loop nest); numpy's erf."""
    op = {o.name: o for o in spec.parse_text(FORMS, "forms.kspec").ops}[name]
    assert_default_kernel_correct(op, backend, cases_per_dtype=2)


def test_the_precision_gene_does_not_narrow_f64():
    op = _op()
    be = get("numpy")
    source = be.render(op, {**be.space(op, "cpu").default(), "precision": "f32"}, "cpu")
    assert "rt.load(inputs['x'], W)" in source
