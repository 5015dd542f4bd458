"""A sum over a one-hot indicator (``lower.scatter``) as Triton atomic adds.

``T[.., e, ..] += value`` for each tuple of the scatter's loops where every key is in
its range: the loops (outer, summed, inner: inner fastest) are flattened into one index,
``BLOCK`` tuples a program, each lane's key and value computed from its decoded indices,
and added into a zeroed accumulator with ``tl.atomic_add``: float64 for a float sum,
int64 for an integer one (atomics add in no fixed order; a float64 total of float32
terms in any order rounds once, to T's type), then a second kernel converts the
accumulator into T, writing every element of it.

The dense lowering reads every tuple once for each value of the keyed indices (N x C
for a histogram of C bins); this reads each once. Where the keyed extent is small the
dense form wins (a few bins: each takes every atomic add of its tuples in turn, while
the dense programs read the keys from cache), so ``backend._lowered`` takes this form
only from ``MIN_KEYS`` keyed elements at the bench point.

Only loops whose ranges are sizes of the dims (not of another index: a jagged segment's
range) are flattened here; the dense lowering keeps the others.
"""
from __future__ import annotations

from kdsl import ir

from kdsl.backends.base import Unsupported
from kdsl.backends.lower.scatter import Scatter, kind
from kdsl.backends.triton.expr import Emitter, ExprGen, Val
from kdsl.backends.triton.kernel import (dispatch, dtype_suffixes, launcher_head, params, py,
                                         tensors)

# keyed elements (the product of the keyed indices' extents at the bench point) from
# which a sum over an indicator is scattered rather than computed densely. Not measured
# on a GPU yet: at C keys the dense form reads the tuples C times (from cache past the
# first), the scatter once with N / C atomic adds queued on each element
MIN_KEYS = 64
BLOCKS = (128, 256, 512, 1024, 2048)
WARPS = (1, 2, 4, 8)
CONVERT_BLOCK = 1024


def flattenable(op: ir.Op, sc: Scatter) -> bool:
    """Whether every loop's range is a size expression of the dims alone."""
    for r in sc.loops:
        for end in (r.lo, r.hi):
            if any(isinstance(n, ir.Name) and n.name not in op.dims for n in ir.walk(end)) \
                    or any(isinstance(n, (ir.Access, ir.Reduce)) for n in ir.walk(end)):
                return False
            try:
                py(end)
            except ValueError:
                return False
    return True


def keyed_extent(op: ir.Op, sc: Scatter, sizes: dict) -> int:
    from kdsl.sizes import NotASize, evaluate
    shape = op.tensor(sc.target).shape
    n = 1
    for keyed, d in zip(sc.keyed, shape):
        if keyed:
            try:
                n *= max(evaluate(d, sizes), 1)
            except (NotASize, KeyError):
                return 0
    return n


def genes_and_defaults(op: ir.Op, sc: Scatter, bench: dict):
    from kdsl.backends.base import Gene
    genes = [Gene("BLOCK", BLOCKS, True, "tuples of the loops a program adds"),
             Gene("num_warps", WARPS, True)]
    return genes, {"BLOCK": 1024, "num_warps": 4}


def render(op: ir.Op, sc: Scatter, genome: dict, name: str):
    """(kernels, helpers, launcher lines) of a one-statement op whose statement is ``sc``."""
    if not flattenable(op, sc):
        raise Unsupported("a scatter over a range of another index")
    wide = "tl.float64" if kind(op, sc.reduce) == "float" else "tl.int64"
    kernels, helpers = [], set()
    for dtype, suffix in dtype_suffixes(op):
        body, needs = _body(op, sc, dtype, wide)
        helpers |= needs
        sig = params(op, ["BLOCK"]).replace(", BLOCK: tl.constexpr",
                                              ", p_kd_acc, BLOCK: tl.constexpr")
        kernels.append("\n".join(["@triton.jit", f"def {name}{suffix}({sig}):"] + body))
    kernels.append("\n".join([
        "@triton.jit",
        f"def {name}_store(p_kd_acc, p_out, n, BLOCK: tl.constexpr):",
        "    f = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
        "    m = f < n",
        "    v = tl.load(p_kd_acc + f, mask=m, other=0)",
        "    tl.store(p_out + f, v.to(p_out.dtype.element_ty), mask=m)"]))
    total = " * ".join(f"max({py(r.hi)} - {py(r.lo)}, 0)" for r in sc.loops) or "1"
    size = " * ".join(f"max({py(d)}, 0)" for d in op.tensor(sc.target).shape) or "1"
    block, warps = int(genome.get("BLOCK", 1024)), int(genome.get("num_warps", 4))
    names = [f"{name}{s}" for _, s in dtype_suffixes(op)]
    acc_dtype = "torch.float64" if wide == "tl.float64" else "torch.int64"
    lines = launcher_head(op) + dispatch(op) + [
        f"    out = outputs['{sc.target}']",
        f"    size = {size}",
        f"    acc = torch.zeros((max(size, 1),), device=out.device, dtype={acc_dtype})",
        f"    n = triton.cdiv({total}, {block})",
        "    if n > 0:",
        f"        ({', '.join(names)},)[variant][(n,)](*args, acc, BLOCK={block}, "
        f"num_warps={warps})",
        "    if size > 0:",
        f"        {name}_store[(triton.cdiv(size, {CONVERT_BLOCK}),)](acc, out, size, "
        f"BLOCK={CONVERT_BLOCK}, num_warps=4)"]
    return kernels, helpers, lines


def _body(op: ir.Op, sc: Scatter, dtype: str, wide: str) -> tuple[list[str], set]:
    em = Emitter()
    gen = ExprGen(em, op, {}, {}, dtype)
    lanes = frozenset("C")
    em.emit("f = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)[None, :]")
    total = " * ".join(f"({gen.size(r.hi)} - ({gen.size(r.lo)}))" for r in sc.loops) or "1"
    em.emit(f"m = f < ({total})")
    gen.masks["C"] = Val("m", "bool", lanes)
    em.emit("rest = f")
    for k, r in reversed(list(enumerate(sc.loops))):
        ext = f"({gen.size(r.hi)} - ({gen.size(r.lo)}))"
        var = f"l{k}"
        if k:
            em.emit(f"{var} = {gen.size(r.lo)} + rest % {ext}")
            em.emit(f"rest = rest // {ext}")
        else:
            em.emit(f"{var} = {gen.size(r.lo)} + rest")
        gen.env[r.name] = Val(var, "int", lanes)
    shape = op.tensor(sc.target).shape
    subs, inside = [], ["m"]
    for key, keyed, d in zip(sc.keys, sc.keyed, shape):
        v = gen.to_int(gen(key))
        if keyed:
            inside.append(f"({v.code} >= 0) & ({v.code} < {gen.size(d)})")
        subs.append(v if v.axes else Val(f"({v.code} + tl.zeros([1, BLOCK], tl.int64))",
                                         "int", lanes))
    value = gen(sc.value)
    value = gen.to_float(value) if wide == "tl.float64" else gen.to_int(value)
    addr, _ = gen.address(sc.target, subs)
    em.emit(f"ok = {' & '.join(inside)}")
    if value.plain:  # a constant (a count's 1)
        code = f"tl.full([1, BLOCK], {value.code}, {wide})"
    else:
        code = f"{value.code}.to({wide})"
        if not value.axes:
            code = f"({code} + tl.zeros([1, BLOCK], {wide}))"
    em.emit(f"tl.atomic_add(p_kd_acc + {addr}, {code}, mask=ok)")
    return em.lines, em.helpers
