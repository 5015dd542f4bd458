"""A reduction written twice in one right side, or free of two of its statement's indices, is
computed once (``lower.common``): a GELU of a linear layer written in one statement gets its
contraction as an intermediate, whatever its copies' index names, a mean over a plane
subtracted from its elements gets one of its own, and the c and numpy kernels stay correct."""
from __future__ import annotations

import pytest

from default_kernels import assert_default_kernel_correct
from kdsl import ir, spec
from kdsl.backends.lower.common import common_reductions

GELU_LINEAR = """
op gelu_linear
  dims B, K, O
  in  x: f32 [B, K]
  in  w: f32 [O, K]
  in  bias: f32 [O]
  out y: f32 [B, O]
  y[b, o] = 0.5 * (sum(k) x[b, k] * w[o, k] + bias[o]) * (1 + erf((sum(j) x[b, j] * w[o, j] + bias[o]) / 1.4142135623730951)) + sum(k) x[b, k]
  baseline F.gelu(F.linear(x, w, bias)) + x.sum(dim=1, keepdim=True)
  tolerance f32(rtol=1e-3, atol=1e-4)
  test  B in 1..12, K in 1..40, O in 1..40
  bench B=64, K=64, O=64
"""


def _op():
    return spec.parse_text(GELU_LINEAR, "t.kspec").ops[0]


def test_the_two_copies_become_one_intermediate_and_a_single_one_stays():
    op = common_reductions(_op())
    assert [st.target for st in op.statements] == ["kd_c0_y", "y"]
    first = op.statements[0]
    assert first.indices == ("b", "o") and isinstance(first.value, ir.Reduce)
    reductions = [n for n in ir.walk(op.statements[1].value) if isinstance(n, ir.Reduce)]
    assert len(reductions) == 1  # the row sum, written once, stays where it is
    assert common_reductions(op) is op


@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_kernels_of_the_shared_contraction_are_correct(backend):
    op = _op()
    assert_default_kernel_correct(op, backend)


PLANE_CENTRING = """
op plane_centring
  dims B, H, W
  in  x: f32 [B, H, W]
  out y: like x [B, H, W]
  z[b, h, w] = tanh(x[b, h, w])
  y[b, h, w] = z[b, h, w] - mean(i, j) z[b, i, j]
  baseline torch.tanh(x) - torch.tanh(x).mean(dim=(1, 2), keepdim=True)
  tolerance f32(rtol=1e-4, atol=1e-5)
  test  B in 1..4, H in 1..24, W in 1..24
  bench B=4, H=64, W=64
"""


def test_a_reduction_free_of_two_indices_of_its_statement_is_computed_once():
    """A mean over a plane subtracted from each of its elements was summed again for every
    element (c: 38 ms against 3.3-11 ms once hoisted, 2026-12-07); it is an intermediate
    over the one index it reads. A softmax's row sum (one reduced axis, one index missing)
    is left to the generators, which fuse it."""
    op = common_reductions(spec.parse_text(PLANE_CENTRING, "t.kspec").ops[0])
    assert [st.target for st in op.statements] == ["z", "kd_c0_y", "y"]
    assert op.statements[1].indices == ("b",)
    assert not [n for n in ir.walk(op.statements[2].value) if isinstance(n, ir.Reduce)]


@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_kernels_of_the_hoisted_plane_mean_are_correct(backend):
    assert_default_kernel_correct(spec.parse_text(PLANE_CENTRING, "t.kspec").ops[0], backend)
