"""Strided window reductions (pooling) read by stride phases: the ``phases`` strategy.

A reduction over a short static window whose input index is ``o * S + k + c`` (``o``
the row axis, ``k`` the window index) reads, for a tile of ``BLOCK_R`` outputs, taps
that are S elements apart. Loaded tap by tap they are strided scalar loads: on an H200
the max_pool1d default (window 3, stride 2, bf16) issued 24 two-byte loads a thread and
ran at 2.2x the memory floor, with its load pipe at 98% and DRAM at 39% (ncu,
2026-12-03). Here the window is split by phase instead: writing ``k + c = q * S + r``
(0 <= r < S), every tap of one phase ``q`` lies in the contiguous run
``x[(o + q) * S + r]``, so the phase is one flat load of ``BLOCK_R * S`` elements
(vectorized), reshaped to ``[BLOCK_R, S]`` and reduced along ``r`` over the taps that
belong to the window. A window of 3 at stride 2 is two phases; the measured kernel of
this form ran at 1.01x the floor (0.098 ms against 0.211 ms).

The stride, the window's bounds and the phase range are compile-time constants
(``WS``, ``J0``, ``J1``, ``QLO``, ``QHI``): one compile per distinct window.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdsl import ir

from kdsl.backends.triton.expr import INT64_MAX, INT64_MIN, Emitter, ExprGen, Val
from kdsl.backends.triton.kernel import (TILE_CAP, dispatch, dtype_suffixes, jit_function, launcher_head,
                            programs, prologue, py, store)
from kdsl.backends.triton.plan import Plan

POS = "__pos"
REDUCERS = ("max", "min", "sum", "mean")
IDENT = {("max", "float"): "float('-inf')", ("min", "float"): "float('inf')",
         ("sum", "float"): "0.0", ("max", "int"): INT64_MIN, ("min", "int"): INT64_MAX,
         ("sum", "int"): "0"}


@dataclass(frozen=True)
class Window:
    """The one reduction of a window op: ``op(k in lo .. hi) body``, where body reads one
    input ``tensor`` at ``row * stride + k + offset`` (``subscript``) and nowhere else by
    row or k."""
    op: str
    tensor: str
    lo: ir.Expr
    hi: ir.Expr
    stride: ir.Expr
    offset: ir.Expr
    subscript: ir.Expr


def window_of(plan: Plan) -> Window | None:
    """The plan's strided window, or None when the op is not one."""
    if plan.kind != "rows" or plan.row_axis is None or plan.inner is not None \
            or not plan.static_column or len(plan.row_values) != 1:
        return None
    rv = plan.row_values[0]
    if rv.op not in REDUCERS or len(rv.ranges) != 1 or len(rv.indices) != 1:
        return None
    row, k = plan.row_axis[0], rv.indices[0]
    reads = {(a.tensor, a.subscripts[-1]) for a in ir.walk(rv.body)  # (a scalar has none)
             if isinstance(a, ir.Access) and a.subscripts and
             _mentions(a.subscripts[-1], (row, k))}
    if len(reads) != 1:
        return None
    ((tensor, sub),) = reads
    for a in ir.walk(rv.body):  # row and k appear only as that last subscript
        if isinstance(a, ir.Access) and any(_mentions(s, (row, k)) for s in a.subscripts[:-1]):
            return None
    if _mentions(_replace(rv.body, sub, ir.Name(POS)), (row, k)):
        return None
    terms = _affine(sub, (row, k))
    if terms is None or not _is_one(terms.get(k)) or row not in terms:
        return None
    stride, offset = terms[row], terms.get(None, ir.Num(0))
    if _mentions(stride, (row, k)) or _mentions(offset, (row, k)):
        return None
    lo, hi = rv.ranges[0]
    return Window(rv.op, tensor, lo, hi, stride, offset, sub)


def _mentions(e: ir.Expr, names) -> bool:
    return any(isinstance(n, ir.Name) and n.name in names for n in ir.walk(e))


def _is_one(e) -> bool:
    return isinstance(e, ir.Num) and e.value == 1


def _affine(e: ir.Expr, names) -> dict | None:
    """{name: coefficient, None: constant} of an expression linear in ``names``, else None."""
    if isinstance(e, ir.Name) and e.name in names:
        return {e.name: ir.Num(1)}
    if not _mentions(e, names):
        return {None: e}
    if isinstance(e, ir.Binary) and e.op in ("+", "-"):
        a, b = _affine(e.left, names), _affine(e.right, names)
        if a is None or b is None:
            return None
        out = dict(a)
        for key, v in b.items():
            v = v if e.op == "+" else ir.Unary("neg", v)
            out[key] = ir.Binary("+", out[key], v) if key in out else v
        return out
    if isinstance(e, ir.Binary) and e.op == "*":
        for lin, const in ((e.left, e.right), (e.right, e.left)):
            if not _mentions(const, names):
                a = _affine(lin, names)
                return None if a is None else {
                    key: (const if _is_one(v) else ir.Binary("*", v, const))
                    for key, v in a.items()}
        return None
    if isinstance(e, ir.Unary) and e.op == "neg":
        a = _affine(e.operand, names)
        return None if a is None else {key: ir.Unary("neg", v) for key, v in a.items()}
    return None


