"""Stride phases: a transposed convolution's K loop over only the taps that count.

A factor guarded by ``(o + c - k * D) % S == 0`` (``o`` an output index, ``k`` a window
axis of the reduction, ``c``, ``D`` and ``S`` built from dims) reads
``x[.., (o + c - k * D) // S]``: for one ``o`` only the taps with ``k * D = o + c (mod S)``
add anything. When every lane of a tile shares ``o``'s residue mod ``S`` (``o`` is one of
the program's scalars, or the tile's own axis enumerated phase by phase: lanes
``o = t * S + r`` for one ``r``), those taps are ``first + j * step`` for
``j < cdiv(K - first, step)``, where ``step`` is the least positive one with
``step * D = 0 (mod S)`` and ``first`` the least non-negative solution below ``step``.
The program finds both with two short scalar loops, and its K loop walks those taps
and no others: S**d fewer multiply-adds than masking the rest.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdsl import ir

from kdsl.backends.triton.dot_plan import Axis, Contraction


@dataclass(frozen=True)
class Phase:
    out: str  # the output index o
    tap: str  # the window axis k
    d: ir.Expr  # k's coefficient is -d
    c: ir.Expr  # what else the residue adds
    s: ir.Expr  # the stride S
    side: str  # 'm' or 'n': o is that side's one tile axis (walked phase by phase); '': a scalar
    conjunct: ir.Expr  # the guard's term this phase makes always true

    @property
    def tiled(self) -> bool:
        return bool(self.side)


def find(plan: Contraction, batch, m, n, k_outer) -> list[Phase]:
    """The guard terms whose taps can be enumerated, at most one a tap; a tiled one only
    when ``o`` is the only axis of its side."""
    scalars = {ax.name for ax in batch}
    taps = {ax.name for ax in k_outer if ax.lo == ir.Num(0)}
    tiles = {axes[0].name: side for side, axes in (("m", m), ("n", n))
             if len(axes) == 1 and axes[0].lo == ir.Num(0)}
    # names a phase's stride, coefficient and remainder may not hold: the lanes'
    vectors = {ax.name for ax in plan.batch + plan.m + plan.n + plan.k} - scalars
    found, used = [], set()
    for guard in (plan.a_guard, plan.b_guard):
        for term in _conjuncts(guard):
            ph = _phase(term, scalars | set(tiles), taps, tiles, vectors)
            if ph is not None and ph.tap not in used and not (ph.tiled and
                                                               any(f.tiled for f in found)):
                found.append(ph)
                used.add(ph.tap)
    return found


def without(guard: ir.Expr | None, phases: list[Phase]) -> ir.Expr | None:
    """``guard`` less the terms the enumeration makes true."""
    if guard is None:
        return None
    terms = [t for t in _conjuncts(guard) if all(t is not p.conjunct for p in phases)]
    out = None
    for t in terms:
        out = t if out is None else ir.Binary("and", out, t)
    return out


def tiled(phases: list[Phase]) -> Phase | None:
    return next((p for p in phases if p.tiled), None)


def tap_lines(phases: list[Phase], k_outer: list[Axis], scope) -> list[str]:
    """Scalars of the program: each phased tap's step, first tap and count."""
    out = []
    extent = {ax.name: scope.idx(ax.extent) for ax in k_outer}
    for p in phases:
        k, d, s = p.tap, f"({scope.idx(p.d)})", f"({scope.idx(p.s)})"
        residue = "ph_r" if p.tiled else scope.index[p.out]  # o's residue is the program's
        out += [f"# the taps of {k} that meet the stride: first_{k} + j * step_{k}",
                f"step_{k} = 1",
                f"while (step_{k} * {d}) % {s} != 0:",
                f"    step_{k} += 1",
                f"first_{k} = 0",
                f"while (first_{k} < step_{k}) & (({residue} + {scope.idx(p.c)} - first_{k} * {d})"
                f" % {s} != 0):",
                f"    first_{k} += 1",
                f"count_{k} = tl.where(first_{k} < step_{k}, "
                f"tl.cdiv(tl.maximum({extent[k]} - first_{k}, 0), step_{k}), 0)"]
    return out


