"""How an exported op finds its dims at call time, written as Python source.

A dim is read off an input's shape where one names it (``x.shape[1]``, or
``offsets.shape[0] - 1`` for ``[B + 1]``); failing that, solved from an equality
among the spec's test conditions (``LO == L + 2 * P - KW + 1``); failing that, the
caller passes it (a padding, a ``k``, a bucket count). Every input's whole shape and
every condition are then checked against the dims found, so a rule read from one
input is enough.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdsl import ir

_ARITH = ("+", "-", "*", "//", "%", "**")
_COMPARE = ("<", "<=", ">", ">=", "==", "!=")


class NotPython(Exception):
    """A size expression this module cannot write as Python (never in a checked spec)."""


def py(e: ir.Expr) -> str:
    """A dim expression as Python over a dict ``s`` of dims, fully parenthesized."""
    if isinstance(e, ir.Num) and isinstance(e.value, int):
        return repr(e.value)
    if isinstance(e, ir.Name):
        return f"s[{e.name!r}]"
    if isinstance(e, ir.Binary) and e.op in _ARITH + _COMPARE + ("and", "or"):
        return f"({py(e.left)} {e.op} {py(e.right)})"
    if isinstance(e, ir.Unary) and e.op == "neg":
        return f"(-{py(e.operand)})"
    if isinstance(e, ir.Unary) and e.op == "not":
        return f"(not {py(e.operand)})"
    raise NotPython(type(e).__name__)


def names(e: ir.Expr) -> set[str]:
    return {n.name for n in ir.walk(e) if isinstance(n, ir.Name)}


@dataclass(frozen=True)
class Rule:
    dim: str
    code: str   # a Python expression over ``t`` (the inputs) and ``s`` (dims found so far)
    why: str    # where it comes from, for messages: "x.shape[1]"


@dataclass(frozen=True)
class DimPlan:
    rules: tuple[Rule, ...]     # in the order they must run
    passed: tuple[str, ...]     # dims the caller gives, in the op's order
    conditions: tuple[tuple[str, str], ...]  # (spec text, Python over s)


def plan(op: ir.Op) -> DimPlan:
    from kdsl.show import format_expr
    rules: list[Rule] = []
    found: set[str] = set()
    for t in op.inputs:
        for axis, e in enumerate(t.shape):
            rule = _from_axis(t.name, axis, e)
            if rule and rule.dim not in found:
                rules.append(rule)
                found.add(rule.dim)
    conditions = op.test.conditions if op.test else ()
    divided = _divided_axes(op, conditions)
    solvable = {d for d, *_ in divided} | {d for c in conditions for d in _equality_dims(c)}
    passed: list[str] = []
    while True:
        _solve(conditions, divided, rules, found, set(op.dims))
        left = [d for d in op.dims if d not in found]
        if not left:
            break
        # the caller gives a dim nothing else can (a padding, a group count) first: it may
        # let an equality or a divided axis give the rest (conv1d's P given, LO follows)
        pick = next((d for d in left if d not in solvable), left[0])
        passed.append(pick)
        found.add(pick)
    checks = []
    for c in conditions:
        try:
            checks.append((format_expr(c), py(c)))
        except NotPython:  # not a size condition this module can test; the kernel decides
            continue
    return DimPlan(tuple(rules), tuple(d for d in op.dims if d in passed), tuple(checks))


def _solve(conditions, divided, rules: list[Rule], found: set[str], dims: set[str]) -> None:
    progress = True
    while progress:  # a solved dim may let another equality be solved
        progress = False
        for c in conditions:
            rule = _from_equality(c, found, dims)
            if rule:
                rules.append(rule)
                found.add(rule.dim)
                progress = True
        for dim, tensor, axis, k in divided:
            if dim not in found and names(k) <= found:
                read = f"t[{tensor!r}].shape[{axis}]"
                rules.append(Rule(dim, f"({read} * {py(k)})",
                                  f"{tensor}.shape[{axis}] * {_text(k)}"))
                found.add(dim)
                progress = True


def _divided_axes(op: ir.Op, conditions) -> list[tuple[str, str, int, ir.Expr]]:
    """Axes ``D // k`` (weights of grouped convolutions: ``[CI, CO // G, K]``) of a dim the
    spec says ``k`` divides (``CO % G == 0``): D is the axis times k, exactly."""
    divides = {_text(c) for c in conditions}
    out = []
    for t in op.inputs:
        for axis, e in enumerate(t.shape):
            if (isinstance(e, ir.Binary) and e.op == "//" and isinstance(e.left, ir.Name)
                    and f"{e.left.name} % {_text(e.right)} == 0" in divides):
                try:
                    py(e.right)
                except NotPython:
                    continue
                out.append((e.left.name, t.name, axis, e.right))
    return out


def _equality_dims(c: ir.Expr) -> set[str]:
    """Dims an equality could be solved for (a side that is ``D`` or ``k * D``)."""
    if not (isinstance(c, ir.Binary) and c.op == "=="):
        return set()
    out = set()
    for side in (c.left, c.right):
        if isinstance(side, ir.Name):
            out.add(side.name)
        elif isinstance(side, ir.Binary) and side.op == "*":
            out |= {n.name for n in (side.left, side.right) if isinstance(n, ir.Name)}
    return out


def _text(e: ir.Expr) -> str:
    from kdsl.show import format_expr
    return format_expr(e)


def _from_axis(tensor: str, axis: int, e: ir.Expr) -> Rule | None:
    read = f"t[{tensor!r}].shape[{axis}]"
    if isinstance(e, ir.Name):
        return Rule(e.name, read, f"{tensor}.shape[{axis}]")
    if (isinstance(e, ir.Binary) and e.op in "+-" and isinstance(e.left, ir.Name)
            and isinstance(e.right, ir.Num) and isinstance(e.right.value, int)):
        sign = "-" if e.op == "+" else "+"
        return Rule(e.left.name, f"{read} {sign} {e.right.value}",
                    f"{tensor}.shape[{axis}] {sign} {e.right.value}")
    return None


def _from_equality(c: ir.Expr, found: set[str], dims: set[str]) -> Rule | None:
    """``D == expr`` or ``k * D == expr`` (either side) with expr's dims all known."""
    from kdsl.show import format_expr
    if not (isinstance(c, ir.Binary) and c.op == "=="):
        return None
    for side, other in ((c.left, c.right), (c.right, c.left)):
        dim, factor = _unknown_term(side, found, dims)
        if dim is None or not names(other) <= found:
            continue
        try:
            code = py(other) if factor == 1 else f"({py(other)} // {factor})"
        except NotPython:
            continue
        return Rule(dim, code, f"the condition {format_expr(c)}")
    return None


def _unknown_term(e: ir.Expr, found: set[str], dims: set[str]) -> tuple[str | None, int]:
    if isinstance(e, ir.Name) and e.name in dims and e.name not in found:
        return e.name, 1
    if isinstance(e, ir.Binary) and e.op == "*":
        for k, d in ((e.left, e.right), (e.right, e.left)):
            if (isinstance(k, ir.Num) and isinstance(k.value, int) and k.value > 0
                    and isinstance(d, ir.Name) and d.name in dims and d.name not in found):
                return d.name, k.value
    return None, 1
