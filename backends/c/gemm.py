"""A contraction (``contraction.Contraction``) as a cache-blocked, packed GEMM.

The flattened sizes are ``B`` (batch), ``M``, ``N`` and ``K`` (each the product of its
indices' extents). The work is cut in tasks of MC x NC outputs of one batch entry,
spread over the OpenMP threads; when there are too few tasks for the threads and K is
long, K is split too (each split accumulates into a scratch of its own, and a last
pass adds them up). A task walks K in blocks of KC: it packs the A block (MC x KC,
panels of MR rows, interleaved by k) and the B block (KC x NC, panels of NR columns)
into contiguous f32 buffers of its thread, whatever the operands' dtypes, axis orders
and strides, padding the panels' edges with zeros, and runs the micro-kernel on each
MR x NR tile: MR x NR/VW vector accumulators in registers, one broadcast of A and NR/VW
vector loads of B per k, written with GCC vector types so that every step is a fused
multiply-add. Tiles accumulate in the thread's MC x NC f32 block; after the last K
block, the statement's epilogue (everything around the sum, emitted by the same
expression emitter as every statement) turns each accumulator into the output element.
Tasks run along M first, and a thread keeps the B panel of its split (up to a size) for
its next task on the same columns, so a transposed B is not re-packed per M block.

A group of indices that sits in an operand as consecutive axes in the same order (and
with the same extents) is addressed as one flat index; otherwise each index is
computed from the flat one, per row or column of a block.

Outputs at most NR / 16 columns wide (a matrix-vector product) would waste most of the
tile, and packing would read A twice: they take the narrow kernel, MR rows and all the
columns at once, each output a dot product along K with a vector accumulator of its own,
the operands read in place. Empty sizes go there too.
"""
from __future__ import annotations

from kdsl import ir

from kdsl.backends.c.code import Block, If, Loop, Style, render_lines
from kdsl.backends.c.contraction import Contraction, flat_run
from kdsl.backends.c.emit import CTYPE, LOAD, C, Var

NARROW_PARALLEL_WORK = 1 << 16  # row blocks x K below which the narrow kernel runs serially
ALIGN = 16  # floats: packed buffers start and end on 64-byte lines
B_PANEL_KEPT = 1 << 20  # floats (4 MiB): the largest B panel a thread keeps between tasks
# the C names of one packed group (made fresh per group: ``kg_<name><n>``)
NAMES = ("B", "M", "N", "K", "mb", "nb", "kb", "tasks", "nth", "ks", "kper", "part", "ap",
         "bp", "cb", "t", "s", "rest", "bb", "m0", "n0", "mc", "nc", "kbeg", "kend", "k0",
         "kc", "jp", "ip", "r", "c", "row", "p0", "ps", "j", "keep", "bsize", "key", "tkey",
         "fresh", "bk", "each", "work")


def vector_width(nr: int) -> int:
    return next(w for w in (16, 8, 4, 1) if nr % w == 0)


def micro_kernel(mr: int, nr: int) -> tuple[str, str]:
    """The name and C text of the MR x NR micro-kernel: c[MR][ldc] (+)= a-panel x b-panel."""
    vw = vector_width(nr)
    nv = nr // vw
    v, vu = f"kd_vf{vw}", f"kd_vf{vw}u"
    name = f"kd_mk_{mr}x{nr}"
    acc = [[f"c{i}_{j}" for j in range(nv)] for i in range(mr)]
    flat = [x for row in acc for x in row]
    lines = [
        f"typedef float {v} __attribute__((vector_size({4 * vw})));",
        f"typedef float {vu} __attribute__((vector_size({4 * vw}), aligned(4)));",
        f"/* c[{mr}][{nr}] at row stride ldc (+)= sum over k of a[k][{mr}] x b[k][{nr}] */",
        f"KD_INLINE void {name}(int64_t kc, const float *restrict a, const float *restrict b,",
        "                      float *restrict c, int64_t ldc, int load) {",
        f"  {v} " + ", ".join(flat) + ";",
        "  if (load) {"]
    lines += [f"    {acc[i][j]} = *(const {vu} *)(c + {i} * ldc + {j * vw});"
              for i in range(mr) for j in range(nv)]
    lines += ["  } else {"]
    lines += [f"    {x} = ({v}){{0}};" for x in flat]
    lines += ["  }",
              "  for (int64_t k = 0; k < kc; ++k) {"]
    lines += [f"    const {v} b{j} = *(const {vu} *)(b + k * {nr} + {j * vw});" for j in range(nv)]
    for i in range(mr):
        lines.append(f"    const float s{i} = a[k * {mr} + {i}];")
        lines.append(f"    const {v} a{i} = {{" + ", ".join([f"s{i}"] * vw) + "};")
        lines += [f"    {acc[i][j]} += a{i} * b{j};" for j in range(nv)]
    lines += ["  }"]
    lines += [f"  *({vu} *)(c + {i} * ldc + {j * vw}) = {acc[i][j]};"
              for i in range(mr) for j in range(nv)]
    lines += ["}"]
    return name, "\n".join(lines) + "\n"


