"""K-offset tables: a windowed contraction's whole reduction walked as one flat K axis.

Where a convolution has too few channels to stage channels-last (3 input channels, 11x11
taps), its taps ride the K lanes and move with the output position, so every K step of the
plain loop decodes each lane with ``%`` and ``//`` and checks 4-8 bounds per element:
sm_90 compiles of KernelBench's few-channel convolutions spent 1180-1740 instructions a step
on that integer work (315-629 in the channels-last kernels). Here every subscript of a
factor is split into a tile part (output and batch indices, dims: computed once a program)
and a K part, ``sum(coefficient * reduced index)`` with dim coefficients, whose contribution
to the address is read each step from a table the launcher fills (a small kernel, no host
copy) by the flat K lane: ``address = base + tile_offset[n] + k_offset[kk]``. A padded
read's bounds become one unsigned compare per checked subscript,
``tile_part[n] + tap[kk] < extent``, made only where the launcher finds that some read can
leave its tensor at these sizes (``CHECK_A``/``CHECK_B``); the tables' padding lanes (past
the reduction, up to a whole number of 128) carry taps that fail every compare.

A factor whose K subscripts are the reduction itself, flattened in place (a convolution's
weight ``w[co, c, kh, kw]``), reads ``kk * stride`` directly, without a table: its lanes
stay visibly contiguous. Offered where every subscript splits so (the K part linear in the
reduced indices, dims for coefficients) and the factors carry no guard; pairs never.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdsl import ir

from kdsl.backends.triton import dot_phases
from kdsl.backends.triton.dot_expr import TileScope
from kdsl.backends.triton.dot_plan import Axis, Contraction

ROW = 128  # each table row: the reduction padded to a whole number of this (any BLOCK_K's)
OUT = -(1 << 30)  # a padding lane's tap: below zero whatever tile part it is added to


@dataclass(frozen=True)
class Sub:
    """One subscript of a factor: ``tile + sum(coef * k)``."""
    tile: ir.Expr  # output and batch indices, dims: constant along K
    k: tuple[tuple[str, ir.Expr], ...]  # (reduced index, its coefficient, of dims only)
    extent: ir.Expr  # the tensor's axis
    checked: bool  # a padded read that may leave the axis: bounds compared


@dataclass(frozen=True)
class Factor:
    access: ir.Access
    subs: tuple[Sub, ...]
    stride: ir.Expr | None  # K offset = kk * stride (the reduction flat in place), else a row


@dataclass(frozen=True)
class Table:
    k: tuple[Axis, ...]  # the reduction, flattened in this order (outermost first)
    a: Factor
    b: Factor

    def rows(self) -> list[tuple[str, int | None]]:
        """The table's rows, in order: (side, None) a factor's K offsets, (side, p) the taps
        of its checked subscript p."""
        out = []
        for side, f in (("a", self.a), ("b", self.b)):
            if f.stride is None and any(s.k for s in f.subs):
                out.append((side, None))
            out += [(side, p) for p, s in enumerate(f.subs) if s.checked and s.k]
        return out


def find(op: ir.Op, plan: Contraction) -> Table | None:
    """The tables of ``plan`` (a window read, every subscript split into tile and K parts);
    None where some subscript does not split, a factor is guarded, or there are pairs."""
    if plan.pairs or plan.a_guard is not None or plan.b_guard is not None:
        return None
    k_names = [ax.name for ax in plan.k]
    indices = {ax.name for ax in plan.batch + plan.m + plan.n + plan.k}
    in_range = {(ax.name, ax.extent) for ax in plan.batch + plan.m + plan.n + plan.k
                if ax.lo == ir.Num(0)}
    factors = []
    for f in (plan.a, plan.b):
        shape = op.tensor(f.tensor).shape
        subs = []
        for s, extent in zip(f.subscripts, shape):
            found = dot_phases.linear(s, set(k_names))
            if found is None or any(_names(c) & indices for c in found[0].values()):
                return None
            coefs, rest = found
            plain = isinstance(s, ir.Name) and (s.name, extent) in in_range
            subs.append(Sub(simplify(rest), tuple((n, simplify(c)) for n, c in coefs.items()),
                            extent, f.pad is not None and not plain))
        factors.append(Factor(f, tuple(subs), _flat_stride(plan, subs, shape)))
    tiled = {ax.name for ax in plan.m + plan.n}
    if not any(s.k and _names(s.tile) & tiled for f in factors for s in f.subs):
        return None  # no window: a plain K loop has nothing to decode
    return Table(plan.k, factors[0], factors[1])


def _flat_stride(plan: Contraction, subs: list[Sub], shape) -> ir.Expr | None:
    """The stride of the flat K lane where the factor's K subscripts are exactly the
    reduction's indices, in its order, on adjacent axes that span them; else None."""
    at = [p for p, s in enumerate(subs) if s.k]
    if not at or at != list(range(at[0], at[0] + len(plan.k))):
        return None
    for p, ax in zip(at, plan.k):
        s = subs[p]
        if s.k != ((ax.name, ir.Num(1)),) or s.tile != ir.Num(0) or \
                ax.lo != ir.Num(0) or ax.extent != shape[p]:
            return None
    return _product(shape[at[-1] + 1:])


