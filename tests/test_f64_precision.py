"""A spec declaring f64 asks for float64's precision: its intermediates are typed f64 (the
checker and every lowering pass's scratch), the numpy and torch kernels compute its floats
in float64 whatever their precision gene (a ``f32 | f64`` op renders one variant each), and
the c backend, which computes in float32, declines a tolerance float32 cannot meet (the
Triton interpreter runs one such op in ``test_backend_triton``)."""
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
    mixed = _op("f32 | f64", "f32(rtol=1e-5, atol=1e-6) " + TIGHT)
    assert all(t.dtypes == ("f64",) for t in mixed.tensors if t.role == "tmp")
    narrow = _op("f32 | bf16", "f32(rtol=1e-5, atol=1e-6) bf16(rtol=2e-2, atol=2e-2)")
    assert all(t.dtypes == ("f32",) for t in narrow.tensors if t.role == "tmp")


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("dtypes", ["f64", "f32 | f64"])
def test_array_kernels_compute_f64_in_float64(backend, dtypes):
    tolerances = TIGHT if dtypes == "f64" else "f32(rtol=1e-5, atol=1e-6) " + TIGHT
    assert_default_kernel_correct(_op(dtypes, tolerances), backend)


def test_the_precision_gene_does_not_narrow_f64():
    op = _op()
    be = get("numpy")
    source = be.render(op, {**be.space(op, "cpu").default(), "precision": "f32"}, "cpu")
    assert "rt.load(inputs['x'], W)" in source


def test_c_declines_an_f64_tolerance_float32_cannot_meet():
    why = get("c").supports(_op(), "cpu")
    assert why is not None and "float32" in why and "rtol=1e-10" in why
    loose = _op(tolerances="f64(rtol=1e-5, atol=1e-6)")
    assert get("c").supports(loose, "cpu") is None
    assert_default_kernel_correct(loose, "c")