def _replace(e, old, new):
    """``e`` with every occurrence of the subtree ``old`` replaced by ``new``."""
    if e == old:
        return new
    if isinstance(e, ir.Access):
        return ir.Access(e.tensor, tuple(_replace(s, old, new) for s in e.subscripts),
                         None if e.pad is None else _replace(e.pad, old, new))
    if isinstance(e, ir.Binary):
        return ir.Binary(e.op, _replace(e.left, old, new), _replace(e.right, old, new))
    if isinstance(e, ir.Unary):
        return ir.Unary(e.op, _replace(e.operand, old, new))
    if isinstance(e, ir.Call):
        return ir.Call(e.fn, tuple(_replace(a, old, new) for a in e.args))
    return e


CONSTEXPRS = ["BLOCK_R", "BLOCK_C", "WS", "SP", "J0", "J1", "QLO", "QHI"]


def kernel_source(op: ir.Op, plan: Plan, win: Window, name: str, dtype: str,
                  math: str = "libdevice", constant_dims=(), exp: str = "tl") -> tuple[str, set]:
    em = Emitter()
    gen = ExprGen(em, op, {}, {}, dtype)
    gen.math, gen.exp = math, exp
    prologue(em, gen, plan, False)
    rv = plan.row_values[0]
    body = _replace(rv.body, win.subscript, ir.Name(POS))
    extent = gen.size(op.tensor(win.tensor).shape[-1])
    base = "sum" if win.op == "mean" else win.op
    kind = "float" if win.op == "mean" else _kind(op, gen, body)
    acc = em.name("acc")
    em.emit(f"{acc} = tl.full([BLOCK_R, 1], {IDENT[base, kind]}, "
            f"{gen.ct if kind == 'float' else 'tl.int64'})")
    em.emit("f = tl.arange(0, BLOCK_R * SP)")
    em.emit("r = tl.arange(0, SP)[None, :]")
    with em.block("for q in tl.static_range(QLO, QHI + 1):"):
        em.emit("# one phase: the contiguous run x[(o + q) * WS + r] of the tile's outputs")
        with em.block("if SP == WS:"):
            em.emit("pos = (t_r * BLOCK_R + q) * WS + f")
        with em.block("else:"):
            em.emit("pos = (t_r * BLOCK_R + q) * WS + (f // SP) * WS + f % SP")
        em.emit(f"pos_ok = (pos >= 0) & (pos < {extent})")
        gen.env[POS] = Val("pos", "int", frozenset("C"))
        gen.masks["C"] = Val("pos_ok", "bool", frozenset("C"))
        v = gen(body)
        v = gen.to_float(v) if kind == "float" else (gen.to_int(v) if v.kind == "bool" else v)
        em.emit(f"tile = tl.reshape({v.code}, [BLOCK_R, SP])")
        em.emit("tap = (q * WS + r >= J0) & (q * WS + r < J1) & (r < WS)")
        em.emit(f"tile = tl.where(tap, tile, {IDENT[base, kind]})")
        combine = {"max": "tl.maximum({a}, {p})", "min": "tl.minimum({a}, {p})",
                   "sum": "{a} + {p}"}[base]
        em.emit(f"{acc} = " + combine.format(a=acc, p=f"tl.{base}(tile, axis=1)[:, None]"))
    gen.masks.pop("C", None)
    value = Val(acc, kind, frozenset("R"))
    if win.op == "mean":
        value = gen.binary("/", value, gen.to_float(gen(ir.Binary("-", win.hi, win.lo))))
    gen.env[rv.name] = value
    for st in plan.stores:
        store(em, gen, st.tensor, st.indices, gen(st.value))
    return jit_function(name, op, CONSTEXPRS, em.lines, constant_dims), em.helpers


def _kind(op, gen: ExprGen, body: ir.Expr) -> str:
    scratch = Emitter()
    g = ExprGen(scratch, op, dict(gen.env, **{POS: Val("pos", "int", frozenset("C"))}),
                dict(gen.masks), gen.dtype)
    kind = g(body).kind
    return "int" if kind == "bool" else kind


def render(op: ir.Op, plan: Plan, win: Window, genome: dict, name: str,
           math: str = "libdevice", constant_dims=(), exp: str = "tl"):
    """(kernels, helpers, launcher lines) of the phases strategy."""
    kernels, helpers, names = [], set(), []
    for dtype, suffix in dtype_suffixes(op):
        src, used = kernel_source(op, plan, win, name + suffix, dtype, math, constant_dims,
                                  exp)
        kernels.append(src)
        helpers |= used
        names.append(name + suffix)
    gr = int(genome.get("BLOCK_R", 1024))
    warps, stages = int(genome.get("num_warps", 4)), int(genome.get("num_stages", 1))
    lines = launcher_head(op) + dispatch(op)
    lines += [f"    WS = {py(win.stride)}",
              f"    J0 = {py(win.lo)} + {py(win.offset)}",
              f"    J1 = {py(win.hi)} + {py(win.offset)}",
              "    if WS < 1:",
              "        raise ValueError(f'a window stride of {WS}: the phases strategy needs "
              "a stride of at least 1')",
              "    SP = triton.next_power_of_2(WS)",
              f"    fn = ({', '.join(names)},)[variant]",
              f"    BLOCK_R = max(1, min({gr}, triton.next_power_of_2(max({py(plan.row_axis[1])}"
              f", 1)), {TILE_CAP} // SP))",
              f"    n = {programs(plan, False)}",
              "    if n <= 0:",
              "        return",
              "    fn[(n,)](*args, BLOCK_R=BLOCK_R, BLOCK_C=1, WS=WS, SP=SP, J0=J0, J1=J1, "
              f"QLO=J0 // WS, QHI=(J1 - 1) // WS, num_warps={warps}, num_stages={stages})"]
    return kernels, helpers, lines
