"""The Triton generator for contractions: ``sum(k...) A[...] * B[...]`` inside an epilogue.

Recognition reads the IR (``triton_dot_plan``), never the op's name: matmul,
a fused bias+relu layer, an implicit-GEMM conv1d (padded reads of
``x[b, ci, o + k - P]``) and the DLRM pairwise interaction (a gram tile per
batch entry whose strict upper triangle is scattered through
``triu_row``/``triu_col``) are all the same kernel template, laid out
differently. The genome is a tile schedule; every genome in the product of
the gene values renders a correct kernel, because the generated launcher
clamps tiles to the problem and the pipeline depth to shared memory.

Public surface: ``matches``, ``genes``, ``defaults``, ``render``.
"""
from __future__ import annotations

import math

from kdsl import ir
from kdsl.sizes import evaluate, shape_of

from kdsl.backends.base import Gene, Genome, Unsupported
from kdsl.backends.lower.groups import split_groups
from kdsl.backends.triton import dot_im2col, dot_phases, dot_staging, dot_table
from kdsl.backends.triton.dot_plan import Contraction, NotAContraction, analyze, swapped
from kdsl.backends.triton.dot_source import (k_split, render_module, split_axes, splittable,
                                             tma_layout, window_axes)

WIDE_TILES = (16, 32, 64, 128, 256)
SPLITS = (1, 2, 4, 8, 16, 32, 64)
SMS = 132  # streaming multiprocessors of an H100/H200: the programs one wave runs
PAIR_TILES = (16, 32, 64)  # a gram tile covers F features; F is tens, not thousands


def matches(op: ir.Op) -> bool:
    return reason(op) is None


def reason(op: ir.Op) -> str | None:
    """None when ``op`` is a contraction this generator renders, else why not."""
    try:
        analyze(split_groups(op, proven=True).op)
    except NotAContraction as e:
        return str(e)
    return None


def _plan(op: ir.Op) -> Contraction:
    """The contraction, read after grouped output axes are split (``lower.groups``)."""
    try:
        return analyze(split_groups(op, proven=True).op)
    except NotAContraction as e:
        raise Unsupported(f"triton_dot: {e}") from None


