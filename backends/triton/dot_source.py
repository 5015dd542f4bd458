"""Assembling the Triton module for a contraction: one @triton.jit kernel and its launcher.

The kernel is one GEMM tile loop over flattened axes: each program owns a
BLOCK_M x BLOCK_N tile of one batch entry (grouped launch order for L2 reuse),
walks the flattened reduction in BLOCK_K steps with ``tl.dot`` into an fp32
accumulator, applies the epilogue and stores in the output's dtype. Indices
are recovered from the flat lanes by division. Lanes past the end of M or N
wrap around to valid ones (``lane % n``, which keeps their contiguity
provable, unlike a clamp), so loads need no M/N masks and only the store is
masked; K lanes are masked unless the launcher proved the tail empty.

The launcher clamps the genome to what the sizes and the device allow: tiles
no larger than the problem (at least 16, tl.dot's minimum), an accumulator of
at most 128 fp32 values a thread, and pipeline stages that fit shared memory.
"""
from __future__ import annotations

from kdsl import ir

from kdsl.backends.triton import dot_im2col, dot_phases, dot_table
from kdsl.backends.triton.dot_staging import row_dim
from kdsl.backends.triton.dot_expr import HELPERS, Run, TileScope, broadcast_kind, join_by_kind
from kdsl.backends.triton.dot_plan import Axis, Contraction


def split_axes(plan: Contraction, flatten: bool):
    """(batch, m, n) axes; without ``flatten`` only each side's innermost axis is tiled."""
    batch, m, n = list(plan.batch), list(plan.m), list(plan.n)
    if not flatten:
        batch += m[:-1] + n[:-1]
        m, n = m[-1:], n[-1:]
    batch.sort(key=lambda ax: _position(plan, ax))
    return batch, m, n


def _position(plan: Contraction, ax: Axis) -> float:
    for p in plan.pairs:
        if ax.name in (p.row, p.col):
            return plan.lhs.index(p.index) + (0.25 if ax.name == p.row else 0.5)
    return plan.lhs.index(ax.name)


def window_axes(plan: Contraction) -> list[Axis]:
    """The K axes a factor reads together with a tile index (a convolution's taps, in
    ``x[.., o * S + k * D - P]``) or that a guard names, in the reduction's order."""
    tiled = {ax.name for ax in plan.m + plan.n}
    shifted = set()
    for f in (plan.a, plan.b):
        for s in f.subscripts:
            names = {n.name for n in ir.walk(s) if isinstance(n, ir.Name)}
            if names & tiled:
                shifted |= names
    for g in (plan.a_guard, plan.b_guard):
        if g is not None:
            shifted |= {n.name for n in ir.walk(g) if isinstance(n, ir.Name)}
    return [ax for ax in plan.k if ax.name in shifted]


def k_split(plan: Contraction, scalar: int):
    """(scalar K axes, tiled K axes): the first ``scalar`` window axes run as scalars in an
    outer loop (one tap a step: the tile's addresses and bounds are then a row vector plus a
    column vector, not a computation per element); the rest are flattened into BLOCK_K."""
    outer = window_axes(plan)[:max(scalar, 0)]
    return outer, [ax for ax in plan.k if ax not in outer]


def tma_layout(plan: Contraction) -> tuple[str, str] | None:
    """How tensor descriptors would read the two factors: ("mk" | "km", "kn" | "nk"), the
    order of each factor's two subscripts; None unless both are plain 2-D reads (bare axis
    names from 0, no padding) of one M or N axis and one K axis, with no batch or pairs."""
    if plan.batch or plan.pairs or len(plan.m) != 1 or len(plan.n) != 1 or len(plan.k) != 1:
        return None
    k = plan.k[0].name
    out = []
    for f, tile, order in ((plan.a, plan.m[0], ("mk", "km")), (plan.b, plan.n[0], ("nk", "kn"))):
        subs = f.subscripts
        if f.pad is not None or len(subs) != 2 or not all(isinstance(x, ir.Name) for x in subs):
            return None
        if any(ax.lo != ir.Num(0) for ax in (tile, plan.k[0])):
            return None
        names = [x.name for x in subs]
        if names == [tile.name, k]:
            out.append(order[0])
        elif names == [k, tile.name]:
            out.append(order[1])
        else:
            return None
    return out[0], out[1]


def tensors(plan: Contraction) -> list[str]:
    names = [plan.a.tensor, plan.b.tensor]
    names += [n.tensor for n in ir.walk(plan.epilogue) if isinstance(n, ir.Access)]
    names.append(plan.target)
    return list(dict.fromkeys(names))


