"""Convolutions read from index notation, and their direct (im2col-free) C kernel.

A statement ``T[out..] = sum(red..) X[..] * W[..]`` is a convolution when one factor
(``x``, perhaps inside ``where(guard, x[..] pad(0), 0)``) has *spatial* subscripts, each
with one output index ``o`` and one reduced index ``k`` (a tap):

- plain: ``a*o + b*k + c`` (a stride, a dilation, a padding), or
- guarded: ``(o + b*k + c) // d`` where the guard holds ``(o + b*k + c) % d == 0``
  (a transposed convolution written as a gather: only taps ``k`` with the right
  residue contribute to an output ``o``).

Every other subscript of ``x`` and every subscript of ``w`` is linear in the indices,
the coefficients built from dims. The output's last index must be spatial: the kernel
vectorises along it. The other indices fall into ``m`` (read by ``w`` only: output
channels, blocked in registers), ``batch`` (everything else: batch, group, depthwise
channel) and, among the reduced ones, taps and ``chans`` (summed channels).

An output axis read as ``co // E`` is split into (group, member) first
(``lower.groups.split_groups``), so that a grouped convolution's member index is ``m``;
the kernel iterates groups up to ``ceil(CO / E)`` and checks ``g * E + j < CO`` itself,
so the split needs no divisibility.

The kernel (``Direct.conv_group``):

1. the vector axis's taps are tabled per *phase*: an output ``o = R*q + r`` (``R`` the
   guard's divisor, 1 when plain) reads ``x`` at ``a*q + off(r, k)`` for the taps ``k``
   whose numerator ``a*r + b*k + c`` is divisible by ``R``, so division and modulo leave
   the inner loop and a transposed convolution does only the useful multiply-adds;
2. ``x`` is copied to f32 rows, one per index of its other axes, zero-padded at both ends
   and split into ``a`` phases (element ``u`` of a padded row at ``(u % a) * L + u / a``),
   so that every tap of every phase reads a contiguous vector without a bounds check;
3. ``w`` is repacked to f32 ``[batch of w][m block][chans][taps][COB]``;
4. tasks (batch, outer spatial outputs, phase, a chunk of q tiles) run in parallel; a
   task lists the (x row, w offset) pairs of its channels and outer taps once, checking
   outer bounds and guards there, then for each tile of ``NV`` vectors of ``q`` and each
   block of ``COB`` of ``m`` runs the micro-kernel: ``COB x NV`` vector accumulators, per
   tap ``NV`` vector loads of ``x`` and ``COB`` broadcasts of ``w``.

When a stride or a divisor is below 1 at run time, the statement's plain loop nest runs
instead. Nothing here knows an op's name or a shape.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdsl import ir

from kdsl.backends.c.code import Block, Style, render_lines
from kdsl.backends.c.contraction import _float_tensor, factors
from kdsl.backends.c.emit import LOAD, C, Var
from kdsl.backends.lower.groups import split_groups

ONE, ZERO = ir.Num(1), ir.Num(0)
PARALLEL_COPY = 1 << 15  # elements: below this the copies run on one thread


# ---- linear forms: {index or None (the constant): coefficient built from dims} ----
def _add(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    if a == ZERO:
        return b
    if b == ZERO:
        return a
    return ir.Binary("+", a, b)


def _mul(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    if a == ONE:
        return b
    if b == ONE:
        return a
    if ZERO in (a, b):
        return ZERO
    return ir.Binary("*", a, b)


def _is_dim_expr(e: ir.Expr, dims) -> bool:
    for n in ir.walk(e):
        if isinstance(n, ir.Name) and n.name not in dims:
            return False
        if isinstance(n, ir.Num) and not isinstance(n.value, int):
            return False
        if not isinstance(n, (ir.Name, ir.Num, ir.Binary, ir.Unary)):
            return False
        if isinstance(n, ir.Binary) and n.op not in ("+", "-", "*", "//", "%"):
            return False
        if isinstance(n, ir.Unary) and n.op != "neg":
            return False
    return True


def linear(e: ir.Expr, idx: set, dims) -> dict | None:
    """``e`` as {index: coefficient, None: constant}, or None when it is not linear in
    the indices ``idx`` with coefficients built from dims."""
    if _is_dim_expr(e, dims):
        return {None: e}
    if isinstance(e, ir.Name):
        return {e.name: ONE} if e.name in idx else None
    if isinstance(e, ir.Unary) and e.op == "neg":
        inner = linear(e.operand, idx, dims)
        return None if inner is None else {k: ir.Unary("neg", v) for k, v in inner.items()}
    if isinstance(e, ir.Binary) and e.op in ("+", "-"):
        left, right = linear(e.left, idx, dims), linear(e.right, idx, dims)
        if left is None or right is None:
            return None
        out = dict(left)
        for k, v in right.items():
            v = v if e.op == "+" else ir.Unary("neg", v)
            out[k] = _add(out[k], v) if k in out else v
        return out
    if isinstance(e, ir.Binary) and e.op == "*":
        left, right = linear(e.left, idx, dims), linear(e.right, idx, dims)
        if left is None or right is None:
            return None
        if set(left) == {None}:
            return {k: _mul(left[None], v) for k, v in right.items()}
        if set(right) == {None}:
            return {k: _mul(v, right[None]) for k, v in left.items()}
    return None


# ---- recognition ----
@dataclass(frozen=True)
class Spatial:
    axis: int          # axis of x
    out: str           # output index
    tap: str           # reduced index
    a: ir.Expr         # x index = (a*out + b*tap + c) // div, guarded when div is set
    b: ir.Expr
    c: ir.Expr
    div: ir.Expr | None


@dataclass(frozen=True)
class Conv:
    stmt: ir.Statement              # the statement itself (its epilogue is emitted from it)
    st: ir.Statement                # as analysed (grouped output axes split)
    original: tuple[str, ...]       # the statement's own output indices
    x: ir.Access
    w: ir.Access
    spatial: tuple[Spatial, ...]    # the last is the vector axis
    m: str | None
    batch: tuple[str, ...]
    chans: tuple[str, ...]
    extent: tuple[tuple[str, ir.Expr], ...]        # every index of ``st`` and of the sum
    splits: tuple[tuple[str, str, ir.Expr, ir.Expr], ...]  # (g, j, E, original extent)

    def ext(self, name: str) -> ir.Expr:
        return dict(self.extent)[name]

    @property
    def vec(self) -> Spatial:
        return self.spatial[-1]

    @property
    def outer(self) -> tuple[Spatial, ...]:
        return self.spatial[:-1]


def _conjuncts(e: ir.Expr) -> list[ir.Expr]:
    if isinstance(e, ir.Binary) and e.op == "and":
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]


def _zero(e: ir.Expr | None) -> bool:
    return e is None or (isinstance(e, ir.Num) and e.value == 0)


def _the_sum(e: ir.Expr) -> ir.Reduce | None:
    """The one sum of ``e`` when everything around it is elementwise, else None."""
    nodes = list(ir.walk(e))
    reds = [n for n in nodes if isinstance(n, ir.Reduce)]
    if len(reds) != 1 or reds[0].op != "sum" or \
            any(isinstance(n, (ir.Scan, ir.Collective)) for n in nodes):
        return None
    return reds[0]


def recognise(op: ir.Op, st: ir.Statement) -> Conv | None:
    """The statement as a convolution, or None (see the module doc)."""
    stmt, original = st, st.indices
    splits: list = []
    extents: dict = {}
    target = op.tensor(st.target)
    if _the_sum(st.value) is None or not _whole_ranges(st, target):
        return None
    if len(op.statements) == 1 and target.role == "out":
        split = split_groups(op)
        new = split.op.statements[0]
        pos = 0
        for q, name in enumerate(original):
            if new.indices[pos] == name:
                extents[name] = target.shape[q]
                pos += 1
                continue
            g, j = new.indices[pos], new.indices[pos + 1]
            block = next(b for e, b in split.exact if e == target.shape[q])
            extents[g] = ir.Binary("//", ir.Binary("-", ir.Binary("+", target.shape[q], block),
                                                   ONE), block)
            extents[j] = block
            splits.append((g, j, block, target.shape[q]))
            pos += 2
        st = new
    else:
        extents = dict(zip(st.indices, target.shape))
    red = _the_sum(st.value)
    if not _float_tensor(op, st.target):
        return None
    dims = set(op.dims)
    for r in red.indices:
        if r.lo != ZERO or r.hi is None or not _is_dim_expr(r.hi, dims):
            return None
        extents[r.name] = r.hi
    outs, reds = set(st.indices), {r.name for r in red.indices}
    if outs & reds or len(reds) != len(red.indices):
        return None
    fs = factors(red.body)
    if len(fs) != 2:
        return None
    for xf, w in (fs, fs[::-1]):
        if not (isinstance(w, ir.Access) and w.pad is None):
            continue
        w_names = {n.name for s in w.subscripts for n in ir.walk(s) if isinstance(n, ir.Name)}
        found = _spatial_factor(op, xf, outs - w_names, reds, dims, outs | reds)
        if found is None:
            continue
        x, spatial = found
        if not _float_tensor(op, w.tensor) or op.tensor(w.tensor).role == "out":
            continue
        extents.update({s.tap: ONE for s in spatial if s.tap not in reds})
        return _classify(stmt, st, original, x, w, spatial, outs, reds, dims, extents, splits)
    return None


def _whole_ranges(st: ir.Statement, target: ir.Tensor) -> bool:
    """Every index declared on the left side (an intermediate's output positions,
    ``c[b, co, oh in 0 .. H - K + 1, ...]``) ranges over its whole axis, from 0."""
    return all(r is None or (r.lo == ZERO and r.hi == target.shape[q])
               for q, r in enumerate(st.ranges))


def _spatial_factor(op, f, outs, reds, dims, idx):
    """``f`` as (x, its spatial subscripts), or None; ``outs``: the output indices that
    ``w`` does not read (a spatial one never is)."""
    guard = None
    if isinstance(f, ir.Call) and f.fn == "where" and len(f.args) == 3 and \
            isinstance(f.args[2], ir.Num) and f.args[2].value == 0:
        guard, f = f.args[0], f.args[1]
    if not isinstance(f, ir.Access) or not _zero(f.pad) or not _float_tensor(op, f.tensor) \
            or op.tensor(f.tensor).role == "out":
        return None
    spatial, needed = [], []
    for axis, s in enumerate(f.subscripts):
        div = None
        if isinstance(s, ir.Binary) and s.op == "//" and _is_dim_expr(s.right, dims) \
                and linear(s, idx, dims) is None:
            div, num = s.right, s.left
            needed.append(ir.Binary("==", ir.Binary("%", num, div), ZERO))
        else:
            num = s
        lin = linear(num, idx, dims)
        if lin is None:
            return None
        names = set(lin) - {None}
        o, k = names & outs, names & reds
        if div is not None and not (len(o) == 1 and len(k) == 1 and len(names) == 2):
            return None
        if o and k:
            if len(o) != 1 or len(k) != 1 or len(names) != 2:
                return None
            (o,), (k,) = o, k
            if div is not None and lin[o] != ONE:
                return None
            spatial.append(Spatial(axis, o, k, lin[o], lin[k], lin.get(None, ZERO), div))
        elif o and names == o and len(o) == 1:
            # a spatial axis of kernel size 1 (``od * S - P``): a tap of extent 1
            (o,) = o
            tap = _fresh_name(f"{o}_k", idx | set(dims))
            spatial.append(Spatial(axis, o, tap, lin[o], ZERO, lin.get(None, ZERO), None))
    if not any(s.b != ZERO for s in spatial):
        return None
    conj = _conjuncts(guard) if guard is not None else []
    if sorted(map(repr, conj)) != sorted(map(repr, needed)):
        return None
    return f, spatial


def _fresh_name(name: str, taken: set) -> str:
    while name in taken:
        name += "_"
    return name


def _classify(stmt, st, original, x, w, spatial, outs, reds, dims, extents, splits):
    s_out = [s.out for s in spatial]
    taps = [s.tap for s in spatial]
    if len(set(s_out)) != len(s_out) or len(set(taps)) != len(taps):
        return None
    last = st.indices[-1]
    if last not in s_out:
        return None
    spatial = [s for s in spatial if s.out != last] + [s for s in spatial if s.out == last]
    idx = outs | reds
    w_names = set()
    for s in w.subscripts:
        lin = linear(s, idx, dims)
        if lin is None:
            return None
        w_names |= set(lin) - {None}
    x_plain = set()
    spatial_axes = {s.axis for s in spatial}
    for axis, s in enumerate(x.subscripts):
        if axis not in spatial_axes:
            x_plain |= set(linear(s, idx, dims)) - {None}
    if w_names & set(s_out) or x_plain & (set(s_out) | set(taps)):
        return None
    m = [i for i in st.indices if i in w_names and i not in x_plain and i not in s_out]
    if len(m) > 1:
        return None
    batch = tuple(i for i in st.indices if i not in s_out and i not in m)
    chans = tuple(r for r in sorted(reds) if r not in taps)
    order = {r: q for q, r in enumerate(n for n in _red_order(st))}
    chans = tuple(sorted(chans, key=order.get))
    return Conv(stmt, st, original, x, w, tuple(spatial), m[0] if m else None, batch, chans,
                tuple(extents.items()), tuple(splits))


def _red_order(st):
    return [r.name for r in _the_sum(st.value).indices]


def convolutions(op: ir.Op) -> dict[str, Conv]:
    out = {}
    for st in op.statements:
        c = recognise(op, st)
        if c is not None:
            out[st.target] = c
    return out


# ---- C ----
def cexpr(e: ir.Expr, env: dict) -> str:
    """An index expression as C: indices by ``env``, dims as ``D_<dim>``."""
    if isinstance(e, ir.Num):
        return f"INT64_C({int(e.value)})"
    if isinstance(e, ir.Name):
        return env.get(e.name, f"D_{e.name}")
    if isinstance(e, ir.Unary) and e.op == "neg":
        return f"(-{cexpr(e.operand, env)})"
    if isinstance(e, ir.Binary) and e.op in ("+", "-", "*"):
        return f"({cexpr(e.left, env)} {e.op} {cexpr(e.right, env)})"
    if isinstance(e, ir.Binary) and e.op in ("//", "%"):
        fn = "kd_floordiv" if e.op == "//" else "kd_mod"
        return f"{fn}({cexpr(e.left, env)}, {cexpr(e.right, env)})"
    raise ValueError(f"not an index expression: {e}")


def vector_width(macros) -> int:
    return 16 if "__AVX512F__" in macros else 8


def micro_kernel(cob: int, nv: int, vw: int) -> tuple[str, str]:
    """``out[cob][nv*vw]`` = the sum over rows and taps of a broadcast of ``w`` times a
    vector of ``x`` (see the module doc, step 4)."""
    v, vu = f"kd_cv{vw}", f"kd_cv{vw}u"
    name = f"kd_conv_{cob}x{nv}_{vw}"
    acc = [[f"c{i}_{j}" for j in range(nv)] for i in range(cob)]
    lines = [
        f"typedef float {v} __attribute__((vector_size({4 * vw})));",
        f"typedef float {vu} __attribute__((vector_size({4 * vw}), aligned(4)));",
        f"KD_INLINE void {name}(int64_t nrow, const int64_t *restrict xo,",
        "    const int64_t *restrict wo, int64_t nt, const int64_t *restrict to,",
        "    const int64_t *restrict tw, const float *restrict x, const float *restrict w,",
        "    float *restrict out) {",
        f"  {v} " + ", ".join(a for row in acc for a in row) + ";"]
    lines += [f"  {a} = ({v}){{0}};" for row in acc for a in row]
    lines += [
        "  for (int64_t r = 0; r < nrow; ++r) {",
        "    const float *restrict xr = x + xo[r];",
        "    const float *restrict wr = w + wo[r];",
        "    for (int64_t t = 0; t < nt; ++t) {",
        "      const float *restrict xs = xr + to[t];",
        "      const float *restrict ws = wr + tw[t];"]
    lines += [f"      const {v} x{j} = *(const {vu} *)(xs + {j * vw});" for j in range(nv)]
    for i in range(cob):
        lines.append(f"      const float s{i} = ws[{i}];")
        lines.append(f"      const {v} b{i} = {{" + ", ".join([f"s{i}"] * vw) + "};")
        lines += [f"      {acc[i][j]} += b{i} * x{j};" for j in range(nv)]
    lines += ["    }", "  }"]
    lines += [f"  *({vu} *)(out + {i * nv * vw + j * vw}) = {acc[i][j]};"
              for i in range(cob) for j in range(nv)]
    lines.append("}")
    return name, "\n".join(lines) + "\n"


def variants(cob: int) -> list[int]:
    """Micro-kernel heights: the block and the powers of two below it (for the rest)."""
    return sorted({cob} | {p for p in (1, 2, 4, 8) if p < cob})


class Direct:
    """Mixed into the kernel writer (``render.KernelWriter``): ``conv_group``."""

    def conv_group(self, g, conv: Conv) -> list[str]:
        from kdsl.backends.c.build import native_macros
        o = self.opt
        vw = vector_width(native_macros())
        cob = o.conv_cob if conv.m is not None else 1
        nv = o.conv_nv
        qt = nv * vw
        kernels = {}
        for c in variants(cob):
            name, text = micro_kernel(c, nv, vw)
            self.helpers.setdefault(name, text)
            kernels[c] = name
        p = self.em.fresh("kc") + "_"
        st, x, w, vec = conv.st, conv.x, conv.w, conv.vec
        env = {n: p + "i_" + n for n, _ in conv.extent}
        E = {n: f"{p}e_{n}" for n, _ in conv.extent}
        L: list[str] = [f"/* direct convolution of {st.target} */"]
        L += [f"const int64_t {E[n]} = {cexpr(e, {})};" for n, e in conv.extent]
        S, R = f"{p}S", f"{p}R"
        L.append(f"const int64_t {S} = {cexpr(vec.a, {})};")
        L.append(f"const int64_t {R} = {cexpr(vec.div, {}) if vec.div is not None else 'INT64_C(1)'};")
        outer_div_ok = " && ".join(f"{cexpr(s.div, {})} >= 1" for s in conv.outer
                                   if s.div is not None)
        ok = f"{S} >= 1 && {R} >= 1" + (f" && {outer_div_ok}" if outer_div_ok else "")
        L.append(f"if ({ok}) {{")
        B: list[str] = []
        ny = E[vec.out]
        KL = E[vec.tap]
        B += [f"const int64_t {p}Q = ({ny} + {R} - 1) / {R};",
              f"const int64_t {p}QT = {qt};",
              f"const int64_t {p}NQ = ({p}Q + {qt} - 1) / {qt};",
              f"const int64_t {p}COB = {cob};",
              f"int64_t *{p}to = (int64_t *)malloc(sizeof(int64_t) * (size_t)kd_max64({R} * {KL}, 1));",
              f"int64_t *{p}tw = (int64_t *)malloc(sizeof(int64_t) * (size_t)kd_max64({R} * {KL}, 1));",
              f"int64_t *{p}nt = (int64_t *)malloc(sizeof(int64_t) * (size_t){R});",
              f"int64_t {p}lo = 0, {p}hi = 0;",
              f"for (int64_t r = 0; r < {R}; ++r) {{",
              "  int64_t n = 0;",
              f"  for (int64_t k = 0; k < {KL}; ++k) {{",
              f"    const int64_t num = {cexpr(vec.a, {})} * r + "
              f"{cexpr(vec.b, {})} * k + {cexpr(vec.c, {})};",
              f"    if (kd_mod(num, {R}) != 0) continue;",
              f"    const int64_t off = kd_floordiv(num, {R});",
              f"    {p}lo = kd_min64({p}lo, off); {p}hi = kd_max64({p}hi, off);",
              f"    {p}to[r * {KL} + n] = off; {p}tw[r * {KL} + n] = k * {p}COB; ++n;",
              "  }",
              f"  {p}nt[r] = n;",
              "}",
              f"const int64_t {p}pad = -{p}lo;",
              f"const int64_t {p}Lp = (({p}NQ * {qt} - 1) * {S} + {p}hi + {p}pad) / {S} + 2;",
              f"const int64_t {p}RL = {S} * {p}Lp;",
              f"for (int64_t t = 0; t < {R} * {KL}; ++t) {{",
              f"  const int64_t u = {p}to[t] + {p}pad;",
              f"  {p}to[t] = (u % {S}) * {p}Lp + u / {S};",
              "}"]
        B += self._conv_copy_x(conv, p)
        B += self._conv_pack_w(conv, p, env, E, cob)
        B += self._conv_tasks(conv, p, env, E, cob, qt, kernels)
        B += [f"free({p}to);", f"free({p}tw);", f"free({p}nt);", f"free({p}xp);",
              f"free({p}wp);"]
        L += ["  " + line for line in B]
        L.append("} else {")
        generic = self.loop_group(g)
        L += ["  " + line[2:] if line.startswith("  ") else line for line in generic]
        L.append("}")
        return ["  {"] + ["    " + line for line in L] + ["  }"]

    # ---- x: padded, phase-split f32 rows ----
    def _conv_copy_x(self, conv: Conv, p: str) -> list[str]:
        x, vec = conv.x, conv.vec
        shape = self.shape_c(x.tensor)
        axes = [q for q in range(len(shape)) if q != vec.axis]
        rows = " * ".join(shape[q] for q in axes) or "INT64_C(1)"
        vs = "1" if vec.axis == len(shape) - 1 else f"st_{x.tensor}_{vec.axis}"
        L = [f"const int64_t {p}rows = {rows};",
             f"float *{p}xp = (float *)malloc(sizeof(float) * (size_t)kd_max64({p}rows * {p}RL, 1));",
             f"#pragma omp parallel for schedule(static) if({p}rows * {p}RL >= {PARALLEL_COPY})",
             f"for (int64_t rr = 0; rr < {p}rows; ++rr) {{",
             "  int64_t rest = rr, base = 0;"]
        for q in reversed(axes):
            stride = "1" if q == len(shape) - 1 else f"st_{x.tensor}_{q}"
            L.append(f"  base += (rest % {shape[q]}) * {stride}; rest /= {shape[q]};")
        load = LOAD[self.dtype_of(x.tensor)].format(f"{self.ptr(x.tensor)}[base + t * {vs}]")
        n = shape[vec.axis]
        L += [f"  float *restrict dst = {p}xp + rr * {p}RL;",
              f"  for (int64_t s = 0; s < {p}S; ++s) {{",
              f"    for (int64_t c = 0; c < {p}Lp; ++c) {{",
              f"      const int64_t t = c * {p}S + s - {p}pad;",
              f"      dst[s * {p}Lp + c] = (t >= 0 && t < {n}) ? {load} : 0.0f;",
              "    }",
              "  }",
              "}"]
        return L

    # ---- w: [batch of w][m block][chans][taps][COB] ----
    def _conv_pack_w(self, conv: Conv, p: str, env: dict, E: dict, cob: int) -> list[str]:
        w = conv.w
        w_names = self._names_in(w)
        wb = [b for b in conv.batch if b in w_names]
        taps = [s.tap for s in conv.spatial]
        m_ext = E[conv.m] if conv.m else "INT64_C(1)"
        flat = wb + [None] + list(conv.chans) + taps   # None: the m block
        ext = {n: E[n] for n in flat if n}
        ext[None] = f"{p}MB"
        L = [f"const int64_t {p}M = {m_ext};",
             f"const int64_t {p}MB = ({p}M + {cob} - 1) / {cob};",
             f"const int64_t {p}WB = " + (" * ".join(E[b] for b in wb) or "INT64_C(1)") + ";",
             f"const int64_t {p}RED = " + (" * ".join(E[n] for n in list(conv.chans) + taps)
                                         or "INT64_C(1)") + ";",
             f"const int64_t {p}wn = {p}WB * {p}MB * {p}RED;",
             f"float *{p}wp = (float *)malloc(sizeof(float) * (size_t)kd_max64({p}wn * {cob}, 1));",
             f"#pragma omp parallel for schedule(static) if({p}wn * {cob} >= {PARALLEL_COPY})",
             f"for (int64_t f = 0; f < {p}wn; ++f) {{",
             "  int64_t rest = f;"]
        for n in reversed(flat):
            var = env[n] if n else f"{p}mb"
            L.append(f"  const int64_t {var} = rest % {ext[n]}; rest /= {ext[n]};")
        valid = []
        if conv.m:
            L.append(f"  (void){p}mb;")
        L.append(f"  for (int64_t i = 0; i < {cob}; ++i) {{")
        if conv.m:
            L.append(f"    const int64_t {env[conv.m]} = {p}mb * {cob} + i;")
            valid.append(f"{env[conv.m]} < {p}M")
        inner = set(wb) | ({conv.m} if conv.m else set())
        for g, j, block, n in conv.splits:
            if g in inner and j in inner:
                valid.append(f"{env[g]} * {E[j]} + {env[j]} < {cexpr(n, {})}")
        subs = [cexpr(s, env) for s in w.subscripts]
        off = self.offset(w.tensor, subs, 0)
        load = LOAD[self.dtype_of(w.tensor)].format(f"{self.ptr(w.tensor)}[{off}]")
        cond = " && ".join(valid) or "1"
        L += [f"    {p}wp[f * {cob} + i] = ({cond}) ? {load} : 0.0f;", "  }", "}"]
        return L

    def _names_in(self, access: ir.Access) -> set:
        out = set()
        for s in access.subscripts:
            for n in ir.walk(s):
                if isinstance(n, ir.Name):
                    out.add(n.name)
        return out

    def _conv_store(self, conv: Conv, p: str, env: dict, E: dict) -> list[str]:
        """The statement's value (its epilogue around the sum, read from ``a[l]``) stored
        at output ``(q0 + l) * R + r`` of the vector axis."""
        whole = {g: f"({env[g]} * {E[j]} + {env[j]})" for g, j, _, _ in conv.splits}
        texts, q = {}, 0
        names = list(conv.st.indices)
        for orig in conv.original:
            n = names[q]
            if n in whole:
                texts[orig], q = whole[n], q + 2
                continue
            texts[orig] = f"((q0 + l) * {p}R + r)" if n == conv.vec.out else env[n]
            q += 1
        scope = {n: Var(t, 0) for n, t in texts.items()}
        blk = Block()
        red = _the_sum(conv.stmt.value)
        self.overrides = {self.em.key(red, scope): C("a[l]", "f")}
        v = self.em.emit(conv.stmt.value, scope, [blk])
        self.overrides = {}
        self.group_p = 0
        blk.main.append(self.store(conv.stmt, scope, v))
        return render_lines(blk.items(), Style(True, None, None), 0)

    # ---- the tasks ----
    def _conv_tasks(self, conv: Conv, p: str, env: dict, E: dict, cob: int, qt: int,
                    kernels: dict) -> list[str]:
        x, vec, st = conv.x, conv.vec, conv.st
        shape = self.shape_c(x.tensor)
        wb = [b for b in conv.batch if b in self._names_in(conv.w)]
        outer = list(conv.outer)
        task_names = list(conv.batch) + [s.out for s in outer]
        other = " * ".join([E[n] for n in task_names] + [p + "R"])
        L = [f"const int64_t {p}other = {other};",
             f"const int64_t {p}nch = kd_min64({p}NQ, kd_max64(1, (8 * (int64_t)omp_get_max_threads()"
             f" + {p}other - 1) / kd_max64({p}other, 1)));",
             f"const int64_t {p}chl = ({p}NQ + {p}nch - 1) / {p}nch;",
             f"const int64_t {p}tasks = {p}other * {p}nch;",
             f"const int64_t {p}nrow = kd_max64(1, " +
             " * ".join([E[c] for c in conv.chans] + [E[s.tap] for s in outer] + ["INT64_C(1)"]) + ");",
             f"#pragma omp parallel if({p}tasks > 1)",
             "{",
             f"  int64_t *restrict xo = (int64_t *)malloc(sizeof(int64_t) * (size_t){p}nrow);",
             f"  int64_t *restrict wo = (int64_t *)malloc(sizeof(int64_t) * (size_t){p}nrow);",
             f"  float acc[{cob * qt}] __attribute__((aligned(64)));",
             "  #pragma omp for schedule(static)",
             f"  for (int64_t task = 0; task < {p}tasks; ++task) {{",
             "    int64_t rest = task;",
             f"    const int64_t ch = rest % {p}nch; rest /= {p}nch;",
             f"    const int64_t r = rest % {p}R; rest /= {p}R;"]
        for n in reversed(task_names):
            L.append(f"    const int64_t {env[n]} = rest % {E[n]}; rest /= {E[n]};")
        for g, j, block, n in conv.splits:
            if g in conv.batch and j in conv.batch:
                L.append(f"    if ({env[g]} * {E[j]} + {env[j]} >= {cexpr(n, {})}) continue;")
        L.append(f"    const int64_t Qr = r < {E[vec.out]} ? ({E[vec.out]} - r + {p}R - 1) / {p}R : 0;")
        # the (x row, w offset) list of the task's channels and outer taps
        body = ["    int64_t nrow = 0;"]
        depth = 2
        ind = lambda: "  " * depth  # noqa: E731
        for c in conv.chans:
            body.append(f"{ind()}for (int64_t {env[c]} = 0; {env[c]} < {E[c]}; ++{env[c]}) {{")
            depth += 1
        for s in outer:
            t, o = env[s.tap], env[s.out]
            body.append(f"{ind()}for (int64_t {t} = 0; {t} < {E[s.tap]}; ++{t}) {{")
            depth += 1
            num = f"{cexpr(s.a, {})} * {o} + {cexpr(s.b, {})} * {t} + {cexpr(s.c, {})}"
            xi = p + "x_" + s.tap
            if s.div is not None:
                d = cexpr(s.div, {})
                body.append(f"{ind()}if (kd_mod({num}, {d}) != 0) continue;")
                body.append(f"{ind()}const int64_t {xi} = kd_floordiv({num}, {d});")
            else:
                body.append(f"{ind()}const int64_t {xi} = {num};")
            body.append(f"{ind()}if ({xi} < 0 || {xi} >= {shape[s.axis]}) continue;")
        subs, checks = [], []
        by_axis = {s.axis: s for s in outer}
        for axis, sub in enumerate(x.subscripts):
            if axis == vec.axis:
                continue
            if axis in by_axis:
                subs.append(p + "x_" + by_axis[axis].tap)
            else:
                text = cexpr(sub, env)
                subs.append(text)
                checks.append(f"({text}) < 0 || ({text}) >= {shape[axis]}")
        if checks:
            body.append(f"{ind()}if ({' || '.join(checks)}) continue;")
        row = "INT64_C(0)"
        for axis, text in zip([q for q in range(len(shape)) if q != vec.axis], subs):
            row = f"({row} * {shape[axis]} + {text})"
        red = "INT64_C(0)"
        for n in list(conv.chans) + [s.tap for s in outer]:
            red = f"({red} * {E[n]} + {env[n]})"
        body.append(f"{ind()}xo[nrow] = {row} * {p}RL;")
        body.append(f"{ind()}wo[nrow] = {red} * {E[vec.tap]} * {cob};")
        body.append(f"{ind()}++nrow;")
        while depth > 2:
            depth -= 1
            body.append(f"{ind()}}}")
        L += body
        wbase = "INT64_C(0)"
        for b in wb:
            wbase = f"({wbase} * {E[b]} + {env[b]})"
        L += [f"    const float *restrict wt = {p}wp + {wbase} * {p}MB * {p}RED * {cob};",
              f"    for (int64_t qi = ch * {p}chl; qi < kd_min64({p}NQ, (ch + 1) * {p}chl); ++qi) {{",
              f"      const int64_t q0 = qi * {qt};",
              "      if (q0 >= Qr) break;",
              f"      const int64_t nq = kd_min64({qt}, Qr - q0);",
              f"      for (int64_t mb = 0; mb < {p}MB; ++mb) {{",
              f"        const int64_t left = {p}M - mb * {cob};",
              f"        const float *restrict wm = wt + mb * {p}RED * {cob};",
              f"        const int64_t *restrict tor = {p}to + r * {E[vec.tap]};",
              f"        const int64_t *restrict twr = {p}tw + r * {E[vec.tap]};"]
        vs = variants(cob)
        for n, c in enumerate(vs):
            head = "if" if n == 0 else "} else if"
            call = (f"{kernels[c]}(nrow, xo, wo, {p}nt[r], tor, twr, {p}xp + q0, wm, acc);")
            if c == vs[-1]:
                L += ["        } else {" if n else "        {", f"          {call}", "        }"]
            else:
                L += [f"        {head} (left <= {c}) {{", f"          {call}"]
        # store
        L += [f"        for (int64_t i = 0; i < kd_min64(left, {cob}); ++i) {{"]
        if conv.m:
            L.append(f"          const int64_t {env[conv.m]} = mb * {cob} + i;")
        for g, j, block, n in conv.splits:
            if not (g in conv.batch and j in conv.batch):
                L.append(f"          if ({env[g]} * {E[j]} + {env[j]} >= {cexpr(n, {})}) continue;")
        L += ["          const float *restrict a = acc + i * " + str(qt) + ";",
              "          for (int64_t l = 0; l < nq; ++l) {"]
        L += ["            " + line for line in self._conv_store(conv, p, env, E)]
        L += ["          }",
              "        }",
              "      }",
              "    }",
              "  }",
              "  free(xo);",
              "  free(wo);",
              "}"]
        return L
