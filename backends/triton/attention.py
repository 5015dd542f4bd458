"""A fused attention kernel (flash-attention style) for ops ``lower.attention`` recognises.

Each program owns BLOCK_M query rows of one batch point (and, past ``D_WHOLE``, one chunk
of the output axis): it walks the keys BLOCK_N at a time, computes the score tile with
tl.dot, keeps each row's running maximum and sum of exponentials in registers, rescales
its accumulator when the maximum grows and adds p . V with a second tl.dot. The [rows,
keys] scores never reach memory, where the staged rendering writes them out and reads
them back twice (the softmax's stage, then the second GEMM's).

The backend offers this kernel only where both head dimensions are at most ``D_WHOLE`` at
the bench point: the scores' reduction is then one [BLOCK_M, BLOCK_D] tile of Q held for
the whole loop and the accumulator one [BLOCK_M, BLOCK_D] tile. Larger sizes still run
(correctness cases may ask for them): the reduction is then looped in chunks inside each
key step and the output axis split across programs, each recomputing the scores, which
is what a D of 1024 (KernelBench 97) would need, and slow; the staged kernels serve it.
"""
from __future__ import annotations

from kdsl import ir

from kdsl.backends.base import Gene, Unsupported
from kdsl.backends.lower.attention import DOT, Attention
from kdsl.backends.triton.expr import Emitter, ExprGen, Val, variants
from kdsl.backends.triton.kernel import jit_function, launcher_head, module, py, tensors

D_WHOLE = 256  # a head dimension up to this is held whole (next power of two, masked)
PREFIX = "fused."  # the fused kernel's genes, beside the staged kernels' s<k>. genes
LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)): the hardware's ex2


def offered(att: Attention | None, bench: dict[str, int]) -> bool:
    """Whether to offer the fused kernel: a match whose head dimensions at the bench point
    are both known and at most ``D_WHOLE``."""
    from kdsl.sizes import NotASize, evaluate
    if att is None:
        return False
    try:
        return all(0 < evaluate(att.extents[a], bench) <= D_WHOLE for a in (att.red, att.col))
    except (NotASize, KeyError, TypeError):
        return False


def genes(att: Attention, bench: dict[str, int], dtype: str) -> tuple[list[Gene], dict]:
    """The fused kernel's genes (prefixed) and defaults by head dimension and dtype."""
    from kdsl.sizes import evaluate
    gs = [Gene("BLOCK_M", (16, 32, 64, 128), True, "query rows a program"),
          Gene("BLOCK_N", (16, 32, 64, 128), True, "keys a step of the loop"),
          Gene("num_warps", (2, 4, 8), True, "warps a program"),
          Gene("num_stages", (1, 2, 3, 4), True, "software pipelining of the key loop")]
    head = max(evaluate(att.extents[a], bench) for a in (att.red, att.col))
    # Untimed: flash-attention practice, checked by sm_90 static compiles of D = 64, 128,
    # 256 for no spills (16-bit: none; f32 with tf32x3, whose split operands take
    # registers: 64x64 and 32x32 tiles none at D = 64 and 128; at D = 256 every tile
    # tried spilled, 16x16 least, 24 words)
    if dtype != "f32":
        d = dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3) if head <= 64 else \
            dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3) if head <= 128 else \
            dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=2)
    else:
        d = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3) if head <= 64 else \
            dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2) if head <= 128 else \
            dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=2)
    if "f32" in att.dtypes:
        # as the contraction generator's F32_DOT (dot.py): how f32 operands multiply
        gs.append(Gene("F32_DOT", ("ieee", "tf32x3", "bf16x3", "tf32"), False,
                       "how f32 operands multiply: ieee, tf32x3 (about f32's accuracy on "
                       "the tensor cores), bf16x3 or tf32 (10 bits of mantissa)"))
        d["F32_DOT"] = "tf32x3" if dtype == "f32" else "ieee"
    return ([Gene(PREFIX + g.name, g.values, g.ordered, g.doc) for g in gs],
            {PREFIX + k: v for k, v in d.items()})