def render_module(op: ir.Op, plan: Contraction, genome: dict, exact=(), staged=None,
                  unfold=None, rows=None, table=None) -> str:
    """The module; ``exact``: (extent, block) pairs of output axes viewed split in two
    (``lower.groups``), which the launcher checks divide before it trusts the view;
    ``staged``: {input: the permutation of its axes the launcher copies it into}, which
    ``op`` already reads (``dot_staging``); ``unfold``: the windowed factor the launcher
    unfolds (``dot_im2col``), which ``op`` already reads unfolded; ``rows``: {input: its rows'
    own length} for those the launcher aligns (``dot_staging.aligned_op``), which ``op``
    already reads so; ``table``: the K-offset tables (``dot_table``) the K loop reads, the
    whole reduction one flat K axis."""
    batch, m, n = split_axes(plan, bool(genome.get("FLATTEN", 1)))
    name = "kdsl_" + "".join(c if c.isalnum() else "_" for c in op.name)
    helpers: set[str] = set()
    tma = tma_layout(plan)
    k_outer, k_inner = k_split(plan, 0 if table else int(genome.get("K_SCALAR", 0)))
    phases = dot_phases.find(plan, batch, m, n, k_outer) if genome.get("PHASES", 1) else []
    split = int(genome.get("SPLIT_K", 1)) > 1 and splittable(plan, k_outer) and not phases
    body = _kernel_body(op, plan, batch, m, n, helpers, tma, genome.get("F32_DOT", "ieee"),
                        k_outer, k_inner, phases, split, table)
    ptrs = [f"t_{t}" for t in tensors(plan)] + (["t_ws"] if split else []) + \
        (["desc_a", "desc_b"] if tma else []) + (["k_tab"] if table else [])
    dims = [f"d_{d}" for d in op.dims]
    params = ptrs + dims + ["n_b", "n_m", "n_n", "n_k", "n_t", "ph_t"] + (
        ["k_chunk", "n_split", "ws_stride"] if split else []) + (
        ["n_kt"] if table else []) + [
        f"{c}: tl.constexpr" for c in
        ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K", "IDX64", "IEEE", "SHARE",
         "F32_PREC")
        + (("TMA",) if tma else ()) + (("PARTIAL", "COMBINE") if split else ())
        + (("CHECK_A", "CHECK_B") if table else ())]
    sig = _wrap(f"def {name}(", params, "):")
    tabling = dot_table.table_kernel(op, table, name + "_ktab", helpers) if table else ""
    parts = [_HEADER.format(op=op.name) + (_TMA_IMPORT if tma else "")]
    parts += [HELPERS[h] for h in sorted(helpers)]
    parts.append("@triton.jit\n" + sig + "\n" + "\n".join("    " + ln if ln else "" for ln in body))
    if tabling:
        parts.append(tabling)
    unfolding = dot_im2col.launcher_code(unfold, _host) if unfold is not None else ("", "")
    if unfolding[0]:
        parts.append(unfolding[0])
    parts.append(_launcher(op, plan, batch, m, n, name, genome, tma, exact, k_outer, k_inner,
                           phases, staged or {}, unfolding[1], split, rows or {}, table))
    return "\n\n".join(p.rstrip("\n") + "\n" for p in parts)


def _wrap(head: str, items: list[str], tail: str, width: int = 96) -> str:
    lines, cur = [], head
    for i, it in enumerate(items):
        piece = it + (", " if i < len(items) - 1 else "")
        if len(cur) + len(piece) > width:
            lines.append(cur.rstrip())
            cur = " " * 8 + piece
        else:
            cur += piece
    lines.append(cur + tail)
    return "\n".join(lines)


# ---- the kernel ---------------------------------------------------------------

_PROLOGUE = [
    "pid = tl.program_id(0)",
    "tiles_m = tl.cdiv(n_m, BLOCK_M)",
    "tiles_n = tl.cdiv(n_n, BLOCK_N)",
    "pid_b = pid // (tiles_m * tiles_n)",
    "tile = pid % (tiles_m * tiles_n)",
    "# grouped order: GROUP_M row tiles share each column tile while it sits in L2",
    "width = GROUP_M * tiles_n",
    "first_m = (tile // width) * GROUP_M",
    "group_m = tl.minimum(tiles_m - first_m, GROUP_M)",
    "pid_m = first_m + (tile % width) % group_m",
    "pid_n = (tile % width) // group_m",
    "lane_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
    "lane_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
    "if IDX64:",
    "    pid_b = pid_b.to(tl.int64)",
    "    lane_m = lane_m.to(tl.int64)",
    "    lane_n = lane_n.to(tl.int64)",
    "ok_m = lane_m < n_m",
    "ok_n = lane_n < n_n",
    "# wrapped lanes read valid data and keep their contiguity visible to the compiler",
    "flat_m = lane_m % n_m",
    "flat_n = lane_n % n_n",
]
def _dot(f32: str) -> list[str]:
    """The MMA step. f32 operands (IEEE, set by the launcher) multiply as the genome's
    F32_DOT says (the launcher's F32_PREC): 'ieee' (fused multiply-adds, no tensor cores),
    'tf32x3' (three TF32 tensor-core products of the split operands: about f32's accuracy
    at tensor-core speed) or 'bf16x3'; 16-bit operands take the tensor cores as they are."""
    return ["if IEEE:",
            "    acc = tl.dot(x_a, x_b, acc, input_precision=F32_PREC)",
            "else:",
            "    acc = tl.dot(x_a, x_b, acc)"]


