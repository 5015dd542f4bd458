"""jagged_softmax, the default genome made persistent: 16 one-warp programs an SM, each walking (segment, column-block) tiles strided by the grid, so 65,536 short programs are not launched one by one (experiment, bench/genome_variants.py --source)."""
import triton
import triton.language as tl

EXAMPLES = [{'sizes': {'L': 1048576, 'D': 128, 'B': 16384}, 'dtype': 'f32', 'tensors': {'values': {'role': 'in', 'shape': [1048576, 128], 'dtype': 'float32'}, 'offsets': {'role': 'in', 'shape': [16385], 'dtype': 'int64'}, 'y': {'role': 'out', 'shape': [1048576, 128], 'dtype': 'float32'}}}]

import os  # noqa: E402

from triton.language.extra import libdevice  # noqa: E402

import torch  # noqa: E402

# the interpreter has no libdevice and no inline assembly; it runs when TRITON_INTERPRET=1
# (read as triton does)
_KD_LIBDEVICE = tl.constexpr(os.environ.get("TRITON_INTERPRET", "").lower()
                             not in ("1", "true", "on", "yes"))
# inline PTX only where kernels compile for NVIDIA GPUs (a static compile for another
# target sets this for that target)
_KD_PTX = tl.constexpr(bool(_KD_LIBDEVICE) and torch.version.hip is None)


@triton.jit
def _kd_exp_ftz(x):
    # f32 on a GPU: the hardware's ex2.approx.ftz.f32 of x * log2(e), two instructions;
    # triton's exp adds three to keep subnormal inputs and results (below 2^-126, under
    # the specs' tolerances). Other dtypes, the interpreter and other GPUs: tl.exp
    if _KD_PTX and x.dtype == tl.float32:
        r = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f",
                                      [x * 1.4426950408889634], dtype=tl.float32,
                                      is_pure=True, pack=1)
    else:
        r = tl.exp(x)
    return r


PROGRAMS_PER_SM = 16

def _sms():
    # one wave of resident one-warp programs; each walks tiles strided by the grid
    if not torch.cuda.is_available():
        return 4
    return torch.cuda.get_device_properties(0).multi_processor_count


@triton.jit
def _kd_jagged_softmax(p_values, p_offsets, p_y, d_L, d_D, d_B, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, N_TILES):
    for tile in range(tl.program_id(0), N_TILES, tl.num_programs(0)):
        pid = tile
        t_r = pid % ((d_D + BLOCK_R - 1) // BLOCK_R)
        pid = pid // ((d_D + BLOCK_R - 1) // BLOCK_R)
        a___seg = pid
        a_d = t_r * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
        m_r = a_d < d_D
        acc1 = tl.full([BLOCK_R, 1], float('-inf'), tl.float32)
        acc2 = tl.zeros([BLOCK_R, 1], tl.float32)
        v4 = tl.load(p_offsets + a___seg).to(tl.int64)
        v5 = (a___seg + 1)
        v6 = tl.load(p_offsets + v5).to(tl.int64)
        v7 = v4 + (v6 - v4) // BLOCK_C * BLOCK_C
        mk9 = tl.full([1, BLOCK_C], 1, tl.int1)
        for s8 in range(v4, v7, BLOCK_C):
            k10 = s8 + tl.arange(0, BLOCK_C)[None, :]
            v11 = tl.load(p_values + k10.to(tl.int64) * (d_D) + a_d, mask=m_r, other=0, eviction_policy="evict_last").to(tl.float32)
            v12 = tl.where(mk9, v11, float('-inf'))
            acc1_n = tl.maximum(acc1, tl.max(v12, axis=1)[:, None])
            acc1_z = tl.where(acc1_n == float('-inf'), 0.0, acc1_n)
            acc2 = acc2 * _kd_exp_ftz(acc1 - acc1_z) + tl.sum(_kd_exp_ftz(v12 - acc1_z), axis=1)[:, None]
            acc1 = acc1_n
        k13 = v7 + tl.arange(0, BLOCK_C)[None, :]
        mk14 = k13 < v6
        v15 = tl.load(p_values + k13.to(tl.int64) * (d_D) + a_d, mask=m_r & mk14, other=0, eviction_policy="evict_last").to(tl.float32)
        v16 = tl.where(mk14, v15, float('-inf'))
        acc1_n = tl.maximum(acc1, tl.max(v16, axis=1)[:, None])
        acc1_z = tl.where(acc1_n == float('-inf'), 0.0, acc1_n)
        acc2 = acc2 * _kd_exp_ftz(acc1 - acc1_z) + tl.sum(_kd_exp_ftz(v16 - acc1_z), axis=1)[:, None]
        acc1 = acc1_n
        for s17 in range(v4, v6, BLOCK_C):
            k18 = s17 + tl.arange(0, BLOCK_C)[None, :]
            mk19 = k18 < v6
            v20 = tl.load(p_values + k18.to(tl.int64) * (d_D) + a_d, mask=m_r & mk19, other=0, eviction_policy="evict_first").to(tl.float32)
            v21 = (v20 - acc1)
            v22 = _kd_exp_ftz(v21)
            v23 = (1.0 / acc2)
            v24 = (v22 * v23)
            tl.store(p_y + k18.to(tl.int64) * (d_D) + a_d, v24.to(p_y.dtype.element_ty), mask=m_r & mk19, eviction_policy="evict_first")

def kernel(inputs, outputs, sizes):
    d_L = int(sizes['L'])
    d_D = int(sizes['D'])
    d_B = int(sizes['B'])
    args = (inputs['values'], inputs['offsets'], outputs['y'], d_L, d_D, d_B,)
    variant = 0
    BLOCK_C = min(32, 32)
    fn = (_kd_jagged_softmax,)[variant]
    BLOCK_R = max(1, min(32, triton.next_power_of_2(max(d_D, 1)), 4096 // BLOCK_C))
    n = max(((d_B + 1) - 1), 0) * triton.cdiv(d_D, BLOCK_R)
    if n <= 0:
        return
    fn[(min(n, PROGRAMS_PER_SM * _sms()),)](*args, N_TILES=n, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C, num_warps=1, num_stages=2)
