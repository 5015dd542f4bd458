"""Sort and top-k kernels: a bitonic network over each row held in registers.

Keys are mapped to int64 so that one integer order serves every dtype: floats
by their sign-flipped bit pattern (an order-preserving bijection, -0.0 folded
into +0.0), integers as they are, and ``~key`` for descending order, as the
reference does. Sorting (key, column index) pairs lexicographically gives the
reference's stable ascending sort and its descending top-k with ties lowest
index first; lanes past the row's end get the largest key and an index past
the end, so they sort last. The network is written here (not ``tl.sort``) so it
carries the index payload and behaves the same on every Triton version;
``tl.sort`` is offered for a values-only sort.

Gene ``method``: 'hypercube' (the tile is reshaped once to [2] * log2 of its size
and each compare-and-swap partner is an xor over one axis, the form of triton's
own ``tl.sort``, here carrying the index payload too), 'reshape' (each
compare-and-swap reshapes the tile to [outer, 2, inner] and sums out the
partner), and where they apply 'select' (top-k as K rounds of row minima) and
'tl.sort' (a values-only sort). Top-k by network sorts chunks of next_pow2(K),
then halves by pairwise minima, O(N log^2 K).
"""
from __future__ import annotations

from kdsl import ir

from kdsl.backends.triton.expr import INT64_MAX, Emitter, ExprGen, Val
from kdsl.backends.triton.kernel import (dispatch, dtype_suffixes, jit_function, launcher_head, programs,
                            prologue, py, store)
from kdsl.backends.triton.plan import Plan

NETWORK = '''
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
'''

# The same networks on a hypercube: the tile is reshaped once to [2] * log2(numel), so
# every compare-and-swap partner lies along one axis of size 2, found by an xor
# reduction over that axis (a register move or a lane shuffle, never a relayout
# through shared memory, which the per-stage reshapes above may cost).
HYPERCUBE = '''
@triton.jit
def _kd_hc_side(n_dims: tl.constexpr, j: tl.constexpr):
    # 0 on the left, 1 on the right of axis j (counted from the innermost)
    return tl.reshape(tl.arange(0, 2), [1] * (n_dims - j - 1) + [2] + [1] * j)


@triton.jit
def _kd_hc_cas(k, v, flip, j: tl.constexpr, n_dims: tl.constexpr, regs: tl.constexpr):
    ky = k ^ tl.xor_sum(k, n_dims - 1 - j, True)
    vy = v ^ tl.xor_sum(v, n_dims - 1 - j, True)
    if j < regs:  # partners in one thread: one compare a pair (see _kd_hc_cas1)
        swap = tl.where(_kd_hc_side(n_dims, j) != 0, (ky > k) | ((ky == k) & (vy > v)),
                        (k > ky) | ((k == ky) & (v > vy))) != (flip != 0)
    else:
        gt = (k > ky) | ((k == ky) & (v > vy))
        swap = gt != ((flip ^ _kd_hc_side(n_dims, j)) != 0)
    return tl.where(swap, ky, k), tl.where(swap, vy, v)


@triton.jit
def _kd_hc_cas1(k, flip, j: tl.constexpr, n_dims: tl.constexpr, regs: tl.constexpr):
    ky = k ^ tl.xor_sum(k, n_dims - 1 - j, True)
    if j < regs:
        # both partners in one thread's registers, where the side is a constant: each
        # asks the same (left > right), a compare the compiler makes once for the pair
        swap = tl.where(_kd_hc_side(n_dims, j) != 0, ky > k, k > ky) != (flip != 0)
    else:
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
def _kd_hc_merge(k, v, stage: tl.constexpr, order: tl.constexpr, n_dims: tl.constexpr,
                 regs: tl.constexpr):
    flip = _kd_hc_flip(stage, order, n_dims)
    for i in tl.static_range(stage):
        k, v = _kd_hc_cas(k, v, flip, stage - 1 - i, n_dims, regs)
    return k, v


@triton.jit
def _kd_hc_merge1(k, stage: tl.constexpr, order: tl.constexpr, n_dims: tl.constexpr,
                  regs: tl.constexpr):
    flip = _kd_hc_flip(stage, order, n_dims)
    for i in tl.static_range(stage):
        k = _kd_hc_cas1(k, flip, stage - 1 - i, n_dims, regs)
    return k


@triton.jit
def _kd_hc_relabel(k, log_r: tl.constexpr, log_n: tl.constexpr, lo: tl.constexpr,
                   hi: tl.constexpr):
    # a row's keys sort the same in any order, so the columns may be relabelled for free
    # (a reshape and a permute move no data): the column bits the loaded layout keeps in
    # each thread's registers, [0, lo) and [hi, log_n), become the low bits, which most
    # compare-and-swap layers pair, and the lane and warp bits [lo, hi) the high ones
    if lo < hi and hi < log_n:
        k4 = tl.reshape(k, [2**log_r, 2**(log_n - hi), 2**(hi - lo), 2**lo])
        k = tl.reshape(tl.permute(k4, (0, 2, 1, 3)), [2**log_r, 2**log_n])
    return k


@triton.jit
def _kd_hc_sort_pairs(k, v, log_r: tl.constexpr, log_n: tl.constexpr, regs: tl.constexpr):
    if log_n > 0:
        hk = tl.reshape(k, [2] * (log_r + log_n))
        hv = tl.reshape(v, [2] * (log_r + log_n))
        for i in tl.static_range(1, log_n + 1):
            hk, hv = _kd_hc_merge(hk, hv, i, 2 if i < log_n else 0, log_r + log_n, regs)
        k = tl.reshape(hk, k.shape)
        v = tl.reshape(hv, v.shape)
    return k, v


@triton.jit
def _kd_hc_sort_keys(k, log_r: tl.constexpr, log_n: tl.constexpr, regs: tl.constexpr):
    if log_n > 0:
        h = tl.reshape(k, [2] * (log_r + log_n))
        for i in tl.static_range(1, log_n + 1):
            h = _kd_hc_merge1(h, i, 2 if i < log_n else 0, log_r + log_n, regs)
        k = tl.reshape(h, k.shape)
    return k


@triton.jit
def _kd_hc_topk_pairs(k, v, log_r: tl.constexpr, log_n: tl.constexpr, log_k: tl.constexpr,
                      regs: tl.constexpr):
    # the 2**log_k smallest (key, index) pairs of each row, ascending: sort runs of 2**log_k
    # in alternating order, then keep the pairwise minima of neighbouring runs (a bitonic
    # sequence holding the smaller half) and merge it, until one run is left
    if log_k == 0:
        k, v = tl.reduce((k, v), 1, _kd_pair_min, keep_dims=True)
    else:
        hk = tl.reshape(k, [2] * (log_r + log_n))
        hv = tl.reshape(v, [2] * (log_r + log_n))
        for i in tl.static_range(1, log_k + 1):
            hk, hv = _kd_hc_merge(hk, hv, i, 2 if i < log_n else 0, log_r + log_n, regs)
        for i in tl.static_range(log_k + 1, log_n + 1):
            # the hypercube has log_r + log_n + log_k + 1 - i axes here; fold axis log_k
            # (the merge pairs only bits under log_k, which the folds leave in place)
            hk, hv = tl.reduce((hk, hv), log_r + log_n - i, _kd_pair_min)
            hk, hv = _kd_hc_merge(hk, hv, log_k, 2 if i < log_n else 0,
                                  log_r + log_n + log_k - i, regs)
        k = tl.reshape(hk, [2**log_r, 2**log_k])
        v = tl.reshape(hv, [2**log_r, 2**log_k])
    return k, v
'''


