"""The c backend's packed GEMM: contractions recognised from index notation whatever the
names, operand order, transposes, batch axes and epilogue, computed by one generic
kernel (packing, register-blocked micro-kernel, K blocks, K split across threads), and
checked against the float64 reference at edge sizes and under non-default block genes."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
import torch

from kdsl import baseline, cases, compare, dtypes, reference, spec
from kdsl.backends import get
from kdsl.backends.c.backend import canonical
from kdsl.backends.c.contraction import contractions
from kdsl.sizes import shape_of

BACKEND = get("c")
pytestmark = pytest.mark.skipif(not BACKEND.available(), reason="no C compiler")

OPS = """
op bmm_perm
  dims BT, M, K, N
  in  a: f32 | bf16 [BT, K, M]
  in  b: like a [N, BT, K]
  out c: like a [BT, M, N]
  c[z, i, j] = sum(k) a[z, k, i] * b[j, z, k]
  baseline torch.einsum("zki,jzk->zij", a.float(), b.float()).to(a.dtype)
  tolerance f32(rtol=1e-4, atol=1e-4) bf16(rtol=2e-2, atol=5e-2)
  test BT in 1..3, M in 1..70, K in 1..300, N in 1..90
  bench BT=2, M=8, K=8, N=8

op two_k
  dims M, N, P, Q
  in  x: f32 [M, P, Q]
  in  w: f32 [Q, P, N]
  out y: f32 [M, N]
  y[i, j] = sum(p, q) x[i, p, q] * w[q, p, j]
  baseline torch.einsum("ipq,qpj->ij", x, w)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test M in 1..70, N in 1..80, P in 1..20, Q in 1..30
  bench M=8, N=8, P=4, Q=4

op scattered_groups
  dims A1, A2, K, N1, N2
  in  x: f32 [A2, K, A1]
  in  y: f32 [N1, K, N2]
  out z: f32 [A1, N2, A2, N1]
  z[a1, n2, a2, n1] = sum(k) x[a2, k, a1] * y[n1, k, n2]
  baseline torch.einsum("bka,nkm->ambn", x, y)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test A1 in 1..12, A2 in 1..9, K in 1..300, N1 in 1..7, N2 in 1..13
  bench A1=2, A2=2, K=4, N1=2, N2=2

op epilogue
  dims M, N, K
  in  a: f32 | bf16 [M, K]
  in  w: like a [N, K]
  in  bias: like a [N]
  in  s: f32 []
  out y: like a [M, N]
  y[i, j] = where(i <= j, tanh(s[] * sum(k) a[i, k] * w[j, k] + bias[j]), 0.0)
  baseline torch.triu(torch.tanh(s * (a @ w.T) + bias))
  tolerance f32(rtol=1e-4, atol=1e-4) bf16(rtol=2e-2, atol=5e-2)
  test M in 1..150, N in 1..200, K in 1..300
  bench M=8, N=8, K=8

op chained
  dims M, K, H, O
  in  x: f32 [M, K]
  in  w1: f32 [K, H]
  in  w2: f32 [O, H]
  out y: f32 [M, O]
  r[i, k] = relu(x[i, k])
  h[i, j] = sum(k) r[i, k] * w1[k, j]
  y[i, o] = sum(j) h[i, j] * w2[o, j] + 1.0
  baseline (torch.relu(x) @ w1) @ w2.T + 1.0
  tolerance f32(rtol=1e-3, atol=1e-3)
  test M in 1..80, K in 1..100, H in 1..90, O in 1..70
  bench M=8, K=8, H=8, O=8

op free_axis
  dims M, K, N, R
  in  a: f32 [M, K]
  in  b: f32 [K, N]
  out y: f32 [M, N, R]
  y[i, j, r] = sum(k) a[i, k] * b[k, j] + r
  baseline (a @ b).unsqueeze(-1) + torch.arange(R)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test M in 1..60, K in 1..100, N in 1..70, R in 1..3
  bench M=8, K=8, N=8, R=2

op matvec_t
  dims M, K
  in  a: f32 | bf16 [K, M]
  in  v: like a [K]
  out y: like a [M]
  y[i] = sum(k) a[k, i] * v[k]
  baseline a.T.float() @ v.float()
  tolerance f32(rtol=1e-4, atol=1e-4) bf16(rtol=2e-2, atol=5e-2)
  test M in 1..300, K in 1..300
  bench M=8, K=8

