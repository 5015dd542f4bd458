"""Pointwise and row kernels: fused elementwise chains, reductions, segments, scans.

One program owns one tile of rows (``BLOCK_R`` lanes of the row axis, one value
of every scalar axis). Row values (reductions) are computed first, then the
outputs. The column axis is walked in one of three ways (the ``reduce`` gene):

- ``onepass``: the whole column is one register tile of ``next_pow2(extent)``
  lanes; every reduction and output reads the same loads. Only for a static
  column shared by all reductions; wider than ``ONEPASS_MAX`` falls back to looped.
- ``looped``: a loop over ``BLOCK_C`` chunks per pass; a pass computes the row
  values that depend only on earlier passes, then a last pass writes the outputs
  (scans carry their running total from chunk to chunk).
- ``online``: looped, with max+sum(exp(x - max)) (softmax) and mean+variance
  (Welford) fused into one pass each.
- ``cached``: for a segment (a data-dependent column) that reductions read and outputs
  write back: when the segment fits one ``BLOCK_C`` tile it is loaded once and kept in
  registers (one-pass); a longer one takes the looped/online path.
- ``unrolled``: looped over a static column whose extent the launcher passes as the
  constexpr ``NCOL``, so the loop unrolls and every chunk's loads are in flight at once
  (a pooling window of 3 is otherwise three dependent round trips to memory). One
  compile per distinct extent; past ``UNROLL_CHUNKS`` chunks or ``UNROLL_MAX`` values a
  thread it falls back to looped.
- ``phases``: a strided window (pooling) read by stride phases, one vectorized load per
  phase (``triton_window``).

Pointwise ops (no reduction, scan or sort) tile the column across programs.
"""
from __future__ import annotations

from contextlib import contextmanager

from kdsl import ir

from kdsl.backends.base import Unsupported
from kdsl.backends.triton.expr import INT64_MAX, INT64_MIN, Emitter, ExprGen, Val, literal
from kdsl.backends.triton.kernel import (acc_shape, divisor_dims, dtype_suffixes, jit_function, prologue,
                            rows_launcher, store)
from kdsl.backends.triton.plan import Plan, flat_extent
from kdsl.backends.triton.window import render as render_window, window_of

ONEPASS_MAX = 32768
# an unrolled column's chunks all have their loads in flight at once: past UNROLL_CHUNKS
# chunks or UNROLL_MAX values a thread over them the looped fallback runs. cross_entropy's
# 32768 columns unrolled in 32 chunks of 1024, 4 rows a program on one warp (4096 values a
# thread): 5728 spilled registers and 221 s of compile in an H200 search evaluation; in
# static sm_90 compiles on the development VM 8 chunks of 1024 on one warp (256 a thread)
# still spilled, and 512 chunks of 64 on 8 warps did not compile in 400 s
UNROLL_CHUNKS = 8
UNROLL_MAX = 128
IDENT = {("sum", "float"): "0.0", ("sum", "int"): "0", ("prod", "float"): "1.0",
         ("prod", "int"): "1", ("max", "float"): "float('-inf')", ("max", "int"): INT64_MIN,
         ("min", "float"): "float('inf')", ("min", "int"): INT64_MAX}


def strategies(plan: Plan) -> tuple[str, ...]:
    out = ("onepass",) if plan.onepass else ()
    out += ("looped",)
    out += ("online",) if plan.fused else ()
    out += ("cached",) if cacheable(plan) else ()
    out += ("unrolled",) if unrollable(plan) else ()
    return out + (("phases",) if window_of(plan) is not None else ())


def cacheable(plan: Plan) -> bool:
    """A segment shared by every reduction and the written-back inner axis: one load of it
    can serve every pass when it fits a tile."""
    return plan.kind == "rows" and plan.shared_column and not plan.static_column \
        and plan.inner is not None and bool(plan.row_values)


def unrollable(plan: Plan) -> bool:
    """One static column shared by every reduction and no inner axis: its extent can be a
    compile-time constant."""
    return plan.kind == "rows" and plan.static_column and plan.inner is None \
        and bool(plan.row_values)