def splittable(plan: Contraction, k_outer) -> bool:
    """Can the reduction be split across programs (``SPLIT_K``)? A plain K loop only: no
    taps run as scalars, no gram tile."""
    return not k_outer and not plan.pairs


# split-K: each of n_split programs of a tile reduces one chunk of K into a float32
# partial (PARTIAL), and a second launch of the same kernel sums them and runs the
# epilogue (COMBINE): the epilogue may be any function of the whole sum. The workspace is
# n_split planes of ws_stride (the output's extent) elements; its offsets are int64 where
# the launcher says IDX64 (pid_b and the lanes already are), and COMBINE walks the planes
# by pointer, so no product of a plane's index and its size is taken in int32
_SPLIT_AT = ["pid_s = tl.program_id(1)",
             "if IDX64:",
             "    pid_s = pid_s.to(tl.int64)",
             "ws_at = (pid_b * n_m + flat_m[:, None]) * n_n + flat_n[None, :]"]
_SPLIT_COMBINE = ["if COMBINE:",
                  "    ws_ptr = t_ws + ws_at",
                  "    for s in range(0, n_split):",
                  "        acc += tl.load(ws_ptr)",
                  "        ws_ptr += ws_stride",
                  "else:"]


def _kernel_body(op, plan: Contraction, batch, m, n, helpers, tma=None,
                 f32: str = "ieee", k_outer=(), k_inner=None, phases=(),
                 split: bool = False, table=None) -> list[str]:
    dims = TileScope(op, {}, helpers=helpers)
    body = list(_PROLOGUE)
    body += _decompose("pid_b", batch, dims)
    tiled = dot_phases.tiled(list(phases))
    runs = {"m": _run(m, "flat_m[:, None]", "n_m"), "n": _run(n, "flat_n[None, :]", "n_n")}
    for side, axes in (("m", m), ("n", n)):
        if tiled is None or tiled.side != side:
            body += _decompose(f"flat_{side}", axes, dims)
            continue
        # the tile's lanes walk one stride phase: o = t * S + r, r fixed for the program
        o, extent, s = axes[0].name, dims.idx(axes[0].extent), dims.idx(tiled.s)
        block = "BLOCK_M" if side == "m" else "BLOCK_N"
        # (t clamped to the phase's last valid position, so that o = t * S + r exactly
        # wherever the phase has one; a phase past the end walks no taps)
        body += [f"ph_r = (pid_{side} * {block}) // ph_t",
                 f"i_{o}_t = flat_{side} % ph_t",
                 f"ok_{side} = ok_{side} & (i_{o}_t * {s} + ph_r < {extent})",
                 f"i_{o}_t = tl.minimum(i_{o}_t, tl.maximum(({extent} - 1 - ph_r) // {s}, 0))",
                 f"i_{o} = tl.minimum(i_{o}_t * {s} + ph_r, {extent} - 1)",
                 f"ph_live = ph_r < {extent}"]
        runs[side] = Run((), (), runs[side].flat, runs[side].extent)
    run_m, run_n = runs["m"], runs["n"]
    scalar = {ax.name: f"i_{ax.name}" for ax in batch}
    rows = {ax.name: f"i_{ax.name}[:, None]" for ax in m}
    cols = {ax.name: f"i_{ax.name}[None, :]" for ax in n}
    if table is not None:
        loop = dot_table.k_loop(op, table, batch, m, n, helpers, _dot(f32))
    else:
        loop = _k_loop(op, plan, m, n, scalar, rows, cols, run_m, run_n, helpers, tma, f32,
                       list(k_outer), list(plan.k if k_inner is None else k_inner),
                       list(phases), split)
    out = TileScope(op, {**scalar, **rows, **cols}, helpers=helpers, runs=(run_m, run_n))
    tail = _epilogue(plan, m, n, out)
    if not split:
        return body + loop + tail
    return body + _SPLIT_AT + loop[:1] + _SPLIT_COMBINE + [
        "    " + ln for ln in loop[1:]] + [
        "if PARTIAL:",
        "    tl.store(t_ws + pid_s * ws_stride + ws_at, acc,",
        "             mask=ok_m[:, None] & ok_n[None, :])",
        "else:"] + ["    " + ln for ln in tail]