op narrow
  dims M, K, N
  in  a: f32 | bf16 [M, K]
  in  b: like a [K, N]
  in  bias: like a [N]
  out y: like a [M, N]
  y[i, j] = sum(k) a[i, k] * b[k, j] + bias[j]
  baseline (a.float() @ b.float() + bias.float()).to(a.dtype)
  tolerance f32(rtol=1e-4, atol=1e-4) bf16(rtol=2e-2, atol=5e-2)
  test M in 0..40, K in 0..300, N in 0..6
  bench M=8, K=8, N=2

op row_dot
  dims M, K
  in  a: f32 [M, K]
  in  b: f32 [M, K]
  out y: f32 [M]
  y[i] = sum(k) a[i, k] * b[i, k]
  baseline (a * b).sum(-1)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test M in 1..30, K in 1..30
  bench M=8, K=8

op three_factors
  dims M, K, N
  in  a: f32 [M, K]
  in  b: f32 [K, N]
  in  g: f32 [K]
  out y: f32 [M, N]
  y[i, j] = sum(k) a[i, k] * b[k, j] * g[k]
  baseline (a * g) @ b
  tolerance f32(rtol=1e-4, atol=1e-4)
  test M in 1..30, K in 1..30, N in 1..30
  bench M=8, K=8, N=8

op pointwise_conv
  dims B, CI, CO, H, W
  in  x: f32 | bf16 [B, CI, H, W]
  in  w: like x [CO, CI, 1, 1]
  out y: like x [B, CO, H, W]
  y[b, co, i, j] = sum(ci) x[b, ci, i, j] * w[co, ci, 0, 0]
  baseline torch.nn.functional.conv2d(x, w)
  tolerance f32(rtol=1e-4, atol=1e-4) bf16(rtol=2e-2, atol=5e-2)
  test B in 1..3, CI in 1..40, CO in 1..30, H in 1..20, W in 1..20
  bench cpu: B=2, CI=8, CO=8, H=16, W=16

op pointwise_conv_small_image
  dims B, CI, CO, H, W
  in  x: f32 [B, CI, H, W]
  in  w: like x [CO, CI, 1, 1]
  out y: like x [B, CO, H, W]
  y[b, co, i, j] = sum(ci) x[b, ci, i, j] * w[co, ci, 0, 0]
  baseline torch.nn.functional.conv2d(x, w)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test B in 1..3, CI in 1..40, CO in 1..30, H in 1..6, W in 1..6
  bench cpu: B=512, CI=8, CO=8, H=4, W=4

op fixed_tap_and_index_epilogue
  dims B, CI, CO, H, W, T
  in  x: f32 [B, CI, H, W]
  in  w: f32 [CO, CI, T, 2]
  out y: f32 [B, CO, H, W]
  y[b, co, i, j] = sum(ci) x[b, ci, i, j] * w[co, ci, T - 1, 1] + j * 0.5
  baseline torch.einsum("bchw,oc->bohw", x, w[:, :, -1, 1]) + 0.5 * torch.arange(W)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test B in 1..3, CI in 1..40, CO in 1..30, H in 1..20, W in 1..20, T in 1..3
  bench cpu: B=2, CI=8, CO=8, H=16, W=16, T=2

op transposed_image
  dims B, CI, CO, H, W
  in  x: f32 [B, CI, H, W]
  in  w: f32 [CO, CI]
  out y: f32 [B, CO, W, H]
  y[b, co, j, i] = sum(ci) x[b, ci, i, j] * w[co, ci]
  baseline torch.einsum("bchw,oc->bowh", x, w)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test B in 1..3, CI in 1..40, CO in 1..30, H in 1..20, W in 1..20
  bench cpu: B=2, CI=8, CO=8, H=16, W=16

op read_tap
  dims M, K, N, T
  in  a: f32 [M, K]
  in  b: f32 [K, T, N]
  in  sel: i64 [1] in 0..T
  out y: f32 [M, N]
  y[i, j] = sum(k) a[i, k] * b[k, sel[0], j]
  baseline a @ b[:, sel[0], :]
  tolerance f32(rtol=1e-4, atol=1e-4)
  test M in 1..40, K in 1..100, N in 1..50, T in 1..4
  bench cpu: M=8, K=8, N=8, T=2

op call_tap
  dims M, K, N, T
  in  a: f32 [M, K]
  in  b: f32 [K, T, N]
  out y: f32 [M, N]
  y[i, j] = sum(k) a[i, k] * b[k, max(T - 2, 0), j]
  baseline a @ b[:, max(T - 2, 0), :]
  tolerance f32(rtol=1e-4, atol=1e-4)
  test M in 1..40, K in 1..100, N in 1..50, T in 1..4
  bench cpu: M=8, K=8, N=8, T=2

