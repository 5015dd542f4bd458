"""kdsl triton kernel for 'topk_rows' (collective); genome: BLOCK_R=1, maxnreg=0, method=hypercube, num_warps=1"""
import triton
import triton.language as tl

EXAMPLES = [{'sizes': {'M': 32768, 'N': 1024, 'K': 64}, 'dtype': 'f32', 'tensors': {'x': {'role': 'in', 'shape': [32768, 1024], 'dtype': 'float32'}, 'vals': {'role': 'out', 'shape': [32768, 64], 'dtype': 'float32'}, 'idx': {'role': 'out', 'shape': [32768, 64], 'dtype': 'int64'}}}, {'sizes': {'M': 32768, 'N': 1024, 'K': 64}, 'dtype': 'i64', 'tensors': {'x': {'role': 'in', 'shape': [32768, 1024], 'dtype': 'int64'}, 'vals': {'role': 'out', 'shape': [32768, 64], 'dtype': 'int64'}, 'idx': {'role': 'out', 'shape': [32768, 64], 'dtype': 'int64'}}}]

@triton.jit
def _kd_cas(k, v, flip, i: tl.constexpr, n_dims: tl.constexpr):
    # compare-and-swap at stride 2**(n_dims - i - 1) of the last n_dims bits
    n_outer: tl.constexpr = k.numel >> n_dims
    shape: tl.constexpr = [n_outer * 2**i, 2, 2**(n_dims - i - 1)]
    m = tl.arange(0, 2)[None, :, None]
    ky = tl.reshape(k, shape)
    vy = tl.reshape(v, shape)
    kl = tl.reshape(tl.broadcast_to(tl.sum(ky * (1 - m), 1)[:, None, :], shape), k.shape)
    kr = tl.reshape(tl.broadcast_to(tl.sum(ky * m, 1)[:, None, :], shape), k.shape)
    vl = tl.reshape(tl.broadcast_to(tl.sum(vy * (1 - m), 1)[:, None, :], shape), k.shape)
    vr = tl.reshape(tl.broadcast_to(tl.sum(vy * m, 1)[:, None, :], shape), k.shape)
    gt = (kl > kr) | ((kl == kr) & (vl > vr))
    swap = (gt.to(tl.int32) ^ flip) != 0
    k = k ^ tl.where(swap, kl ^ kr, tl.zeros_like(k))
    v = v ^ tl.where(swap, vl ^ vr, tl.zeros_like(v))
    return k, v


@triton.jit
def _kd_merge(k, v, stage: tl.constexpr, order: tl.constexpr, n_dims: tl.constexpr):
    # order 0: ascending; 2: alternating runs of 2**stage
    n_outer: tl.constexpr = k.numel >> n_dims
    if order == 2:
        shape: tl.constexpr = [n_outer * 2**(n_dims - 1 - stage), 2, 2**stage]
        flip = tl.reshape(tl.broadcast_to(tl.arange(0, 2)[None, :, None], shape), k.shape)
    else:
        flip = tl.zeros(k.shape, tl.int32)
    for i in tl.static_range(stage):
        k, v = _kd_cas(k, v, flip, i + (n_dims - stage), n_dims)
    return k, v


@triton.jit
def _kd_sort_pairs(k, v, n_dims: tl.constexpr):
    for i in tl.static_range(1, n_dims + 1):
        k, v = _kd_merge(k, v, i, 2 if i < n_dims else 0, n_dims)
    return k, v


@triton.jit
def _kd_cas1(k, flip, i: tl.constexpr, n_dims: tl.constexpr):
    n_outer: tl.constexpr = k.numel >> n_dims
    shape: tl.constexpr = [n_outer * 2**i, 2, 2**(n_dims - i - 1)]
    m = tl.arange(0, 2)[None, :, None]
    ky = tl.reshape(k, shape)
    kl = tl.reshape(tl.broadcast_to(tl.sum(ky * (1 - m), 1)[:, None, :], shape), k.shape)
    kr = tl.reshape(tl.broadcast_to(tl.sum(ky * m, 1)[:, None, :], shape), k.shape)
    swap = ((kl > kr).to(tl.int32) ^ flip) != 0
    return k ^ tl.where(swap, kl ^ kr, tl.zeros_like(k))


