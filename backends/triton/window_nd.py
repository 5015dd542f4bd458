"""Window reductions over any number of window dims (pooling) read by output tiles: the
``tiles`` strategy.

An op whose one reduction reads one input at subscripts ``o * S + k * D + c`` (an output
axis ``o``, a window index ``k``, any names, any order of terms, any positions) is
pooling of any dimensionality. Read by the generic row kernel it was one program per
output row of up to 64 lanes, every tap's window index decoded from one flattened column
by division and modulo, its address built in int64 per element: on an H200 3-d max
pooling ran at 37.7 ms against torch.compile's 5.5.

Here a program owns a 2-d tile of outputs, ``[BLOCK_R, BLOCK_C]``, over the two output
axes that the read's last two axis subscripts follow (the innermost one contiguous in
memory), every other output axis one value a program, decoded from the program id once.
The taps are nested loops, one per window dim, outermost first: unrolled
(``tl.static_range``) when the window is small, since every tap's load is then in
flight at once. A window dim's extent, stride, dilation and offset are compile-time
constants (``WK<p>``, ``WS<p>``, ``WD<p>``, ``WO<p>``, ``p`` the subscript's position):
one compile per distinct window, as the 1-d ``phases`` strategy does. Per program: a
scalar int64 base pointer and an int32 tile of offsets (int64 where a tensor holds
2**30 elements or more: the ``BIG`` constant); per tap a scalar pointer step and, with
padding, a bound check per tap-row ([BLOCK_R, 1] or [1, BLOCK_C]), so an output's tap
costs a mask AND, a load and the combine.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdsl import ir

from kdsl.backends.triton.expr import Emitter, ExprGen, Val, tensor_kind
from kdsl.backends.triton.kernel import (TILE_CAP, dispatch, divisor_dims, dtype_suffixes,
                                         launcher_head, py, tensors)
from kdsl.backends.triton.plan import Plan, flat_extent
from kdsl.backends.triton.window import IDENT, REDUCERS, _affine, _mentions, _replace, window_of

STRATEGY = "tiles"
# every tap unrolled while the window has at most this many; past it the innermost
# window dim alone while it has at most INNER_UNROLL, else no loop unrolled
UNROLL_TAPS = 64
INNER_UNROLL = 16
# at most this many outputs a thread: unrolled taps multiply a thread's loads in flight
THREAD_OUTPUTS = 32
WIN = "__win"


@dataclass(frozen=True)
class Sub:
    """One subscript of the windowed read: ``out * stride + k * dil + offset`` where
    ``out`` is an output axis and ``k`` (optional) a window index, or any expression of
    other axes (``out`` None)."""
    expr: ir.Expr
    out: str | None = None
    k: str | None = None
    stride: ir.Expr = ir.Num(1)
    dil: ir.Expr = ir.Num(0)
    offset: ir.Expr = ir.Num(0)


@dataclass(frozen=True)
class Tiles:
    """The one reduction of a window op and how its read is tiled."""
    op: str
    tensor: str
    subs: tuple[Sub, ...]
    pads: tuple  # the pads the read is written with (None: unpadded)
    ranges: tuple[tuple[str, ir.Expr, ir.Expr], ...]  # (window index, lo, hi)
    tile: tuple[int | None, int]  # subscript positions of the tile's rows and columns

    @property
    def windows(self) -> list[int]:
        """Positions of the subscripts with a window index, outermost first."""
        return [p for p, s in enumerate(self.subs) if s.k is not None]

    def lo(self, k: str) -> ir.Expr:
        return next(lo for name, lo, _ in self.ranges if name == k)

    def extent(self, k: str) -> ir.Expr:
        lo, hi = next((lo, hi) for name, lo, hi in self.ranges if name == k)
        return ir.Binary("-", hi, lo)


def tiles_of(op: ir.Op, plan: Plan) -> Tiles | None:
    """The plan's window reduction, tiled, or None when the op is not one."""
    if plan.kind != "rows" or plan.inner is not None or not plan.static_column \
            or len(plan.row_values) != 1:
        return None
    rv = plan.row_values[0]
    if rv.op not in REDUCERS or not rv.indices or len(rv.indices) != len(rv.ranges):
        return None
    outs = tuple(axis_names(plan))
    ks = tuple(rv.indices)
    reads = [a for a in ir.walk(rv.body) if isinstance(a, ir.Access)]
    windowed = {(a.tensor, a.subscripts) for a in reads
                if any(_mentions(s, ks) and _mentions(s, outs) for s in a.subscripts)}
    if len(windowed) != 1:
        return None
    ((tensor, subscripts),) = windowed
    if op.tensor(tensor).role != "in":
        return None
    pads = tuple(dict.fromkeys(a.pad for a in reads
                               if (a.tensor, a.subscripts) == (tensor, subscripts)))
    subs = tuple(_sub(s, outs, ks) for s in subscripts)

    def elsewhere(p: int, name: str) -> bool:
        return any(_mentions(t, (name,)) for q, t in enumerate(subscripts) if q != p)
    for k in ks:  # each window index in one subscript, as its window term
        holders = [p for p, s in enumerate(subscripts) if _mentions(s, (k,))]
        if len(holders) != 1 or subs[holders[0]].k != k:
            return None
    if any(s.k is not None and elsewhere(p, s.out) for p, s in enumerate(subs)):
        return None
    for s in subs:  # strides, dilations, offsets and ranges: sizes the launcher computes
        for e in (s.stride, s.dil, s.offset) if s.k is not None else ():
            if not _size(e, op.dims):
                return None
    if not all(_size(lo, op.dims) and _size(hi, op.dims) for lo, hi in rv.ranges):
        return None
    axes = [p for p, s in enumerate(subs) if s.out is not None and not elsewhere(p, s.out)]
    tile = ([None] + axes)[-2:]
    return Tiles(rv.op, tensor, subs, pads,
                 tuple((k, lo, hi) for k, (lo, hi) in zip(ks, rv.ranges)), tuple(tile))