def genes(op: ir.Op, device: str) -> list[Gene]:
    plan = _plan(op)
    out = [
        Gene("BLOCK_M", _tiles(plan.m), ordered=True, doc="output tile rows"),
        Gene("BLOCK_N", _tiles(plan.n), ordered=True, doc="output tile columns"),
        Gene("BLOCK_K", (16, 32, 64, 128), ordered=True, doc="reduction step"),
        Gene("GROUP_M", (1, 4, 8, 16), ordered=True, doc="row tiles launched together (L2 reuse)"),
        Gene("num_warps", (2, 4, 8), ordered=True, doc="warps a program"),
        Gene("num_stages", (1, 2, 3, 4, 5), ordered=True,
             doc="software pipeline depth (clamped to shared memory)"),
    ]
    if len(plan.m) > 1 or len(plan.n) > 1:
        out.append(Gene("FLATTEN", (0, 1), doc="1: every index of a side joins the tile; "
                                               "0: only the innermost, the rest go to the grid"))
    if "f32" in op.dtype_choices:
        out.append(Gene("F32_DOT", ("ieee", "tf32x3", "bf16x3", "tf32"), doc="how f32 "
                        "operands multiply: ieee (fused multiply-adds), tf32x3 (three TF32 "
                        "tensor-core products of the split operands, about f32's accuracy), "
                        "bf16x3 (three bf16 products of operands split in bf16 halves: 16 bits "
                        "of mantissa, at twice TF32's tensor-core rate) or tf32 (one TF32 "
                        "product, 10 bits of mantissa: what torch's cuDNN convolutions do by "
                        "default; it stands only where the spec's tolerance admits its error, "
                        "which the correctness cases and the bench point judge)"))
    if window_axes(plan):
        out.append(Gene("K_SCALAR", tuple(range(len(window_axes(plan)) + 1)), ordered=True,
                        doc="window (tap) axes run as scalars in an outer loop, outermost "
                            "first; the rest of the reduction is tiled by BLOCK_K"))
    if _tabled(op, plan):
        out.append(Gene("K_TABLE", (0, 1), doc="1: the whole reduction one flat K axis, "
                        "each factor's address a tile offset (once a program) plus a K offset "
                        "read from a table the launcher fills, bounds one unsigned compare a "
                        "checked subscript, made only where some read can leave its tensor: "
                        "no lane decoded by division in the loop (K_SCALAR is then moot); "
                        "0: the taps decoded from the lanes or run as scalars"))
    if _swappable(plan):
        out.append(Gene("SWAP", (0, 1), doc="1: the factors' roles exchanged (the output's "
                        "contiguous axis on M), for an N side too narrow for the tensor "
                        "cores' wide tiles"))
    if plan.a_guard is not None or plan.b_guard is not None:
        out.append(Gene("PHASES", (0, 1), doc="1: a stride guard's taps enumerated per "
                        "phase (only the taps that count); 0: every tap, masked"))
    if _unfoldable(op, plan):
        out.append(Gene("IM2COL", (0, 1), doc="1: the windowed factor copied first (one "
                        "gather, in the timed call) into a dense [its indices.., reduction] "
                        "tensor the GEMM reads without masks or per-element addresses; it "
                        "holds K / channels times the input, so it pays where the reduction "
                        "has few channels; 0: the window read in place"))
    if _stageable(op, plan):
        out.append(Gene("STAGE", (0, 1), doc="1: a factor whose tiled reduction index is "
                        "not its innermost axis is copied first (one pass, in the timed call) "
                        "into the permutation that puts it there (channels-last for a "
                        "convolution): K-major tiles, vector loads, the layout Hopper's TF32 "
                        "MMAs read; 0: every factor read where it lies"))
    if _alignable(op, plan):
        out.append(Gene("ALIGN", (0, 1), doc="1: a factor whose K lanes walk its rows reads "
                        "them through a row length the launcher makes a whole number of 16 "
                        "elements (a zero-filled copy, in the timed call, where it is not): "
                        "16-byte loads and the copy engine for odd K; 0: rows as they lie"))
    if _splittable(plan):
        out.append(Gene("SPLIT_K", SPLITS, ordered=True, doc="programs a tile's reduction "
                        "is split across (float32 partial sums, added up by a second "
                        "launch that runs the epilogue): for few tiles over a long K"))
    if tma_layout(plan):
        out.append(Gene("TMA", (0, 1), doc="1: both factors' tiles by tensor descriptors "
                                           "(the copy engine; zero fill past the edges) "
                                           "where their strides allow; 0: pointer loads"))
    return out


# flops of the product per byte the staging copies move (each element read and written
# once), below which the copies are not made. Reading a factor N-major about doubled an
# f32 product's time, and a transposing copy costs more than its bytes at the copy rate.
# On the H200 (KernelBench, f32, 2026-12-05): staged at 128 flops a byte, a batched GEMM
# went from 7.89 to 5.27 ms; at 64, the partial GEMMs of a K = 2**19 product went from
# 2.16 to 4.16 ms with their 512 MB factor transposed in the call. So the line is drawn
# between the two; at 32, a pointwise convolution over a 4 GB input stays as it ran
# unstaged (1.96x torch.compile on an H100)
STAGE_FLOPS_PER_BYTE = 96


def _pays_for_copies(op: ir.Op, plan: Contraction, orders, sizes) -> bool:
    flops = 2 * _extent(plan.batch + plan.m + plan.n + plan.k, sizes)
    moved = sum(2 * 4 * math.prod(shape_of(op, name, sizes)) for name in orders)  # f32, r+w
    return flops >= STAGE_FLOPS_PER_BYTE * moved