def _outside(e: ir.Expr, red: ir.Reduce) -> set[str]:
    """The names ``e`` reads outside the sum ``red``."""
    if e == red:
        return set()
    if isinstance(e, ir.Name):
        return {e.name}
    return set().union(*(_outside(x, red) for x in ir.operands(e)))


def _round(n: int, to: int) -> int:
    return (n + to - 1) // to * to


class Packed:
    """Mixed into the kernel writer (``render.KernelWriter``): ``packed_group``."""

    # ---- sizes and addresses ----
    def _extent(self, con: Contraction, st: ir.Statement, name: str) -> ir.Expr:
        if name in con.k:
            return next(r.hi for r in con.red.indices if r.name == name)
        return self.op.tensor(st.target).shape[st.indices.index(name)]

    def _total(self, con, st, names) -> str:
        if not names:
            return "INT64_C(1)"
        return "(" + " * ".join(self.dims_c(self._extent(con, st, n)) for n in names) + ")"

    def _collapsible(self, con, st, names, access: ir.Access) -> bool:
        """``names`` are consecutive axes of ``access``'s tensor, in order, with the
        extents of the indices: one flat index addresses them."""
        return flat_run(list(con.names(access)), self.op.tensor(access.tensor).shape, names,
                        lambda n: self._extent(con, st, n))

    def _split(self, con, st, names, flat: str) -> tuple[list[str], dict]:
        """Lines computing each of ``names`` from their flat index, and their C names."""
        if len(names) == 1:
            return [], {names[0]: flat}
        lines, out = [], {}
        rest = self.em.fresh("kg_q")
        lines.append(f"const int64_t {rest} = {flat};")
        for n in reversed(names[1:]):
            ext = self.dims_c(self._extent(con, st, n))
            var = self.em.fresh(f"kg_{n}_")
            out[n] = var
            lines.append(f"const int64_t {var} = {rest} % {ext};")
            nxt = self.em.fresh("kg_q")
            lines.append(f"const int64_t {nxt} = {rest} / {ext};")
            rest = nxt
        out[names[0]] = rest
        return lines, out

    def _address(self, con, st, names, flat: str, access: ir.Access) -> tuple[list[str], dict]:
        """Subscript texts of ``names`` in ``access`` for flat index ``flat`` (and lines)."""
        if self._collapsible(con, st, names, access):
            return [], {n: (flat if n == names[-1] else "0") for n in names}
        return self._split(con, st, names, flat)

    def _offset(self, access: ir.Access, subs: dict, fixed: bool = True) -> str:
        """``subs`` gives each index's text; a fixed coordinate is its own expression, or
        0 without ``fixed`` (an offset from a pointer that holds it already)."""
        return self.offset(access.tensor, [
            subs[s.name] if isinstance(s, ir.Name) and s.name in subs else
            (f"(int64_t)({self.dims_c(s)})" if fixed else "0") for s in access.subscripts], 0)

    # ---- packing ----
    def _pack(self, con, st, access, rows, w: int, origin: str, count: str, dst_base: str,
              batch: dict, k0: str, kc: str) -> Loop:
        """Loops packing ``access`` for rows ``origin .. origin + count`` (indices ``rows``)
        and k in ``k0 .. k0 + kc`` into panels of ``w`` rows, interleaved by k."""
        em = self.em
        p, ii, kk = em.fresh("kg_p"), em.fresh("kg_i"), em.fresh("kg_kk")
        d, h = em.fresh("kg_d"), em.fresh("kg_h")
        panel = Loop(p, "0", count, step=str(w), vector=False)
        panel.body.main += [f"float *restrict {d} = {dst_base} + {p} * {kc};",
                            f"const int64_t {h} = kd_min64({w}, {count} - {p});"]
        row_lines, row_subs = self._address(con, st, rows, f"({origin} + {p} + {ii})", access)
        k_lines, k_subs = self._address(con, st, con.k, f"({k0} + {kk})", access)
        subs = {**batch, **row_subs, **k_subs}
        value = self.load(access.tensor, self._offset(access, subs))
        last = con.names(access)[-1]
        rows_inner = not row_lines and last == rows[-1]  # unit stride along the rows
        if rows_inner:
            outer = Loop(kk, "0", kc, vector=False)
            outer.body.main += k_lines
            copy = Loop(ii, "0", h)
            copy.body.main.append(f"{d}[{kk} * {w} + {ii}] = {value};")
            zero = Loop(ii, h, str(w))
            zero.body.main.append(f"{d}[{kk} * {w} + {ii}] = 0.0f;")
            outer.body.main += [copy, zero]
            panel.body.main.append(outer)
            return panel
        copy = Loop(ii, "0", h, vector=False)
        copy.body.main += row_lines
        inner = Loop(kk, "0", kc, vector=False)
        inner.body.main += k_lines + [f"{d}[{kk} * {w} + {ii}] = {value};"]
        copy.body.main.append(inner)
        zero = Loop(ii, h, str(w), vector=False)
        zfill = Loop(kk, "0", kc, vector=False)
        zfill.body.main.append(f"{d}[{kk} * {w} + {ii}] = 0.0f;")
        zero.body.main.append(zfill)
        panel.body.main += [copy, zero]
        return panel

    # ---- the epilogue ----
    def _finish(self, con, st, stack: list, scope: dict, acc: str) -> None:
        """The statement's value at ``scope`` with the sum read from ``acc``, stored."""
        self.overrides = {self.em.key(con.red, scope): C(acc, "f")}
        v = self.em.emit(st.value, scope, stack)
        self.overrides = {}
        stack[-1].main.append(self.store(st, scope, v))

    def _epilogue(self, con, st, bsubs: dict, axes: list, stack: list, acc: str) -> None:
        """``_finish`` inside the loops over an output block: ``axes`` are (the output
        axes, their flat index, the block whose loop sets it, that loop's depth), each
        axis group's unflattened indices computed at the head of its block."""
        scope = {n: Var(x, 1) for n, x in bsubs.items()}
        for names, flat, block, depth in axes:
            lines, subs = self._stored(con, st, names, flat)
            block.pre += lines
            scope.update({n: Var(x, depth) for n, x in subs.items()})
        self._finish(con, st, stack, scope, acc)

    def _stored(self, con, st, names, flat: str) -> tuple[list[str], dict]:
        """``_split`` for the epilogue: where one flat index addresses ``names`` in the
        output and nothing around the sum reads them, that index alone (no division an
        element)."""
        target = ir.Access(st.target, tuple(ir.Name(i) for i in st.indices))
        if self._collapsible(con, st, names, target) and \
                not _outside(st.value, con.red) & set(names):
            return [], {n: (flat if n == names[-1] else "0") for n in names}
        return self._split(con, st, names, flat)

    # ---- the group ----
    def packed_group(self, g, con: Contraction) -> list[str]:
        """The group's C lines: sizes, then the narrow kernel for outputs narrower than
        the vector tile (and empty sizes), else the schedule, the tasks and the sum of
        the K splits."""
        st, o = g.stmts[0].st, self.opt
        name, text = micro_kernel(o.mr, o.nr)
        self.helpers.setdefault(name, text)
        self.group_p = 0
        self.pre = Block()
        v = {s: self.em.fresh(f"kg_{s}") for s in NAMES}
        head = [f"const int64_t {v[x]} = {self._total(con, st, names)};"
                for x, names in (("B", con.batch), ("M", con.m), ("N", con.n), ("K", con.k))]
        width = max(1, o.nr // 16)
        narrow = f"{v['N']} <= {width} || {v['M']} == 0 || {v['K']} == 0 || {v['B']} == 0"
        style = Style(True, o.simdlen, o.unroll)
        # one narrow kernel per column count, so that no column is computed twice
        narrow_lines = []
        for cols in range(1, width + 1):
            if cols < width:
                narrow_lines.append(f"      {'if' if cols == 1 else '} else if'} "
                                    f"({v['N']} == {cols}) {{")
            elif width > 1:
                narrow_lines.append("      } else {")
            self.pre = Block()
            lines = self._narrow(con, st, v, cols, style)
            narrow_lines += ["  " + line for line in lines] if width > 1 else lines
        if width > 1:
            narrow_lines.append("      }")
        self.pre = Block()
        task = self._task(con, st, v, name)
        combine = self._combine(con, st, v)
        region = [f"float *restrict {v['ap']} = {v['work']} + (int64_t)omp_get_thread_num() * "
                  f"{v['each']};",
                  f"float *restrict {v['cb']} = {v['ap']} + {self._a_floats()};",
                  f"float *restrict {v['bp']} = {v['cb']} + {self._c_floats()};",
                  f"int64_t {v['key']} = -1;", task, combine]
        out = [f"  /* {st.target}: packed GEMM, batch {list(con.batch)}, rows {list(con.m)} of "
               f"{con.a.tensor}, columns {list(con.n)} of {con.b.tensor}, sum over "
               f"{list(con.k)} */", "  {"]
        out += render_lines(head, style, 2)
        out.append(f"    if ({narrow}) {{")
        out += narrow_lines
        out.append("    } else {")
        out += render_lines(self.pre.items() + self._schedule(v), style, 3)
        out.append(f"      #pragma omp parallel{self._threads()} if({v['tasks']} * {v['ks']} > 1)")
        out.append("      {")
        out += render_lines(region, style, 4)
        out.append("      }")
        out += render_lines([f"free({v['work']});", f"free({v['part']});"], style, 3)
        out += ["    }", "  }"]
        return out

    def _a_floats(self) -> int:
        return _round(_round(self.opt.mc, self.opt.mr) * self.opt.kc, ALIGN)

    def _c_floats(self) -> int:
        return _round(_round(self.opt.mc, self.opt.mr) * _round(self.opt.nc, self.opt.nr), ALIGN)

    def _threads(self) -> str:
        return "" if self.opt.threads == "all" else f" num_threads({self.opt.threads})"

    def _narrow(self, con, st, v: dict, cols: int, style: Style) -> list[str]:
        """MR rows and ``cols`` columns at once (column chunks cover the rest when a size
        is empty and N is wide), each output a dot product along K vectorised with its
        own accumulator, the operands read in place (A is streamed once; packing it would
        read it twice and pad the columns to NR)."""
        o, em = self.opt, self.em
        rows = o.mr
        t, k, w, r, n0 = (em.fresh(x) for x in ("kg_t", "kg_k", "kg_w", "kg_r", "kg_n0"))
        m0, h, bb, tasks = (em.fresh(x) for x in ("kg_m0", "kg_h", "kg_bb", "kg_tasks"))
        mb = f"(({v['M']} + {rows - 1}) / {rows})"
        T1, C2 = Block(), Block()
        T1.pre += [f"const int64_t {bb} = {t} / {mb};",
                   f"const int64_t {m0} = ({t} % {mb}) * {rows};",
                   f"const int64_t {h} = kd_min64({rows}, {v['M']} - {m0});"]
        blines, bsubs = self._split(con, st, con.batch, bb) if con.batch else ([], {})
        T1.pre += blines
        zero_k = {n: "0" for n in con.k}
        a_ptr, b_ptr = [], []
        for q in range(rows):  # rows past M read the last row again (never stored)
            lines, subs = self._address(con, st, con.m, f"kd_min64({m0} + {q}, {v['M']} - 1)",
                                        con.a)
            a_ptr.append(em.fresh("kg_a"))
            T1.pre += lines + [f"{self._operand_ptr(con.a)} {a_ptr[-1]} = "
                               f"{self.ptr(con.a.tensor)} + "
                               f"{self._offset(con.a, {**bsubs, **subs, **zero_k})};"]
        for q in range(cols):  # so do columns past N
            lines, subs = self._address(con, st, con.n, f"kd_min64({n0} + {q}, {v['N']} - 1)",
                                        con.b)
            b_ptr.append(em.fresh("kg_b"))
            C2.pre += lines + [f"{self._operand_ptr(con.b)} {b_ptr[-1]} = "
                               f"{self.ptr(con.b.tensor)} + "
                               f"{self._offset(con.b, {**bsubs, **subs, **zero_k})};"]
        acc = [[em.fresh(f"kg_s{q}_{c}_") for c in range(cols)] for q in range(rows)]
        flat = [x for row in acc for x in row]
        C2.main.append("float " + ", ".join(f"{x} = 0.0f" for x in flat) + ";")
        dot = Loop(k, "0", v["K"], reductions=[("+", x) for x in flat])
        va, vb = em.fresh("kg_va"), em.fresh("kg_vb")
        for access, ptrs, stem in ((con.b, b_ptr, vb), (con.a, a_ptr, va)):
            lines, subs = self._address(con, st, con.k, k, access)
            off = self._offset(access, {**{n: "0" for n in con.names(access) if n}, **subs},
                               fixed=False)
            dot.body.main += lines
            for q, p in enumerate(ptrs):
                dot.body.main.append(f"const float {stem}_{q} = "
                                     f"{self._load_at(access.tensor, p, off)};")
        dot.body.main += [f"{acc[q][c]} += {va}_{q} * {vb}_{c};"
                          for q in range(rows) for c in range(cols)]
        C2.main.append(dot)
        grid = em.fresh("kg_acc")
        C2.main.append(f"const float {grid}[{rows}][{cols}] = {{" +
                       ", ".join("{" + ", ".join(row) + "}" for row in acc) + "};")
        W3, R4 = Block(), Block()
        self._epilogue(con, st, bsubs, [(con.n, f"({n0} + {w})", W3, 3),
                                        (con.m, f"({m0} + {r})", R4, 4)],
                       [self.pre, T1, C2, W3, R4], f"{grid}[{r}][{w}]")
        W3.main.append(Loop(r, "0", h, body=R4, vector=False))
        C2.main.append(Loop(w, "0", f"kd_min64({cols}, {v['N']} - {n0})", body=W3,
                            vector=False))
        T1.main.append(Loop(n0, "0", v["N"], step=str(cols), body=C2, vector=False))
        task = Loop(t, "0", tasks, body=T1, vector=False, head=["#pragma omp for schedule(static)"])
        out = render_lines(self.pre.items() + [f"const int64_t {tasks} = {v['B']} * {mb};"],
                           style, 3)
        out.append(f"      #pragma omp parallel{self._threads()} if({tasks} * {v['K']} >= "
                   f"{NARROW_PARALLEL_WORK})")
        out.append("      {")
        out += render_lines([task], style, 4)
        out.append("      }")
        return out

    def _operand_ptr(self, access: ir.Access) -> str:
        return f"const {CTYPE[self.dtype_of(access.tensor)]} *restrict"

    def _load_at(self, tensor: str, ptr: str, off: str) -> str:
        return LOAD[self.dtype_of(tensor)].format(f"{ptr}[{off}]")

    def _schedule(self, v: dict) -> list[str]:
        """Block counts, tasks, the K split and the scratch the splits need."""
        o = self.opt
        ncp = _round(o.nc, o.nr)
        work = f"{v['tasks']} * {v['ks']}"
        rounds = f"(({work} + {v['nth']} - 1) / {v['nth']})"
        lines = [
            f"const int64_t {v['mb']} = ({v['M']} + {o.mc - 1}) / {o.mc};",
            f"const int64_t {v['nb']} = ({v['N']} + {o.nc - 1}) / {o.nc};",
            f"const int64_t {v['kb']} = ({v['K']} + {o.kc - 1}) / {o.kc};",
            f"const int64_t {v['tasks']} = {v['B']} * {v['mb']} * {v['nb']};",
            f"const int64_t {v['nth']} = "
            f"{'omp_get_max_threads()' if o.threads == 'all' else o.threads};",
            f"int64_t {v['ks']} = 1;"]
        if o.split_k == "auto":
            # split K while the tasks would leave threads idle (fewer tasks than threads,
            # or a last round of tasks that keeps less than 4/5 of the threads busy)
            lines.append(f"while ({v['ks']} < {v['kb']} && ({work} < {v['nth']} || "
                         f"5 * {work} < 4 * {v['nth']} * {rounds})) ++{v['ks']};")
        lines += [
            f"const int64_t {v['kper']} = ({v['kb']} + {v['ks']} - 1) / {v['ks']};",
            f"{v['ks']} = ({v['kb']} + {v['kper']} - 1) / {v['kper']};",
            # B packed for a whole split is kept for the thread's next task on the same
            # columns (tasks run along M first), unless that panel would be too large
            f"const int {v['keep']} = {v['kper']} * {o.kc * ncp} <= {B_PANEL_KEPT};",
            f"const int64_t {v['bsize']} = {v['keep']} ? {v['kper']} * {o.kc * ncp} : "
            f"{o.kc * ncp};",
            # one allocation for every thread's buffers (A panel, C block, B panel): the
            # allocator keeps it between calls, where a few per thread would be mapped
            # and faulted in again every time
            f"const int64_t {v['each']} = {self._a_floats()} + {self._c_floats()} + "
            f"{v['bsize']};",
            f"float *restrict {v['work']} = (float *)aligned_alloc(64, sizeof(float) * "
            f"(size_t)({v['nth']} * {v['each']}));",
            f"float *restrict {v['part']} = {v['ks']} > 1 ? (float *)malloc(sizeof(float) * "
            f"(size_t)({v['ks']} * {v['B']} * {v['M']} * {v['N']})) : NULL;"]
        return lines

    def _task(self, con, st, v: dict, micro: str) -> Loop:
        """The loop over tasks (batch entry, M block, N block, K split): pack, multiply,
        then finish the block, or leave a split's share in the scratch."""
        o = self.opt
        ncp = _round(o.nc, o.nr)
        T1 = Block()
        T1.pre += [
            f"const int64_t {v['s']} = {v['t']} % {v['ks']};",
            f"const int64_t {v['rest']} = {v['t']} / {v['ks']};",
            f"const int64_t {v['m0']} = ({v['rest']} % {v['mb']}) * {o.mc};",
            f"const int64_t {v['n0']} = (({v['rest']} / {v['mb']}) % {v['nb']}) * {o.nc};",
            f"const int64_t {v['bb']} = {v['rest']} / ({v['mb']} * {v['nb']});",
            f"const int64_t {v['mc']} = kd_min64({o.mc}, {v['M']} - {v['m0']});",
            f"const int64_t {v['nc']} = kd_min64({o.nc}, {v['N']} - {v['n0']});",
            f"const int64_t {v['kbeg']} = {v['s']} * {v['kper']} * {o.kc};",
            f"const int64_t {v['kend']} = kd_min64({v['K']}, ({v['s']} + 1) * {v['kper']} * "
            f"{o.kc});",
            f"const int64_t {v['tkey']} = {v['rest']} / {v['mb']} * {v['ks']} + {v['s']};",
            f"const int {v['fresh']} = !{v['keep']} || {v['tkey']} != {v['key']};",
            f"{v['key']} = {v['tkey']};"]
        blines, bsubs = self._split(con, st, con.batch, v["bb"]) if con.batch else ([], {})
        T1.pre += blines
        kloop = Loop(v["k0"], v["kbeg"], v["kend"], step=str(o.kc), vector=False)
        kloop.body.main += [
            f"const int64_t {v['kc']} = kd_min64({o.kc}, {v['kend']} - {v['k0']});",
            f"float *restrict {v['bk']} = {v['bp']} + ({v['keep']} ? ({v['k0']} - {v['kbeg']})"
            f" * {ncp} : 0);"]
        pack_b = If(v["fresh"])
        pack_b.then.main.append(self._pack(con, st, con.b, con.n, o.nr, v["n0"], v["nc"],
                                           v["bk"], bsubs, v["k0"], v["kc"]))
        kloop.body.main.append(pack_b)
        kloop.body.main.append(self._pack(con, st, con.a, con.m, o.mr, v["m0"], v["mc"],
                                          v["ap"], bsubs, v["k0"], v["kc"]))
        jp = Loop(v["jp"], "0", v["nc"], step=str(o.nr), vector=False)
        ip = Loop(v["ip"], "0", v["mc"], step=str(o.mr), vector=False)
        ip.body.main.append(f"{micro}({v['kc']}, {v['ap']} + {v['ip']} * {v['kc']}, "
                            f"{v['bk']} + {v['jp']} * {v['kc']}, "
                            f"{v['cb']} + {v['ip']} * {ncp} + {v['jp']}, {ncp}, "
                            f"{v['k0']} != {v['kbeg']});")
        jp.body.main.append(ip)
        kloop.body.main.append(jp)
        T1.main.append(kloop)

        acc = f"{v['cb']}[{v['r']} * {ncp} + {v['c']}]"
        split = If(f"{v['ks']} > 1")
        share = Loop(v["r"], "0", v["mc"], vector=False)
        dst = self.em.fresh("kg_dst")
        share.body.main.append(f"float *restrict {dst} = {v['part']} + (({v['s']} * {v['B']} + "
                               f"{v['bb']}) * {v['M']} + {v['m0']} + {v['r']}) * {v['N']} + "
                               f"{v['n0']};")
        cols = Loop(v["c"], "0", v["nc"])
        cols.body.main.append(f"{dst}[{v['c']}] = {acc};")
        share.body.main.append(cols)
        split.then.main.append(share)
        R2, C3 = Block(), Block()
        self._epilogue(con, st, bsubs, [(con.m, f"({v['m0']} + {v['r']})", R2, 2),
                                        (con.n, f"({v['n0']} + {v['c']})", C3, 3)],
                       [self.pre, T1, R2, C3], acc)
        R2.main.append(Loop(v["c"], "0", v["nc"], body=C3))
        split.orelse.main.append(Loop(v["r"], "0", v["mc"], body=R2, vector=False))
        T1.main.append(split)
        # dynamic: edge tasks are narrower (an N of 741 in blocks of 512), and a thread
        # that shares its core with another process takes fewer of them
        return Loop(v["t"], "0", f"{v['tasks']} * {v['ks']}", body=T1, vector=False,
                    head=["#pragma omp for schedule(dynamic, 1)"])

    def _combine(self, con, st, v: dict) -> If:
        """After the tasks of a split K: each output row's shares added up, then finished."""
        F1, F2 = Block(), Block()
        F1.pre.append(f"float *restrict {v['p0']} = {v['part']} + {v['row']} * {v['N']};")
        more = Loop(v["s"], "1", v["ks"], vector=False)
        more.body.main.append(f"const float *restrict {v['ps']} = {v['part']} + ({v['s']} * "
                              f"{v['B']} * {v['M']} + {v['row']}) * {v['N']};")
        add = Loop(v["j"], "0", v["N"])
        add.body.main.append(f"{v['p0']}[{v['j']}] += {v['ps']}[{v['j']}];")
        more.body.main.append(add)
        F1.pre.append(more)
        bl, bs = self._split(con, st, con.batch, f"({v['row']} / {v['M']})") if con.batch \
            else ([], {})
        ml, ms = self._split(con, st, con.m, f"({v['row']} % {v['M']})")
        nl, ns = self._stored(con, st, con.n, v["c"])
        F1.pre += bl + ml
        F2.pre += nl
        scope = {n: Var(t, 1) for n, t in {**bs, **ms}.items()}
        scope.update({n: Var(t, 2) for n, t in ns.items()})
        self._finish(con, st, [self.pre, F1, F2], scope, f"{v['p0']}[{v['c']}]")
        F1.main.append(Loop(v["c"], "0", v["N"], body=F2))
        final = If(f"{v['ks']} > 1")
        final.then.main.append(Loop(v["row"], "0", f"{v['B']} * {v['M']}", body=F1, vector=False,
                                    head=["#pragma omp for schedule(static)"]))
        return final