# ---- the kernel -------------------------------------------------------------------

def k_loop(op: ir.Op, t: Table, batch, m, n, helpers: set, dot: list[str]) -> list[str]:
    """The main kernel's K loop (and what it hoists before it): tile offsets and bound
    parts once a program, then per step one table load a factor and its checked taps."""
    helpers.add("below")
    tile_names = {ax.name for ax in m}, {ax.name for ax in n}
    # every tile index by its own name: a scalar (batch) or a vector of its tile side
    scope = TileScope(op, {ax.name: f"i_{ax.name}" for ax in list(batch) + list(m) + list(n)},
                      helpers=helpers)
    head, loads, row = [], [], {r: j for j, r in enumerate(t.rows())}
    for side, f, names in (("a", t.a, tile_names[0]), ("b", t.b, tile_names[1])):
        lane = "lane_m" if side == "a" else "lane_n"
        # (a tile offset of the factor's own tile axis: a vector; else a scalar, widened)
        vec = bool(_uses(f, names))
        tile = _offset([s.tile for s in f.subs], op.tensor(f.access.tensor).shape, scope)
        head.append(f"toff_{side} = {tile}" + ("" if vec else f" + 0 * {lane}"))
        if any(s.checked and not s.k for s in f.subs):  # tile-only bound checks, hoisted
            head.append(f"okt_{side} = {lane} >= 0")
        k_rows = {p: row[(side, p)] for p, s in enumerate(f.subs) if s.checked and s.k}
        for p, s in enumerate(f.subs):
            if not s.checked:
                continue
            head.append(f"ext_{side}{p} = {scope.idx(s.extent)}")
            head.append(f"cb_{side}{p} = {scope.idx(s.tile)}")
            if not s.k:
                # (widened to the lanes: a bound on a per-program index alone is a scalar,
                # and the interpreter's & of a vector and a scalar bool is no bool mask)
                head.append(f"okt_{side} = okt_{side} & _kdsl_below(cb_{side}{p} + 0 * {lane}, "
                            f"ext_{side}{p})")
            else:
                head.append(f"tab_{side}{p} = k_tab + {k_rows[p]} * n_kt")
        if not any(s.k for s in f.subs):  # a factor constant along K
            ko = "0 * kk"
        elif f.stride is None:
            head.append(f"tab_{side} = k_tab + {row[(side, None)]} * n_kt")
            ko = f"tl.load(tab_{side} + kk)"
        elif f.stride == ir.Num(1):
            ko = "kk"
        else:
            head.append(f"kst_{side} = {scope.idx(f.stride)}")
            ko = f"kk * kst_{side}"
        loads += _loads(side, f, ko, names, scope)
    body = ["kk = k0 + tl.arange(0, BLOCK_K)", "if IDX64:", "    kk = kk.to(tl.int64)"]
    body += loads + dot
    return head + ["acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                   "for k0 in range(0, n_k, BLOCK_K):"] + ["    " + ln for ln in body]


def _loads(side: str, f: Factor, ko: str, names, scope) -> list[str]:
    """One factor's tile: its pointer, and the checked load where CHECK_<side> says."""
    kb, tb = ("[None, :]", "[:, None]") if side == "a" else ("[:, None]", "[None, :]")
    x, ptr = f"x_{side}", f"ptr_{side}"
    lines = [f"ko_{side} = {ko}", f"{ptr} = t_{f.access.tensor} + "
             f"({_join(f'toff_{side}{tb}', f'ko_{side}{kb}', side)})"]
    tail = f"(kk < n_k){kb}"
    checks = [f"okt_{side}{tb}"] if any(s.checked and not s.k for s in f.subs) else []
    for p, s in enumerate(f.subs):
        if s.checked and s.k:
            tap = f"tl.load(tab_{side}{p} + kk)"
            if _uses_sub(s, names):
                checks.append(f"_kdsl_below({_join(f'cb_{side}{p}{tb}', f'{tap}{kb}', side)}, "
                              f"ext_{side}{p})")
            else:  # a scalar tile part (a group's first channel): a K vector
                checks.append(f"_kdsl_below(cb_{side}{p} + {tap}, ext_{side}{p}){kb}")
    # a checked tap's padding lanes fail its compare; without one, the tail is masked
    covered = any(s.checked and s.k for s in f.subs)
    pad = None if f.access.pad is None else scope.value(f.access.pad)
    pad = None if pad is None or pad.const == 0 else pad.code
    inside = " & ".join(checks)
    checked = [f"inside_{side} = {inside}"]
    if covered:
        checked.append(f"{x} = tl.load({ptr}, mask=inside_{side}, other=0.0)")
    else:
        checked += ["if EVEN_K:", f"    {x} = tl.load({ptr}, mask=inside_{side}, other=0.0)",
                    "else:", f"    {x} = tl.load({ptr}, mask=inside_{side} & {tail}, "
                    "other=0.0)"]
    if pad is not None:  # the pad value on padded lanes, never on the tail
        checked += [f"{x} = tl.where(inside_{side}, {x}, {pad}).to({x}.dtype)",
                    "if not EVEN_K:",
                    f"    {x} = tl.where({tail}, {x}, 0).to({x}.dtype)"]
    plain = ["if EVEN_K:", f"    {x} = tl.load({ptr})",
             "else:", f"    {x} = tl.load({ptr}, mask={tail}, other=0.0)"]
    if not checks:  # nothing to check: every read lands in the tensor
        return lines + plain
    return lines + [f"if CHECK_{side.upper()}:"] + ["    " + ln for ln in checked] + \
        ["el" + plain[0]] + plain[1:]


def _join(tile: str, k: str, side: str) -> str:
    """A [M, K] (side a) or [K, N] (side b) sum of a tile vector and a K vector."""
    return f"{tile} + {k}" if side == "a" else f"{k} + {tile}"


# ---- the table kernel -------------------------------------------------------------

def table_kernel(op: ir.Op, t: Table, name: str, helpers: set) -> str:
    """A @triton.jit kernel filling the table rows, ROW lanes a program: each lane's
    reduced indices decoded once here, not at every step of every program."""
    rows = t.rows()
    scope = TileScope(op, {ax.name: f"i_{ax.name}" for ax in t.k}, helpers=helpers)
    lines = ["kk = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "if IDX64:",
             "    kk = kk.to(tl.int64)", "live = kk < n_k"]
    rest = "kk"
    for j, ax in enumerate(reversed(t.k)):  # row-major: the last index fastest
        lo = "" if ax.lo == ir.Num(0) else f"{scope.idx(ax.lo)} + "
        if j == len(t.k) - 1:
            lines.append(f"i_{ax.name} = {lo}{rest}")
            break
        ext = str(max(int(ax.extent.value), 1)) if isinstance(ax.extent, ir.Num) else \
            f"tl.maximum({scope.idx(ax.extent)}, 1)"  # (an empty reduction: no lane lives)
        lines += [f"i_{ax.name} = {lo}{rest} % {ext}", f"rest = {rest} // {ext}"]
        rest = "rest"
    for j, (side, p) in enumerate(rows):
        f = t.a if side == "a" else t.b
        if p is None:  # a factor's K offset: its K parts times the tensor's strides
            value = _offset([_k_part(s) for s in f.subs], op.tensor(f.access.tensor).shape,
                            scope)
            fill = "0"
        else:
            value, fill = scope.idx(_k_part(f.subs[p])), str(OUT)
        lines.append(f"tl.store(k_tab + {j} * n_kt + kk, tl.where(live, {value}, {fill}))")
    params = ["k_tab"] + [f"d_{d}" for d in op.dims] + [
        "n_k", "n_kt", "IDX64: tl.constexpr", "BLOCK: tl.constexpr"]
    return "@triton.jit\ndef " + name + "(" + ", ".join(params) + "):\n" + \
        "".join(f"    {ln}\n" for ln in lines)


# ---- the launcher -----------------------------------------------------------------

def configure_code(t: Table, host, tile_axes) -> str:
    """configure()'s lines: the rows' length and whether each factor's reads may leave its
    tensor at these sizes (then its bounds are compared: CHECK_A, CHECK_B)."""
    spans = {ax.name: (host(ax.lo), f"max({host(ax.extent)}, 1)")
             for ax in list(tile_axes) + list(t.k)}
    flags = {}
    for side, f in (("a", t.a), ("b", t.b)):
        tests = []
        for s in f.subs:
            if not s.checked:
                continue
            tile = dot_phases.linear(s.tile, {ax.name for ax in tile_axes})
            if tile is None:
                tests.append("True")  # a tile part not linear in its indices: always checked
                continue
            terms = list(tile[0].items()) + list(s.k)
            terms = ", ".join(f"({host(simplify(c))}, {spans[i][0]}, {spans[i][1]})"
                              for i, c in terms)
            tests.append(f"_k_outside({host(simplify(tile[1]))}, [{terms}], "
                         f"{host(s.extent)})")
        flags[side] = f"bool({' or '.join(tests)})" if tests else "False"
    return (f"    n_kt = -(-max(n_k, 1) // {ROW}) * {ROW}  # a table row: K padded to whole "
            f"blocks\n"
            f"    scalars += [(\"n_kt\", n_kt)]\n"
            f"    # may a padded read leave its tensor here? then its bounds are compared\n"
            f"    constexprs.update(CHECK_A={flags['a']},\n"
            f"                      CHECK_B={flags['b']})\n")


HELPERS = f'''

def _k_outside(const, terms, extent):
    """Can const + sum(c * i), each i in lo .. lo + n - 1 (terms of (c, lo, n)), leave
    0 .. extent - 1?"""
    lo = hi = const
    for c, a, n in terms:
        ends = (c * a, c * (a + n - 1))
        lo, hi = lo + min(ends), hi + max(ends)
    return lo < 0 or hi >= extent
'''


def build_code(t: Table, name: str) -> str:
    """kernel()'s lines, before the launch: the table, filled on the device."""
    return (f'        sc = dict(cfg["scalars"])\n'
            f'        k_tab = torch.empty({len(t.rows())} * sc["n_kt"], device=dst.device,\n'
            f'                            dtype=torch.int64 if big else torch.int32)\n'
            f'        dims = [v for k, v in cfg["scalars"] if k.startswith("d_")]\n'
            f'        {name}[(sc["n_kt"] // {ROW},)](\n'
            f'            k_tab, *dims, sc["n_k"], sc["n_kt"], IDX64=big, BLOCK={ROW})\n')


# ---- expressions ------------------------------------------------------------------

def _offset(parts: list[ir.Expr], shape, scope: TileScope) -> str:
    """sum(part * stride) over a contiguous tensor's axes, zero parts left out."""
    terms = []
    for p, part in enumerate(parts):
        if part == ir.Num(0):
            continue
        stride = _product(shape[p + 1:])
        code = scope.idx(part)
        terms.append(code if stride == ir.Num(1) else f"{code} * {scope.idx(stride)}")
    return " + ".join(terms) or "0"


def _k_part(s: Sub) -> ir.Expr:
    e: ir.Expr = ir.Num(0)
    for name, c in s.k:
        e = simplify(ir.Binary("+", e, ir.Binary("*", c, ir.Name(name))))
    return e


def _product(exprs) -> ir.Expr:
    e: ir.Expr = ir.Num(1)
    for x in exprs:
        e = simplify(ir.Binary("*", e, x))
    return e


def simplify(e: ir.Expr) -> ir.Expr:
    """``e`` with the zeros and ones that splitting leaves (``0 * D``, ``x + 0``) folded."""
    if not isinstance(e, ir.Binary):
        return e
    left, right = simplify(e.left), simplify(e.right)
    zero, one = ir.Num(0), ir.Num(1)
    if e.op == "*":
        if zero in (left, right):
            return zero
        if left == one:
            return right
        if right == one:
            return left
    if e.op == "+" and left == zero:
        return right
    if e.op in ("+", "-") and right == zero:
        return left
    return ir.Binary(e.op, left, right)


def _names(e: ir.Expr) -> set[str]:
    return {x.name for x in ir.walk(e) if isinstance(x, ir.Name)}


def _uses(f: Factor, names: set[str]) -> set[str]:
    return {x for s in f.subs for x in _names(s.tile) & names}


def _uses_sub(s: Sub, names: set[str]) -> bool:
    return bool(_names(s.tile) & names)
