"""The c backend's direct convolutions (``backends/c/conv.py``): a representative set of
KernelBench convolutions (1D/2D/3D, stride, padding, dilation, groups, depthwise,
transposed with strides, a bias epilogue, a depthwise-separable pair) agree with the
float64 reference under the default genome and under a small register tile; the
generated C has no division or modulo in its micro-kernels; grouped outputs need no
divisibility of the group size.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch

from kdsl import baseline, cases, compare, dtypes, reference, spec
from kdsl.backends import get
from kdsl.backends.c.conv import convolutions
from kdsl.sizes import shape_of

BACKEND = get("c")
pytestmark = pytest.mark.skipif(not BACKEND.available(), reason="no C compiler")
LEVEL1 = Path(__file__).resolve().parent.parent / "specs" / "kernelbench" / "level1"
MAX_CASE_ELEMENTS = 1 << 16
# standard 1D / strided-dilated 1D / 2D with bias / 2D grouped-strided-padded-dilated /
# 3D / depthwise / depthwise-separable / transposed 1D and 2D and 3D with strides, groups
PROBLEMS = (67, 76, 50, 63, 60, 82, 86, 57, 79, 75, 77)
SMALL = {"conv_cob": 4, "conv_nv": 1}

EXTRA = """
op uneven_groups
  dims B, C, CO, E, L, K, P
  in  x: f32 [B, (CO + E - 1) // E * C, L]
  in  w: f32 [CO, C, K]
  out y: f32 [B, CO, L + 2 * P - K + 1]
  y[b, co, o] = sum(c, k) x[b, co // E * C + c, o + k - P] pad(0) * w[co, c, k]
  baseline torch.zeros(1)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test B in 1..2, C in 1..4, CO in 1..9, E in 1..4, L in 1..40, K in 1..4, P in 0..2 where K <= L + 2 * P
  bench B=1, C=1, CO=1, E=1, L=4, K=1, P=0
"""


@lru_cache(maxsize=None)
def load(n: int):
    return spec.load(next(LEVEL1.glob(f"{n:02d}_*.kspec"))).ops[0]


def genome(op, which: str) -> dict:
    g = BACKEND.space(op, "cpu").default()
    return g if which == "default" else {**g, **SMALL}


@lru_cache(maxsize=1)
def built() -> dict:
    jobs = [(n, w) for n in PROBLEMS for w in ("default", "small")]

    def build(job):
        n, w = job
        op = load(n)
        src = BACKEND.render(op, genome(op, w), "cpu")
        return job, (src, BACKEND.build(op, src, "cpu"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(build, jobs))


def check(op, fn, seed: int, per_dtype: int = 3) -> int:
    n = 0
    for case in cases.generate(op, seed=seed, per_dtype=per_dtype):
        if sum(int(np.prod(shape_of(op, t.name, case.sizes))) for t in op.tensors
               if t.role != "tmp") > MAX_CASE_ELEMENTS:
            continue
        ref = reference.reference(op, case.sizes, case.inputs)
        ins = baseline.to_torch(op, case.dtype, case.inputs)
        outs = {t.name: torch.full(shape_of(op, t.name, case.sizes), float("nan"),
                                   dtype=dtypes.torch_dtype(op.dtype_of(t.name, case.dtype)))
                for t in op.outputs}
        fn(ins, outs, case.sizes)
        got = {k: v.to(torch.float64).numpy() for k, v in outs.items()}
        bad = compare.compare(op, case.dtype, got, ref, case.inputs)
        assert bad is None, f"{op.name} on {case.shape.describe()}: {bad}"
        n += 1
    return n


@pytest.mark.parametrize("which", ("default", "small"))
@pytest.mark.parametrize("n", PROBLEMS)
def test_matches_reference(n, which):
    op = load(n)
    src, b = built()[(n, which)]
    assert "direct convolution" in src
    assert check(op, b.fn, seed=11) > 0


def micro_kernels(src: str) -> list[str]:
    return re.findall(r"KD_INLINE void kd_conv_\w+\(.*?\n}\n", src, re.S)


@pytest.mark.parametrize("n", (57, 63, 75, 79))
def test_inner_loop_has_no_division(n):
    """The micro-kernels (the taps' loop) neither divide nor take a modulo: strides and
    transposed phases are tabled outside them."""
    src, _ = built()[(n, "default")]
    kernels = micro_kernels(src)
    assert kernels
    for k in kernels:
        body = k.split("{", 1)[1]
        assert not re.search(r"[/%]|kd_floordiv|kd_mod", body), k


def test_recognised_from_the_ir_alone():
    """Every KernelBench convolution but the pointwise one (no spatial subscript: a GEMM)
    is recognised; the matmuls are not."""
    for n in [50] + list(range(54, 87)):
        assert convolutions(load(n)), n
    assert not convolutions(load(87))
    assert not convolutions(load(1))


def test_grouped_outputs_need_no_divisibility():
    op = spec.parse_text(EXTRA, "<test_c_conv>").ops[0]
    conv = convolutions(op)["y"]
    assert conv.splits and conv.m is not None
    for which in ("default", "small"):
        src = BACKEND.render(op, genome(op, which), "cpu")
        assert "direct convolution" in src
        assert check(op, BACKEND.build(op, src, "cpu").fn, seed=5, per_dtype=12) > 0


POOLED = """
op conv_then_channel_min
  dims B, CI, CO, H, W, K
  in  x: f32 [B, CI, H, W]
  in  w: f32 [CO, CI, K, K]
  out y: f32 [B, H - K + 1, W - K + 1]
  c[b, co, oh in 0 .. H - K + 1, ow in 0 .. W - K + 1] = sum(ci, kh, kw) x[b, ci, oh + kh, ow + kw] * w[co, ci, kh, kw]
  y[b, oh, ow] = tanh(min(co) c[b, co, oh, ow])
  baseline torch.tanh(torch.min(F.conv2d(x, w), dim=1)[0])
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  B in 1..2, CI in 1..6, CO in 1..9, H in 3..20, W in 3..20, K in 1..3 where K <= H, K <= W
  bench B=4, CI=16, CO=32, H=64, W=64, K=3
"""


def test_a_convolution_into_an_intermediate_is_direct():
    """A model's convolution reduced or pooled right after is an intermediate whose output
    positions are declared on the left side; the declared ranges (each its whole axis) kept
    it from the direct kernel, a loop nest re-reading the window for every output channel
    (a level-2 probe: 0.05-0.5x of eager on five such models)."""
    from default_kernels import assert_default_kernel_correct
    op = spec.parse_text(POOLED, "pooled.kspec").ops[0]
    assert "c" in convolutions(op)
    assert "direct convolution of c" in BACKEND.render(op, BACKEND.space(op, "cpu").default(),
                                                       "cpu")
    assert_default_kernel_correct(op, "c", cases_per_dtype=2)