def _k_loop(op, plan: Contraction, m, n, scalar, rows, cols, run_m, run_n, helpers,
            tma=None, f32: str = "ieee", k_outer=(), k_inner=(), phases=(),
            split: bool = False) -> list[str]:
    taps = {ax.name: f"i_{ax.name}" for ax in k_outer}
    k_cols = {ax.name: f"i_{ax.name}[None, :]" for ax in k_inner}
    k_rows = {ax.name: f"i_{ax.name}[:, None]" for ax in k_inner}
    tiled = dot_phases.tiled(list(phases))
    phase = None
    if tiled is not None:
        bcast = "[:, None]" if tiled.side == "m" else "[None, :]"
        phase = (tiled.out, tiled.s, f"i_{tiled.out}_t{bcast}", "ph_r")
    a_scope = TileScope(op, {**scalar, **rows, **k_cols, **taps}, helpers=helpers,
                        runs=(run_m, _run(k_inner, "lane_k[None, :]", "n_k")), phase=phase)
    b_scope = TileScope(op, {**scalar, **cols, **k_rows, **taps}, helpers=helpers,
                        runs=(run_n, _run(k_inner, "lane_k[:, None]", "n_k")), phase=phase)
    every = plan.batch + plan.m + plan.n + plan.k
    inner = []
    walked = dot_phases.counted_axes(phases, list(k_outer))
    counts = {f"count_{p.tap}": f"count_{p.tap}" for p in phases}
    if k_outer:
        # one flat loop over (tap, K block) pairs keeps a single loop for the pipeliner
        inner += ["tap = step // tiles_k", "k0 = (step % tiles_k) * BLOCK_K"]
        inner += _decompose("tap", walked, TileScope(op, counts, helpers=helpers))
        inner += dot_phases.tap_values(phases)
    inner += ["lane_k = k0 + tl.arange(0, BLOCK_K)", "if IDX64:", "    lane_k = lane_k.to(tl.int64)"]
    inner += _decompose("lane_k", k_inner, TileScope(op, {}, helpers=helpers))
    a_ptr, a_inside, a_pad = _operand(plan.a, a_scope, m, plan.k, ("BLOCK_M", "BLOCK_K"), every)
    b_ptr, b_inside, b_pad = _operand(plan.b, b_scope, plan.k, n, ("BLOCK_K", "BLOCK_N"), every)
    a_guard = _guard(dot_phases.without(plan.a_guard, phases), a_scope)
    b_guard = _guard(dot_phases.without(plan.b_guard, phases), b_scope)
    inner += _loads("a", a_ptr, a_inside, a_pad, "[None, :]", a_guard)
    b_lines = _loads("b", b_ptr, b_inside, b_pad, "[:, None]", b_guard)
    if _self_transposed(plan, m, n):
        # B is A with rows and columns swapped (a gram tile): when one tile covers both,
        # the launcher sets SHARE and the operand is read once
        inner += ["if SHARE:", "    x_b = tl.trans(x_a)", "else:"] + ["    " + ln for ln in b_lines]
    else:
        inner += b_lines
    if tma:
        inner = _tma_loads(*tma) + ["else:"] + ["    " + ln for ln in inner]
    inner += _dot(f32)
    head = ["acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"]
    if phases:
        scope = TileScope(op, {**scalar, **counts}, helpers=helpers)
        head += dot_phases.tap_lines(phases, list(k_outer), scope)
        taps_n = " * ".join(scope.idx(ax.extent) for ax in walked)
        if tiled is not None:
            taps_n = f"tl.where(ph_live, {taps_n}, 0)"
        head += ["tiles_k = tl.cdiv(n_k, BLOCK_K)",
                 f"for step in range(0, {taps_n} * tiles_k):"]
    elif k_outer:
        head += ["tiles_k = tl.cdiv(n_k, BLOCK_K)", "for step in range(0, n_t * tiles_k):"]
    elif split:  # this program's chunk of K (whole blocks: EVEN_K still holds)
        head += ["for k0 in range(pid_s * k_chunk, tl.minimum(pid_s * k_chunk + k_chunk, n_k),"
                 " BLOCK_K):"]
    else:
        head += ["for k0 in range(0, n_k, BLOCK_K):"]
    return head + ["    " + ln for ln in inner]


def _tma_loads(a: str, b: str) -> list[str]:
    """Both tiles by tensor descriptors (the launcher sets TMA): the copy engine zero-fills
    what lies past the tensor's edge, so no lane needs a mask."""
    m0, n0 = "pid_m * BLOCK_M", "pid_n * BLOCK_N"
    return ["if TMA:",
            "    x_a = desc_a.load([%s, k0])" % m0 if a == "mk" else
            "    x_a = tl.trans(desc_a.load([k0, %s]))" % m0,
            "    x_b = desc_b.load([k0, %s])" % n0 if b == "kn" else
            "    x_b = tl.trans(desc_b.load([%s, k0]))" % n0]