def axis_names(plan: Plan) -> list[str]:
    """The output axes, outermost first."""
    return [n for n, _ in plan.scalar_axes] + ([plan.row_axis[0]] if plan.row_axis else [])


def _sub(e: ir.Expr, outs, ks) -> Sub:
    terms = _affine(e, outs + ks)
    if terms is None:
        return Sub(e)
    axes = [n for n in terms if n in outs]
    idx = [n for n in terms if n in ks]
    if len(axes) != 1 or len(idx) > 1 or any(_mentions(v, outs + ks) for v in terms.values()):
        return Sub(e)
    k = idx[0] if idx else None
    return Sub(e, axes[0], k, terms[axes[0]], terms[k] if k else ir.Num(0),
               terms.get(None, ir.Num(0)))


def _size(e: ir.Expr, dims) -> bool:
    """Whether ``e`` is a size expression of the dims alone (the launcher's Python)."""
    if any(isinstance(n, ir.Name) and n.name not in dims for n in ir.walk(e)):
        return False
    try:
        py(e)
        return True
    except ValueError:
        return False


# ---- genes ------------------------------------------------------------------

def preferred(op: ir.Op, plan: Plan, bench: dict, strategies) -> dict | None:
    """The tiles strategy's defaults where it is the op's default: every window op but a
    1-d one that ``window.py`` reads (its ``phases`` strategy ran max_pool1d at 1.01x the
    floor on an H200; a stride wider than the window stays ``unrolled``)."""
    if STRATEGY not in strategies or window_of(plan) is not None:
        return None
    return defaults(plan, tiles_of(op, plan), bench)