KEYS_PER_THREAD = 32  # (sm_90, top-k of 64 over 1024 i64 keys a row: 32 keys a thread
# compile in 12 s with 210 registers; 64 spill 329 words to local memory and take 19 s)


class SortKernel:
    def __init__(self, op: ir.Op, plan: Plan, genome: dict, name: str, dtype: str):
        self.op, self.plan, self.genome, self.name = op, plan, genome, name
        self.method = genome.get("method", "hypercube")
        self.hypercube = self.method == "hypercube"
        self.em = Emitter()
        self.gen = ExprGen(self.em, op, {}, {}, dtype)

    def render(self) -> str:
        em, gen, plan = self.em, self.gen, self.plan
        prologue(em, gen, plan, False)
        lo, hi = gen(plan.column[0]), gen(plan.column[1])
        k = em.let(f"{lo.code} + tl.arange(0, BLOCK_C)[None, :]", "int", frozenset("C"), "k")
        mk = em.let(f"{k.code} < {hi.code}", "bool", frozenset("C"), "mk")
        gen.env["__k0"], gen.masks["C"] = k, mk
        for g, group in enumerate(plan.groups):
            wanted = {what for (gi, what) in plan.store_groups if gi == g}
            key, kind = self.key(group, k, mk)
            idx = em.let(f"tl.broadcast_to({k.code}, [BLOCK_R, BLOCK_C])", "int",
                         frozenset("RC"), "ix")
            if self.hypercube and group.family == "sort":
                # (top-k keeps the loaded order: its halving folds bit log_k again and
                # again, the column's bits from log_k up, which halve each thread's share
                # only while they lie in registers, as bits 6-9 of a 1024-key row do)
                key, idx = (em.let(f"_kd_hc_relabel({t.code}, LOG_R, LOG_C, LANE_LO, LANE_HI)",
                                   "int", frozenset("RC"), t.code.rstrip("0123456789"))
                            for t in (key, idx))
            if group.family == "sort":
                self.sort(g, key, idx, kind, wanted, k, mk)
            elif self.method == "select":
                self.select(g, key, idx, kind)
            else:
                ks, vs = em.name("ks"), em.name("vs")
                em.emit(f"{ks}, {vs} = _kd_hc_topk_pairs({key.code}, {idx.code}, LOG_R, LOG_C, "
                        "LOG_K, LANE_LO)" if self.hypercube else
                        f"{ks}, {vs} = _kd_topk_pairs({key.code}, {idx.code}, LOG_C, LOG_K, "
                        "BLOCK_R)")
                r = em.let("tl.arange(0, BLOCK_K)[None, :]", "int", frozenset("C"), "r")
                gen.masks["C"] = em.let(f"{r.code} < {gen(group.k).code}", "bool",
                                        frozenset("C"), "mr")
                self.stores(g, Val(ks, "int", frozenset("RC")), Val(vs, "int", frozenset("RC")),
                            kind, r)
                gen.masks["C"] = mk
        constexprs = ["BLOCK_R", "LOG_R", "BLOCK_C", "LOG_C", "BLOCK_K", "LOG_K", "LANE_LO",
                      "LANE_HI"]
        return jit_function(self.name, self.op, constexprs, em.lines)

    def key(self, group, k: Val, mk: Val) -> tuple[Val, str]:
        """The int64 sort key of the group's body (largest past the row's end)."""
        em, gen = self.em, self.gen
        v = gen(group.body)
        kind = "int" if v.kind == "bool" else v.kind
        desc = group.family == "topk"
        if kind == "float":
            v = gen.to_float(v)
            bits, flip = ("tl.int64", "0x7FFFFFFFFFFFFFFF") if gen.ct == "tl.float64" \
                else ("tl.int32", "0x7FFFFFFF")
            z = em.let(f"tl.where({v.code} == 0, 0.0, {v.code}).to({bits}, bitcast=True)",
                       "int", v.axes)
            o = em.let(f"tl.where({z.code} < 0, {z.code} ^ {flip}, {z.code}).to(tl.int64)",
                       "int", v.axes)
        else:
            o = gen.to_int(v)
        if desc:
            o = em.let(f"(~{o.code})", "int", o.axes)
        key = em.let(f"tl.broadcast_to(tl.where({mk.code}, {o.code}, {INT64_MAX}), "
                     f"[BLOCK_R, BLOCK_C])", "int", frozenset("RC"), "key")
        return key, kind

    def value(self, key: Val, kind: str, desc: bool) -> Val:
        """The body value a key came from."""
        em, gen = self.em, self.gen
        o = em.let(f"(~{key.code})", "int", key.axes) if desc else key
        if kind != "float":
            return o
        if gen.ct == "tl.float64":
            bits, flip, ft = "tl.int64", "0x7FFFFFFFFFFFFFFF", "tl.float64"
        else:
            bits, flip, ft = "tl.int32", "0x7FFFFFFF", "tl.float32"
        z = em.let(f"{o.code}.to({bits})", "int", key.axes)
        return em.let(f"tl.where({z.code} < 0, {z.code} ^ {flip}, {z.code}).to({ft}, "
                      f"bitcast=True)", "float", key.axes)

    def stores(self, g: int, ks: Val, vs: Val, kind: str, position: Val) -> None:
        plan = self.plan
        self.gen.env[plan.inner] = position
        for st, (gi, what) in zip(plan.stores, plan.store_groups):
            if gi != g:
                continue
            val = vs if what == "indices" else self.value(ks, kind, plan.groups[g].family == "topk")
            store(self.em, self.gen, st.tensor, st.indices, val)

    def sort(self, g, key: Val, idx: Val, kind: str, wanted: set, k: Val, mk: Val) -> None:
        em = self.em
        ks, vs = em.name("ks"), em.name("vs")
        if "indices" in wanted:
            em.emit(f"{ks}, {vs} = _kd_hc_sort_pairs({key.code}, {idx.code}, LOG_R, LOG_C, "
                    "LOG_C - LANE_HI + LANE_LO)"
                    if self.hypercube else
                    f"{ks}, {vs} = _kd_sort_pairs({key.code}, {idx.code}, LOG_C)")
        elif self.method == "tl.sort":
            em.emit(f"{ks} = tl.sort({key.code}, dim=1)")
        else:
            em.emit(f"{ks} = _kd_hc_sort_keys({key.code}, LOG_R, LOG_C, LOG_C - LANE_HI + LANE_LO)" if self.hypercube
                    else f"{ks} = _kd_sort_keys({key.code}, LOG_C)")
        self.stores(g, Val(ks, "int", frozenset("RC")), Val(vs, "int", frozenset("RC")), kind, k)

    def select(self, g, key: Val, idx: Val, kind: str) -> None:
        """K rounds: the smallest (key, index) of the row, then knock it out."""
        em, gen = self.em, self.gen
        kk, vv = em.name("kk"), em.name("vv")
        em.emit(f"{kk} = {key.code}")
        em.emit(f"{vv} = {idx.code}.to(tl.int64)")
        saved = gen.masks.pop("C")
        with em.block(f"for rank in range(0, {gen(self.plan.groups[g].k).code}):"):
            em.emit(f"{kk}_m = tl.min({kk}, axis=1)[:, None]")
            em.emit(f"{vv}_m = tl.min(tl.where({kk} == {kk}_m, {vv}, {INT64_MAX}), "
                    "axis=1)[:, None]")
            self.stores(g, Val(f"{kk}_m", "int", frozenset("R")),
                        Val(f"{vv}_m", "int", frozenset("R")), kind, Val("rank", "int"))
            em.emit(f"{kk} = tl.where({vv} == {vv}_m, {INT64_MAX}, {kk})")
            em.emit(f"{vv} = tl.where({vv} == {vv}_m, {INT64_MAX}, {vv})")
        gen.masks["C"] = saved