def counted_axes(phases: list[Phase], k_outer: list[Axis]) -> list[Axis]:
    """The scalar tap axes as this program walks them: a phased one over its count."""
    counted = {p.tap for p in phases}
    return [Axis(ax.name, ir.Name(f"count_{ax.name}")) if ax.name in counted else ax
            for ax in k_outer]


def tap_values(phases: list[Phase]) -> list[str]:
    """A phased tap's index from its position j among the taps that count."""
    return [f"i_{p.tap} = first_{p.tap} + i_{p.tap} * step_{p.tap}" for p in phases]


def strides_checked(phases: list[Phase], host) -> str:
    """Launcher lines: a stride below 1 has no phases (the reference divides by it)."""
    return "".join(f"    if {host(p.s)} < 1:\n        raise ValueError("
                   f"\"a stride of %d\" % {host(p.s)})\n" for p in phases)


# ---- recognising a term ----------------------------------------------------------

def _conjuncts(e: ir.Expr | None) -> list[ir.Expr]:
    if e is None:
        return []
    if isinstance(e, ir.Binary) and e.op == "and":
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]


def _phase(term, outs: set[str], taps: set[str], tiles: dict[str, str],
           vectors: set[str]) -> Phase | None:
    if not (isinstance(term, ir.Binary) and term.op == "==" and term.right == ir.Num(0)
            and isinstance(term.left, ir.Binary) and term.left.op == "%"):
        return None
    expr, s = term.left.left, term.left.right
    if _names(s) & (outs | taps | vectors):
        return None
    lin = linear(expr, outs | taps)
    if lin is None:
        return None
    coef, rest = lin
    o = [x for x in coef if x in outs]
    k = [x for x in coef if x in taps]
    if len(o) != 1 or len(k) != 1 or len(coef) != 2 or coef[o[0]] != ir.Num(1):
        return None
    d = _neg(coef[k[0]])
    if (_names(d) | _names(rest)) & (vectors | outs | taps):
        return None  # a lane's index in the remainder: not one residue a program
    return Phase(o[0], k[0], d, rest, s, tiles.get(o[0], ""), term)


def linear(e: ir.Expr, names: set[str]):
    """({name: coefficient}, rest) with ``e = sum(coef * name) + rest``, coefficients and
    rest free of ``names``; None when ``e`` is not linear in them."""
    if isinstance(e, ir.Name) and e.name in names:
        return {e.name: ir.Num(1)}, ir.Num(0)
    if not (_names(e) & names):
        return {}, e
    if isinstance(e, ir.Unary) and e.op == "neg":
        inner = linear(e.operand, names)
        return None if inner is None else ({k: _neg(v) for k, v in inner[0].items()},
                                           _neg(inner[1]))
    if isinstance(e, ir.Binary) and e.op in ("+", "-"):
        left, right = linear(e.left, names), linear(e.right, names)
        if left is None or right is None:
            return None
        coef = dict(left[0])
        for k, v in right[0].items():
            v = v if e.op == "+" else _neg(v)
            coef[k] = ir.Binary("+", coef[k], v) if k in coef else v
        return coef, ir.Binary(e.op, left[1], right[1])
    if isinstance(e, ir.Binary) and e.op == "*":
        for lin_side, const in ((e.left, e.right), (e.right, e.left)):
            if not (_names(const) & names):
                inner = linear(lin_side, names)
                if inner is None:
                    return None
                return ({k: ir.Binary("*", v, const) for k, v in inner[0].items()},
                        ir.Binary("*", inner[1], const))
    return None


def _neg(e: ir.Expr) -> ir.Expr:
    if isinstance(e, ir.Num):
        return ir.Num(-e.value)
    if isinstance(e, ir.Unary) and e.op == "neg":
        return e.operand
    return ir.Unary("neg", e)


def _names(e: ir.Expr) -> set[str]:
    return {n.name for n in ir.walk(e) if isinstance(n, ir.Name)}