def _alignable(op: ir.Op, plan: Contraction) -> bool:
    """Does some factor, as it lies or staged, walk its rows with the K lanes?"""
    k_inner = k_split(plan, 0)[1]
    staged = dot_staging.staged_op(op, dot_staging.permutations(op, plan, k_inner))
    return bool(dot_staging.k_major_factors(staged, _plan(staged), k_inner))


def _splittable(plan: Contraction) -> bool:
    """A plain K loop (no window taps to run as scalars, no gram tile): ``SPLIT_K``."""
    return not window_axes(plan) and splittable(plan, ())


def _split(programs: int, k_blocks: int) -> int:
    """Programs a tile's reduction is split across: enough for two waves of the device,
    each chunk still at least 8 K blocks long (a split's partials cost a write and a read
    of the output per chunk)."""
    split = 1
    while split < SPLITS[-1] and programs * split * 2 <= 2 * SMS and \
            k_blocks >= 16 * split:
        split *= 2
    return split


def _tabled(op: ir.Op, plan: Contraction) -> bool:
    return dot_table.find(split_groups(op, proven=True).op, plan) is not None


def _unfoldable(op: ir.Op, plan: Contraction) -> bool:
    return dot_im2col.find(op, plan) is not None


def _stageable(op: ir.Op, plan: Contraction) -> bool:
    """Would some K_SCALAR leave a factor worth staging (``dot_staging``)?"""
    return any(dot_staging.permutations(op, plan, k_split(plan, s)[1])
               for s in range(len(window_axes(plan)) + 1))


def _tiles(axes) -> tuple[int, ...]:
    return PAIR_TILES if axes and all(ax.virtual for ax in axes) else WIDE_TILES


def defaults(op: ir.Op, device: str) -> Genome:
    """A schedule for an H200 on bf16 at the op's bench sizes (the CPU bench on 'cpu')."""
    g = _defaults(op, device)
    if g.get("K_TABLE") and g.get("SWAP") == 0 and _bench_dtype(op, device) == "f32":
        # the tabled factor is a gather along the output's positions, contiguous along
        # them, never along K: f32 reaches the TF32 MMAs only K-major, except as the A
        # operand, which comes from registers in any layout. So the positions go on M
        # (H100, KernelBench 59 at 1 stage: 3.07 ms on M against 12.56 on N; 50, 54, 60
        # at 3 stages 9-29% faster so)
        g = _defaults(op, device, swap=1)
    if g.get("K_TABLE"):
        # a gathered factor's loads are one element each, which the software pipeline
        # cannot issue ahead as bulk copies: its stages only take shared memory from the
        # programs that could hide the loads' latency instead (H100, KernelBench 50, 54,
        # 59, 60: 1 stage 2.76, 5.53, 12.56, 8.32 ms against 3 stages 5.01, 8.59, 14.67,
        # 17.03)
        g["num_stages"] = 1
    return g