def _epilogue(plan: Contraction, m, n, out: TileScope) -> list[str]:
    lines, store_mask = [], ["ok_m[:, None]", "ok_n[None, :]"]
    for p in plan.pairs:
        row, col, size = out.index[p.row], out.index[p.col], out.idx(p.size)
        extent = out.idx(plan.extent_of(p.index))
        lines += [f"# strict upper triangle of the {p.index} tile, row-major",
                  f"i_{p.index} = {row} * (2 * {size} - {row} - 1) // 2 + {col} - {row} - 1",
                  f"tri_{p.index} = ({row} < {col}) & (i_{p.index} < {extent})"]
        out.index.update({p.index: f"i_{p.index}", f"triu_row({p.index})": row,
                          f"triu_col({p.index})": col})
        out.pair_masks[p.index] = f"tri_{p.index}"
        store_mask.append(f"tri_{p.index}")
    value = out.value(plan.epilogue)
    target = ir.Access(plan.target, tuple(ir.Name(i) for i in plan.lhs))
    ptr = f"t_{plan.target} + ({out.offset(target)})"
    spans = set(plan.lhs) | {v for p in plan.pairs for v in (p.row, p.col)}
    if not (spans & {ax.name for ax in m}) or not (spans & {ax.name for ax in n}):
        ptr += " + tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)"  # an output without M or N
    return lines + [
        f"val = {value.code}",
        f"tl.store({ptr}, val.to(t_{plan.target}.dtype.element_ty), "
        f"mask={' & '.join(store_mask)})",
    ]


def _run(axes, flat: str, extent: str) -> Run:
    """The flat lane of a group; only a group whose every index starts at 0 is a plain run."""
    if any(ax.lo != ir.Num(0) for ax in axes):
        return Run((), (), flat, extent)
    return Run(tuple(ax.name for ax in axes), tuple(ax.extent for ax in axes), flat, extent)


def _decompose(flat: str, axes, scope: TileScope) -> list[str]:
    """Row-major unflattening of ``flat`` into one variable per axis, innermost first."""
    if not axes:
        return []
    out, rest = [], flat
    for j, ax in enumerate(reversed(axes)):
        lo = "" if ax.lo == ir.Num(0) else f"{scope.idx(ax.lo)} + "
        if j == len(axes) - 1:
            out.append(f"i_{ax.name} = {lo}{rest}")
            break
        extent = scope.idx(ax.extent)
        out.append(f"i_{ax.name} = {lo}{rest} % {extent}")
        # one name per flat axis: a loop-carried name must keep its shape
        out.append(f"rest_{flat} = {rest} // {extent}")
        rest = f"rest_{flat}"
    return out


def _operand(f: ir.Access, scope: TileScope, rows, cols, shape, every_axis):
    """Pointer tile of a factor, its padding checks and its non-zero pad value (or None)."""
    in_range = {(ax.name, ax.extent) for ax in every_axis if ax.lo == ir.Num(0)}
    ptr = f"t_{f.tensor} + ({scope.offset(f)})"
    used = {n.name for s in f.subscripts for n in ir.walk(s) if isinstance(n, ir.Name)}
    if not (used & {ax.name for ax in rows}) or not (used & {ax.name for ax in cols}):
        ptr += f" + tl.zeros(({shape[0]}, {shape[1]}), dtype=tl.int32)"  # tl.dot needs full tiles
    inside = scope.inside(f, in_range)
    pad = None
    if inside:
        v = scope.value(f.pad)
        pad = None if v.const == 0 else v.code
    return ptr, inside, pad


def _guard(cond: ir.Expr | None, scope: TileScope) -> list[str]:
    """A guarded factor's condition as a tile mask (lanes where it fails read as 0)."""
    if cond is None:
        return []
    v = scope.value(cond)
    if v.const is not None:
        return [] if v.const else ["False"]
    # != 0 also makes a bool of the interpreter's int32 from a 0-d & 2-d inside the guard
    return [f"({v.code} != 0)"]


def _loads(side: str, ptr: str, inside: list[str], pad, k_bcast: str,
           guard: list[str] = ()) -> list[str]:
    """One operand's tile: K's tail masked unless EVEN_K, padded reads checked, a guarded
    factor's failing lanes zero."""
    x, p = f"x_{side}", f"ptr_{side}"
    mask = inside + list(guard)
    tail = f"(lane_k < n_k){k_bcast}"
    even, odd = [_load(x, p, mask)], [_load(x, p, mask + [tail])]
    if pad is not None:  # a non-zero pad value on padded lanes only, never on K's tail
        padded = f"{x} = tl.where({' & '.join(inside)}, {x}, {pad}).to({x}.dtype)"
        even.append(padded)
        odd += [padded, f"{x} = tl.where({tail}, {x}, 0).to({x}.dtype)"]
        if guard:
            zero = f"{x} = tl.where({' & '.join(guard)}, {x}, 0).to({x}.dtype)"
            even.append(zero)
            odd.append(zero)
    return [f"{p} = {ptr}", "if EVEN_K:"] + ["    " + ln for ln in even] + \
        ["else:"] + ["    " + ln for ln in odd]


def _self_transposed(plan: Contraction, m, n) -> bool:
    if plan.a.tensor != plan.b.tensor or plan.a.pad != plan.b.pad or len(m) != len(n) or not m:
        return False
    if any(x.extent != y.extent or x.lo != y.lo for x, y in zip(m, n)):
        return False
    swap = {x.name: ir.Name(y.name) for x, y in zip(m, n)}
    return tuple(_rename(s, swap) for s in plan.a.subscripts) == plan.b.subscripts