def render(op: ir.Op, att: Attention, genome: dict) -> str:
    g = {k[len(PREFIX):]: v for k, v in genome.items() if k.startswith(PREFIX)}
    if len(variants(op)) != 1:
        raise Unsupported("fused attention: one kernel serves every dtype of the op")
    name = f"_kd_{op.name}_attention"
    em = Emitter()
    _body(em, op, att)
    kernel = jit_function(name, op, ["BLOCK_M", "BLOCK_N", "BLOCK_DK", "BLOCK_DV", "ONE_K",
                                      "F32", "F32_PREC", "IDX64"], em.lines)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(genome.items()))
    doc = (f"kdsl triton kernel for '{op.name}' (fused attention: online softmax, the "
           f"scores kept in registers); genome: {shown}")
    return module(op, doc, em.helpers, [DOT_HELPER.strip("\n") + "\n", kernel],
                  _launcher(op, att, g, name), "import torch")


def _addr(op: ir.Op, gen: ExprGen, a: ir.Access, codes: dict[str, str]) -> str:
    """The element offset of read ``a`` (a contiguous tensor) with its index names bound
    to ``codes``; strides are products of the later dims, left to right, so that an int64
    index keeps every product in int64."""
    shape = op.tensor(a.tensor).shape
    terms = []
    for p, s in enumerate(a.subscripts):
        later = [f"({gen.size(d)})" for d in shape[p + 1:]]
        terms.append(" * ".join([codes[s.name]] + later))
    return " + ".join(terms)