def _defaults(op: ir.Op, device: str, swap: int | None = None) -> Genome:
    """``defaults`` before the choices that need the schedule first; ``swap`` forces
    the orientation."""
    plan = _plan(op)
    sizes = _bench_sizes(op, device)
    g: Genome = {}
    if _swappable(plan):
        # Hopper's warpgroup MMA wants 64 rows a tile; a convolution with few output
        # channels (M) and many positions (N) reads better the other way round
        wide = [_extent(axes, sizes) for axes in (plan.m, plan.n)]
        g["SWAP"] = int(wide[0] < 64 <= wide[1]) if swap is None else swap
        plan = oriented(plan, g)
    if "f32" in op.dtype_choices:
        g["F32_DOT"] = "ieee"
    if tma_layout(plan):
        g["TMA"] = 0  # the pointer loads, but on the tile where TMA was timed (below)
    if plan.a_guard is not None or plan.b_guard is not None:
        g["PHASES"] = 1
    windows = window_axes(plan)
    if windows:
        # as many taps scalar as leave a reduction tile of at least 16 (tl.dot's least K)
        g["K_SCALAR"] = next((s for s in range(len(windows), -1, -1)
                              if _extent([ax for ax in plan.k if ax not in windows[:s]],
                                         sizes) >= 16), 0)
        if _strided_phases(plan, dict(g, K_SCALAR=len(windows)), sizes):
            # a stride's taps walked by phase skip S-1 of every S: worth a padded K tile
            g["K_SCALAR"] = len(windows)
    if _unfoldable(op, plan):
        g["IM2COL"] = 0  # (not yet timed against the window read in place)
    f32_cores = "F32_DOT" in g and _bench_dtype(op, device) == "f32"  # tf32x3, below
    if _stageable(op, plan):
        # a window's taps run as scalars leave the channels on K: copied channels-last, the
        # tiles load 16 bytes at a time (sm_90 compiles of KernelBench's 2-D convolutions:
        # 18 16-byte cp.async a step against 72 of 4 bytes). And f32 factors reach Hopper's
        # TF32 MMAs only K-major: a factor read N-major is transposed through registers at
        # every step (H200, f32 4096^3 as tf32x3 on 128x128x32 tiles: B read [K, N] 3.96 ms,
        # staged [N, K] 1.85 ms with the copy; torch's f32 GEMM 2.69), where the product
        # has the work to pay for the copy
        orders = dot_staging.permutations(op, plan, k_split(plan, g.get("K_SCALAR", 0))[1])
        g["STAGE"] = int(bool(orders) and (bool(windows) or (
            f32_cores and _pays_for_copies(op, plan, orders, sizes))))
    if _tabled(op, plan):
        # too few channels to stage: the taps stay in the K lanes, where the plain loop
        # decodes each with % and // and checks its bounds per element at every step
        # (sm_90, KernelBench's 3-channel convolutions: 1180-1740 instructions a step, the
        # staged ones 315-629); the tables leave a load and an add a factor
        in_lanes = any(ax in windows for ax in k_split(plan, g.get("K_SCALAR", 0))[1])
        g["K_TABLE"] = int(in_lanes and not g.get("STAGE"))
        if g["K_TABLE"]:
            g["K_SCALAR"] = 0  # (moot: the whole reduction is the flat K axis)
    if len(plan.m) > 1 or len(plan.n) > 1:
        inner = [_extent(axes[-1:], sizes) for axes in (plan.m, plan.n) if len(axes) > 1]
        g["FLATTEN"] = int(min(inner) < 128)
        if g["FLATTEN"] and _strided_phases(plan, g, sizes):
            g["FLATTEN"] = 0  # a stride's phases need one tile axis: S**d fewer taps walked
    batch, m, n = split_axes(plan, bool(g.get("FLATTEN", 1)))
    M, N = _extent(m, sizes), _extent(n, sizes)
    K = _extent(k_split(plan, g.get("K_SCALAR", 0))[1], sizes)  # one step's reduction
    if plan.pairs:
        # one gram tile a program, memory-bound: cover F and D in one step
        tile = min(max(16, _pow2(max(M, N))), PAIR_TILES[-1])
        # (H200, dlrm bench: 2 warps 49 us, 4 warps 57 us, torch 215 us)
        g.update(BLOCK_M=tile, BLOCK_N=tile, BLOCK_K=min(max(16, _pow2(K)), 128),
                 GROUP_M=1, num_warps=2, num_stages=2)
    elif _shifted(plan) and min(M, N) >= 128:
        # a window read like x[.., o + k - P] has no provable alignment: its tile loads one
        # element at a time without cp.async, so keep that tile small and the other tall
        # (H200, conv1d bench, ms: 256x64x32/4w 0.31, 256x128x64/8w 0.32, 256x128x32/8w 0.38,
        # 128x256x64/8w 0.47; cuDNN 0.21)
        g.update(BLOCK_M=256 if M >= 256 else 128, BLOCK_N=64, BLOCK_K=32,
                 GROUP_M=8, num_warps=4, num_stages=3)
    elif min(M, N) >= 128 and max(M, N) >= 256:
        # the classic Hopper GEMM tile: 128x256x64, 8 warps, 3 stages (H200, triton 3.6:
        # matmul bench 1.61 ms = 685 TFLOP/s, torch 1.60; matmul_bias_relu 0.41 ms, torch 0.42);
        # on 128x256, both factors by TMA with 4 stages and GROUP_M 16 (H200, one call:
        # matmul 1.434 ms by pointer loads, 1.424 so; matmul_bias_relu 0.3703-0.3711 ->
        # 0.3643; a 256x128 tile with TMA was slower, 1.526). Where the launcher finds no
        # copy engine or unusable strides, these run as pointer loads (not timed)
        wide_m = M > N and N < 256
        g.update(BLOCK_M=256 if wide_m else 128, BLOCK_N=128 if wide_m else 256, BLOCK_K=64,
                 GROUP_M=8, num_warps=8, num_stages=3)
        if tma_layout(plan) and not wide_m:
            g.update(TMA=1, GROUP_M=16, num_stages=4)
        if _bench_dtype(op, device) == "f32":
            # f32 operands on 128x128 tiles, 8 warps: compiles for sm_90 with no spills
            # as tf32x3 (128x256x64: 136 spilled registers; every ieee tile tried spilled
            # 424-1446). K-major factors take a 64 step (H200, f32 4096^3, both K-major:
            # 1.55 ms against 1.85 at 32; with one read N-major 3.73 against 3.96)
            k_major = not windows and dot_staging.k_major(
                op, plan, k_split(plan, 0)[1], bool(g.get("STAGE")))
            g.update(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64 if k_major else 32, num_warps=8,
                     num_stages=3)
    else:
        bm = min(max(16, _pow2(M)), 128)
        bn = min(max(16, _pow2(N)), 128)
        g.update(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=min(max(16, _pow2(K)), 64),
                 GROUP_M=8, num_warps=8 if bm * bn >= 128 * 128 else 4, num_stages=3)
    if _bench_dtype(op, device) == "f32" and windows:
        # split f32 operands double the registers a product takes, and a window's tile
        # holds its addresses and bounds too: at 4 warps a 64x128, 128x64 or 128x16 tile
        # spilled 2-18 registers (sm_90 compiles of KernelBench's convolutions, tf32x3;
        # 48-354 with BLOCK_K 64), at 8 warps and BLOCK_K 32 none
        g["BLOCK_K"] = min(g["BLOCK_K"], 32)
        if g["BLOCK_M"] * g["BLOCK_N"] >= 64 * 128 or max(g["BLOCK_M"], g["BLOCK_N"]) >= 128:
            g["num_warps"] = 8
    if _alignable(op, plan):
        # rows of an odd length read one element at a time (H200, KernelBench 08: K = 2949,
        # 15.2 ms against torch's 6.5); only where the product is on f32's tensor cores and
        # its window-free (the convolutions' channels were timed as they lie)
        g["ALIGN"] = int(f32_cores and not windows)
    if _splittable(plan):
        # a tile's reduction split where the tiles alone would leave most of the device
        # idle (a 512x512 output over K = 16384 is sixteen 128x128 tiles; longer sums are
        # cut in chunks by the lowering first, ``lower.partials.split_long``)
        tiles = _extent(batch, sizes) * -(-M // g["BLOCK_M"]) * -(-N // g["BLOCK_N"])
        g["SPLIT_K"] = _split(tiles, -(-K // g["BLOCK_K"]))
    if "F32_DOT" in g and _bench_dtype(op, device) == "f32":
        # f32 operands as three TF32 tensor-core products of their split halves (about
        # f32's accuracy; H200, f32 4096^3: 4.00 ms against 6.92 by fused multiply-adds)
        g["F32_DOT"] = "tf32x3"
    return g


def render(op: ir.Op, genome: Genome) -> str:
    full = {**defaults(op, "cuda"), **genome}
    plan = oriented(_plan(op), full)
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        full[key] = _floor_pow2(max(16, int(full[key])))
    full["num_warps"] = _floor_pow2(max(1, int(full["num_warps"])))
    for key in ("GROUP_M", "num_stages"):
        full[key] = max(1, int(full[key]))
    split = split_groups(op, proven=True)
    unfold = dot_im2col.find(split.op, analyze(split.op)) if full.get("IM2COL") else None
    if unfold is not None:
        # the window unfolded, nothing is left to stage: a plain GEMM of dense factors
        unfolded = dot_im2col.unfolded_op(split.op, unfold)
        plan = oriented(analyze(unfolded), full)
        return render_module(unfolded, plan, full, split.exact, {}, unfold)
    orders, rows = {}, {}
    # with the tables, the whole reduction is the tiled K axis
    k_inner = k_split(plan, 0 if full.get("K_TABLE") else int(full.get("K_SCALAR", 0)))[1]
    if full.get("STAGE"):
        orders = dot_staging.permutations(op, plan, k_inner)
        op = dot_staging.staged_op(op, orders)
        plan = oriented(_plan(op), full)
        split = split_groups(op, proven=True)
    if full.get("ALIGN"):
        op, rows = dot_staging.aligned_op(op, dot_staging.k_major_factors(op, plan, k_inner))
        plan = oriented(_plan(op), full)
        split = split_groups(op, proven=True)
    table = dot_table.find(split.op, plan) if full.get("K_TABLE") else None
    return render_module(split.op, plan, full, split.exact, orders, rows=rows, table=table)


def _swappable(plan: Contraction) -> bool:
    """Plans whose orientation the genome may choose: plain ones, with rows and columns
    (not a gram tile's pairs, nor the descriptors' fixed layouts)."""
    return bool(plan.m and plan.n) and not plan.pairs and not tma_layout(plan)


def oriented(plan: Contraction, genome: Genome) -> Contraction:
    return swapped(plan) if genome.get("SWAP") and _swappable(plan) else plan


def _strided_phases(plan: Contraction, g: Genome, sizes) -> bool:
    """Would the unflattened tile walk a stride's phases, with a stride above 1 here?"""
    batch, m, n = split_axes(plan, False)
    found = dot_phases.find(plan, batch, m, n, k_split(plan, g.get("K_SCALAR", 0))[0])
    try:
        return any(evaluate(p.s, sizes) > 1 for p in found)
    except Exception:
        return False


def _shifted(plan: Contraction) -> bool:
    """Does an operand read a window: one subscript mixing a tile index and a K index?"""
    tiled = {ax.name for ax in plan.m + plan.n}
    reduced = {ax.name for ax in plan.k}
    for f in (plan.a, plan.b):
        for s in f.subscripts:
            names = {n.name for n in ir.walk(s) if isinstance(n, ir.Name)}
            if not isinstance(s, ir.Name) and names & tiled and names & reduced:
                return True
    return False


def _bench_dtype(op: ir.Op, device: str) -> str | None:
    points = [p for p in op.bench if p.device in (None, device)]
    return points[0].dtype if points else None


def _bench_sizes(op: ir.Op, device: str) -> dict[str, int]:
    points = [b for b in op.bench if b.device == device] or \
        [b for b in op.bench if b.device is None] or list(op.bench)
    if points:
        return points[0].size_dict()
    return {d: 1024 for d in op.dims}


def _extent(axes, sizes) -> int:
    n = 1
    for ax in axes:
        try:
            n *= max(evaluate(ax.extent, sizes), 0)
        except Exception:
            n *= 1024
    return n


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _floor_pow2(n: int) -> int:
    return 1 << (int(n).bit_length() - 1)