op int_mm
  dims M, K, N
  in  a: i64 [M, K] in -5..5
  in  b: i64 [K, N] in -5..5
  out y: i64 [M, N]
  y[i, j] = sum(k) a[i, k] * b[k, j]
  baseline a @ b
  tolerance exact
  test M in 1..30, K in 1..30, N in 1..30
  bench M=8, K=8, N=8
"""

# Block genes small enough that the test sizes cross several blocks and panel edges.
SMALL_BLOCKS = {"mr": 6, "nr": 16, "kc": 128, "mc": 64, "nc": 128}
WIDE = {"mr": 12, "nr": 48, "kc": 384, "mc": 192, "nc": 512, "threads": 1}


@lru_cache(maxsize=None)
def ops() -> dict:
    return {op.name: op for op in spec.parse_text(OPS, "<test_c_gemm>").ops}


@lru_cache(maxsize=None)
def built(name: str, genes: tuple = ()):
    op = ops()[name]
    genome = dict(BACKEND.space(op, "cpu").default(), **dict(genes))
    return BACKEND.build(op, BACKEND.render(op, genome, "cpu"), "cpu")


def run(op, fn, dtype: str, sizes: dict, inputs: dict) -> dict:
    tin = baseline.to_torch(op, dtype, inputs)
    before = {k: v.clone() for k, v in tin.items()}
    outs = {t.name: torch.full(shape_of(op, t.name, sizes), float("nan"),
                               dtype=dtypes.torch_dtype(op.dtype_of(t.name, dtype)))
            for t in op.outputs}
    fn(tin, outs, sizes)
    for k, v in tin.items():
        assert torch.equal(v, before[k]), f"input '{k}' was modified"
    return {k: v.to(torch.float64).numpy() for k, v in outs.items()}


def check_cases(name: str, genes: dict, seed: int = 5) -> None:
    op = ops()[name]
    b = built(name, tuple(sorted(genes.items())))
    for case in cases.generate(op, seed=seed, per_dtype=4):
        ref = reference.reference(op, case.sizes, case.inputs)
        got = run(op, b.fn, case.dtype, case.sizes, case.inputs)
        bad = compare.compare(op, case.dtype, got, ref, case.inputs)
        assert bad is None, f"{name} {genes} on {case.shape.describe()}: {bad}"


@pytest.mark.parametrize("name, batch, m, n, k, a", [
    ("bmm_perm", ("z",), ("i",), ("j",), ("k",), "a"),
    ("two_k", (), ("i",), ("j",), ("p", "q"), "x"),
    ("scattered_groups", (), ("a1", "a2"), ("n2", "n1"), ("k",), "x"),
    ("epilogue", (), ("i",), ("j",), ("k",), "a"),
    ("free_axis", ("r",), ("i",), ("j",), ("k",), "a"),
    ("matvec_t", (), ("i",), (), ("k",), None),
    ("row_dot", (), (), (), ("k",), None),
    ("three_factors", (), (), (), (), None),
    ("int_mm", (), (), (), (), None),
    # a fixed coordinate (the 0s of a 1 x 1 kernel) is no index; b sits apart from (i, j)
    # in x and y: a batch index where (i, j) spans 128 columns or more at the bench point
    ("pointwise_conv", ("b",), ("co",), ("i", "j"), ("ci",), "w"),
    ("pointwise_conv_small_image", (), ("co",), ("b", "i", "j"), ("ci",), "w"),
    ("fixed_tap_and_index_epilogue", ("b",), ("co",), ("i", "j"), ("ci",), "w"),
    # (j, i) lie the other way in x: not one flat index, so the columns stay as written
    ("transposed_image", (), ("co",), ("b", "j", "i"), ("ci",), "w"),
    # a coordinate read from a tensor or through a call is no fixed one: the loop nest
    ("read_tap", (), (), (), (), None),
    ("call_tap", (), (), (), (), None),
])
def test_recognised_from_index_notation(name, batch, m, n, k, a):
    """The sets come from which factor reads which index, never from names or order; a
    dot product per output, a third factor and integer operands are not GEMMs."""
    op = ops()[name]
    found = contractions(op)
    if a is None:
        assert not found
        return
    (con,) = found.values()
    assert (con.batch, con.m, con.n, con.k, con.a.tensor) == (batch, m, n, k, a)


@pytest.mark.parametrize("genes", [{}, {"nr": 16}, {"nr": 64, "mr": 6}, {"threads": 1}],
                         ids=["width2", "width1", "width4", "one_thread"])
def test_narrow_outputs_and_empty_sizes(genes):
    """N up to NR / 16 takes the narrow kernel (dot products along K, A read in place),
    wider N the packed one; an empty M, N or K writes what it must (the bias alone)."""
    check_cases("narrow", genes, seed=11)
    op = ops()["narrow"]
    b = built("narrow", tuple(sorted(genes.items())))
    rng = np.random.default_rng(1)
    for m, k, n in ((9, 0, 40), (0, 5, 3), (33, 1000, 1), (17, 300, 2), (21, 70, 5)):
        sizes = {"M": m, "K": k, "N": n}
        inputs = {"a": rng.standard_normal((m, k), dtype=np.float32),
                  "b": rng.standard_normal((k, n), dtype=np.float32),
                  "bias": rng.standard_normal(n, dtype=np.float32)}
        ref = reference.reference(op, sizes, inputs)
        got = run(op, b.fn, "f32", sizes, inputs)
        assert compare.compare(op, "f32", got, ref, inputs) is None, sizes


def test_chained_contractions_both_found():
    assert set(contractions(ops()["chained"])) == {"h", "y"}


def test_packed_operands_need_no_transposed_copy():
    """The loop nest reads a transposed factor through a copy (lower.layouts); packing
    reads any layout itself, so the packed form of the op keeps the original reads."""
    op = ops()["bmm_perm"]
    assert any(t.name.startswith("kd_t") for t in canonical(op).tensors)
    assert not any(t.name.startswith("kd_t") for t in canonical(op, True).tensors)
    src = BACKEND.render(op, BACKEND.space(op, "cpu").default(), "cpu")
    assert "kd_mk_8x32" in src and "packed GEMM" in src and "kd_t0" not in src
    loops = BACKEND.render(op, dict(BACKEND.space(op, "cpu").default(), gemm="loops"), "cpu")
    assert "kd_mk_" not in loops


@pytest.mark.parametrize("genes", [{}, SMALL_BLOCKS, WIDE, {"gemm": "loops"}],
                         ids=["default", "small_blocks", "wide", "loops"])
@pytest.mark.parametrize("name", ["bmm_perm", "two_k", "scattered_groups", "epilogue",
                                  "chained", "free_axis", "matvec_t", "pointwise_conv",
                                  "pointwise_conv_small_image",
                                  "fixed_tap_and_index_epilogue", "transposed_image",
                                  "read_tap", "call_tap"])
def test_matches_reference(name, genes):
    check_cases(name, genes)


@pytest.mark.parametrize("genes", [{}, {"threads": 2}, {"split_k": "off"}, SMALL_BLOCKS],
                         ids=["default", "two_threads", "no_split", "small_blocks"])
def test_long_sum_split_across_threads(genes):
    """Few output blocks and a long K: K is split, the splits added up, the epilogue
    applied once after (tanh and the mask would be wrong on a partial sum)."""
    op = ops()["epilogue"]
    b = built("epilogue", tuple(sorted(genes.items())))
    rng = np.random.default_rng(0)
    for m, n, k in ((20, 37, 3000), (1, 40, 1500), (70, 33, 2049)):
        sizes = {"M": m, "N": n, "K": k}
        inputs = {"a": rng.standard_normal((m, k), dtype=np.float32) / 8,
                  "w": rng.standard_normal((n, k), dtype=np.float32) / 8,
                  "bias": rng.standard_normal(n, dtype=np.float32),
                  "s": np.array(0.5, dtype=np.float32)}
        ref = reference.reference(op, sizes, inputs)
        got = run(op, b.fn, "f32", sizes, inputs)
        assert compare.compare(op, "f32", got, ref, inputs) is None, (m, n, k)


def test_columns_one_flat_index_addresses_are_stored_without_division():
    """Where (i, j) sit together in the output and nothing around the sum reads them, the
    epilogue stores along one flat index: no division an element (a 1 x 1 convolution
    stored through three divisions an element ran at 0.14x of torch on two cores, and at
    1.2x without them)."""
    op = ops()["pointwise_conv"]
    src = BACKEND.render(op, BACKEND.space(op, "cpu").default(), "cpu")
    assert "packed GEMM" in src and "% D_W" not in src and "/ D_W" not in src
    flat = ops()["pointwise_conv_small_image"]
    assert "% D_W" in BACKEND.render(flat, BACKEND.space(flat, "cpu").default(), "cpu")


def test_kernelbench_shapes_at_their_cpu_point_are_packed():
    """Every KernelBench matmul variant with a contraction renders the packed GEMM by
    default: the same mechanism for square, batched, 3-D/4-D, transposed and masked."""
    import glob
    paths = [p for p in sorted(glob.glob("specs/kernelbench/level1/*.kspec"))
             if int(p.split("/")[-1].split("_")[0]) <= 18]
    found = 0
    for path in paths:
        op = spec.load(path).ops[0]
        if not contractions(op):
            continue
        found += 1
        src = BACKEND.render(op, BACKEND.space(op, "cpu").default(), "cpu")
        assert "packed GEMM" in src, path
    assert found == 16  # all but the scalar multiple (05) and the diagonal scaling (12)


def test_register_tile_default_follows_the_vector_registers(monkeypatch):
    """8 x 32 where AVX-512 gives 32 vector registers, 6 x 16 where there are 16."""
    from kdsl.backends.c import build as c_build
    op = ops()["epilogue"]
    monkeypatch.setattr(c_build, "native_macros", lambda: frozenset({"__AVX2__"}))
    small = BACKEND.space(op, "cpu").default()
    monkeypatch.setattr(c_build, "native_macros", lambda: frozenset({"__AVX2__", "__AVX512F__"}))
    wide = BACKEND.space(op, "cpu").default()
    assert (small["mr"], small["nr"], wide["mr"], wide["nr"]) == (6, 16, 8, 32)


def _default_kernel_agrees(op) -> None:
    """The default genome's kernel against the reference on a few drawn cases."""
    built = BACKEND.build(op, BACKEND.render(op, BACKEND.space(op, "cpu").default(), "cpu"),
                          "cpu")
    for case in cases.generate(op, seed=2, per_dtype=3):
        got = run(op, built.fn, case.dtype, case.sizes, case.inputs)
        ref = reference.reference(op, case.sizes, case.inputs)
        assert compare.compare(op, case.dtype, got, ref, case.inputs) is None


