"""triton_dot: contractions recognised from the IR, their genes, and the kernels they render.

Generated kernels are checked two ways, each in one subprocess started once for the module:
- run under the Triton interpreter (TRITON_INTERPRET=1, which must be set before triton is
  imported) against ``kdsl.reference`` on small cases, in f32 and f16 (the interpreter's bf16
  arithmetic is wrong);
- compiled without a GPU for GPUTarget("cuda", 90, 32) and GPUTarget("hip", "gfx942", 64) at the
  specs' bench sizes, reporting registers and spills (run pytest with -s to see them).
This file is also the workers' entry point: ``python this_file.py interp|compile JOBS OUT``.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import itertools
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kdsl import cases, ir
from kdsl.backends import Unsupported
from kdsl.backends.triton import dot as td
from kdsl.backends.triton.dot_plan import analyze
from kdsl.backends.triton import dot_staging
from kdsl.backends.triton.dot_im2col import linear
from kdsl.backends.triton.dot_source import k_split, tma_layout, window_axes
from kdsl.spec import load, parse_text

ROOT = Path(__file__).resolve().parents[1]
SPECS = ("matmul", "matmul_bias_relu", "conv1d", "dlrm_interaction")
REQUIRED_GENES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
# Small test ranges (the interpreter is slow); draws still honour each spec's `where`.
CAPS = {
    "matmul": dict(M=64, N=64, K=64),
    "matmul_bias_relu": dict(M=64, N=64, K=64),
    "conv1d": dict(B=2, CI=8, CO=20, L=40, LO=46),
    "dlrm_interaction": dict(B=3, F=40, D=48, P=780),
}
RAGGED = {
    "conv_transposed1d": dict(B=2, CI=6, CO=9, G=3, L=11, K=4, S=3, P=2, D=2),
    "matmul": dict(M=37, N=19, K=45),
    "matmul_bias_relu": dict(M=37, N=19, K=45),
    "conv1d": dict(B=2, CI=7, CO=19, L=37, KW=5, P=2, LO=37),
    "dlrm_interaction": dict(B=3, F=19, D=45, P=171),
}
# Contractions the library does not hold, to keep recognition honest: batched A @ B^T with a
# scale inside the sum and a gated epilogue; a vector-matrix mean over a range starting at 1
# (no M index at all); a convolution padded with ones; an epilogue of literals (inf, pi),
# floor division and modulo, a power and a gathered read.
EXTRA_SPECS = """
op bmm_nt_gate
  dims Z, M, N, K
  in  a: f32 | f16 [Z, M, K]
  in  b: like a [Z, N, K]
  in  g: like a [M]
  out y: like a [Z, M, N]
  y[z, i, j] = where(g[i] > 0, sigmoid(sum(k) a[z, i, k] * b[z, j, k] * 0.5), g[i] * 2)
  baseline torch.where(g[:, None] > 0, torch.sigmoid(0.5 * a @ b.transpose(1, 2)), g[:, None] * 2)
  tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=5e-3, atol=1e-2)
  test  Z in 1..3, M in 1..40, N in 1..40, K in 1..40
  bench Z=8, M=512, N=512, K=512, dtype=f16
op vecmat_mean
  dims N, K
  in  v: f32 | f16 [K]
  in  w: like v [K, N]
  out y: f32 [N]
  y[j] = mean(k in 1 .. K) f32(v[k]) * w[k, j]
  baseline (v[1:].float() @ w[1:].float()) / (K - 1)
  tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=5e-3, atol=1e-2)
  test  N in 1..40, K in 2..40
  bench N=4096, K=4096, dtype=f16
op conv_pad_one
  dims CI, CO, L, KW, P, LO
  in  x: f32 | f16 [CI, L]
  in  w: like x [CO, CI, KW]
  out y: like x [CO, LO]
  y[co, o] = relu(sum(ci, k) x[ci, o + k - P] pad(1) * w[co, ci, k]) + 1
  baseline torch.relu(F.conv1d(F.pad(x, (P, P), value=1)[None], w)[0]) + 1
  tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=5e-3, atol=1e-2)
  test  CI in 1..6, CO in 1..20, L in 1..30, KW in 1..5, P in 0..2, LO in 1..34 where KW <= L + 2 * P, LO == L + 2 * P - KW + 1
  bench CI=64, CO=64, L=4096, KW=3, P=1, LO=4096, dtype=f16
op odd_epilogue
  dims M, N, K
  in  a: f32 | f16 [M, K]
  in  b: like a [K, N]
  in  s: like a [N]
  out y: like a [M, N]
  y[i, j] = min(sum(k) a[i, k] * b[k, j], inf) * pi / pi + s[(j + 1) // 2] ** 2 + max(s[j], -inf) * (i % 3)
  baseline torch.minimum(a @ b, torch.tensor(math.inf)) + s[(torch.arange(N) + 1) // 2] ** 2 + s * (torch.arange(M)[:, None] % 3)
  tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=5e-3, atol=1e-2)
  test  M in 1..40, N in 1..40, K in 1..40
  bench M=512, N=512, K=512, dtype=f16
op partial_nt
  dims M, N, K
  in  a: f32 | f16 [M, K]
  in  b: like a [N, K]
  out y: like a [M, N]
  y[i, j] = sum(k in 0 .. K - 8) a[i, k] * b[j, k]
  baseline a[:, :K - 8] @ b[:, :K - 8].T
  tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=5e-3, atol=1e-2)
  test  M in 1..40, N in 1..40, K in 9..48
  bench M=512, N=512, K=512, dtype=f16