def _rename(e: ir.Expr, names: dict[str, ir.Expr]) -> ir.Expr:
    if isinstance(e, ir.Name):
        return names.get(e.name, e)
    if isinstance(e, ir.Binary):
        return ir.Binary(e.op, _rename(e.left, names), _rename(e.right, names))
    if isinstance(e, ir.Unary):
        return ir.Unary(e.op, _rename(e.operand, names))
    return e


def _load(var: str, ptr: str, mask: list[str]) -> str:
    if not mask:
        return f"{var} = tl.load({ptr})"
    code = join_by_kind([(broadcast_kind(t), t) for t in mask], "&")
    if any("[" not in t for t in mask) and any("[" in t for t in mask):
        # a scalar term (a tap's row in range) beside tile terms: the interpreter's & of
        # a 0-d and a 2-d bool gives int32, which its load refuses; != 0 makes it bool
        # again (on a GPU the compare of an i1 with 0 folds away)
        code = f"({code}) != 0"
    return f"{var} = tl.load({ptr}, mask={code}, other=0.0)"


# ---- the launcher ---------------------------------------------------------------

def _host(e: ir.Expr) -> str:
    """A dim expression as Python over ``sizes``."""
    if isinstance(e, ir.Num):
        return str(int(e.value))
    if isinstance(e, ir.Name):
        return f'sizes["{e.name}"]'
    if isinstance(e, ir.Unary) and e.op == "neg":
        return f"(-{_host(e.operand)})"
    if isinstance(e, ir.Binary):
        return f"({_host(e.left)} {e.op} {_host(e.right)})"
    raise AssertionError(f"not a dim expression: {e}")


def _product(axes) -> str:
    return " * ".join(f"max({_host(ax.extent)}, 0)" for ax in axes) or "1"


def _launcher(op, plan: Contraction, batch, m, n, name: str, genome: dict, tma=None,
              exact=(), k_outer=(), k_inner=None, phases=(), staged=None,
              unfolding: str = "", split: bool = False, rows=None, table=None) -> str:
    names = tensors(plan)
    ins = [t for t in names if t != plan.target]
    a, b = plan.a.tensor, plan.b.tensor
    cast = "" if a == b else (
        f'    if t["{a}"].dtype != t["{b}"].dtype:  # tl.dot wants one operand dtype\n'
        f'        t["{a}"], t["{b}"] = t["{a}"].float(), t["{b}"].float()\n')
    keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
    gen = ", ".join(f'"{k}": {int(genome[k])}' for k in keys)
    args = ", ".join(f't["{t}"]' for t in ins) + ", dst" + (", ws" if split else "")
    descs = ""
    if tma:
        gen += f', "TMA": {int(genome.get("TMA", 0))}'
        args += ", *descs"
        descs = _DESCRIPTORS.format(a=a, b=b, la=tma[0], lb=tma[1])
    if split:
        gen += f', "SPLIT_K": {int(genome["SPLIT_K"])}'
    if table:
        args += ", k_tab"
    launch = (_SPLIT_LAUNCH if split else _LAUNCH).format(name=name, args=args)
    return _LAUNCHER.format(
        launch=launch, split_cfg=_SPLIT_CFG if split else "",
        table_cfg=dot_table.configure_code(table, _host, batch + m + n) if table else "",
        table_helpers=dot_table.HELPERS if table else "",
        table_build=dot_table.build_code(table, name + "_ktab") if table else "",
        aligned=_ALIGNED.format(rows=", ".join(f'"{t}": "{row_dim(t)}"' for t in rows))
        if rows else "",
        row_dims=_ROW_DIMS.format(rows="".join(
            f'    sizes["{row_dim(t)}"] = -(-max({_host(ext)}, 1) // 16) * 16\n'
            for t, ext in rows.items())) if rows else "",
        row_sizes="    sizes = _row_dims(sizes)\n" if rows else "",
        genome=gen, name=name, dims=", ".join(f'"{d}"' for d in op.dims),
        n_b=_product(batch), n_m=_product(m), n_n=_product(n),
        n_k=_product(plan.k if k_inner is None else k_inner), n_t=_product(k_outer),
        ins=", ".join(f'"{t}"' for t in ins), target=plan.target, a=a, cast=cast,
        f32=genome.get("F32_DOT", "ieee"),
        args=args, descs=descs, exact="".join(_EXACT.format(
            ext=_host(ext), block=_host(block)) for ext, block in exact)
        + dot_phases.strides_checked(list(phases), _host)
        + unfolding,  # (after the checks: a bad size gets their message, not as_strided's)
        phase=_phase_fit(dot_phases.tiled(list(phases))),
        staged=", ".join(f'"{t}": {tuple(order)}' for t, order in (staged or {}).items()))


_HEADER = '''"""Generated by kdsl (backends/triton/dot.py) for op {op}: a contraction as a tl.dot GEMM."""
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice  # noqa: F401  (pow, when the epilogue needs it)
'''