BATCHED_MATVEC = """
op batched_matvec
  dims B, M, K
  in  A: f32 [B, M, K]
  in  v: like A [B, K]
  out y: like A [B, M]
  y[b, i] = sum(k) A[b, i, k] * v[b, k]
  baseline torch.bmm(A, v.unsqueeze(2)).squeeze(2)
  tolerance f32(rtol=1e-3, atol=1e-3)
  test  B in 1..6, M in 1..40, K in 1..300
  bench cpu: B=32, M=512, K=512, dtype=f32
"""


def test_a_matrix_vector_product_reads_its_matrix_in_place():
    """One factor moves along the output's last index and along the sum, and no other factor
    has an output index it lacks: each output is a dot product of contiguous rows. A copy
    putting the output's index last (lower.layouts) read the matrix three times over: an
    outsider's batched matvec at 0.41-0.46x of torch, 1.45-2.14x without it. A GEMM with
    its second factor transposed (an M axis beside it) keeps the copy."""
    op = spec.parse_text(BATCHED_MATVEC, "<t>").ops[0]
    assert not any(t.name.startswith("kd_t") for t in canonical(op).tensors)
    bt = ops()["bmm_perm"]
    assert any(t.name.startswith("kd_t") for t in canonical(bt).tensors)
    _default_kernel_agrees(op)


ROW_DOTS = """
op row_dots
  dims B, D
  in  a: f32 [B, D]
  in  b: like a [B, D]
  out y: f32 [B]
  out z: f32 [B]
  y[i] = sum(d) a[i, d] * b[i, d]
  z[i] = sum(d) a[i, d] * a[i, d]
  baseline ((a * b).sum(dim=1), (a * a).sum(dim=1))
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  B in 1..40, D in 1..300
  bench cpu: B=8192, D=1024, dtype=f32
"""


def test_row_dot_products_read_their_rows_in_place():
    """Every factor moves along the output's index and along the sum: a batch of dot
    products of contiguous rows (cosine similarity's parts), which copies putting the
    output's index last read strided along the sum (an outsider's at 0.11x of torch, its
    cosine similarity 0.18x; 0.51x and 1.32x without them)."""
    op = spec.parse_text(ROW_DOTS, "<t>").ops[0]
    assert not any(t.name.startswith("kd_t") for t in canonical(op).tensors)
    _default_kernel_agrees(op)
