"""Hand-written conv1d, persistent: the channels-last TMA form of the third round
(`2026-12-03-h200-ftz/sources/conv_channels_last_tma.py`: a GEMM over (tap, input-channel
block), weights laid out [KW, CO, CI], x copied to [B, L, CI] so a tap's shift is an outer
TMA coordinate and the padding the descriptor's zero fill), with one program an SM walking
the tiles. Its K loop is short (3 taps x CI/64 = 12 steps for the bench point), so a tile's
pipeline fill and its epilogue cost as much as its MMAs; `tl.range(..., flatten=True)` lets
the compiler pipeline the K steps of consecutive tiles as one loop, so the next tile's
loads are in flight during this tile's epilogue, and the epilogue stores by TMA. Untimed
when written (no GPU that session); run it through bench/genome_variants.py --source.
Shapes the descriptors cannot take (f32, whose dots want IEEE precision, or rows not a
multiple of 16 bytes), and the CPU, take a plain pointer-load GEMM over (tap, channel
block) instead (the sixth round's version called torch's conv1d there, which the guards
reject)."""
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BM, BN, BK, WARPS, STAGES, GROUP = 128, 256, 64, 8, 4, 8
INTERPRET = False  # set True to run the descriptor path in the Triton interpreter


@triton.jit
def _conv(w_desc, x_desc, y_desc, B, CO, LO, P, n_t, n_ck, NUM_PROGRAMS: tl.constexpr,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
          GROUP_M: tl.constexpr):
    tiles_m = tl.cdiv(CO, BLOCK_M)
    tiles_n = tl.cdiv(LO, BLOCK_N)
    per_batch = tiles_m * tiles_n
    n_tiles = B * per_batch
    k_steps = n_t * n_ck
    tile = tl.program_id(0) - NUM_PROGRAMS
    ki = -1
    b = 0
    m0 = 0
    n0 = 0
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # one flat loop over (tile, k step): the pipeliner overlaps tiles
    for _ in tl.range(0, tl.cdiv(n_tiles - tl.program_id(0), NUM_PROGRAMS) * k_steps,
                      flatten=True):
        ki = tl.where(ki == k_steps - 1, 0, ki + 1)
        if ki == 0:
            tile += NUM_PROGRAMS
            b = tile // per_batch
            t_in = tile % per_batch
            width = GROUP_M * tiles_n
            first_m = (t_in // width) * GROUP_M
            group_m = tl.minimum(tiles_m - first_m, GROUP_M)
            m0 = (first_m + (t_in % width) % group_m) * BLOCK_M
            n0 = ((t_in % width) // group_m) * BLOCK_N
        t = ki // n_ck
        c0 = (ki - t * n_ck) * BLOCK_K
        a = w_desc.load([t, m0, c0]).reshape(BLOCK_M, BLOCK_K)
        xb = x_desc.load([b, n0 + t - P, c0]).reshape(BLOCK_N, BLOCK_K)
        acc = tl.dot(a, tl.trans(xb), acc)
        if ki == k_steps - 1:
            y_desc.store([b, m0, n0], acc.to(y_desc.dtype).reshape(1, BLOCK_M, BLOCK_N))
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)


@triton.jit
def _conv_plain(x, w, y, CI, CO, L, LO, KW, P, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, IEEE: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # output channels
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # output positions
    b = tl.program_id(2).to(tl.int64)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(0, KW):
        pos = rn + t - P
        for c0 in range(0, CI, BLOCK_K):
            rk = c0 + tl.arange(0, BLOCK_K)
            a = tl.load(w + (rm[:, None].to(tl.int64) * CI + rk[None, :]) * KW + t,
                        mask=(rm[:, None] < CO) & (rk[None, :] < CI), other=0)
            xb = tl.load(x + (b * CI + rk[:, None]) * L + pos[None, :],
                         mask=(rk[:, None] < CI) & (pos[None, :] >= 0) & (pos[None, :] < L),
                         other=0)
            if IEEE:
                acc = tl.dot(a, xb, acc, input_precision="ieee")
            else:
                acc = tl.dot(a, xb, acc)
    tl.store(y + (b * CO + rm[:, None]) * LO + rn[None, :], acc.to(y.dtype.element_ty),
             mask=(rm[:, None] < CO) & (rn[None, :] < LO))


def _alloc(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)


def kernel(inputs, outputs, sizes):
    x, w, y = inputs["x"].contiguous(), inputs["w"], outputs["y"]
    B, CI, CO, L, KW, P, LO = (int(sizes[k]) for k in ("B", "CI", "CO", "L", "KW", "P", "LO"))
    if y.numel() == 0:
        return
    if CI == 0 or KW == 0:
        y.zero_()
        return
    if x.dtype == torch.float32 or (CI * x.element_size()) % 16 or \
            (LO * y.element_size()) % 16 or not (x.is_cuda or INTERPRET):
        # the descriptors need 16-byte strides; f32 wants ieee dots: pointer loads
        dst = y if y.is_contiguous() else torch.empty_like(y)
        grid = (triton.cdiv(CO, 32), triton.cdiv(LO, 32), B)
        _conv_plain[grid](x, w.contiguous(), dst, CI, CO, L, LO, KW, P, BLOCK_M=32,
                          BLOCK_N=32, BLOCK_K=32, IEEE=x.dtype == torch.float32, num_warps=4)
        if dst is not y:
            y.copy_(dst)
        return
    wt = w.permute(2, 0, 1).contiguous()  # [KW, CO, CI]
    xcl = x.transpose(1, 2).contiguous()  # [B, L, CI]
    bm, bn, bk = (min(v, max(16, triton.next_power_of_2(n))) for v, n in
                  ((BM, CO), (BN, LO), (BK, CI)))
    dst = y if y.is_contiguous() else torch.empty_like(y)
    w_desc = TensorDescriptor(wt, [KW, CO, CI], [CO * CI, CI, 1], [1, bm, bk])
    x_desc = TensorDescriptor(xcl, [B, L, CI], [L * CI, CI, 1], [1, bn, bk])
    y_desc = TensorDescriptor(dst, [B, CO, LO], [CO * LO, LO, 1], [1, bm, bn])
    n_tiles = B * triton.cdiv(CO, bm) * triton.cdiv(LO, bn)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    programs = min(sms, n_tiles)
    # the deepest pipeline whose buffers fit shared memory beside the epilogue's tile
    stages = next((s for s in range(STAGES, 1, -1) if (bm * bk + bk * bn) * x.element_size()
                   * s + bm * bn * y.element_size() <= 220_000), 2)
    triton.set_allocator(_alloc)
    _conv[(programs,)](w_desc, x_desc, y_desc, B, CO, LO, P, KW, triton.cdiv(CI, bk),
                       NUM_PROGRAMS=programs, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                       GROUP_M=GROUP, num_warps=WARPS, num_stages=stages)
    if dst is not y:
        y.copy_(dst)