_TMA_IMPORT = """from triton.tools.tensor_descriptor import TensorDescriptor

# the copy engine (TMA): NVIDIA's from Hopper (sm_90) on, and timed there only. None: ask
# the tensors' device; a static compile for a named target sets it for that target
COPY_ENGINE = None


def _copy_engine(device):
    if COPY_ENGINE is not None:
        return COPY_ENGINE
    if device.type == "cpu":  # the interpreter runs the descriptors on the host
        return True
    if torch.version.hip is not None:
        return False
    if device.type == "cuda" or torch.cuda.is_available():  # meta tensors: this GPU's
        return torch.cuda.get_device_capability(device if device.type == "cuda" else None)[0] >= 9
    return True  # meta tensors on a machine without a GPU: a static compile for sm_90
"""

_LAUNCHER = '''GENOME = {{{genome}}}
SMEM_DEFAULT = 232448  # H100/H200 opt-in shared memory a block; the interpreter's stand-in
F32_PREC = "{f32}"  # how f32 operands multiply in tl.dot
INTERPRETED_PRECS = ("ieee", "tf32", "tf32x3")  # what the Triton interpreter accepts
INDEX64_FROM = 2 ** 31  # elements: a tensor this big gets int64 offsets
WORKSPACE_BYTES = 1 << 30  # at most, for a split reduction's partial sums
DIMS = ({dims},)
# inputs copied, each call, into this order of their axes: the layout the kernel reads
STAGED = {{{staged}}}


def _pow2(n):
    return 1 << max(int(n) - 1, 0).bit_length()
{row_dims}{table_helpers}

def fit(n_m, n_n, n_k, itemsize, smem):
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_stages): the genome clamped to the problem and device."""
    bm = min(GENOME["BLOCK_M"], max(16, _pow2(n_m)))
    bn = min(GENOME["BLOCK_N"], max(16, _pow2(n_n)))
    bk = min(GENOME["BLOCK_K"], max(16, _pow2(n_k)))
    while bm * bn > 4096 * GENOME["num_warps"]:  # at most 128 fp32 accumulators a thread
        if bn >= bm:
            bn //= 2
        else:
            bm //= 2
    stages = GENOME["num_stages"]

    def need(s):
        return s * (bm * bk + bk * bn) * itemsize

    while stages > 1 and need(stages) > smem:
        stages -= 1
    while need(stages) > smem and bk > 16:
        bk //= 2
    while need(stages) > smem and max(bm, bn) > 16:
        if bn >= bm:
            bn //= 2
        else:
            bm //= 2
    return bm, bn, bk, stages


def configure(sizes, itemsize, smem=SMEM_DEFAULT, idx64=False, ieee=False):
    """The launch for ``sizes``: grid, scalar arguments, constexprs and options; None if empty."""
{row_sizes}    n_b, n_m, n_n, n_k, n_t = {n_b}, {n_m}, {n_n}, {n_k}, {n_t}
    if n_b <= 0 or n_m <= 0 or n_n <= 0:
        return None
    bm, bn, bk, stages = fit(n_m, n_n, n_k, itemsize, smem)
{phase}    grid = (n_b * triton.cdiv(n_m, bm) * triton.cdiv(n_n, bn),)
    scalars = [("d_" + d, int(sizes[d])) for d in DIMS]
    scalars += [("n_b", n_b), ("n_m", n_m), ("n_n", n_n), ("n_k", max(n_k, 0)),
                ("n_t", max(n_t, 0)), ("ph_t", ph_t)]
    constexprs = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GENOME["GROUP_M"],
                      F32_PREC=F32_PREC,
                      EVEN_K=n_k % bk == 0, IDX64=idx64, IEEE=ieee,
                      SHARE=n_m == n_n and bm == bn and n_m <= bm)
{split_cfg}{table_cfg}    return dict(grid=grid, scalars=scalars, constexprs=constexprs,
                num_warps=GENOME["num_warps"], num_stages=stages)


def _smem(device):
    if device.type != "cuda":
        return SMEM_DEFAULT
    props = torch.cuda.get_device_properties(device)
    return int(getattr(props, "shared_memory_per_block_optin", 0) or SMEM_DEFAULT)


def kernel(inputs, outputs, sizes):
{exact}    t = {{name: (inputs[name].permute(STAGED[name]) if name in STAGED else inputs[name])
         .contiguous() for name in ({ins},)}}
{aligned}{cast}    out = outputs["{target}"]
    dst = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    big = max([x.numel() for x in t.values()]
              + [dst.numel() * GENOME.get("SPLIT_K", 1)]) >= INDEX64_FROM
    cfg = configure(sizes, t["{a}"].element_size(), _smem(dst.device), big,
                    t["{a}"].dtype == torch.float32)
    if cfg is not None and dst.device.type == "cpu" and F32_PREC not in INTERPRETED_PRECS:
        cfg["constexprs"]["F32_PREC"] = "tf32x3"  # the interpreter's nearest: f32 either way
    if cfg is not None:
{descs}{table_build}{launch}    if dst is not out:
        out.copy_(dst)
'''