class RowKernel:
    def __init__(self, op: ir.Op, plan: Plan, strategy: str, name: str, dtype: str,
                 math: str = "libdevice", constant_dims=(), exp: str = "tl",
                 evict: str = "none"):
        self.op, self.plan, self.strategy, self.name, self.dtype = op, plan, strategy, name, dtype
        self.constant_dims = constant_dims
        self.evict = evict
        self.em = Emitter()
        self.gen = ExprGen(self.em, op, {}, {}, dtype)
        self.gen.math, self.gen.exp = math, exp

    # ---- the kernel body ----
    def render(self) -> str:
        plan, em, gen = self.plan, self.em, self.gen
        split = plan.kind == "pointwise" and plan.inner is not None
        prologue(em, gen, plan, split)
        if plan.kind == "pointwise":
            for st in plan.stores:
                store(em, gen, st.tensor, st.indices, gen(st.value))
        elif self.strategy == "onepass":
            self.onepass()
        elif self.strategy == "cached":
            self.cached()
        else:
            self.looped()
        constexprs = ["BLOCK_R", "BLOCK_C"] + (["NCOL"] if self.strategy == "unrolled" else [])
        return jit_function(self.name, self.op, constexprs, em.lines, self.constant_dims)

    def onepass(self) -> None:
        plan, gen = self.plan, self.gen
        ranges = plan.row_values[0].ranges if plan.row_values else (plan.column,)
        with self.column(ranges, looped=False) as (k, mk, count):
            if plan.inner is not None:
                gen.env[plan.inner] = k
            for rv in plan.row_values:
                gen.env[rv.name] = self.reduce_once(rv, mk, count)
            gen.scan = lambda e: self.scan_tile(e, mk)
            for st in plan.stores:
                store(self.em, gen, st.tensor, st.indices, gen(st.value))

    def cached(self) -> None:
        """One-pass when the segment fits a BLOCK_C tile, else the looped (online) passes."""
        em, gen = self.em, self.gen
        lo, hi = gen(self.plan.column[0]), gen(self.plan.column[1])
        n = gen.binary("-", hi, lo)
        longest = f"tl.max({n.code})" if n.axes else n.code
        env, masks = dict(gen.env), dict(gen.masks)
        with em.block(f"if {longest} <= BLOCK_C:"):
            self.onepass()
        gen.env, gen.masks = dict(env), dict(masks)
        with em.block("else:"):
            self.looped(online=bool(self.plan.fused))

    def looped(self, online: bool | None = None) -> None:
        """``online`` fuses max+sum and mean+variance pairs (default: the online strategy)."""
        plan, em, gen = self.plan, self.em, self.gen
        online = self.strategy == "online" if online is None else online
        passes = self.passes(online)
        # evict 'reread' (offered where outputs along the column are written after the
        # reductions, so the write-back reads the column again): the row data the
        # reduction passes read stays in cache (evict_last), and the write-back pass's
        # reads and writes are streamed (evict_first)
        hints = self.evict == "reread" and bool(passes)
        axes = ([plan.row_axis] if plan.row_axis else []) + list(plan.scalar_axes)
        gen.row_names = frozenset(name for name, _ in axes)
        try:
            gen.load_policy = "evict_last" if hints else ""
            for ranges, items in passes:
                accs = [self.init(item) for item in items]
                for k, mk, count in self.chunks(ranges):
                    for item, acc in zip(items, accs):
                        self.update(item, acc, mk)
                for item, acc in zip(items, accs):
                    self.finish(item, acc, count)
            gen.load_policy = gen.store_policy = "evict_first" if hints else ""
            self.write_back()
        finally:
            gen.load_policy = gen.store_policy = ""

    def write_back(self) -> None:
        """The last pass: each output from the row values the passes before computed."""
        plan, em, gen = self.plan, self.em, self.gen
        for st in plan.stores:
            if not st.inner:
                store(em, gen, st.tensor, st.indices, gen(st.value))
        inner = [st for st in plan.stores if st.inner]
        if not inner:
            return
        scans = []
        for st in inner:
            for n in ir.walk(st.value):
                if isinstance(n, ir.Scan) and n not in [s for s, _ in scans]:
                    if any(isinstance(m, ir.Scan) for m in ir.walk(n.body) if m is not n):
                        raise Unsupported("a scan of a scan")
                    kind = self.kind_of(n.body, {plan.inner: Val("j", "int", frozenset("C"))})
                    kind = "int" if kind == "bool" else kind
                    kind = "float" if n.op in FLOAT_SCANS else kind
                    carry = em.name("carry")
                    dt = gen.ct if kind == "float" else "tl.int64"
                    em.emit(f"{carry} = tl.full({acc_shape(plan)}, "
                            f"{scan_identity(n.op, kind)}, {dt})")
                    scans.append((n, carry))
        with self.column((plan.column,), looped=True) as (k, mk, count):
            gen.env[plan.inner] = k
            updates = []
            gen.scan = lambda e: self.scan_chunk(e, mk, dict(scans), updates)
            for st in inner:
                store(em, gen, st.tensor, st.indices, gen(st.value))
            for line in updates:
                em.emit(line)

    # ---- the column ----
    def bounds(self, ranges) -> tuple[Val, Val]:
        """[lo, hi) of a pass: one range, or several walked as one flattened column."""
        if len(ranges) == 1:
            return self.gen(ranges[0][0]), self.gen(ranges[0][1])
        return literal(0), self.gen(flat_extent(ranges))

    @contextmanager
    def column(self, ranges, looped: bool, bounds: tuple[Val, Val] | None = None):
        """Bind the column index (and each reduction index) for one pass over ``ranges``
        (whose ``bounds`` a caller may have emitted already)."""
        em, gen = self.em, self.gen
        lo, hi = bounds or self.bounds(ranges)
        count = _Lazy(lambda: gen.binary("-", hi, lo))  # emitted only if a mean needs it
        vector = bool(lo.axes | hi.axes)
        axes = frozenset("C") | lo.axes | hi.axes
        if not looped:
            k = em.let(f"{lo.code} + tl.arange(0, BLOCK_C)[None, :]", "int", axes, "k")
            mk = em.let(f"{k.code} < {hi.code}", "bool", axes, "mk")
            yield from self._bind(ranges, k, mk, count)
            return
        s = em.name("s")
        if self.strategy == "unrolled" and not vector:
            header, start = f"for {s} in tl.static_range(0, NCOL, BLOCK_C):", f"{lo.code} + {s}"
        elif vector:
            length = em.let(f"tl.max({hi.code} - {lo.code})", "int")
            header, start = f"for {s} in range(0, {length.code}, BLOCK_C):", f"{lo.code} + {s}"
        else:
            header, start = f"for {s} in range({lo.code}, {hi.code}, BLOCK_C):", s
        with em.block(header):
            k = em.let(f"{start} + tl.arange(0, BLOCK_C)[None, :]", "int", axes, "k")
            mk = em.let(f"{k.code} < {hi.code}", "bool", axes, "mk")
            yield from self._bind(ranges, k, mk, count)

    def chunks(self, ranges):
        """A reduction pass over ``ranges``: (k, mk, count) for each loop it emits.

        A static range is read in whole ``BLOCK_C`` chunks with no column mask, then one
        masked tail chunk (empty when the range divides evenly): the mask and its
        selects cost instructions on every element of an issue-bound pass. A segment
        (bounds per row lane) or an unrolled window keeps one masked loop."""
        em, gen = self.em, self.gen
        lo, hi = self.bounds(ranges)
        if self.strategy == "unrolled" or lo.axes or hi.axes:
            with self.column(ranges, looped=True, bounds=(lo, hi)) as chunk:
                yield chunk
            return
        count = _Lazy(lambda: gen.binary("-", hi, lo))
        whole = em.let(f"{lo.code} + ({hi.code} - {lo.code}) // BLOCK_C * BLOCK_C", "int")
        s = em.name("s")
        # a constant all-true mask: the selects on it fold away, and values that do not
        # vary along the chunk still broadcast to its shape
        every = em.let("tl.full([1, BLOCK_C], 1, tl.int1)", "bool", frozenset("C"), "mk")
        with em.block(f"for {s} in range({lo.code}, {whole.code}, BLOCK_C):"):
            k = em.let(f"{s} + tl.arange(0, BLOCK_C)[None, :]", "int", frozenset("C"), "k")
            yield from self._bind(ranges, k, every, count, masked=False)
        k = em.let(f"{whole.code} + tl.arange(0, BLOCK_C)[None, :]", "int", frozenset("C"), "k")
        mk = em.let(f"{k.code} < {hi.code}", "bool", frozenset("C"), "mk")
        yield from self._bind(ranges, k, mk, count)

    def _bind(self, ranges, k: Val, mk: Val, count: "_Lazy", masked: bool = True):
        gen = self.gen
        if masked:
            gen.masks["C"] = mk
        if len(ranges) == 1:
            gen.env["__k0"] = k
        else:  # several reduction indices over one flattened column, last fastest
            stride: Val = literal(1)
            for p in range(len(ranges) - 1, -1, -1):
                lo, hi = gen(ranges[p][0]), gen(ranges[p][1])
                ext = gen.binary("-", hi, lo)
                q = gen.binary("//", k, stride) if stride.code != "1" else k
                gen.env[f"__k{p}"] = gen.binary("+", lo, gen.binary("%", q, ext))
                stride = gen.binary("*", stride, ext)
            gen.flat_column = (k, tuple(ranges))  # reads of the whole tail: no decode
        try:
            yield k, mk, count
        finally:
            gen.masks.pop("C", None)
            gen.flat_column = None

    # ---- reductions ----
    def body(self, e: ir.Expr, op: str) -> Val:
        v = self.gen(e)
        if v.kind == "bool" or (op == "mean" and v.kind == "int"):
            v = self.gen.to_float(v) if op == "mean" else self.gen.to_int(v)
        return v

    def tile_reduce(self, op: str, v: Val, mk: Val) -> Val:
        em = self.em
        base = "sum" if op == "mean" else op
        m = em.let(f"tl.where({mk.code}, {v.code}, {IDENT[base, v.kind]})", v.kind,
                   v.axes | mk.axes)
        if base == "prod":
            em.helpers.add("mul")
            code = f"tl.reduce({m.code}, 1, _kd_mul)[:, None]"
        else:
            code = f"tl.{base}({m.code}, axis=1)[:, None]"
        return em.let(code, v.kind, m.axes - {"C"})

    def arg_partial(self, op: str, v: Val, mk: Val) -> tuple[Val, Val]:
        """(extreme value, lowest index holding it) of a chunk."""
        em, k = self.em, self.gen.env["__k0"]
        base = "max" if op == "argmax" else "min"
        ext = self.tile_reduce(base, v, mk)
        m = em.let(f"tl.where({mk.code}, {v.code}, {IDENT[base, v.kind]})", v.kind,
                   v.axes | mk.axes)
        idx = em.let(f"tl.min(tl.where({m.code} == {ext.code}, {k.code}.to(tl.int64), "
                     f"{INT64_MAX}), axis=1)[:, None]", "int", (m.axes | k.axes) - {"C"})
        return ext, idx

    def reduce_once(self, rv, mk: Val, count: "_Lazy") -> Val:
        v = self.body(rv.body, rv.op)
        if rv.op in ("argmax", "argmin"):
            return self.arg_partial(rv.op, v, mk)[1]
        r = self.tile_reduce(rv.op, v, mk)
        if rv.op == "mean":
            return self.gen.binary("/", r, count())
        return r

    def passes(self, online: bool):
        """[(ranges, items)]: row values grouped by dependency level and range."""
        plan = self.plan
        names = {rv.name: rv for rv in plan.row_values}
        fused = {f.second: f for f in plan.fused} if online else {}
        firsts = {f.first: f for f in fused.values()}
        level: dict[str, int] = {}
        for rv in plan.row_values:
            deps = _reads(rv, names)
            if rv.name in fused:
                deps.discard(fused[rv.name].first)
            level[rv.name] = 1 + max((level[d] for d in deps), default=-1)
            if rv.name in fused:  # the pair runs in the first's pass
                level[rv.name] = level[fused[rv.name].first] = max(
                    level[rv.name], level[fused[rv.name].first])
        groups: dict[tuple, list] = {}
        for rv in plan.row_values:
            if rv.name in fused:
                continue
            item = ("fused", firsts[rv.name]) if rv.name in firsts else ("one", rv)
            groups.setdefault((level[rv.name], rv.ranges), []).append(item)
        return [(key[1], items) for key, items in sorted(groups.items(), key=lambda kv: kv[0][0])]

    def kind_of(self, e: ir.Expr, extra: dict[str, Val]) -> str:
        """The kind of ``e`` without emitting it (a dry run on a scratch emitter)."""
        scratch = Emitter()
        env = dict(self.gen.env)
        env.update(extra)
        env.setdefault("__k0", Val("k", "int", frozenset("C")))
        for n in ir.walk(e):
            if isinstance(n, ir.Name) and n.name.startswith("__k"):
                env.setdefault(n.name, Val("k", "int", frozenset("C")))
        g = ExprGen(scratch, self.op, env, dict(self.gen.masks), self.dtype)
        g.scan = lambda s: Val("c", self.kind_of(s.body, extra), frozenset("C"))
        return g(e).kind

    def init(self, item):
        em, shape, ct = self.em, acc_shape(self.plan), self.gen.ct
        if item[0] == "fused":
            names = [em.name("acc") for _ in range(3)]
            if item[1].pattern == "maxsum":
                em.emit(f"{names[0]} = tl.full({shape}, float('-inf'), {ct})")
                em.emit(f"{names[1]} = tl.zeros({shape}, {ct})")
            else:
                for n in names:
                    em.emit(f"{n} = tl.zeros({shape}, {ct})")
            return names
        rv = item[1]
        kind = self.kind_of(rv.body, {})
        kind = "float" if rv.op == "mean" else ("int" if kind == "bool" else kind)
        dt = ct if kind == "float" else "tl.int64"
        acc = em.name("acc")
        if rv.op in ("argmax", "argmin"):
            base = "max" if rv.op == "argmax" else "min"
            em.emit(f"{acc} = tl.full({shape}, {IDENT[base, kind]}, {dt})")
            em.emit(f"{acc}_i = tl.zeros({shape}, tl.int64) + {self.gen(rv.ranges[0][0]).code}")
            return [acc, f"{acc}_i"]
        em.emit(f"{acc} = tl.full({shape}, {IDENT['sum' if rv.op == 'mean' else rv.op, kind]}, "
                f"{dt})")
        return [acc]

    def update(self, item, acc: list[str], mk: Val) -> None:
        em = self.em
        if item[0] == "fused":
            f = item[1]
            first = next(rv for rv in self.plan.row_values if rv.name == f.first)
            v = self.gen.to_float(self.gen(first.body))
            if f.pattern == "maxsum":
                m, s = acc[0], acc[1]
                x = em.let(f"tl.where({mk.code}, {v.code}, float('-inf'))", "float",
                           v.axes | mk.axes)
                em.emit(f"{m}_n = tl.maximum({m}, tl.max({x.code}, axis=1)[:, None])")
                em.emit(f"{m}_z = tl.where({m}_n == float('-inf'), 0.0, {m}_n)")
                exp = self.gen.exp_of
                em.emit(f"{s} = {s} * {exp(f'{m} - {m}_z')} + "
                        f"tl.sum({exp(f'{x.code} - {m}_z')}, axis=1)[:, None]")
                em.emit(f"{m} = {m}_n")
                return
            n, mean, m2 = acc
            x = em.let(f"tl.where({mk.code}, {v.code}, 0.0)", "float", v.axes | mk.axes)
            em.emit(f"{n}_c = tl.sum(tl.where({mk.code}, 1.0, 0.0), axis=1)[:, None]")
            em.emit(f"{mean}_c = tl.sum({x.code}, axis=1)[:, None] / tl.maximum({n}_c, 1.0)")
            em.emit(f"{m2}_d = tl.where({mk.code}, {x.code} - {mean}_c, 0.0)")
            em.emit(f"{n}_n = {n} + {n}_c")
            em.emit(f"{mean}_w = {n}_c / tl.maximum({n}_n, 1.0)")
            em.emit(f"{mean}_e = {mean}_c - {mean}")
            em.emit(f"{m2} = {m2} + tl.sum({m2}_d * {m2}_d, axis=1)[:, None] + "
                    f"{mean}_e * {mean}_e * {n} * {mean}_w")
            em.emit(f"{mean} = {mean} + {mean}_e * {mean}_w")
            em.emit(f"{n} = {n}_n")
            return
        rv = item[1]
        v = self.body(rv.body, rv.op)
        a = acc[0]
        if rv.op in ("argmax", "argmin"):
            ext, idx = self.arg_partial(rv.op, v, mk)
            better = ">" if rv.op == "argmax" else "<"
            em.emit(f"{a}_u = {ext.code} {better} {a}")
            em.emit(f"{acc[1]} = tl.where({a}_u, {idx.code}, {acc[1]})")
            em.emit(f"{a} = tl.where({a}_u, {ext.code}, {a})")
            return
        part = self.tile_reduce(rv.op, v, mk)
        combine = {"sum": "{a} + {p}", "mean": "{a} + {p}", "prod": "{a} * {p}",
                   "max": "tl.maximum({a}, {p})", "min": "tl.minimum({a}, {p})"}[rv.op]
        em.emit(f"{a} = " + combine.format(a=a, p=part.code))

    def finish(self, item, acc: list[str], count: "_Lazy") -> None:
        gen, axes = self.gen, frozenset("R") if self.plan.row_axis is not None else frozenset()
        if item[0] == "fused":
            f = item[1]
            if f.pattern == "maxsum":
                gen.env[f.first] = Val(acc[0], "float", axes)
                gen.env[f.second] = Val(acc[1], "float", axes)
            else:
                n, mean, m2 = acc
                gen.env[f.first] = self.em.let(f"tl.where({n} > 0, {mean}, float('nan'))",
                                               "float", axes)
                gen.env[f.second] = self.em.let(f"{m2} / {n}", "float", axes)
            return
        rv = item[1]
        kind = self.kind_of(rv.body, {})
        kind = "float" if rv.op == "mean" else ("int" if kind == "bool" else kind)
        if rv.op in ("argmax", "argmin"):
            gen.env[rv.name] = Val(acc[1], "int", axes)
        elif rv.op == "mean":
            gen.env[rv.name] = gen.binary("/", Val(acc[0], "float", axes), count())
        else:
            gen.env[rv.name] = Val(acc[0], kind, axes)

    # ---- scans ----
    def scan_body(self, e: ir.Scan, mk: Val) -> Val:
        v = self.gen(e.body)
        v = self.gen.to_int(v) if v.kind == "bool" else v
        if e.op in FLOAT_SCANS and v.kind != "float":
            v = self.em.let(f"{v.code}.to({self.gen.ct})", "float", v.axes)
        ident = scan_identity(e.op, v.kind)
        return self.em.let(f"tl.where({mk.code}, {v.code}, {ident})", v.kind, v.axes | mk.axes)

    def scan_tile(self, e: ir.Scan, mk: Val) -> Val:
        m = self.scan_body(e, mk)
        if e.op == "cumdecay":
            return self.decayed(e, mk, m)[0]
        return self.em.let(self.scanned(e, m), m.kind, m.axes)

    def decayed(self, e: ir.Scan, mk: Val, m: Val) -> tuple[Val, str, str]:
        """(the decayed scan of tile ``m``, and the names of its pairs' scan): each lane is
        the map y -> a * y + b, a the decay (1 on a masked lane) and b the value, composed
        along the columns; the scan's b is y with nothing before the tile."""
        self.em.helpers.add("decay")
        a = self.em.let(f"tl.broadcast_to(tl.where({mk.code}, {e.factor.value!r}, 1.0)"
                        f".to({self.gen.ct}), {m.code}.shape)", "float", m.axes)
        sa, sb = self.em.name("deca"), self.em.name("decb")
        self.em.emit(f"{sa}, {sb} = tl.associative_scan(({a.code}, {m.code}), 1, _kd_decay)")
        return Val(sb, "float", m.axes), sa, a.code

    def scanned(self, e: ir.Scan, m: Val) -> str:
        """The inclusive scan of tile ``m`` along its columns."""
        if e.op in COMBINES:
            self.em.helpers.add(COMBINES[e.op])
            return f"tl.associative_scan({m.code}, 1, _kd_{COMBINES[e.op]})"
        return f"tl.{e.op}({m.code}, axis=1)"

    def scan_chunk(self, e: ir.Scan, mk: Val, carries: dict, updates: list) -> Val:
        m = self.scan_body(e, mk)
        carry = carries[e]
        if e.op == "cumdecay":  # y = b + a * (the row's y before the chunk)
            y, sa, _ = self.decayed(e, mk, m)
            out = self.em.let(f"({y.code} + {sa} * {carry})", "float", m.axes | {"R"})
            # the next carry is the chunk's last lane (masked lanes are the identity). Not
            # tl.reduce of the pairs: on a GPU it combines out of order, and this combine
            # does not commute
            k = self.gen.env[self.plan.inner]
            updates.append(f"{carry} = tl.sum(tl.where({k.code} == tl.max({k.code}), "
                           f"{out.code}, 0.0), 1)[:, None]")
            return out
        if e.op in LOG_DOMAIN:  # the chunk's total and its running sums, each with the carry
            fn = f"_kd_{COMBINES[e.op]}"
            updates.append(f"{carry} = {fn}({carry}, tl.reduce({m.code}, 1, {fn})[:, None])")
            return self.em.let(f"{fn}({self.scanned(e, m)}, {carry})", m.kind, m.axes | {"R"})
        if e.op in EXTREMES:
            fn = EXTREMES[e.op]
            updates.append(f"{carry} = tl.{fn}imum({carry}, tl.{fn}({m.code}, axis=1)[:, None])")
            return self.em.let(f"tl.{fn}imum({self.scanned(e, m)}, {carry})", m.kind,
                               m.axes | {"R"})
        if e.op == "cumprod":
            self.em.helpers.add("mul")
            updates.append(f"{carry} = {carry} * tl.reduce({m.code}, 1, _kd_mul)[:, None]")
            return self.em.let(f"(tl.cumprod({m.code}, axis=1) * {carry})", m.kind, m.axes | {"R"})
        updates.append(f"{carry} = {carry} + tl.sum({m.code}, axis=1)[:, None]")
        return self.em.let(f"(tl.cumsum({m.code}, axis=1) + {carry})", m.kind, m.axes | {"R"})