@triton.jit
def _kd_merge1(k, stage: tl.constexpr, order: tl.constexpr, n_dims: tl.constexpr):
    n_outer: tl.constexpr = k.numel >> n_dims
    if order == 2:
        shape: tl.constexpr = [n_outer * 2**(n_dims - 1 - stage), 2, 2**stage]
        flip = tl.reshape(tl.broadcast_to(tl.arange(0, 2)[None, :, None], shape), k.shape)
    else:
        flip = tl.zeros(k.shape, tl.int32)
    for i in tl.static_range(stage):
        k = _kd_cas1(k, flip, i + (n_dims - stage), n_dims)
    return k


@triton.jit
def _kd_sort_keys(k, n_dims: tl.constexpr):
    # keys alone: for a values-only sort, equal keys need no order
    for i in tl.static_range(1, n_dims + 1):
        k = _kd_merge1(k, i, 2 if i < n_dims else 0, n_dims)
    return k


@triton.jit
def _kd_pair_min(k1, v1, k2, v2):
    first = (k1 < k2) | ((k1 == k2) & (v1 < v2))
    return tl.where(first, k1, k2), tl.where(first, v1, v2)


@triton.jit
def _kd_topk_pairs(k, v, log_n: tl.constexpr, log_k: tl.constexpr, rows: tl.constexpr):
    # the 2**log_k smallest (key, index) pairs of each row, ascending
    for i in tl.static_range(1, log_k + 1):
        k, v = _kd_merge(k, v, i, 2 if i < log_n else 0, log_n)
    for i in tl.static_range(log_k + 1, log_n + 1):
        k, v = _kd_halve(k, v, 2 ** (log_n + log_k + 1 - i), log_k, rows)
        if log_k > 0:
            k, v = _kd_merge(k, v, log_k, 2 if i < log_n else 0, log_n + log_k - i)
    return k, v


