"""Exponentials written as the math reads, rewritten into forms that do not overflow.

The float64 reference computes ``exp(x) / sum(j) exp(x)`` at x = 200 without trouble; a
float32 kernel rendered as written takes ``exp(200)`` to infinity and returns NaN. Where
a spec declares inputs of such magnitudes (``in x: f32 [M, N] in -200 .. 200``) that
kernel is wrong, and torch's own softmax, log-softmax, softplus and cross-entropy are
right. The same values, in forms that stay finite, with ``m`` the maximum of the
exponents over the summed indices (an intermediate of its own):

- ``exp(a) / sum(J) exp(b)``      ->  ``exp(a - m) / sum(J) exp(b - m)``
- ``log(sum(J) exp(b))``          ->  ``m + log(sum(J) exp(b - m))``
- ``log(exp(a))``                 ->  ``a``
- ``log(p / q)`` (p, q of the above forms)  ->  ``log(p) - log(q)``
- ``log(1 + exp(a))``, ``log1p(exp(a))``    ->  ``max(a, 0) + log(1 + exp(-abs(a)))``

An intermediate defined as one such exponential or sum (``e[i, j] = exp(x[i, j])``,
``s[i] = sum(j) e[i, j]``) is seen through, and dropped once nothing reads it. A sum whose
exponents are already shifted by a maximum (``exp(x[i, j] - m[i])`` with ``m`` a max) is
left as written, and so is one that reads an index bound by an enclosing reduction (its
maximum would need an intermediate over that index's range).
"""
from __future__ import annotations

import dataclasses

from kdsl import ir
from kdsl.backends.lower.rewrite import free_names, rebuild, subst


def stable_exponentials(op: ir.Op) -> ir.Op:
    """``op`` with each form above rewritten; ``op`` itself where there is none."""
    defs = {st.target: st for st in op.statements if op.tensor(st.target).role == "tmp"}
    tensors, statements = list(op.tensors), []
    changed = False
    for st in op.statements:
        shape = dict(zip(st.indices, op.tensor(st.target).shape))
        extra: list[ir.Statement] = []
        rewriter = _Rewriter(op, defs, st, shape, extra, tensors)
        value = rewriter.visit(st.value)
        changed |= rewriter.changed
        statements += extra + [dataclasses.replace(st, value=value)]
    if not changed:
        return op
    return _without_unread(dataclasses.replace(op, tensors=tuple(tensors),
                                               statements=tuple(statements)))


class _Rewriter:
    def __init__(self, op, defs, st, shape, extra, tensors):
        self.op, self.defs, self.st, self.shape = op, defs, st, shape
        self.extra, self.tensors = extra, tensors
        self.changed = False

    # -- seeing through intermediates ------------------------------------------------

    def _resolved(self, e: ir.Expr) -> ir.Expr:
        """``e``, or the definition of the intermediate it reads when that is an
        exponential or a sum (its indices put in place)."""
        if isinstance(e, ir.Access) and e.tensor in self.defs and e.pad is None:
            d = self.defs[e.tensor]
            if _is_exp(d.value) or _is_sum_of_exp(d.value, self.defs):
                return subst(d.value, dict(zip(d.indices, e.subscripts)))
        return e

    def _exp_arg(self, e: ir.Expr) -> ir.Expr | None:
        e = self._resolved(e)
        return e.args[0] if _is_exp(e) else None

    def _sum_of_exp(self, e: ir.Expr) -> tuple[ir.Reduce, ir.Expr] | None:
        """(the sum, its exponent) of ``sum(J) exp(b)``, ``b`` not shifted by a maximum."""
        e = self._resolved(e)
        if not (isinstance(e, ir.Reduce) and e.op == "sum"):
            return None
        b = self._exp_arg(e.body)
        if b is None or _shifted_by_max(b, self.op, self.defs):
            return None
        if not free_names(e, self.op.dims) <= set(self.st.indices):
            return None  # reads an index an enclosing reduction binds
        return e, b

    # -- the rewrite -------------------------------------------------------------------

    def visit(self, e: ir.Expr) -> ir.Expr:
        if isinstance(e, ir.Call) and e.fn in ("log", "log1p") and len(e.args) == 1:
            found = self._log(e)
            if found is not None:
                self.changed = True
                return found
        if isinstance(e, ir.Binary) and e.op == "/":
            found = self._ratio(e)
            if found is not None:
                self.changed = True
                return found
        return rebuild(e, self.visit)

    def _log(self, e: ir.Call) -> ir.Expr | None:
        x = e.args[0]
        if e.fn == "log1p":
            a = self._exp_arg(x)
            return None if a is None else _softplus(self.visit(a))
        if isinstance(x, ir.Binary) and x.op == "+":
            for one, other in ((x.left, x.right), (x.right, x.left)):
                a = self._exp_arg(other)
                if isinstance(one, ir.Num) and one.value == 1 and a is not None:
                    return _softplus(self.visit(a))
        a = self._exp_arg(x)
        if a is not None:
            return self.visit(a)
        if isinstance(x, ir.Binary) and x.op == "/" and self._positive(x.left) and \
                self._positive(x.right):
            return ir.Binary("-", self._log_of(x.left), self._log_of(x.right))
        found = self._sum_of_exp(x)
        if found is not None:
            total, b = found
            m = self._maximum(total, b)
            shifted = dataclasses.replace(total, body=_exp(ir.Binary("-", self.visit(b), m)))
            return ir.Binary("+", m, ir.Call("log", (shifted,)))
        return None

    def _log_of(self, e: ir.Expr) -> ir.Expr:
        return self.visit(ir.Call("log", (e,)))

    def _positive(self, e: ir.Expr) -> bool:
        return self._exp_arg(e) is not None or self._sum_of_exp(e) is not None

    def _ratio(self, e: ir.Binary) -> ir.Expr | None:
        a = self._exp_arg(e.left)
        found = self._sum_of_exp(e.right)
        if a is None or found is None:
            return None
        total, b = found
        m = self._maximum(total, b)
        shifted = dataclasses.replace(total, body=_exp(ir.Binary("-", self.visit(b), m)))
        return ir.Binary("/", _exp(ir.Binary("-", self.visit(a), m)), shifted)

    def _maximum(self, total: ir.Reduce, b: ir.Expr) -> ir.Access:
        """An intermediate holding ``max(J) b`` over the statement's indices it reads."""
        keep = [n for n in self.st.indices if n in free_names(total, self.op.dims)]
        name = f"kd_max{len(self.extra)}_{self.st.target}"
        self.tensors.append(ir.Tensor(name, "tmp", ("f32",), None,
                                      tuple(self.shape[n] for n in keep)))
        self.extra.append(ir.Statement(name, tuple(keep),
                                       ir.Reduce("max", total.indices, self.visit(b))))
        return ir.Access(name, tuple(ir.Name(n) for n in keep))