# factors whose rows are read through a dim of their own (``dot_staging.aligned_op``): a
# zero-filled copy where a row is not a whole number of 16 elements
_ALIGNED = """    sizes = _row_dims(sizes)
    for name, row in {{{rows}}}.items():
        n = t[name].shape[-1]
        if n != sizes[row]:
            x = torch.zeros(tuple(t[name].shape[:-1]) + (sizes[row],), dtype=t[name].dtype,
                            device=t[name].device)
            x[..., :n] = t[name]
            t[name] = x
"""

# the aligned factors' row lengths: their own, rounded up to a whole number of 16 elements
# (at least one row of 16 where a factor is empty)
_ROW_DIMS = """

def _row_dims(sizes):
    sizes = dict(sizes)
{rows}    return sizes
"""

_LAUNCH = """        {name}[cfg["grid"]]({args}, *[v for _, v in cfg["scalars"]], **cfg["constexprs"],
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
"""

# K split in chunks of whole blocks: at most SPLIT_K of them, none empty, their float32
# partials within WORKSPACE_BYTES (a split pays for small outputs; a large one has tiles)
_SPLIT_CFG = """    n_split = max(1, min(GENOME["SPLIT_K"], triton.cdiv(max(n_k, 1), bk),
                         WORKSPACE_BYTES // max(4 * n_b * n_m * n_n, 1)))
    k_chunk = triton.cdiv(triton.cdiv(max(n_k, 1), n_split), bk) * bk
    n_split = triton.cdiv(max(n_k, 1), k_chunk)
    grid = grid + (n_split,)
    scalars += [("k_chunk", k_chunk), ("n_split", n_split), ("ws_stride", n_b * n_m * n_n)]
    constexprs.update(PARTIAL=n_split > 1, COMBINE=False)
"""

# the partial sums in a float32 workspace, then a launch over the tiles that adds them up
# and runs the epilogue
_SPLIT_LAUNCH = """        sc = dict(cfg["scalars"])
        parts = cfg["grid"][1]
        ws = dst if parts == 1 else torch.empty(parts * sc["n_b"] * sc["n_m"] * sc["n_n"],
                                                dtype=torch.float32, device=dst.device)
        {name}[cfg["grid"]]({args}, *[v for _, v in cfg["scalars"]], **cfg["constexprs"],
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        if parts > 1:
            {name}[cfg["grid"][:1] + (1,)]({args}, *[v for _, v in cfg["scalars"]],
                **dict(cfg["constexprs"], PARTIAL=False, COMBINE=True),
                num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
"""


def _phase_fit(tiled) -> str:
    """Launcher lines: N lanes for a tile axis walked phase by phase, each phase padded to
    whole tiles so that no tile spans two (ph_t lanes a phase)."""
    if tiled is None:
        return "    ph_t = 0\n"
    s, b, n = _host(tiled.s), f"b{tiled.side}", f"n_{tiled.side}"
    return (f"    {b} = min({b}, max(16, _pow2(triton.cdiv({n}, {s}))))  # a phase's extent\n"
            f"    ph_t = triton.cdiv(triton.cdiv({n}, {s}), {b}) * {b}\n"
            f"    {n} = {s} * ph_t\n")


_EXACT = """    if {block} <= 0 or {ext} % {block} != 0:  # the output is viewed split in groups
        raise ValueError("an output axis of %d is not whole groups of %d" % ({ext}, {block}))
"""

# The descriptors of a TMA-capable module (inside kernel(), once cfg is known): each
# factor's block in the order of its subscripts; without the TMA gene, or where the copy
# engine's rules fail (16-byte aligned base and row strides, unit last stride), None and
# TMA=False: the pointer loads.
_DESCRIPTORS = """        bm, bn, bk = (cfg["constexprs"][k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
        blocks = {{"mk": [bm, bk], "km": [bk, bm], "kn": [bk, bn], "nk": [bn, bk]}}
        sc = dict(cfg["scalars"])
        # each factor's extent is the contraction's (a sum may cover part of a tensor's axis):
        # the zero fill must start where the reduction ends, not at the tensor's edge
        extents = {{"m": sc["n_m"], "n": sc["n_n"], "k": sc["n_k"]}}
        pair = [(t["{a}"], "{la}"), (t["{b}"], "{lb}")]
        usable = (GENOME["TMA"] and _copy_engine(t["{a}"].device)
                  and min(extents.values()) > 0 and all(
                      x.data_ptr() % 16 == 0 and x.stride(-1) == 1
                      and all(st * x.element_size() % 16 == 0 for st in x.stride()[:-1])
                      for x, _ in pair))
        descs = [TensorDescriptor(x, [extents[c] for c in order], list(x.stride()), blocks[order])
                 if usable else None for x, order in pair]
        cfg["constexprs"]["TMA"] = bool(usable)
"""