def render(op: ir.Op, plan: Plan, genome: dict, name: str) -> tuple[list[str], set, list[str]]:
    sources, helpers, names = [NETWORK.strip("\n") + "\n", HYPERCUBE.strip("\n") + "\n"], \
        set(), []
    for dtype, suffix in dtype_suffixes(op):
        kernel = SortKernel(op, plan, genome, name + suffix, dtype)
        sources.append(kernel.render())
        helpers |= kernel.em.helpers
        names.append(name + suffix)
    lines = launcher_head(op) + dispatch(op)
    rows = py(plan.row_axis[1]) if plan.row_axis is not None else "1"
    lines.append(f"    BLOCK_C = triton.next_power_of_2(max({py(plan.column[1])} - "
                 f"{py(plan.column[0])}, 1))")
    ks = [g.k for g in plan.groups if g.k is not None]
    lines.append(f"    BLOCK_K = min(triton.next_power_of_2(max({py(ks[0])}, 1)), BLOCK_C)"
                 if ks else "    BLOCK_K = 1")
    # at most KEYS_PER_THREAD keys a thread: a longer network spills to local memory and
    # compiles longer (more rows a program are dropped first, then warps added)
    warps = int(genome.get('num_warps', 4))
    lines.append(f"    BLOCK_R = max(1, min({int(genome.get('BLOCK_R', 1))}, "
                 f"triton.next_power_of_2(max({rows}, 1)), 8192 // BLOCK_C, "
                 f"{KEYS_PER_THREAD * 32 * warps} // BLOCK_C))")
    lines.append("    import torch")
    lines.append("    most = 16 if torch.version.hip else 32  # 1024 threads: AMD's waves are 64 wide")
    lines.append(f"    warps = min(most, max({warps}, BLOCK_R * BLOCK_C // {KEYS_PER_THREAD * 32}))")
    # the column bits of the loaded layout that lie across lanes and warps (a guess at the
    # compiler's choice: 16-byte vectors a thread, then the lanes and the warps along the
    # row); the relabelling is correct for any value, fast when the guess is right
    lines.append("    vec = 16 // max(1, min(16, args[0].element_size()))")
    lines.append("    LANE_LO = min(vec.bit_length() - 1, BLOCK_C.bit_length() - 1)")
    lines.append("    lanes = 6 if torch.version.hip else 5  # 64- or 32-wide warps")
    lines.append("    LANE_HI = min(LANE_LO + lanes + warps.bit_length() - 1, "
                 "BLOCK_C.bit_length() - 1)")
    lines.append(f"    n = {programs(plan, False)}")
    lines.append("    if n <= 0:")
    lines.append("        return")
    regs = int(genome.get("maxnreg", 0))
    if regs:  # ptxas' register cap, an NVIDIA option (HIP's launcher would refuse it)
        lines.append(f"    caps = {{}} if torch.version.hip else {{'maxnreg': {regs}}}")
    lines.append(f"    ({', '.join(names)},)[variant][(n,)](*args, BLOCK_R=BLOCK_R, "
                 "LOG_R=BLOCK_R.bit_length() - 1, BLOCK_C=BLOCK_C, "
                 "LOG_C=BLOCK_C.bit_length() - 1, BLOCK_K=BLOCK_K, "
                 "LOG_K=BLOCK_K.bit_length() - 1, LANE_LO=LANE_LO, LANE_HI=LANE_HI, "
                 "num_warps=warps, "
                 f"num_stages={int(genome.get('num_stages', 1))}" + (", **caps)" if regs else ")"))
    return sources, helpers, lines