@triton.jit
def _kd_halve(k, v, width: tl.constexpr, log_k: tl.constexpr, rows: tl.constexpr):
    # adjacent runs of 2**log_k (one ascending, one descending): their pairwise minima
    shape: tl.constexpr = [rows * (width >> (log_k + 1)), 2, 2**log_k]
    k, v = tl.reduce((tl.reshape(k, shape), tl.reshape(v, shape)), 1, _kd_pair_min)
    return tl.reshape(k, [rows, width // 2]), tl.reshape(v, [rows, width // 2])


@triton.jit
def _kd_hc_side(n_dims: tl.constexpr, j: tl.constexpr):
    # 0 on the left, 1 on the right of axis j (counted from the innermost)
    return tl.reshape(tl.arange(0, 2), [1] * (n_dims - j - 1) + [2] + [1] * j)


@triton.jit
def _kd_hc_cas(k, v, flip, j: tl.constexpr, n_dims: tl.constexpr):
    ky = k ^ tl.xor_sum(k, n_dims - 1 - j, True)
    vy = v ^ tl.xor_sum(v, n_dims - 1 - j, True)
    gt = (k > ky) | ((k == ky) & (v > vy))
    swap = gt != ((flip ^ _kd_hc_side(n_dims, j)) != 0)
    return tl.where(swap, ky, k), tl.where(swap, vy, v)


@triton.jit
def _kd_hc_cas1(k, flip, j: tl.constexpr, n_dims: tl.constexpr):
    ky = k ^ tl.xor_sum(k, n_dims - 1 - j, True)
    swap = (k > ky) != ((flip ^ _kd_hc_side(n_dims, j)) != 0)
    return tl.where(swap, ky, k)


@triton.jit
def _kd_hc_flip(stage: tl.constexpr, order: tl.constexpr, n_dims: tl.constexpr):
    # order 0: ascending; 2: alternating runs of 2**stage
    if order == 2:
        return _kd_hc_side(n_dims, stage)
    else:
        return tl.zeros([1] * n_dims, tl.int32)


@triton.jit
def _kd_hc_merge(k, v, stage: tl.constexpr, order: tl.constexpr, n_dims: tl.constexpr):
    flip = _kd_hc_flip(stage, order, n_dims)
    for i in tl.static_range(stage):
        k, v = _kd_hc_cas(k, v, flip, stage - 1 - i, n_dims)
    return k, v


@triton.jit
def _kd_hc_merge1(k, stage: tl.constexpr, order: tl.constexpr, n_dims: tl.constexpr):
    flip = _kd_hc_flip(stage, order, n_dims)
    for i in tl.static_range(stage):
        k = _kd_hc_cas1(k, flip, stage - 1 - i, n_dims)
    return k


@triton.jit
def _kd_hc_sort_pairs(k, v, log_r: tl.constexpr, log_n: tl.constexpr):
    if log_n > 0:
        hk = tl.reshape(k, [2] * (log_r + log_n))
        hv = tl.reshape(v, [2] * (log_r + log_n))
        for i in tl.static_range(1, log_n + 1):
            hk, hv = _kd_hc_merge(hk, hv, i, 2 if i < log_n else 0, log_r + log_n)
        k = tl.reshape(hk, k.shape)
        v = tl.reshape(hv, v.shape)
    return k, v


@triton.jit
def _kd_hc_sort_keys(k, log_r: tl.constexpr, log_n: tl.constexpr):
    if log_n > 0:
        h = tl.reshape(k, [2] * (log_r + log_n))
        for i in tl.static_range(1, log_n + 1):
            h = _kd_hc_merge1(h, i, 2 if i < log_n else 0, log_r + log_n)
        k = tl.reshape(h, k.shape)
    return k


@triton.jit
def _kd_hc_topk_pairs(k, v, log_r: tl.constexpr, log_n: tl.constexpr, log_k: tl.constexpr):
    # the 2**log_k smallest (key, index) pairs of each row, ascending: sort runs of 2**log_k
    # in alternating order, then keep the pairwise minima of neighbouring runs (a bitonic
    # sequence holding the smaller half) and merge it, until one run is left
    if log_k == 0:
        k, v = tl.reduce((k, v), 1, _kd_pair_min, keep_dims=True)
    else:
        hk = tl.reshape(k, [2] * (log_r + log_n))
        hv = tl.reshape(v, [2] * (log_r + log_n))
        for i in tl.static_range(1, log_k + 1):
            hk, hv = _kd_hc_merge(hk, hv, i, 2 if i < log_n else 0, log_r + log_n)
        for i in tl.static_range(log_k + 1, log_n + 1):
            # the hypercube has log_r + log_n + log_k + 1 - i axes here; fold axis log_k
            hk, hv = tl.reduce((hk, hv), log_r + log_n - i, _kd_pair_min)
            hk, hv = _kd_hc_merge(hk, hv, log_k, 2 if i < log_n else 0,
                                  log_r + log_n + log_k - i)
        k = tl.reshape(hk, [2**log_r, 2**log_k])
        v = tl.reshape(hv, [2**log_r, 2**log_k])
    return k, v


@triton.jit
def _kd_topk_rows_f32(p_x, p_vals, p_idx, d_M, d_N, d_K, BLOCK_R: tl.constexpr, LOG_R: tl.constexpr, BLOCK_C: tl.constexpr, LOG_C: tl.constexpr, BLOCK_K: tl.constexpr, LOG_K: tl.constexpr):
    pid = tl.program_id(0)
    t_r = pid % ((d_M + BLOCK_R - 1) // BLOCK_R)
    pid = pid // ((d_M + BLOCK_R - 1) // BLOCK_R)
    a_i = t_r * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
    m_r = a_i < d_M
    k1 = 0 + tl.arange(0, BLOCK_C)[None, :]
    mk2 = k1 < d_N
    v3 = tl.load(p_x + a_i.to(tl.int64) * (d_N) + k1, mask=m_r & mk2, other=0).to(tl.float32)
    v4 = tl.where(v3 == 0, 0.0, v3).to(tl.int32, bitcast=True)
    v5 = tl.where(v4 < 0, v4 ^ 0x7FFFFFFF, v4).to(tl.int64)
    v6 = (~v5)
    key7 = tl.broadcast_to(tl.where(mk2, v6, 9223372036854775807), [BLOCK_R, BLOCK_C])
    ix8 = tl.broadcast_to(k1, [BLOCK_R, BLOCK_C])
    ks9, vs10 = _kd_hc_topk_pairs(key7, ix8, LOG_R, LOG_C, LOG_K)
    r11 = tl.arange(0, BLOCK_K)[None, :]
    mr12 = r11 < d_K
    v13 = (~ks9)
    v14 = v13.to(tl.int32)
    v15 = tl.where(v14 < 0, v14 ^ 0x7FFFFFFF, v14).to(tl.float32, bitcast=True)
    tl.store(p_vals + a_i.to(tl.int64) * (d_K) + r11, v15.to(p_vals.dtype.element_ty), mask=m_r & mr12)
    tl.store(p_idx + a_i.to(tl.int64) * (d_K) + r11, vs10.to(p_idx.dtype.element_ty), mask=m_r & mr12)

@triton.jit
def _kd_topk_rows_i64(p_x, p_vals, p_idx, d_M, d_N, d_K, BLOCK_R: tl.constexpr, LOG_R: tl.constexpr, BLOCK_C: tl.constexpr, LOG_C: tl.constexpr, BLOCK_K: tl.constexpr, LOG_K: tl.constexpr):
    pid = tl.program_id(0)
    t_r = pid % ((d_M + BLOCK_R - 1) // BLOCK_R)
    pid = pid // ((d_M + BLOCK_R - 1) // BLOCK_R)
    a_i = t_r * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
    m_r = a_i < d_M
    k1 = 0 + tl.arange(0, BLOCK_C)[None, :]
    mk2 = k1 < d_N
    v3 = tl.load(p_x + a_i.to(tl.int64) * (d_N) + k1, mask=m_r & mk2, other=0).to(tl.int64)
    v4 = (~v3)
    key5 = tl.broadcast_to(tl.where(mk2, v4, 9223372036854775807), [BLOCK_R, BLOCK_C])
    ix6 = tl.broadcast_to(k1, [BLOCK_R, BLOCK_C])
    ks7, vs8 = _kd_hc_topk_pairs(key5, ix6, LOG_R, LOG_C, LOG_K)
    r9 = tl.arange(0, BLOCK_K)[None, :]
    mr10 = r9 < d_K
    v11 = (~ks7)
    tl.store(p_vals + a_i.to(tl.int64) * (d_K) + r9, v11.to(p_vals.dtype.element_ty), mask=m_r & mr10)
    tl.store(p_idx + a_i.to(tl.int64) * (d_K) + r9, vs8.to(p_idx.dtype.element_ty), mask=m_r & mr10)

def kernel(inputs, outputs, sizes):
    d_M = int(sizes['M'])
    d_N = int(sizes['N'])
    d_K = int(sizes['K'])
    args = (inputs['x'], outputs['vals'], outputs['idx'], d_M, d_N, d_K,)
    variant = {'float32': 0, 'int64': 1}[str(inputs['x'].dtype).split('.')[-1]]
    BLOCK_C = triton.next_power_of_2(max(d_N - 0, 1))
    BLOCK_K = min(triton.next_power_of_2(max(d_K, 1)), BLOCK_C)
    BLOCK_R = max(1, min(1, triton.next_power_of_2(max(d_M, 1)), 8192 // BLOCK_C, 1024 // BLOCK_C))
    import torch
    most = 16 if torch.version.hip else 32  # 1024 threads: AMD's waves are 64 wide
    warps = min(most, max(1, BLOCK_R * BLOCK_C // 1024))
    n = triton.cdiv(d_M, BLOCK_R)
    if n <= 0:
        return
    (_kd_topk_rows_f32, _kd_topk_rows_i64,)[variant][(n,)](*args, BLOCK_R=BLOCK_R, LOG_R=BLOCK_R.bit_length() - 1, BLOCK_C=BLOCK_C, LOG_C=BLOCK_C.bit_length() - 1, BLOCK_K=BLOCK_K, LOG_K=BLOCK_K.bit_length() - 1, num_warps=warps, num_stages=1)