def defaults(plan: Plan, win: Tiles, bench: dict) -> dict:
    """A tile of about 1024 outputs on 4 warps (8 a thread), up to 128 wide along the
    contiguous axis when the other tile axis is long, as wide as fits the extents with
    little of the last tile wasted."""
    from kdsl.sizes import NotASize, evaluate
    extents = dict(plan.scalar_axes + ((plan.row_axis,) if plan.row_axis else ()))

    def extent(pos) -> int:
        if pos is None:
            return 1
        try:
            return max(1, evaluate(extents[win.subs[pos].out], bench))
        except (NotASize, KeyError):
            return 64
    long_rows = extent(win.tile[0]) >= 8
    cols = _fit(extent(win.tile[1]), tuple(1 << s for s in range(10, -1, -1)
                                           if not long_rows or 1 << s <= 128))
    rows = _fit(extent(win.tile[0]), tuple(r for r in (64, 32, 16, 8, 4, 2, 1)
                                           if r * cols <= 1024))
    return {"reduce": STRATEGY, "BLOCK_R": rows, "BLOCK_C": cols, "num_warps": 4}


def _fit(extent: int, sizes) -> int:
    """The largest tile (of ``sizes``, largest first) no larger than the extent's next
    power of two whose last tile wastes at most an eighth of the tiles' lanes."""
    top = 1 << (extent - 1).bit_length()
    for s in sizes:
        if s <= top and -(-extent // s) * s * 8 <= extent * 9:
            return s
    return min(sizes[-1], top)


# ---- the kernel -------------------------------------------------------------

def constexprs(win: Tiles) -> list[str]:
    out = ["BLOCK_R", "BLOCK_C", "UNROLL", "BIG"]
    for p in win.windows:
        out += [f"WK{p}", f"WS{p}", f"WD{p}", f"WO{p}"]
    return out


class TileKernel:
    def __init__(self, op: ir.Op, plan: Plan, win: Tiles, name: str, dtype: str,
                 math: str = "libdevice", constant_dims=(), exp: str = "tl"):
        self.op, self.plan, self.win, self.name = op, plan, win, name
        self.constant_dims = constant_dims
        self.em = Emitter()
        self.gen = ExprGen(self.em, op, {}, {}, dtype)
        self.gen.math, self.gen.exp = math, exp
        self.shape = op.tensor(win.tensor).shape
        self.padded = any(p is not None for p in win.pads)
        self.extents = dict(plan.scalar_axes + ((plan.row_axis,) if plan.row_axis else ()))
        self.rv = plan.row_values[0]
        body = self.rv.body
        for j, pad in enumerate(win.pads):
            body = _replace(body, ir.Access(win.tensor, tuple(s.expr for s in win.subs), pad),
                            ir.Name(f"{WIN}{j}"))
        self.body = body
        self.r: dict[int, Val] = {}  # each subscript's index without its window term
        self.masks: dict[int, str] = {}  # each tile subscript's current bound mask

    def source(self) -> str:
        em = self.em
        self.prologue()
        ok = self.base()
        kind = self.kind()
        base = "sum" if self.win.op == "mean" else self.win.op
        dt = self.gen.ct if kind == "float" else "tl.int64"
        em.emit(f"acc = tl.full([BLOCK_R, BLOCK_C], {IDENT[base, kind]}, {dt})")
        inner = self.win.windows[-1]
        modes = (("if UNROLL == 2:", set(self.win.windows)), ("elif UNROLL == 1:", {inner}),
                 ("else:", set()))
        masks = dict(self.masks)
        for header, static in modes:
            with em.block(header):
                self.masks = dict(masks)
                self.nest(0, static, "p_tap", ok, base, kind)
        self.finish(kind)
        return self.signature() + "\n" + "\n".join(em.lines)

    def signature(self) -> str:
        names = [f"p_{t.name}" for t in tensors(self.op)]
        names += [f"d_{d}: tl.constexpr" if d in self.constant_dims else f"d_{d}"
                  for d in self.op.dims]
        names += [f"e_{a}" for a in axis_names(self.plan)]
        names += [f"{c}: tl.constexpr" for c in constexprs(self.win)]
        return f"@triton.jit\ndef {self.name}({', '.join(names)}):"

    # ---- program axes ----
    def prologue(self) -> None:
        """Decode the program id once: the tile's columns fastest, then its rows, then
        every other output axis, innermost first."""
        em, gen, win = self.em, self.gen, self.win
        outs = axis_names(self.plan)
        rows, cols = (None if p is None else win.subs[p].out for p in win.tile)
        em.emit("pid = tl.program_id(0)")
        for axis, block in ((cols, "BLOCK_C"), (rows, "BLOCK_R")):
            if axis is not None:
                tiles = em.let(f"(e_{axis} + {block} - 1) // {block}", "int").code
                em.emit(f"t_{axis} = pid % {tiles}")
                em.emit(f"pid = pid // {tiles}")
        grid = [a for a in outs if a not in (rows, cols)]
        for p in range(len(grid) - 1, -1, -1):
            axis = grid[p]
            if p == 0:
                em.emit(f"a_{axis} = pid")
            else:
                em.emit(f"a_{axis} = pid % e_{axis}")
                em.emit(f"pid = pid // e_{axis}")
            gen.env[axis] = Val(f"a_{axis}", "int")
        for axis, block, lanes, tag in ((rows, "BLOCK_R", "[:, None]", "R"),
                                        (cols, "BLOCK_C", "[None, :]", "C")):
            if axis is not None:
                mask = f"m_{tag.lower()}"
                em.emit(f"a_{axis} = t_{axis} * {block} + tl.arange(0, {block}){lanes}")
                em.emit(f"{mask} = a_{axis} < e_{axis}")
                gen.env[axis] = Val(f"a_{axis}", "int", frozenset(tag))
                gen.masks[tag] = Val(mask, "bool", frozenset(tag))
        for axis in outs:
            gen.extents[axis] = self.extents[axis]
        out_mask = " & ".join(gen.masks[t].code for t in ("R", "C") if t in gen.masks)
        em.emit(f"m_out = {out_mask} & tl.full([BLOCK_R, BLOCK_C], 1, tl.int1)")

    # ---- the windowed read ----
    def stride(self, p: int) -> list[str]:
        """The element stride of subscript ``p`` as factors (none: 1)."""
        return [f"({self.gen.size(d)})" for d in self.shape[p + 1:]]

    def index(self, p: int) -> Val:
        """Subscript ``p`` without its window term: ``out * WS + WO`` of a window dim (its
        offset and the range's start folded into WO), else the subscript itself."""
        s, gen = self.win.subs[p], self.gen
        if s.k is None:
            return gen.to_int(gen(s.expr))
        o = gen.env[s.out]
        return self.em.let(f"{o.code} * WS{p} + WO{p}", "int", o.axes)

    def check(self, code: str, p: int) -> str:
        """``code`` (an index along subscript ``p``) inside the tensor's dim."""
        return f"({code} >= 0) & ({code} < {self.gen.size(self.shape[p])})"

    def checked(self, p: int) -> bool:
        """Whether reads along subscript ``p`` are bound-checked: every subscript of a
        padded read but a program axis over exactly its dim, which is always inside."""
        s = self.win.subs[p]
        return self.padded and (s.k is not None or not (
            isinstance(s.expr, ir.Name) and self.extents.get(s.expr.name) == self.shape[p]))

    def base(self) -> str | None:
        """The scalar base pointer (int64 offsets), the tile's offsets from it, the bound
        masks that do not move with the taps; returns the scalar check, if any."""
        em, win = self.em, self.win
        tile = [p for p in win.tile if p is not None]
        terms, checks = [], []
        for p in range(len(win.subs)):
            if p in tile:
                continue
            v = self.r[p] = self.index(p)
            if v.code != "0":
                first = v.code if v.plain else f"{v.code}.to(tl.int64)"
                terms.append(" * ".join([first] + self.stride(p)))
            if self.checked(p) and win.subs[p].k is None:
                checks.append(self.check(v.code, p))
        em.emit(f"p_tap = p_{win.tensor}" + "".join(f" + {t}" for t in terms))
        ok = None
        if checks:
            ok = "ok0"
            em.emit(f"ok0 = {' & '.join(checks)}")
        narrow, wide = [], []
        for p in tile:
            v = self.r[p] = self.index(p)
            narrow.append(" * ".join([v.code] + self.stride(p)))
            wide.append(" * ".join([f"{v.code}.to(tl.int64)"] + self.stride(p)))
            tag = "R" if p == win.tile[0] else "C"
            if self.checked(p) and win.subs[p].k is None:
                self.masks[p] = em.let(self.check(v.code, p), "bool", v.axes).code
            elif not self.checked(p):  # (lanes past the outputs read nothing)
                self.masks[p] = self.gen.masks[tag].code
        em.emit(f"off = {' + '.join(wide)} if BIG else {' + '.join(narrow)}")
        return ok

    # ---- the taps ----
    def nest(self, level: int, static: set, ptr: str, ok: str | None, base: str,
             kind: str) -> None:
        """The loop over window dim ``level`` and, inside it, the rest: ``ptr`` is the
        scalar pointer of the taps so far, ``ok`` their scalar bound check (None: none)."""
        em, gen, win = self.em, self.gen, self.win
        if level == len(win.windows):
            return self.tap(f"{ptr} + off", ok, base, kind)
        p = win.windows[level]
        s = win.subs[p]
        t = em.name("t")
        loop = f"tl.static_range(WK{p})" if p in static else f"range(WK{p})"
        lo = gen(win.lo(s.k))
        step = " * ".join([f"WD{p}"] + self.stride(p))
        last = level == len(win.windows) - 1 and p in win.tile
        here = em.name("p_tap")
        # the innermost window dim along the tile: one tile of pointers, then a constant
        # step a tap (unrolled: an immediate offset of the load)
        em.emit(f"{here} = {ptr} + off" if last else f"{here} = {ptr}")
        with em.block(f"for {t} in {loop}:"):
            gen.env[s.k] = Val(t if lo.code == "0" else f"({lo.code} + {t})", "int",
                               plain=p in static and lo.plain)
            i = f"({self.r[p].code} + {t} * WD{p})"
            if p in win.tile:
                if self.checked(p):
                    self.masks[p] = em.let(self.check(i, p), "bool", self.r[p].axes).code
                else:
                    self.masks[p] = self.gen.masks["R" if p == win.tile[0] else "C"].code
                if ok is not None:  # the scalar check, folded into a row or column mask
                    self.masks[p] = self.fold(self.masks[p], ok, self.r[p].axes)
                inner = None
            else:
                inner = ok
                if self.checked(p):
                    inner = em.name("ok")
                    em.emit(f"{inner} = {self.check(i, p)}" if ok is None
                            else f"{inner} = {ok} & {self.check(i, p)}")
            if last:
                self.tap(f"{here} + {t} * {step}", inner, base, kind)
            else:
                self.nest(level + 1, static, here, inner, base, kind)
                em.emit(f"{here} += {step}")
        gen.env.pop(s.k, None)

    def tap(self, ptrs: str, ok: str | None, base: str, kind: str) -> None:
        """One tap of every output of the tile: a load, the body, the combine."""
        em, gen, win = self.em, self.gen, self.win
        tile = [p for p in win.tile if p is not None]
        parts = [self.masks[p] for p in tile]
        if ok is not None:
            parts[0] = self.fold(parts[0], ok, self.r[tile[0]].axes)
        mask = "m_out" if parts == [gen.masks[t].code for t in ("R", "C") if t in gen.masks] \
            else em.let(" & ".join(parts), "bool", frozenset("RC")).code
        t_kind = tensor_kind(self.op, win.tensor, gen.dtype)
        pads = [None if p is None else gen(p) for p in win.pads]
        # one constant pad of the tensor's kind (an integer pad of a float tensor too) is
        # the load's own value for masked lanes: no select a tap
        uniform = len(pads) == 1 and pads[0] is not None and pads[0].plain and (
            pads[0].kind == t_kind or (t_kind, pads[0].kind) == ("float", "int"))
        other = (gen.to_float(pads[0]) if t_kind == "float" else pads[0]).code if uniform \
            else "0"
        conv = {"float": f".to({gen.ct})", "int": ".to(tl.int64)", "bool": ""}[t_kind]
        raw = em.let(f"tl.load({ptrs}, mask={mask}, other={other}){conv}", t_kind,
                     frozenset("RC"))
        for j, pad in enumerate(pads):
            if pad is None or uniform:
                gen.env[f"{WIN}{j}"] = raw
            else:
                k, (v, pv) = gen.common(raw, pad)
                gen.env[f"{WIN}{j}"] = em.let(f"tl.where({mask}, {v.code}, {pv.code})", k,
                                              frozenset("RC"))
        v = gen(self.body)
        v = gen.to_float(v) if kind == "float" else (gen.to_int(v) if v.kind == "bool" else v)
        combine = {"max": "tl.maximum(acc, {v})", "min": "tl.minimum(acc, {v})",
                   "sum": "acc + {v}"}[base]
        em.emit("acc = " + combine.format(v=v.code))

    def fold(self, mask: str, ok: str, axes) -> str:
        """``mask`` (a row or column of the tile) and the scalar check ``ok``."""
        # (the interpreter turns a scalar bool & a tensor bool into int32: compared again)
        return self.em.let(f"(({mask}) & {ok}) != 0", "bool", axes).code

    def kind(self) -> str:
        """The accumulator's kind: the body's (an int for a bool), a mean's float."""
        if self.win.op == "mean":
            return "float"
        scratch = Emitter()
        env = dict(self.gen.env)
        g = ExprGen(scratch, self.op, env, dict(self.gen.masks), self.gen.dtype)
        t_kind = tensor_kind(self.op, self.win.tensor, self.gen.dtype)
        for k, _, _ in self.win.ranges:
            env[k] = Val("t", "int")
        for j, pad in enumerate(self.win.pads):
            w = Val("w", t_kind, frozenset("RC"))
            env[f"{WIN}{j}"] = w if pad is None else Val("w", g.common(w, g(pad))[0], w.axes)
        kind = g(self.body).kind
        return "int" if kind == "bool" else kind

    # ---- the outputs ----
    def finish(self, kind: str) -> None:
        gen = self.gen
        value = Val("acc", kind, frozenset("RC"))
        if self.win.op == "mean":
            value = gen.binary("/", value, gen.to_float(gen(flat_extent(self.rv.ranges))))
        gen.env[self.rv.name] = value
        for st in self.plan.stores:
            self.store(st.tensor, st.indices, gen(st.value))

    def store(self, tensor: str, indices, value: Val) -> None:
        """A store at a scalar int64 base plus the tile's int32 offsets."""
        em, gen = self.em, self.gen
        shape = self.op.tensor(tensor).shape
        scalar, narrow, wide = [], [], []
        for p, name in enumerate(indices):
            factors = [f"(e_{indices[q]})" if self.extents.get(indices[q]) == shape[q]
                       else f"({gen.size(shape[q])})" for q in range(p + 1, len(shape))]
            v = gen.env[name]
            if v.axes:
                narrow.append(" * ".join([v.code] + factors))
                wide.append(" * ".join([f"{v.code}.to(tl.int64)"] + factors))
            else:
                scalar.append(" * ".join([f"{v.code}.to(tl.int64)"] + factors))
        em.emit(f"off_{tensor} = {' + '.join(wide)} if BIG else {' + '.join(narrow)}")
        code = value.code if value.plain else f"{value.code}.to(p_{tensor}.dtype.element_ty)"
        if not value.axes:
            code = f"{code} + tl.zeros([BLOCK_R, BLOCK_C], p_{tensor}.dtype.element_ty)"
        addr = "".join(f" + {t}" for t in scalar)
        em.emit(f"tl.store(p_{tensor}{addr} + off_{tensor}, {code}, mask=m_out)")


def render_genome(op: ir.Op, plan: Plan, genome: dict, name: str):
    """(kernels, helpers, launcher lines) of a genome of the tiles strategy."""
    consts = divisor_dims(op) if genome.get("constants") == "divisors" else ()
    return render(op, plan, tiles_of(op, plan), genome, name, genome.get("math", "libdevice"),
                  consts, genome.get("exp", "tl"))


def render(op: ir.Op, plan: Plan, win: Tiles, genome: dict, name: str,
           math: str = "libdevice", constant_dims=(), exp: str = "tl"):
    """(kernels, helpers, launcher lines) of the tiles strategy."""
    kernels, helpers, names = [], set(), []
    for dtype, suffix in dtype_suffixes(op):
        k = TileKernel(op, plan, win, name + suffix, dtype, math, constant_dims, exp)
        kernels.append(k.source())
        helpers |= k.em.helpers
        names.append(name + suffix)
    return kernels, helpers, launcher(op, plan, win, genome, names)


def launcher(op: ir.Op, plan: Plan, win: Tiles, genome: dict, names: list[str]) -> list[str]:
    gr, gc = int(genome.get("BLOCK_R", 16)), int(genome.get("BLOCK_C", 64))
    warps, stages = int(genome.get("num_warps", 4)), int(genome.get("num_stages", 1))
    extents = dict(plan.scalar_axes + ((plan.row_axis,) if plan.row_axis else ()))
    outs = axis_names(plan)
    lines = launcher_head(op) + dispatch(op)
    lines += [f"    e_{a} = max({py(extents[a])}, 0)" for a in outs]
    consts = []
    for p in win.windows:
        s = win.subs[p]
        lines += [f"    WK{p} = max({py(win.extent(s.k))}, 0)",
                  f"    WS{p} = {py(s.stride)}",
                  f"    WD{p} = {py(s.dil)}",
                  f"    WO{p} = {py(s.offset)} + {py(win.lo(s.k))} * WD{p}"]
        consts += [f"WK{p}=WK{p}", f"WS{p}=WS{p}", f"WD{p}=WD{p}", f"WO{p}=WO{p}"]
    taps = " * ".join(f"WK{p}" for p in win.windows)
    inner = win.windows[-1]
    lines.append(f"    UNROLL = 2 if {taps} <= {UNROLL_TAPS} else "
                 f"(1 if WK{inner} <= {INNER_UNROLL} else 0)")
    rows, cols = (None if p is None else win.subs[p].out for p in win.tile)
    cap = min(TILE_CAP, THREAD_OUTPUTS * 32 * warps)
    lines.append(f"    BLOCK_C = max(1, min({min(gc, cap)}, "
                 f"triton.next_power_of_2(max(e_{cols}, 1))))")
    rows_cap = f"triton.next_power_of_2(max(e_{rows}, 1))" if rows else "1"
    lines.append(f"    BLOCK_R = max(1, min({gr}, {rows_cap}, {cap} // BLOCK_C))")
    # every warp with outputs to compute: a small tile takes fewer warps
    lines.append(f"    warps = max(1, min({warps}, BLOCK_R * BLOCK_C // 32))")
    sizes = [" * ".join(f"({py(d)})" for d in op.tensor(t.name).shape) or "1"
             for t in tensors(op)]
    lines.append(f"    BIG = max({', '.join(sizes)}, 0) >= 2 ** 30")
    grid = [f"e_{a}" for a in outs if a not in (rows, cols)]
    grid.append(f"triton.cdiv(e_{cols}, BLOCK_C)")
    if rows:
        grid.append(f"triton.cdiv(e_{rows}, BLOCK_R)")
    lines.append(f"    n = {' * '.join(grid)}")
    lines += ["    if n <= 0:", "        return",
              f"    fn = ({', '.join(names)},)[variant]",
              f"    fn[(n,)](*args, {', '.join(f'e_{a}' for a in outs)}, BLOCK_R=BLOCK_R, "
              f"BLOCK_C=BLOCK_C, UNROLL=UNROLL, BIG=BIG, {', '.join(consts)}, "
              f"num_warps=warps, num_stages={stages})"]
    return lines