# the running extremes: scanned with tl.associative_scan and a combine of kdsl's own
EXTREMES = {"cummax": "max", "cummin": "min"}
# the running log-sum-exp (``numerics.py`` writes it), in floats, with -inf its identity
LOG_DOMAIN = {"logcumsumexp": "logaddexp"}
COMBINES = EXTREMES | LOG_DOMAIN
# scans computed in floats whatever their body's kind (``cumdecay``: y = c * y + x, the
# scan of (c, x) pairs, ``decayed``)
FLOAT_SCANS = set(LOG_DOMAIN) | {"cumdecay"}


def scan_identity(op: str, kind: str) -> str:
    """What a masked-off lane of a scan reads: the identity of its combine."""
    if op in LOG_DOMAIN:
        return "float('-inf')"
    if op in EXTREMES:
        low = op == "cummax"
        if kind == "int":
            return "-9223372036854775807 - 1" if low else "9223372036854775807"
        return "float('-inf')" if low else "float('inf')"
    one = op == "cumprod"
    return ("1" if one else "0") if kind == "int" else ("1.0" if one else "0.0")


class _Lazy:
    """A value emitted the first time it is asked for (in the scope asking)."""

    def __init__(self, make):
        self.make, self.value = make, None

    def __call__(self) -> Val:
        if self.value is None:
            self.value = self.make()
        return self.value