def _exp(e: ir.Expr) -> ir.Call:
    return ir.Call("exp", (e,))


def _is_exp(e: ir.Expr) -> bool:
    return isinstance(e, ir.Call) and e.fn == "exp" and len(e.args) == 1


def _is_sum_of_exp(e: ir.Expr, defs) -> bool:
    if not (isinstance(e, ir.Reduce) and e.op == "sum"):
        return False
    body = e.body
    if isinstance(body, ir.Access) and body.tensor in defs:
        body = defs[body.tensor].value
    return _is_exp(body)


def _softplus(a: ir.Expr) -> ir.Expr:
    """log(1 + exp(a)) as ``max(a, 0) + log(1 + exp(-|a|))``: finite for every finite a.
    (``log`` rather than ``log1p``: as precise as the form written where a is very negative,
    and vectorized where ``log1p`` is not: the C softplus ran at half the speed with it.)"""
    tail = _exp(ir.Unary("neg", ir.Call("abs", (a,))))
    return ir.Binary("+", ir.Call("max", (a, ir.Num(0.0))),
                     ir.Call("log", (ir.Binary("+", ir.Num(1.0), tail),)))


def _shifted_by_max(b: ir.Expr, op: ir.Op, defs) -> bool:
    """``b`` is ``x - m`` with ``m`` a maximum (read from an intermediate or inline)."""
    if not (isinstance(b, ir.Binary) and b.op == "-"):
        return False
    m = b.right
    if isinstance(m, ir.Access) and m.tensor in defs:
        m = defs[m.tensor].value
    return isinstance(m, ir.Reduce) and m.op == "max"


def _without_unread(op: ir.Op) -> ir.Op:
    """``op`` without the intermediates nothing reads any more."""
    statements = list(op.statements)
    while True:
        read = {n.tensor for st in statements for n in ir.walk(st.value)
                if isinstance(n, ir.Access)}
        read |= {n.args[0].name for st in statements for n in ir.walk(st.value)
                 if isinstance(n, ir.Call) and n.fn == "segment_of"
                 and isinstance(n.args[0], ir.Name)}
        dead = [st for st in statements
                if op.tensor(st.target).role == "tmp" and st.target not in read]
        if not dead:
            break
        statements = [st for st in statements if st not in dead]
    kept = {st.target for st in statements}
    tensors = tuple(t for t in op.tensors if t.role != "tmp" or t.name in kept)
    return dataclasses.replace(op, tensors=tensors, statements=tuple(statements))