def _body(em: Emitter, op: ir.Op, att: Attention) -> None:
    gen = ExprGen(em, op, {}, {}, variants(op)[0][0])
    ext = {a: gen.size(e) for a, e in att.extents.items()}
    rows, keys, dk, dv = (ext[a] for a in (att.row, att.key, att.red, att.col))
    em.emit("pid = tl.program_id(0)")
    # rows fastest, then output chunks, then batch: neighbouring programs read the same
    # keys and values (L2)
    em.emit(f"t_m = pid % (({rows} + BLOCK_M - 1) // BLOCK_M)")
    em.emit(f"pid = pid // (({rows} + BLOCK_M - 1) // BLOCK_M)")
    em.emit(f"t_v = pid % (({dv} + BLOCK_DV - 1) // BLOCK_DV)")
    em.emit(f"pid = pid // (({dv} + BLOCK_DV - 1) // BLOCK_DV)")
    for p in range(len(att.batch) - 1, -1, -1):
        b = att.batch[p]
        em.emit(f"a_{b} = pid" if p == 0 else f"a_{b} = pid % ({ext[b]})")
        if p:
            em.emit(f"pid = pid // ({ext[b]})")
    em.emit(f"l_m = t_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    em.emit(f"l_v = t_v * BLOCK_DV + tl.arange(0, BLOCK_DV)")
    em.emit("l_d = tl.arange(0, BLOCK_DK)")
    em.emit("l_n = tl.arange(0, BLOCK_N)")
    with em.block("if IDX64:"):  # tensors of 2**31 elements or more
        for v in ["l_m", "l_v", "l_d", "l_n"] + [f"a_{b}" for b in att.batch]:
            em.emit(f"{v} = {v}.to(tl.int64)")
    em.emit(f"ok_m = l_m < {rows}")
    em.emit(f"ok_v = l_v < {dv}")
    batch = {b: f"a_{b}" for b in att.batch}
    i, j, d, e = att.row, att.key, att.red, att.col
    q_at = _addr(op, gen, att.q, {**batch, i: "l_m[:, None]", d: "kd[None, :]"})
    k_at = _addr(op, gen, att.k, {**batch, j: "l_j[None, :]", d: "kd[:, None]"})
    v_at = _addr(op, gen, att.v, {**batch, j: "l_j[:, None]", e: "l_v[None, :]"})
    y_at = _addr(op, gen, ir.Access(att.out, tuple(ir.Name(n) for n in _out_indices(op, att))),
                 {**batch, i: "l_m[:, None]", e: "l_v[None, :]"})
    q_load = f"tl.load(p_{att.q.tensor} + {q_at}, mask=ok_m[:, None] & (kd < {dk})[None, :], " \
             "other=0.0)"
    k_load = f"tl.load(p_{att.k.tensor} + {k_at}, mask=(kd < {dk})[:, None] & ok_j[None, :], " \
             "other=0.0)"
    with em.block("if ONE_K:"):  # the whole reduction one tile: Q read once a program
        em.emit("kd = l_d")
        em.emit(f"q = {q_load}")
    em.emit("m_run = tl.full([BLOCK_M], float('-inf'), tl.float32)")
    em.emit("l_run = tl.zeros([BLOCK_M], tl.float32)")
    em.emit("acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)")
    scale = _scale(op, att.score)
    if scale is not None:  # a constant scale folds into exp2's log2(e): one multiply
        em.emit(f"qk_scale = {gen.to_float(gen(scale)).code} * {LOG2E}")
    with em.block(f"for start in range(0, {keys}, BLOCK_N):"):
        em.emit("l_j = start + l_n")
        em.emit(f"ok_j = l_j < {keys}")
        with em.block("if ONE_K:"):
            em.emit("kd = l_d")
            em.emit(f"qk = _kd_attn_dot(q, {k_load}, tl.zeros([BLOCK_M, BLOCK_N], tl.float32), "
                    "F32, F32_PREC)")
        with em.block("else:"):  # a long reduction: chunks of it, Q read again each step
            em.emit("qk = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)")
            with em.block(f"for k0 in range(0, {dk}, BLOCK_DK):"):
                em.emit("kd = k0 + l_d")
                em.emit(f"qk = _kd_attn_dot({q_load}, {k_load}, qk, F32, F32_PREC)")
        if scale is not None:
            s = "qk * qk_scale"
        else:  # any elementwise score: a bias read at (rows, keys), a mask by index
            em.emit("r_i = l_m[:, None]")
            em.emit("c_j = l_j[None, :]")
            em.emit("m_r = ok_m[:, None]")
            em.emit("m_c = ok_j[None, :]")
            gen.env = {**{b: Val(f"a_{b}", "int") for b in att.batch},
                       i: Val("r_i", "int", frozenset("R")), j: Val("c_j", "int", frozenset("C")),
                       DOT: Val("qk", "float", frozenset("RC"))}
            gen.masks = {"R": Val("m_r", "bool", frozenset("R")),
                         "C": Val("m_c", "bool", frozenset("C"))}
            s = f"{gen.to_float(gen(att.score)).code} * {LOG2E}"
        # keys past the end score -inf; a row with no finite score yet keeps a 0 offset,
        # so that exp2 of -inf - -inf never makes a NaN
        em.emit(f"s = tl.where(ok_j[None, :], {s}, float('-inf'))")
        em.emit("m_new = tl.maximum(m_run, tl.max(s, 1))")
        em.emit("m_use = tl.where(m_new == float('-inf'), 0.0, m_new)")
        em.emit("alpha = tl.exp2(m_run - m_use)")
        em.emit("p = tl.exp2(s - m_use[:, None])")
        em.emit("l_run = l_run * alpha + tl.sum(p, 1)")
        em.emit(f"v = tl.load(p_{att.v.tensor} + {v_at}, mask=ok_j[:, None] & ok_v[None, :], "
                "other=0.0)")
        # 16-bit values: the probabilities in their type, for the tensor cores
        em.emit("acc = _kd_attn_dot(p.to(v.dtype), v, acc * alpha[:, None], F32, F32_PREC)")
        em.emit("m_run = m_new")
    # no key at all (an empty sum) leaves 0, as the reference's empty sum; keys all masked
    # out (every score -inf) leave 0 / 0, NaN, as the reference's softmax of them does
    em.emit(f"out = acc / tl.where((l_run == 0.0) & ({keys} == 0), 1.0, l_run)[:, None]")
    em.emit(f"tl.store(p_{att.out} + {y_at}, out.to(p_{att.out}.dtype.element_ty), "
            "mask=ok_m[:, None] & ok_v[None, :])")


def _out_indices(op: ir.Op, att: Attention) -> tuple[str, ...]:
    return next(st.indices for st in op.statements if st.target == att.out)


def _scale(op: ir.Op, score: ir.Expr) -> ir.Expr | None:
    """c where the score is the contraction times or over c, an expression of dims and
    numbers alone (the same for every program); None otherwise."""
    def dot(x):
        return isinstance(x, ir.Name) and x.name == DOT
    if dot(score):
        return ir.Num(1.0)
    if not (isinstance(score, ir.Binary) and score.op in ("*", "/")):
        return None
    d, c = (score.right, score.left) if score.op == "*" and dot(score.right) else \
        (score.left, score.right)
    if not dot(d) or any(isinstance(n, (ir.Access, ir.Reduce, ir.Scan, ir.Collective)) or (
            isinstance(n, ir.Name) and n.name not in op.dims and n.name not in ("inf", "pi"))
            for n in ir.walk(c)):
        return None
    return c if score.op == "*" else ir.Binary("/", ir.Num(1.0), c)


DOT_HELPER = '''
@triton.jit
def _kd_attn_dot(a, b, acc, F32: tl.constexpr, F32_PREC: tl.constexpr):
    # f32 operands multiply as the genome's F32_DOT says; 16-bit ones on the tensor cores
    if F32:
        acc = tl.dot(a, b, acc, input_precision=F32_PREC)
    else:
        acc = tl.dot(a, b, acc)
    return acc
'''

_LAUNCH = '''
GENOME_FUSED = {genome!r}
F32_PREC = "{prec}"  # how f32 operands multiply in tl.dot
INTERPRETED_PRECS = ("ieee", "tf32", "tf32x3")  # what the Triton interpreter accepts
INDEX64_FROM = 2 ** 31  # elements: a tensor this big gets int64 offsets
D_WHOLE = {whole}  # a head dimension held whole in registers up to this


def _pow2(n):
    return 1 << max(int(n) - 1, 0).bit_length()


def kernel(inputs, outputs, sizes):
{dims}
    n_rows, n_keys, n_dk, n_dv, n_batch = {rows}, {keys}, {dk}, {dv}, {batch}
    if n_rows <= 0 or n_dv <= 0 or n_batch <= 0:
        return
    t = {{name: inputs[name].contiguous() for name in ({ins},)}}
    out = outputs["{out}"]
    dst = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    # tl.dot takes at least 16 along each side: tiles padded (masked) to 16
    one_k = n_dk <= D_WHOLE
    bdk = max(16, _pow2(n_dk)) if one_k else 64
    bdv = max(16, _pow2(n_dv)) if n_dv <= D_WHOLE else 128
    warps = GENOME_FUSED["num_warps"]
    bm = min(GENOME_FUSED["BLOCK_M"], max(16, _pow2(n_rows)))
    bn = min(GENOME_FUSED["BLOCK_N"], max(16, _pow2(n_keys)))
    # at most 128 f32 accumulators (and as many scores) a thread: no tile that must spill
    while bm > 16 and max(bm * bdv, bm * bn) > 4096 * warps:
        bm //= 2
    f32 = t["{q}"].dtype == torch.float32
    prec = F32_PREC
    if dst.device.type == "cpu" and prec not in INTERPRETED_PRECS:
        prec = "tf32x3"  # the interpreter's nearest: f32 either way
    big = max([x.numel() for x in t.values()] + [dst.numel()]) >= INDEX64_FROM
    grid = (triton.cdiv(n_rows, bm) * triton.cdiv(n_dv, bdv) * n_batch,)
    {name}[grid]({args}, {dimargs}, BLOCK_M=bm, BLOCK_N=bn, BLOCK_DK=bdk, BLOCK_DV=bdv,
        ONE_K=one_k, F32=f32, F32_PREC=prec, IDX64=big, num_warps=warps,
        num_stages=GENOME_FUSED["num_stages"])
    if dst is not out:
        out.copy_(dst)
'''


def _launcher(op: ir.Op, att: Attention, g: dict, name: str) -> list[str]:
    ins = [t.name for t in op.inputs]
    batch = " * ".join(f"max({py(att.extents[b])}, 0)" for b in att.batch) or "1"
    args = ", ".join(f't["{t.name}"]' if t.role == "in" else "dst" for t in tensors(op))
    genome = {k: g[k] for k in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")}
    text = _LAUNCH.format(
        genome=genome, prec=g.get("F32_DOT", "ieee"), whole=D_WHOLE,
        dims="\n".join(launcher_head(op)[1:1 + len(op.dims)]),
        rows=py(att.extents[att.row]), keys=py(att.extents[att.key]),
        dk=py(att.extents[att.red]), dv=py(att.extents[att.col]), batch=batch,
        ins=", ".join(f'"{n}"' for n in ins) + ("," if len(ins) == 1 else ""),
        out=att.out, q=att.q.tensor, name=name, args=args,
        dimargs=", ".join(f"d_{d}" for d in op.dims))
    return text.strip("\n").split("\n")