def _reads(rv, names) -> set[str]:
    out = set()
    exprs = [rv.body] + [x for r in rv.ranges for x in r]
    for e in exprs:
        for n in ir.walk(e):
            if isinstance(n, ir.Name) and n.name in names:
                out.add(n.name)
    return out


def render(op: ir.Op, plan: Plan, genome: dict, name: str) -> tuple[list[str], set, list[str]]:
    """(kernels, helpers, launcher lines) for a pointwise or row plan."""
    strategy = genome.get("reduce", "looped") if plan.kind != "pointwise" else "pointwise"
    math, exp = genome.get("math", "libdevice"), genome.get("exp", "tl")
    evict = genome.get("evict", "none")
    consts = divisor_dims(op) if genome.get("constants") == "divisors" else ()
    if strategy == "phases":
        return render_window(op, plan, window_of(plan), genome, name, math, consts, exp)
    fallback = strategy if plan.kind != "pointwise" and strategy in ("onepass", "unrolled") \
        else None
    kernels, helpers, names = [], set(), []
    for dtype, suffix in dtype_suffixes(op):
        k = RowKernel(op, plan, strategy, name + suffix, dtype, math, consts, exp, evict)
        kernels.append(k.render())
        helpers |= k.em.helpers
        names.append(name + suffix)
        if fallback:
            k = RowKernel(op, plan, "online" if plan.fused else "looped",
                          name + suffix + "_looped", dtype, math, consts, exp, evict)
            kernels.append(k.render())
            helpers |= k.em.helpers
    launcher = rows_launcher(op, plan, genome, names, fallback)
    # module-level knobs, so a static compile can reach the fallback
    if fallback == "onepass":
        launcher = [f"ONEPASS_MAX = {ONEPASS_MAX}  # widest one-pass column", ""] + launcher
    elif fallback == "unrolled":
        launcher = [f"UNROLL_CHUNKS = {UNROLL_CHUNKS}  # most chunks of an unrolled column",
                    f"UNROLL_MAX = {UNROLL_MAX}  # most values a thread over its chunks",
                    ""] + launcher
    return kernels, helpers, launcher