op conv2d_grouped_bias
  dims B, CI, CO, G, H, W, K, S, P, D
  in  x: f32 | f16 [B, CI, H, W]
  in  w: like x [CO, CI // G, K, K]
  in  bias: like x [CO]
  out y: like x [B, CO, (H + 2 * P - D * (K - 1) - 1) // S + 1, (W + 2 * P - D * (K - 1) - 1) // S + 1]
  y[b, co, oh, ow] = sum(c, kh, kw) x[b, co // (CO // G) * (CI // G) + c, oh * S + kh * D - P, ow * S + kw * D - P] pad(0) * w[co, c, kh, kw] + bias[co]
  baseline F.conv2d(x, w, bias, stride=S, padding=P, dilation=D, groups=G)
  tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=5e-3, atol=1e-2)
  test  B in 1..2, CI in 1..8, CO in 1..8, G in 1..3, H in 1..9, W in 1..9, K in 1..3, S in 1..2, P in 0..1, D in 1..2 where CI % G == 0, CO % G == 0, D * (K - 1) + 1 <= H + 2 * P, D * (K - 1) + 1 <= W + 2 * P
  bench B=8, CI=64, CO=128, G=1, H=256, W=256, K=3, S=1, P=1, D=1, dtype=f16
op conv_transposed1d
  dims B, CI, CO, G, L, K, S, P, D
  in  x: f32 | f16 [B, CI, L]
  in  w: like x [CI, CO // G, K]
  out y: like x [B, CO, (L - 1) * S - 2 * P + D * (K - 1) + 1]
  y[b, co, o] = sum(c in 0 .. CI // G, k) where((o + P - k * D) % S == 0, x[b, co // (CO // G) * (CI // G) + c, (o + P - k * D) // S] pad(0), 0) * w[co // (CO // G) * (CI // G) + c, co % (CO // G), k]
  baseline F.conv_transpose1d(x, w, stride=S, padding=P, dilation=D, groups=G)
  tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=5e-3, atol=1e-2)
  test  B in 1..2, CI in 1..12, CO in 1..12, G in 1..3, L in 1..20, K in 1..4, S in 1..3, P in 0..2, D in 1..2 where CI % G == 0, CO % G == 0, 2 * P <= (L - 1) * S + D * (K - 1)
  bench B=16, CI=64, CO=64, G=1, L=65536, K=3, S=2, P=1, D=1, dtype=f16
op conv3d_strided_dilated
  dims B, CI, CO, D, H, W, K, S, P, DL
  in  x: f32 | f16 [B, CI, D, H, W]
  in  w: like x [CO, CI, K, K, K]
  out y: like x [B, CO, (D + 2 * P - DL * (K - 1) - 1) // S + 1, (H + 2 * P - DL * (K - 1) - 1) // S + 1, (W + 2 * P - DL * (K - 1) - 1) // S + 1]
  y[b, co, od, oh, ow] = sum(c, kd, kh, kw) x[b, c, od * S + kd * DL - P, oh * S + kh * DL - P, ow * S + kw * DL - P] pad(0) * w[co, c, kd, kh, kw]
  baseline F.conv3d(x, w, stride=S, padding=P, dilation=DL)
  tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=5e-3, atol=1e-2)
  test  B in 1..2, CI in 1..3, CO in 1..5, D in 1..6, H in 1..6, W in 1..6, K in 1..3, S in 1..2, P in 0..1, DL in 1..2 where DL * (K - 1) + 1 <= D + 2 * P, DL * (K - 1) + 1 <= H + 2 * P, DL * (K - 1) + 1 <= W + 2 * P
  bench B=16, CI=3, CO=64, D=64, H=64, W=64, K=3, S=1, P=0, DL=1, dtype=f32
"""
EXTRA = ("bmm_nt_gate", "vecmat_mean", "conv_pad_one", "odd_epilogue", "partial_nt",
         "conv2d_grouped_bias", "conv_transposed1d", "conv3d_strided_dilated")
SM90_SMEM, GFX942_SMEM = 232448, 65536
# ops whose window the IM2COL gene unfolds (sizes where RAGGED has none)
UNFOLDED_OPS = {"conv1d": None, "conv_pad_one": dict(CI=5, CO=7, L=19, KW=3, P=2, LO=21),
                "conv2d_grouped_bias": dict(B=2, CI=6, CO=9, G=3, H=7, W=9, K=3, S=2, P=1,
                                            D=2),
                "conv3d_strided_dilated": dict(B=2, CI=3, CO=5, D=6, H=5, W=7, K=3, S=2, P=1,
                                               DL=2)}
# ops whose factors the STAGE gene copies (sizes where RAGGED has none)
STAGED_OPS = {"conv1d": None, "conv2d_grouped_bias": dict(B=2, CI=6, CO=9, G=3, H=7, W=9, K=3,
                                                         S=2, P=1, D=1),
              "conv_transposed1d": None, "matmul": None,
              "conv_pad_one": dict(CI=5, CO=7, L=19, KW=3, P=2, LO=21)}
# ops whose window the K_TABLE gene reads through K-offset tables: 1-D, 2-D grouped and 3-D,
# with stride, padding (zeros and ones) and dilation; each at sizes whose reads leave the
# input (bounds compared) and sizes where none can (the compares skipped)
TABLE_OPS = {
    "conv1d": [dict(B=2, CI=7, CO=19, L=37, KW=5, P=2, LO=37),
               dict(B=1, CI=3, CO=5, L=20, KW=3, P=0, LO=18)],
    "conv_pad_one": [dict(CI=5, CO=7, L=19, KW=3, P=2, LO=21)],
    "conv2d_grouped_bias": [dict(B=2, CI=6, CO=9, G=3, H=7, W=9, K=3, S=2, P=1, D=2),
                            dict(B=2, CI=4, CO=6, G=2, H=8, W=7, K=2, S=1, P=0, D=1)],
    "conv3d_strided_dilated": [dict(B=2, CI=3, CO=5, D=6, H=5, W=7, K=3, S=2, P=1, DL=2),
                               dict(B=1, CI=2, CO=3, D=5, H=6, W=4, K=2, S=1, P=0, DL=1)],
}
FIT_GENES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
TMA_OPS = ("matmul", "matmul_bias_relu", "partial_nt")  # plain 2-D factors, dims M, N, K
ALIGNED_OPS = {"matmul": dict(M=37, N=19, K=45), "bmm_nt_gate": dict(Z=2, M=17, N=19, K=45),
               "partial_nt": dict(M=17, N=19, K=45),
               "conv2d_grouped_bias": dict(B=2, CI=6, CO=9, G=3, H=7, W=9, K=3, S=2, P=1, D=1)}
SPLIT_OPS = {"matmul": dict(M=37, N=19, K=45), "matmul_bias_relu": dict(M=37, N=19, K=45),
             "vecmat_mean": dict(N=19, K=45), "bmm_nt_gate": dict(Z=2, M=17, N=19, K=45),
             "partial_nt": dict(M=17, N=19, K=45)}


@functools.lru_cache(maxsize=None)
def library_op(name: str) -> ir.Op:
    return load(ROOT / "specs" / f"{name}.kspec").ops[0]


@functools.lru_cache(maxsize=None)
def extra_op(name: str) -> ir.Op:
    return parse_text(EXTRA_SPECS, "<extra>").op(name)


def find_op(name: str) -> ir.Op:
    return extra_op(name) if name in EXTRA else library_op(name)


def random_genomes(op: ir.Op, n: int) -> list[dict]:
    rng = random.Random(f"triton_dot:{op.name}")
    genes = td.genes(op, "cuda")
    return [{g.name: rng.choice(g.values) for g in genes} for _ in range(n)]


def small(op: ir.Op, caps: dict[str, int]) -> ir.Op:
    """``op`` with its test ranges capped, so generated cases stay interpreter-sized."""
    ranges = tuple(dataclasses.replace(r, hi=ir.Num(min(caps[r.dim], r.hi.value)))
                   if r.dim in caps else r for r in op.test.ranges)
    return dataclasses.replace(op, test=dataclasses.replace(op.test, ranges=ranges))


# ---- in-process: recognition, genes, rendering (triton never imported here) --------------

def test_matches_exactly_the_contractions_of_the_library():
    found = {op.name for p in sorted((ROOT / "specs").glob("*.kspec"))
             for op in load(p).ops if td.matches(op)}
    assert found == set(SPECS)
    assert all(td.matches(extra_op(n)) for n in EXTRA)


@pytest.mark.parametrize("text, why", [
    ("y[i] = sum(k) a[i, k]", "factors"),
    ("y[i] = sum(k) a[i, k] * a[i, k] + sum(k) a[i, k]", "exactly one"),
    ("y[i] = max(k) a[i, k] * a[i, k]", "exactly one"),
    ("y[i] = sum(k) exp(a[i, k]) * a[i, k]", "not a read"),
])
def test_rejects_what_is_not_a_contraction(text, why):
    spec = f"""op t
  dims M, K
  in  a: f32 [M, K]
  out y: like a [M]
  {text}
  baseline a.sum(1)
  tolerance f32(rtol=1e-5, atol=1e-5)
  test M in 1..4, K in 1..4
  bench M=4, K=4, dtype=f32
"""
    op = parse_text(spec).ops[0]
    assert not td.matches(op)
    assert why in td.reason(op)
    with pytest.raises(Unsupported):
        td.render(op, {})


def test_a_split_reductions_workspace_is_addressed_without_int32_products(tmp_path):
    # n_split planes of the output's size: a plane's index times that size overflowed int32
    # (an 8192^2 output, 64 planes), so the plane index is int64 under IDX64 and the sum
    # walks the planes by pointer; and the planes stay within WORKSPACE_BYTES
    op = library_op("matmul")
    src = td.render(op, dict(td.defaults(op, "cuda"), SPLIT_K=64))
    assert "pid_s = pid_s.to(tl.int64)" in src and "ws_ptr += ws_stride" in src
    kernel = src.split("\nGENOME = ")[0]
    assert not re.search(r"\bs \* ", kernel)
    mod = _load_module(src, tmp_path / "split.py")
    cfg = mod.configure(dict(M=8192, N=8192, K=8192), 4, SM90_SMEM, True)
    sc = dict(cfg["scalars"])
    assert cfg["grid"][1] == sc["n_split"] and 1 < sc["n_split"] <= 4  # 1 GiB of partials
    assert sc["n_split"] * sc["ws_stride"] * 4 <= mod.WORKSPACE_BYTES


def test_layouts():
    mm = analyze(library_op("matmul"))
    assert [[a.name for a in s] for s in (mm.batch, mm.m, mm.n, mm.k)] == [[], ["i"], ["j"], ["k"]]
    conv = analyze(library_op("conv1d"))
    # the output's contiguous index o must lie on N: x becomes the [K, N] operand
    assert (conv.a.tensor, conv.b.tensor) == ("w", "x")
    assert [[a.name for a in s] for s in (conv.batch, conv.m, conv.n, conv.k)] == \
        [[], ["co"], ["b", "o"], ["ci", "k"]]
    dlrm = analyze(library_op("dlrm_interaction"))
    assert [p.index for p in dlrm.pairs] == ["p"]
    assert [a.name for a in dlrm.batch] == ["b"] and all(a.virtual for a in dlrm.m + dlrm.n)
    mbr = analyze(library_op("matmul_bias_relu"))
    assert any(isinstance(n, ir.Access) and n.tensor == "bias" for n in ir.walk(mbr.epilogue))


def test_grouped_and_guarded_convolutions_tile_by_group_with_taps_as_scalars():
    # co // (CO // G) splits co into (group, member): the group is a batch axis, the member
    # an N or M tile axis, and the taps (read beside a tile index) run as scalar steps
    conv = td._plan(extra_op("conv2d_grouped_bias"))
    assert {ax.name for ax in conv.batch} == {"co_g"}
    assert {ax.name for ax in conv.m + conv.n} == {"co_j", "b", "oh", "ow"}
    assert [ax.name for ax in window_axes(conv)] == ["kh", "kw"]
    assert td.defaults(extra_op("conv2d_grouped_bias"), "cuda")["K_SCALAR"] == 2
    # the transposed convolution's where() guard stays with its factor, as a load mask
    convt = td._plan(extra_op("conv_transposed1d"))
    guard = convt.a_guard if convt.a.tensor == "x" else convt.b_guard
    assert guard is not None and [ax.name for ax in window_axes(convt)] == ["k"]
    src = td.render(extra_op("conv_transposed1d"), {"K_SCALAR": 1, "PHASES": 0})
    assert "for step in range(0, n_t * tiles_k):" in src
    assert "an output axis of %d is not whole groups of %d" in src
    # with phases the tile walks one residue of o mod S and the loop only the taps that
    # meet it; the guard's term is dropped from the mask
    src = td.render(extra_op("conv_transposed1d"), {"K_SCALAR": 1, "PHASES": 1, "FLATTEN": 0})
    assert "for step in range(0, tl.where(ph_live, count_k, 0) * tiles_k):" in src
    assert "ph_r = (pid_n * BLOCK_N) // ph_t" in src and "% d_S == 0" not in src
    # SWAP puts the positions on M: the phases walk M's lanes then
    src = td.render(extra_op("conv_transposed1d"),
                    {"K_SCALAR": 1, "PHASES": 1, "FLATTEN": 0, "SWAP": 1})
    assert "ph_r = (pid_m * BLOCK_M) // ph_t" in src


def test_staging_puts_the_tiled_channel_innermost():
    # taps as scalars leave the channel c on K: both factors copied channels-last
    conv = extra_op("conv2d_grouped_bias")
    plan = td._plan(conv)
    assert dot_staging.permutations(conv, plan, k_split(plan, 2)[1]) == \
        {"x": (0, 2, 3, 1), "w": (0, 2, 3, 1)}
    # all of K flattened: w's lane kw is already last, and x's moves with the tile (ow + kw)
    assert dot_staging.permutations(conv, plan, k_split(plan, 0)[1]) == {}
    src = td.render(conv, {"K_SCALAR": 2, "STAGE": 1})
    assert 'STAGED = {"x": (0, 2, 3, 1), "w": (0, 2, 3, 1)}' in src or \
        'STAGED = {"w": (0, 2, 3, 1), "x": (0, 2, 3, 1)}' in src
    assert "STAGED = {}" in td.render(conv, {"K_SCALAR": 2, "STAGE": 0})
    staged = dot_staging.staged_op(conv, {"x": (0, 2, 3, 1)})
    assert [str(e) for e in staged.tensor("x").shape] == \
        [str(e) for e in (conv.tensor("x").shape[p] for p in (0, 2, 3, 1))]
    read = next(n for n in ir.walk(staged.statements[0].value)
                if isinstance(n, ir.Access) and n.tensor == "x")
    assert read.subscripts[-1] == next(n for n in ir.walk(conv.statements[0].value)
                                       if isinstance(n, ir.Access) and n.tensor == "x"
                                       ).subscripts[1] and read.pad is not None
    # a matmul's B[k, j] is read transposed: staged, it is the [j, k] copy
    mm = library_op("matmul")
    assert dot_staging.permutations(mm, analyze(mm), list(analyze(mm).k)) == {"b": (1, 0)}
    # a gram tile's pairs are left alone, and a lane followed only by unit axes needs nothing
    dlrm = library_op("dlrm_interaction")
    assert dot_staging.permutations(dlrm, analyze(dlrm), list(analyze(dlrm).k)) == {}
    unit = parse_text(EXTRA_SPECS.replace("w: like x [CO, CI // G, K, K]",
                                          "w: like x [CO, K, K, CI // G, 1]").replace(
        "* w[co, c, kh, kw]", "* w[co, kh, kw, c, 0]"), "<unit>").op("conv2d_grouped_bias")
    uplan = td._plan(unit)
    assert dot_staging.permutations(unit, uplan, k_split(uplan, 2)[1]) == {"x": (0, 2, 3, 1)}


def test_im2col_unfolds_a_window_read_affinely_and_nothing_else():
    conv = extra_op("conv2d_grouped_bias")
    genes = {g.name for g in td.genes(conv, "cuda")}
    assert "IM2COL" in genes and td.defaults(conv, "cuda")["IM2COL"] == 0
    src = td.render(conv, {"IM2COL": 1})
    # the kernel reads the unfolded tensor as a plain GEMM operand: no window, no bounds
    # both factors unfolded, the reduction one flat index padded to 16: a plain GEMM
    assert "def _unfold_x_cols(x, sizes):" in src and "def _unfold_w_cols(x, sizes):" in src
    assert 'x_cols=_unfold_x_cols(inputs["x"], sizes)' in src
    kernel = src.split("@triton.jit")[-1].split("def _unfold_")[0]
    assert ">= 0)" not in kernel and "t_x +" not in kernel and "t_w +" not in kernel
    assert "t_x_cols +" in kernel and "t_w_cols +" in kernel and "t_bias" in kernel
    # a guarded window (the transposed convolution's stride test), a plain GEMM: not offered
    for name in ("conv_transposed1d", "matmul_bias_relu"):
        assert "IM2COL" not in {g.name for g in td.genes(find_op(name), "cuda")}
    indices = {"o", "k", "g", "c"}
    assert linear(parse_expr("o * S + k * D - P"), indices) is not None
    assert linear(parse_expr("(o + P - k) // S"), indices) is None  # a divided index
    assert linear(parse_expr("o * k"), indices) is None
    assert linear(parse_expr("P - o"), indices) is None  # a negative coefficient


@pytest.mark.parametrize("genes", [{"IM2COL": 1}, {"K_TABLE": 1}, {"STAGE": 1, "K_SCALAR": 2},
                                   {"STAGE": 1, "K_SCALAR": 2, "ALIGN": 1},
                                   {"IM2COL": 1, "SWAP": 1, "FLATTEN": 0}])
def test_layout_copies_pass_the_evaluators_guards(genes):
    # the launcher's copies are candidate code like any other: plumbing only, no torch compute
    from kdsl.search.eval import guards
    for name in ("conv2d_grouped_bias", "conv_pad_one", "conv3d_strided_dilated"):
        found = guards.check(td.render(find_op(name), genes), "python", "triton")
        assert not found, (name, genes, found)


def _loop_of(src: str, kernel: str) -> list[str]:
    """The lines of ``kernel``'s K loop in a rendered module."""
    body = src.split(f"def {kernel}(")[1].split("\n\n")[0].splitlines()
    start = next(i for i, ln in enumerate(body) if ln.strip().startswith("for k0 in range"))
    indent = len(body[start]) - len(body[start].lstrip())
    end = next((i for i in range(start + 1, len(body))
                if body[i].strip() and len(body[i]) - len(body[i].lstrip()) <= indent),
               len(body))
    return body[start:end]


@pytest.mark.parametrize("name", ["conv1d", "conv_pad_one", "conv2d_grouped_bias",
                                  "conv3d_strided_dilated"])
def test_k_tables_leave_no_division_in_the_k_loop(name):
    # the taps decoded once, by the table kernel; the loop reads offsets and adds
    op = find_op(name)
    assert "K_TABLE" in {g.name for g in td.genes(op, "cuda")}
    src = td.render(op, {"K_TABLE": 1})
    kernel = "kdsl_" + op.name
    loop = _loop_of(src, kernel)
    assert any("tl.load(tab_b + kk)" in ln or "tl.load(tab_a + kk)" in ln for ln in loop)
    assert not [ln for ln in loop if "%" in ln or "//" in ln or "floordiv" in ln
                or "floormod" in ln], loop
    assert f"def {kernel}_ktab(" in src  # the tables are filled on the device
    # the plain window loop decodes its lanes by division
    plain = _loop_of(td.render(op, {"K_TABLE": 0, "K_SCALAR": 0}), kernel)
    assert any("%" in ln for ln in plain)
    # a guarded window (a transposed convolution's stride test): not offered
    assert "K_TABLE" not in {g.name for g in td.genes(find_op("conv_transposed1d"), "cuda")}


CHANNEL_BOUND = """
import dataclasses, glob
import numpy as np, torch
from kdsl import cases, compare, reference
from kdsl.backends import get
from kdsl.sizes import shape_of
from kdsl.spec import load
op = load(glob.glob("specs/kernelbench/level1/84_*.kspec")[0]).ops[0]
op = dataclasses.replace(op, bench=tuple(dataclasses.replace(
    b, sizes=tuple((k, 5 if k == "K" else v) for k, v in b.sizes)) for b in op.bench))
be, sizes = get("triton"), dict(B=1, CI=2, CO=4, H=9, W=11, K=3, S=2, P=1)
genome = be.space(op, "cpu").default()
assert genome["K_TABLE"] == 1, genome
built = be.build(op, be.render(op, genome, "cpu"), "cpu")
c = cases.draw(op, cases.Shape(sizes, "f32", "t", 0), 7)
ins = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in c.inputs.items()}
outs = {t.name: torch.full(shape_of(op, t.name, sizes), float("nan")) for t in op.outputs}
built.fn(ins, outs, sizes)
bad = compare.compare(op, "f32", {k: v.double().numpy() for k, v in outs.items()},
                      reference.reference(op, sizes, c.inputs), c.inputs)
assert bad is None, bad
"""


def test_k_tables_bound_a_per_program_channel_in_the_interpreter():
    """A channel multiplier's input channel (``co // (CO // CI)``) is one index a program;
    its hoisted bound, a scalar, is widened to the lanes before it joins the mask (the
    interpreter's & of a vector and a scalar made no bool mask: a review's find). KernelBench
    84 with 5x5 taps takes the tables by default."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", CHANNEL_BOUND], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_k_table_row_is_a_whole_number_of_every_block_k():
    """A K loop reads whole BLOCK_K steps of a table row (ROW lanes, the reduction padded):
    a step longer than a row would read past it."""
    from kdsl.backends.triton import dot_table
    values = next(g.values for g in td.genes(kernelbench_op("50"), "cuda") if g.name == "BLOCK_K")
    assert all(dot_table.ROW % v == 0 for v in values), (dot_table.ROW, values)


def test_k_tables_are_the_default_where_taps_ride_the_lanes():
    # few channels (3): the taps stay in the K lanes, nothing to stage channels-last
    for n in ("50", "59"):
        op = kernelbench_op(n)
        d = td.defaults(op, "cuda")
        assert d["K_TABLE"] == 1 and d["K_SCALAR"] == 0 and not d.get("STAGE"), (n, d)
        assert "kdsl_" + op.name + "_ktab" in td.render(op, {})
    # many channels (64): taps as scalars, the channels staged innermost, no tables
    d = td.defaults(kernelbench_op("55"), "cuda")
    assert d["K_TABLE"] == 0 and d["STAGE"] == 1 and d["K_SCALAR"] == 2


def test_tabled_factors_run_one_stage_with_the_positions_on_m():
    """A tabled factor is a gather: one stage (its loads are not bulk copies to run
    ahead), and in f32 its positions on M, where the TF32 MMA takes any layout; a staged
    convolution keeps its pipeline and orientation."""
    for n in ("50", "54", "59", "60", "66"):
        d = td.defaults(kernelbench_op(n), "cuda")
        assert (d["K_TABLE"], d["num_stages"], d["SWAP"]) == (1, 1, 1), (n, d)
    d = td.defaults(kernelbench_op("55"), "cuda")
    assert (d["K_TABLE"], d["num_stages"], d["SWAP"]) == (0, 3, 0)


def kernelbench_op(number: str) -> ir.Op:
    path, = (ROOT / "specs" / "kernelbench" / "level1").glob(f"{number}_*.kspec")
    return load(path).ops[0]


def parse_expr(text: str) -> ir.Expr:
    spec = f"""op e
  dims S, D, P, N
  in  x: f32 [N]
  out y: f32 [N]
  y[o] = sum(k in 0 .. 2, g in 0 .. 2, c in 0 .. 2) x[{text}] pad(0)
  baseline x
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  N in 1..4, S in 1..2, D in 1..2, P in 0..1
  bench N=4, S=1, D=1, P=0, dtype=f32
"""
    st = parse_text(spec, "<e>").ops[0].statements[0]
    return next(n for n in ir.walk(st.value) if isinstance(n, ir.Access)).subscripts[0]


def test_groups_split_only_where_the_spec_says_the_block_divides():
    spec = """op grouped
  dims M, N, K, E
  in  a: f32 [M, K]
  in  b: like a [K, N]
  out y: like a [M, N]
  y[i, j] = sum(k) a[i // E, k] * b[k, j]
  baseline a[torch.arange(M) // E] @ b
  tolerance f32(rtol=1e-4, atol=1e-4)
  test M in 1..8, N in 1..8, K in 1..8, E in 1..3{cond}
  bench M=64, N=64, K=64, E=2, dtype=f32
"""
    loose = td._plan(parse_text(spec.format(cond="")).ops[0])
    assert [ax.name for ax in loose.m + loose.n + loose.batch] and \
        not any(ax.name.startswith("i_") for ax in loose.m + loose.n + loose.batch)
    src = td.render(parse_text(spec.format(cond="")).ops[0], {})
    assert "not whole groups" not in src  # i stays whole: any M works
    # with `where M % E == 0` the spec says E divides M: i splits into (group, member)
    assert "not whole groups" in td.render(
        parse_text(spec.format(cond=" where M % E == 0")).ops[0], {})


@pytest.mark.parametrize("name", SPECS + EXTRA)
def test_genes_and_defaults(name):
    op = find_op(name)
    genes = {g.name: g for g in td.genes(op, "cuda")}
    assert set(REQUIRED_GENES) <= set(genes)
    for dev in ("cuda", "cpu"):
        d = td.defaults(op, dev)
        assert set(d) == set(genes) and all(d[k] in genes[k].values for k in d), (dev, d)


def test_defaults_for_big_bf16_gemms_are_the_hopper_tile():
    for name in ("matmul", "matmul_bias_relu"):
        d = td.defaults(library_op(name), "cuda")
        assert (d["BLOCK_M"], d["BLOCK_N"], d["BLOCK_K"], d["num_warps"]) == (128, 256, 64, 8)


@pytest.mark.parametrize("name", SPECS + EXTRA)
def test_every_genome_renders_python(name):
    op = find_op(name)
    for g in [td.defaults(op, "cuda")] + random_genomes(op, 6):
        tree = ast.parse(td.render(op, g))
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert {"kernel", "configure", "fit"} <= names


# ---- subprocess workers ---------------------------------------------------------------

def interp_jobs() -> list[dict]:
    jobs = []
    for name in SPECS + EXTRA:
        op = find_op(name)
        sop = small(op, CAPS.get(name, {}))
        genomes = [("default", td.defaults(op, "cuda"))]
        n_random = 2 if name in SPECS else 1
        genomes += [(f"random{k}", g) for k, g in enumerate(random_genomes(op, n_random))]
        for label, g in genomes:
            seed = len(jobs)
            for shape in cases.shapes(sop, seed, per_dtype=3, dtype_list=["f32", "f16"]):
                jobs.append(dict(op=name, label=label, genome=g, sizes=shape.sizes,
                                 dtype=shape.dtype, seed=seed))
            if label == "default" and name in RAGGED:
                for dt in ("f32", "f16"):
                    jobs.append(dict(op=name, label=label, genome=g, sizes=RAGGED[name],
                                     dtype=dt, seed=seed))
                # int64 offsets, and strided tensors (inputs copied, the output written back)
                jobs.append(dict(op=name, label=label, genome=g, sizes=RAGGED[name],
                                 dtype="f32", seed=seed, idx64=True, strided=True))
        if name == "conv_transposed1d":  # positions on M, the stride phases walking M
            g = dict(td.defaults(op, "cuda"), SWAP=1, FLATTEN=0, K_SCALAR=1, PHASES=1)
            for dt in ("f32", "f16"):
                jobs.append(dict(op=name, label="swap", genome=g, sizes=RAGGED[name], dtype=dt,
                                 seed=len(jobs)))
        if name in STAGED_OPS:
            # factors copied channels-last (B transposed, for the matmul) before the kernel:
            # the taps as scalars, ragged and strided inputs
            k_scalar = max(next((g.values for g in td.genes(op, "cuda")
                                 if g.name == "K_SCALAR"), (0,)))
            g = dict(td.defaults(op, "cuda"), STAGE=1, K_SCALAR=k_scalar)
            for dt in ("f32", "f16"):
                jobs.append(dict(op=name, label="stage", genome=g, dtype=dt, seed=len(jobs),
                                 sizes=RAGGED.get(name) or STAGED_OPS[name]))
            jobs.append(dict(op=name, label="stage", genome=g, dtype="f32", seed=len(jobs),
                             sizes=RAGGED.get(name) or STAGED_OPS[name], strided=True))
        if name in UNFOLDED_OPS:
            # the window unfolded before the GEMM (im2col): padding with its pad value,
            # strides, dilation and groups in the gather, ragged and strided inputs
            g = dict(td.defaults(op, "cuda"), IM2COL=1)
            sizes = RAGGED.get(name) or UNFOLDED_OPS[name]
            for dt in ("f32", "f16"):
                jobs.append(dict(op=name, label="im2col", genome=g, dtype=dt, seed=len(jobs),
                                 sizes=sizes))
            jobs.append(dict(op=name, label="im2col", genome=dict(g, FLATTEN=0, SWAP=1),
                             dtype="f32", seed=len(jobs), sizes=sizes, strided=True))
            jobs.append(dict(op=name, label="im2col", genome=g, dtype="f32", seed=len(jobs),
                             sizes=sizes, offset=True))  # views into a larger buffer
        if name in TABLE_OPS:
            # the whole reduction one flat K axis, addresses from K-offset tables; bounds
            # compared where a read can leave the input; int64 offsets and strided inputs;
            # positions on M
            g = dict(td.defaults(op, "cuda"), K_TABLE=1)
            for k, sizes in enumerate(TABLE_OPS[name]):
                for dt in ("f32", "f16"):
                    jobs.append(dict(op=name, label="table", genome=g, dtype=dt,
                                     seed=len(jobs), sizes=sizes))
                jobs.append(dict(op=name, label="table", genome=dict(g, SWAP=1, FLATTEN=0)
                                 if k else g, dtype="f32", seed=len(jobs), sizes=sizes,
                                 idx64=True, strided=True))
        if name == "matmul":  # one TF32 product a step (the interpreter multiplies in f32)
            g = dict(td.defaults(op, "cuda"), F32_DOT="tf32", BLOCK_M=32, BLOCK_N=32,
                     BLOCK_K=16)
            jobs.append(dict(op=name, label="tf32", genome=g, sizes=dict(M=37, N=24, K=40),
                             dtype="f32", seed=len(jobs)))
        if name in SPLIT_OPS:
            # the reduction split across programs: chunks of whole K blocks with a tail
            # (K = 45 in blocks of 16: three chunks, the last short), float32 partials
            # added up by the second launch, which runs the epilogue (a relu, a mean, a
            # gate, a batch)
            g = dict(td.defaults(op, "cuda"), SPLIT_K=4, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
            sizes = SPLIT_OPS[name]
            for dt in ("f32", "f16"):
                jobs.append(dict(op=name, label="split", genome=g, sizes=sizes, dtype=dt,
                                 seed=len(jobs)))
        if name in ALIGNED_OPS:
            # rows read through a length the launcher rounds up to 16 elements (K = 45: a
            # zero-filled copy), staged or as they lie, with TMA where it applies, a batch,
            # strided inputs and the reduction split
            k_scalar = max(next((g.values for g in td.genes(op, "cuda")
                                 if g.name == "K_SCALAR"), (0,)))  # the channel on K
            g = dict(td.defaults(op, "cuda"), ALIGN=1, STAGE=1, K_SCALAR=k_scalar,
                     BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
            sizes = ALIGNED_OPS[name]
            for dt in ("f32", "f16"):
                jobs.append(dict(op=name, label="align", genome=g, sizes=sizes, dtype=dt,
                                 seed=len(jobs)))
            jobs.append(dict(op=name, label="align", genome=dict(g, STAGE=0, TMA=1,
                             SPLIT_K=2), sizes=sizes, dtype="f32", seed=len(jobs),
                             strided=True))
        if name in TMA_OPS:
            # the TMA gene: rows of 16-byte multiples (descriptors) with M, N and K tails,
            # and a K whose f32 rows are not (the pointer loads again); partial_nt reads B
            # transposed and sums over part of K (the zero fill must start where it ends)
            g = dict(td.defaults(op, "cuda"), TMA=1, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
            for sizes, dt in ((dict(M=37, N=24, K=40), "f32"), (dict(M=40, N=24, K=56), "f16"),
                              (dict(M=37, N=19, K=45), "f32")):
                jobs.append(dict(op=name, label="tma", genome=g, sizes=sizes, dtype=dt,
                                 seed=len(jobs)))
    return jobs


def compile_jobs(backend: str) -> list[dict]:
    jobs = []
    for name in SPECS:
        op = library_op(name)
        sizes = op.bench[0].size_dict()
        jobs.append(dict(op=name, label="default", genome=td.defaults(op, "cuda"), sizes=sizes,
                         dtype="bf16", backend=backend))
        if backend == "cuda":
            jobs.append(dict(op=name, label="random0", genome=random_genomes(op, 1)[0],
                             sizes=sizes, dtype="f16", backend=backend))
        if backend == "cuda" and tma_layout(analyze(op)):  # both factors by pointer loads
            jobs.append(dict(op=name, label="loads", genome=dict(td.defaults(op, "cuda"), TMA=0),
                             sizes=sizes, dtype="bf16", backend=backend))
    if backend == "cuda":  # the reduction split across programs, both launches
        mm = library_op("matmul")
        jobs.append(dict(op="matmul", label="split", genome=dict(td.defaults(mm, "cuda"),
                         SPLIT_K=8), sizes=mm.bench[0].size_dict(), dtype="bf16",
                         backend=backend))
    if backend == "cuda":  # int64 offsets and the f32 (ieee) dot, at a small size
        conv = library_op("conv1d")
        jobs.append(dict(op="conv1d", label="idx64", genome=td.defaults(conv, "cuda"),
                         sizes=RAGGED["conv1d"], dtype="f32", backend=backend, idx64=True))
    return jobs


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """Start the interpreter and the two compile workers at once (2 cores), then collect."""
    d = tmp_path_factory.mktemp("triton_dot")
    procs = {}
    for kind, jobs in (("interp", interp_jobs()), ("cuda", compile_jobs("cuda")),
                       ("hip", compile_jobs("hip"))):
        (d / f"{kind}.jobs.json").write_text(json.dumps(jobs))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        if kind == "interp":
            env["TRITON_INTERPRET"] = "1"
        mode = "interp" if kind == "interp" else "compile"
        procs[kind] = subprocess.Popen(
            [sys.executable, __file__, mode, str(d / f"{kind}.jobs.json"),
             str(d / f"{kind}.out.json"), str(d / kind)],
            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = {}
    for kind, p in procs.items():
        log, _ = p.communicate(timeout=540)
        assert p.returncode == 0, f"{kind} worker failed:\n{log[-4000:]}"
        out[kind] = json.loads((d / f"{kind}.out.json").read_text())
    return out


@pytest.mark.parametrize("name", SPECS + EXTRA)
def test_interpreted_kernels_match_the_reference(workers, name):
    runs = [r for r in workers["interp"]["results"] if r["op"] == name]
    assert len({r["label"] for r in runs}) >= (3 if name in SPECS else 2)
    if name in RAGGED:
        assert any(r["sizes"] == RAGGED[name] for r in runs)
    bad = [r for r in runs if r["error"] or r["mismatch"]]
    assert not bad, "\n".join(f"{r['label']} {r['genome']} {r['sizes']} {r['dtype']}: "
                              f"{r['error'] or r['mismatch']}" for r in bad[:5])


def test_the_tma_gene_reads_by_descriptors_where_the_strides_allow(workers):
    runs = [r for r in workers["interp"]["results"] if r["label"] == "tma"]
    assert {r["op"] for r in runs} == set(TMA_OPS)
    for r in runs:
        assert not r["error"] and not r["mismatch"], r
        aligned = all(r["sizes"][d] * {"f32": 4, "f16": 2}[r["dtype"]] % 16 == 0
                      for d in ("N", "K"))
        assert r["descriptors"] == (2 if aligned else 0), r


@pytest.mark.parametrize("backend", ["cuda", "hip"])
def test_default_kernels_compile_for_both_vendors(workers, backend):
    budget = SM90_SMEM if backend == "cuda" else GFX942_SMEM
    runs = workers[backend]["results"]
    for r in runs:
        assert not r.get("error"), f"{r['op']} {r['label']}: {r['error']}"
        assert r["shared"] <= budget, r
        print(f"{backend:4} {r['op']:18} {r['label']:8} {r['dtype']} tile={r['tile']} "
              f"regs={r['n_regs']} spills={r['n_spills']} shared={r['shared']}")
    assert {r["op"] for r in runs if r["label"] == "default"} == set(SPECS)
    if backend == "cuda":  # the big GEMMs must reach Hopper's wgmma fed by the copy engine
        for r in runs:
            if r["op"] in ("matmul", "matmul_bias_relu") and r["label"] == "default":
                assert r["wgmma"] and r["tma"] and r["n_spills"] == 0, r
            if r["label"] == "loads":  # or, without the TMA gene, by a cp.async pipeline
                assert r["wgmma"] and r["pipelined"] and r["n_spills"] == 0, r
        assert {r["op"] for r in runs if r["label"] == "loads"} == {"matmul", "matmul_bias_relu"}


def test_launcher_clamps_every_genome(workers):
    """fit() over the whole gene product: power-of-two tiles in [16, 256] within the
    accumulator and shared-memory budgets of both vendors."""
    fits = workers["cuda"]["fit"]
    assert {f["op"] for f in fits} == set(SPECS) and all(f["ok"] for f in fits), fits


# ---- worker side (run as a script) -------------------------------------------------------

def _load_module(source: str, path: Path):
    import importlib.util
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)  # @triton.jit reads its function's source from a file
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run_interp(job: dict, where: Path) -> dict:
    import numpy as np
    import torch
    from kdsl import cases, compare, dtypes, reference
    from kdsl.sizes import shape_of
    op = find_op(job["op"])
    mod = _load_module(td.render(op, job["genome"]), where / f"k{job['n']}_{job['op']}.py")
    if job.get("idx64"):
        mod.INDEX64_FROM = 0
    case = cases.draw(op, cases.Shape(job["sizes"], job["dtype"], "test", 0), job["seed"])

    def tensor(shape, dtype, fill=None):
        """A tensor, laid out backwards when the job asks for strided ones, and a view
        into a larger buffer (a storage offset) when it asks for offset ones."""
        t = torch.empty(tuple(reversed(shape)) if job.get("strided") else shape, dtype=dtype)
        if job.get("offset"):
            t = torch.empty(t.numel() + 7, dtype=dtype).narrow(0, 7, t.numel()).view(t.shape)
        t = t.permute(*reversed(range(len(shape)))) if job.get("strided") else t
        t.copy_(torch.full(shape, float("nan")) if fill is None else torch.from_numpy(fill))
        return t

    inputs = {k: tensor(v.shape, dtypes.torch_dtype(op.dtype_of(k, job["dtype"])), np.asarray(v))
              for k, v in case.inputs.items()}
    outputs = {t.name: tensor(shape_of(op, t.name, job["sizes"]),
                              dtypes.torch_dtype(op.dtype_of(t.name, job["dtype"])))
               for t in op.outputs}
    made = []  # the tensor descriptors the launcher builds (the TMA gene's path)
    if hasattr(mod, "TensorDescriptor"):
        real = mod.TensorDescriptor
        mod.TensorDescriptor = lambda *a, **k: made.append(1) or real(*a, **k)
    mod.kernel(inputs, outputs, job["sizes"])
    got = {k: v.double().numpy() for k, v in outputs.items()}
    ref = reference.reference(op, job["sizes"], case.inputs)
    bad = compare.compare(op, job["dtype"], got, ref, case.inputs)
    return {"mismatch": None if bad is None else str(bad), "descriptors": len(made)}


TRITON_TYPES = {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "i32": "i32", "i64": "i64",
                "bool": "i1"}


def static_compile(mod, op: ir.Op, sizes: dict, dtype: str, backend: str, idx64=False) -> dict:
    """Compile the module's kernel as the launcher would launch it at ``sizes``, without a GPU.

    Specialisation follows Triton's launcher: ints equal to 1 become constexprs, ints and
    pointers divisible by 16 get the divisibility attribute.
    """
    import re
    import triton
    from triton.backends.compiler import GPUTarget
    target = GPUTarget("cuda", 90, 32) if backend == "cuda" else GPUTarget("hip", "gfx942", 64)
    smem = SM90_SMEM if backend == "cuda" else GFX942_SMEM
    cfg = mod.configure(sizes, {"f32": 4, "f16": 2, "bf16": 2}[dtype], smem, idx64, dtype == "f32")
    fn = next(v for k, v in vars(mod).items()
              if k.startswith("kdsl_") and isinstance(v, triton.runtime.jit.JITFunction))
    scalars = dict(cfg["scalars"])
    signature, constexprs, attrs = {}, dict(cfg["constexprs"]), {}
    # as the launcher: the copy engine on NVIDIA only
    tma = bool(mod.GENOME.get("TMA")) and "TMA" in fn.arg_names and backend == "cuda"
    if "TMA" in fn.arg_names:
        constexprs["TMA"] = tma
    c = cfg["constexprs"]
    blocks = {"mk": (c["BLOCK_M"], c["BLOCK_K"]), "kn": (c["BLOCK_K"], c["BLOCK_N"]),
              "km": (c["BLOCK_K"], c["BLOCK_M"]), "nk": (c["BLOCK_N"], c["BLOCK_K"])}
    layout = dict(zip(("desc_a", "desc_b"), tma_layout(analyze(op)) or ()))
    for i, arg in enumerate(fn.arg_names):
        if arg in layout:  # a tensor descriptor, or None (a constexpr) without TMA
            if tma:
                signature[arg] = f"tensordesc<{TRITON_TYPES[dtype]}%s>" % list(blocks[layout[arg]])
            else:
                signature[arg], constexprs[arg] = "constexpr", None
        elif arg == "k_tab":  # the K-offset tables (int32 offsets, or int64 under IDX64)
            signature[arg] = "*i64" if idx64 else "*i32"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif arg.startswith("t_"):
            try:
                kind = op.dtype_of(arg[2:], dtype)
            except KeyError:  # a tensor the launcher derives (an unfolded window): like x
                kind = dtype
            signature[arg] = "*" + TRITON_TYPES[kind]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif arg in scalars and scalars[arg] == 1:
            signature[arg], constexprs[arg] = "constexpr", 1
        elif arg in scalars:
            signature[arg] = "i32" if abs(scalars[arg]) < 2 ** 31 else "i64"
            if scalars[arg] % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            signature[arg] = "constexpr"
    k = triton.compile(triton.compiler.ASTSource(fn, signature, constexprs, attrs), target=target,
                       options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
    c = cfg["constexprs"]
    out = {"shared": k.metadata.shared,
           "tile": [c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], cfg["num_warps"], cfg["num_stages"]]}
    if backend == "cuda":
        # Registers and stack from the cubin; Triton's own n_spills is the local memory / 4.
        cubin = Path(mod.__file__).with_suffix(".cubin")
        cubin.write_bytes(k.asm["cubin"])
        tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        usage = subprocess.run([str(tool), "--dump-resource-usage", str(cubin)],
                               capture_output=True, text=True, check=True).stdout
        out["n_regs"] = int(re.search(r"REG:(\d+)", usage).group(1))
        out["n_spills"] = int(re.search(r"STACK:(\d+)", usage).group(1)) // 4
        out["wgmma"] = "warp_group_dot" in k.asm["ttgir"]
        out["pipelined"] = "async_copy_global_to_local" in k.asm["ttgir"]
        out["tma"] = "async_tma_copy_global_to_local" in k.asm["ttgir"]
    else:
        gcn = k.asm["amdgcn"]
        out["n_regs"] = int(re.search(r"\.vgpr_count:\s+(\d+)", gcn).group(1))
        out["n_spills"] = sum(int(x) for x in re.findall(r"\.[sv]gpr_spill_count:\s+(\d+)", gcn))
    return out


def _fit_all(where: Path) -> list[dict]:
    report = []
    for name in SPECS:
        op = library_op(name)
        genes = [g for g in td.genes(op, "cuda") if g.name in FIT_GENES]  # what fit() reads
        mod = _load_module(td.render(op, td.defaults(op, "cuda")), where / f"fit_{name}.py")
        ok = True
        for values in itertools.product(*[g.values for g in genes]):
            mod.GENOME = dict(zip([g.name for g in genes], values))
            for n_m, n_n, n_k, item in ((1, 1, 1, 4), (37, 19, 45, 2), (8192, 8192, 8192, 4),
                                        (8192, 4096, 4096, 2)):
                for smem in (SM90_SMEM, GFX942_SMEM):
                    bm, bn, bk, st = mod.fit(n_m, n_n, n_k, item, smem)
                    ok &= all(16 <= x <= 256 and x & (x - 1) == 0 for x in (bm, bn, bk))
                    ok &= st >= 1 and st * (bm * bk + bk * bn) * item <= smem
                    ok &= bm * bn <= 4096 * mod.GENOME["num_warps"]
        report.append({"op": name, "ok": bool(ok)})
    return report


def _worker(mode: str, jobs_path: str, out_path: str, where: str) -> None:
    import traceback
    where = Path(where)
    results = []
    for n, job in enumerate(json.loads(Path(jobs_path).read_text())):
        rec = dict(job, error=None, mismatch=None)
        try:
            if mode == "interp":
                rec.update(_run_interp(dict(job, n=n), where))
            else:
                op = library_op(job["op"])
                mod = _load_module(td.render(op, job["genome"]), where / f"c{n}_{job['op']}.py")
                rec.update(static_compile(mod, op, job["sizes"], job["dtype"], job["backend"],
                                          job.get("idx64", False)))
        except Exception:
            rec["error"] = traceback.format_exc()[-3000:]
        results.append(rec)
    out = {"results": results}
    if mode == "compile" and results and results[0]["backend"] == "cuda":
        out["fit"] = _fit_all(where)
    Path(out_path).write_text(json.dumps(out))


if __name__ == "__main__":
    _worker(*sys.argv[1:5])
