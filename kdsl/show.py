"""Readable text for IR nodes: ``kdsl show`` and error messages use it."""
from __future__ import annotations

from . import ir

_PREC = {"or": 1, "and": 2, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4,
         "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6, "**": 8}
_UNARY = {"not": 3, "neg": 7}  # 'not' binds looser than comparisons, '-' tighter than '*'
_BODY = (ir.Reduce, ir.Scan, ir.Collective)


def format_expr(e: ir.Expr, parent: int = 0) -> str:
    """``e`` as .kspec text that parses back to ``e``, with no more parentheses than needed."""
    s = _bare(e)
    return f"({s})" if _wraps(e, parent) else s


def _wraps(e: ir.Expr, parent: int) -> bool:
    if isinstance(e, ir.Num):
        return repr(e.value).startswith("-") and parent > _UNARY["neg"]
    if isinstance(e, ir.Unary):
        return parent > _UNARY[e.op]
    if isinstance(e, ir.Binary):
        return _PREC[e.op] < parent
    return False


def _sides(op: str) -> tuple[int, int]:
    """The parent precedence of each operand: ** groups to the right, comparisons don't chain."""
    p = _PREC[op]
    if op == "**":
        return p + 1, p
    return (p + 1 if p == 4 else p), p + 1


def _open_right(e: ir.Expr) -> bool:
    """Does ``e``'s text end in a reduction body, which a following '*' would extend?"""
    if isinstance(e, _BODY):
        return True
    if isinstance(e, ir.Binary):
        return not _wraps(e.right, _sides(e.op)[1]) and _open_right(e.right)
    if isinstance(e, ir.Unary):
        return not _wraps(e.operand, _UNARY[e.op]) and _open_right(e.operand)
    return False


def _bare(e: ir.Expr) -> str:
    if isinstance(e, ir.Num):
        return repr(e.value)
    if isinstance(e, ir.Name):
        return e.name
    if isinstance(e, ir.Access):
        s = f"{e.tensor}[{', '.join(format_expr(x) for x in e.subscripts)}]"
        return s + (f" pad({format_expr(e.pad)})" if e.pad is not None else "")
    if isinstance(e, ir.Unary):
        return ("-" if e.op == "neg" else "not ") + format_expr(e.operand, _UNARY[e.op])
    if isinstance(e, ir.Binary):
        lp, rp = _sides(e.op)
        left = format_expr(e.left, lp)
        if _PREC[e.op] >= _PREC["*"] and not _wraps(e.left, lp) and _open_right(e.left):
            left = f"({left})"
        return f"{left} {e.op} {format_expr(e.right, rp)}"
    if isinstance(e, ir.Call):
        return f"{e.fn}({', '.join(format_expr(a) for a in e.args)})"
    if isinstance(e, ir.Reduce):
        idx = ", ".join(_format_range(r) for r in e.indices)
        return f"{e.op}({idx}) {format_expr(e.body, 9)}"
    if isinstance(e, ir.Scan):  # (a decayed scan shows its decay: y = c * y + body)
        decay = "" if e.factor is None else f", {format_expr(e.factor)}"
        return f"{e.op}({e.index}{decay}) {format_expr(e.body, 9)}"
    if isinstance(e, ir.Collective):
        k = f", {format_expr(e.k)}" if e.k is not None else ""
        return f"{e.op}({_format_range(e.index)}{k}) {format_expr(e.body, 9)}"
    raise TypeError(type(e).__name__)


def _format_range(r: ir.IndexRange) -> str:
    if r.lo is None:
        return r.name
    return f"{r.name} in {format_expr(r.lo)} .. {format_expr(r.hi)}"


def _format_domain(d) -> str:
    if isinstance(d, ir.ValueRange):
        return f" in {format_expr(d.lo)}..{format_expr(d.hi)}"
    if isinstance(d, ir.Offsets):
        return f" offsets({format_expr(d.total)})"
    if isinstance(d, ir.Positive):
        return " positive"
    return ""


def format_tensor(t: ir.Tensor) -> str:
    dt = f"like {t.like}" if t.like else " | ".join(t.dtypes)
    shape = ", ".join(format_expr(s) for s in t.shape)
    return f"{t.role:<3} {t.name}: {dt} [{shape}]{_format_domain(t.domain)}"


def format_op(op: ir.Op) -> str:
    lines = [f"op {op.name}  (hash {op.hash})", f"  dims {', '.join(op.dims)}"]
    lines += [f"  {format_tensor(t)}" for t in op.tensors]
    for s in op.statements:
        lhs = [n if not s.ranges or s.ranges[p] is None else _format_range(s.ranges[p])
               for p, n in enumerate(s.indices)]
        lines.append(f"  {s.target}[{', '.join(lhs)}] = {format_expr(s.value)}")
    if op.baseline:
        lines.append(f"  baseline {op.baseline.source}")
    if op.tolerance:
        tol = "exact" if op.tolerance.exact else " ".join(
            f"{d}(rtol={r:g}, atol={a:g})" for d, r, a in op.tolerance.table)
        lines.append(f"  tolerance {tol}")
    if op.test:
        rng = ", ".join(f"{r.dim} in {format_expr(r.lo)}..{format_expr(r.hi)}"
                        for r in op.test.ranges)
        cond = " where " + " and ".join(format_expr(c) for c in op.test.conditions) \
            if op.test.conditions else ""
        lines.append(f"  test {rng}{cond}")
    for b in op.bench:
        dev = f"{b.device}: " if b.device else ""
        dt = f", dtype={b.dtype}" if b.dtype else ""
        lines.append(f"  bench {dev}{', '.join(f'{k}={v}' for k, v in b.sizes)}{dt}")
    return "\n".join(lines)
