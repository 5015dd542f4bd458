"""Exponentials written as the math reads, rewritten into forms that do not overflow.

The float64 reference computes ``exp(x) / sum(j) exp(x)`` at x = 200 without trouble; a
float32 kernel rendered as written takes ``exp(200)`` to infinity and returns NaN. Where
a spec declares inputs of such magnitudes (``in x: f32 [M, N] in -200 .. 200``) that
kernel is wrong, and torch's own softmax, log-softmax, softplus, cross-entropy and
attention are right.

An *exponential term* is ``exp(a)`` times factors without exponentials, possibly under a
mask: ``exp(a)``, ``w[j] * exp(a)``, ``exp(a) * f32(mask[i, j])``, ``where(j <= i,
exp(a), 0)``, ``e[i, j]`` for an intermediate defined as one. A *sum of exponentials* is a
sum or mean over indices of one term, or terms added and subtracted (a term without
exponentials counts as ``exp(0)`` times itself: the 1 of ``1 + exp(x)``). Such a sum
times ``exp(-m)`` is the same sum with each ``exp(a)`` replaced by ``exp(a - m)``, and
with ``m`` the largest exponent among its active terms (a maximum over the summed
indices, an intermediate of its own, or an elementwise ``max`` of a few) every
exponential stays at most 1. So, with that ``m``:

- ``N / D``, D a sum of exponentials and N a term or a sum of them:
  ``N·exp(-m) / D·exp(-m)`` (a softmax, a sigmoid ``e / (1 + e)``, a tanh through
  ``exp``, an attention's weighted sum, masked or not; ``N * (1 / D)`` too; with N free
  of exponentials, as in ``1 / (1 + exp(-x))``, D's overflow gives the right limit, 0);
- ``log(D)``: ``m + log(D·exp(-m))`` (log-sum-exp, weighted, of a mean, logaddexp);
- ``log(N / D)``: ``log(N) - log(D)``, where both are known never to be negative (their
  factors numbers, inputs of non-negative domains, absolute values); ``log(exp(a) * r)``:
  ``a + log(r)``;
- ``log(1 + exp(a))``, ``log1p(exp(a))``: ``max(a, 0) + log(1 + exp(-abs(a)))``;
- ``log(cumsum(j) T)``, T a term never negative: ``logcumsumexp(j) log T``, a running
  log-sum-exp (a prefix has no one maximum to shift by: each partial sum keeps its own).

Masked maxima are taken over the active terms only (a causal mask's future scores may be
the largest, and a shift by them would take every active term to zero), a masked term
stays 0 whatever its exponent, and a maximum over no active term (masked, or a range that
may be empty) shifts by 0. A reduction's bound indices are renamed before a shift goes
inside it, so that the shift's indices are never captured. An intermediate defined as one of these forms (``e[i,
j] = exp(x[i, j])``, ``s[i] = sum(j) e[i, j]``, ``p[i, j] = e[i, j] / s[i]``) is seen
through and dropped once nothing reads it. Sums already shifted by a maximum
(``exp(x[i, j] - m[i])``) are left as written, and so is a sum that reads an index an
enclosing reduction binds over a range not starting at 0.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from kdsl import ir
from kdsl.backends.base import Unsupported
from kdsl.backends.lower.rewrite import (free_names, rebuild, subst, unique_name,
                                        without_unread)

NEG_INF = ir.Unary("neg", ir.Name("inf"))


@dataclass(frozen=True)
class Term:
    """``exp(a)`` times factors free of exponentials, active where ``cond`` holds (None:
    everywhere); ``shifted(m)`` is the term with ``exp(a)`` as ``exp(a - m)``; ``positive``:
    never negative (its factors are known not to be)."""
    a: ir.Expr
    cond: ir.Expr | None
    shifted: Callable[[ir.Expr], ir.Expr]
    positive: bool = True


def stable_exponentials(op: ir.Op) -> ir.Op:
    """``op`` with each form above rewritten; ``op`` itself where there is none."""
    defs = {st.target: st for st in op.statements}  # (an output read elsewhere too)
    tensors, statements = list(op.tensors), []
    changed = False
    for st in op.statements:
        rewriter = _Rewriter(op, defs, st, tensors)
        value = rewriter.visit(st.value, {})
        changed |= rewriter.changed
        statements += rewriter.extra + [dataclasses.replace(st, value=value)]
    if not changed:
        return op
    return without_unread(dataclasses.replace(op, tensors=tuple(tensors),
                                               statements=tuple(statements)))


def _alpha(e: ir.Expr, mapping: dict | None = None) -> ir.Expr:
    """``e`` with ``mapping`` put in and every bound index renamed fresh, so that a shift
    put inside it can never be captured by one of its reductions."""
    return subst(e, dict(mapping or {}) or {"__kd_none": ir.Name("__kd_none")})


def _is_num(e: ir.Expr, value=None) -> bool:
    return isinstance(e, ir.Num) and (value is None or e.value == value)


class _Rewriter:
    def __init__(self, op, defs, st, tensors):
        self.op, self.defs, self.st, self.tensors = op, defs, st, tensors
        self.shape = dict(zip(st.indices, op.tensor(st.target).shape))
        self.extra: list[ir.Statement] = []
        self.changed = False

    # -- seeing through intermediates ----------------------------------------------

    def _resolved(self, e: ir.Expr) -> ir.Expr:
        """``e``, or the definition of the intermediate it reads when that carries an
        exponential (its indices put in place)."""
        if isinstance(e, ir.Access) and e.tensor in self.defs and e.pad is None:
            d = self.defs[e.tensor]
            if any(isinstance(n, (ir.Scan, ir.Collective)) for n in ir.walk(d.value)):
                return e  # (read at another index, a scan is not a value to put in place)
            if self._carries_exp(d.value) or self._reciprocal(d.value) is not None:
                try:
                    return _alpha(d.value, dict(zip(d.indices, e.subscripts)))
                except Unsupported:
                    return e
        return e

    def _carries_exp(self, e: ir.Expr, seen: frozenset = frozenset()) -> bool:
        """``e`` has an exponential, in itself or in an intermediate it reads."""
        for n in ir.walk(e):
            if isinstance(n, ir.Call) and n.fn == "exp":
                return True
            if isinstance(n, ir.Access) and n.tensor in self.defs and n.tensor not in seen \
                    and self._carries_exp(self.defs[n.tensor].value, seen | {n.tensor}):
                return True
        return False

    def _reciprocal(self, e: ir.Expr) -> ir.Expr | None:
        """D of ``1 / D``."""
        if isinstance(e, ir.Binary) and e.op == "/" and _is_num(e.left, 1):
            return e.right
        return None

    # -- terms -------------------------------------------------------------------------

    def term(self, e: ir.Expr) -> Term | None:
        """``e`` as an exponential term, or None."""
        e = self._resolved(e)
        if isinstance(e, ir.Call) and e.fn == "exp" and len(e.args) == 1:
            a = e.args[0]
            return Term(a, None, lambda m: ir.Call("exp", (ir.Binary("-", a, m),)))
        if isinstance(e, ir.Unary) and e.op == "neg":
            t = self.term(e.operand)
            return t and Term(t.a, t.cond, lambda m: ir.Unary("neg", t.shifted(m)), False)
        if isinstance(e, ir.Binary) and e.op in ("*", "/"):
            for k, (x, y) in enumerate(((e.left, e.right), (e.right, e.left))):
                if k == 1 and e.op == "/":
                    break  # r / exp(a) is not a term of exp(a)
                if self._carries_exp(y):
                    continue
                t = self.term(x)
                if t is None:
                    continue
                positive = t.positive and self._nonnegative(y)
                if e.op == "/":
                    return Term(t.a, t.cond, lambda m: ir.Binary("/", t.shifted(m), y), positive)
                # a factor that is 0 masks the term: its maximum is over the others, and a
                # masked exp(a - m) past the float range must not make inf * 0 = NaN
                nonzero = ir.Binary("!=", y, ir.Num(0))

                def masked(m, t=t, y=y, k=k, nonzero=nonzero):
                    product = ir.Binary("*", t.shifted(m), y) if k == 0 else \
                        ir.Binary("*", y, t.shifted(m))
                    return ir.Call("where", (nonzero, product, ir.Num(0.0)))
                return Term(t.a, _and(t.cond, nonzero), masked, positive)
            return None
        if isinstance(e, ir.Call) and e.fn == "where" and len(e.args) == 3:
            c, x, y = e.args
            for value, other, active in ((x, y, c), (y, x, ir.Unary("not", c))):
                if _is_num(other, 0) or _is_num(other, 0.0):
                    t = self.term(value)
                    if t is not None:
                        def shifted(m, t=t, value=value):
                            args = (c, t.shifted(m), other) if value is x else \
                                (c, other, t.shifted(m))
                            return ir.Call("where", args)
                        return Term(t.a, _and(active, t.cond), shifted, t.positive)
        return None

    def chain(self, e: ir.Expr) -> list[tuple[str, ir.Expr, Term | None]] | None:
        """``e`` as terms added and subtracted: (sign, the leaf, its term or None for a
        leaf free of exponentials); None unless some leaf is a term and every leaf that
        carries an exponential is one."""
        out: list = []

        def walk(x, sign):
            x2 = self._resolved(x)
            if isinstance(x2, ir.Binary) and x2.op in ("+", "-"):
                walk(x2.left, sign)
                walk(x2.right, sign if x2.op == "+" else ("-" if sign == "+" else "+"))
                return
            t = self.term(x2)
            if t is None and (self._carries_exp(x2) or any(isinstance(n, ir.Reduce)
                                                   for n in ir.walk(x2))):
                raise ValueError
            out.append((sign, x2, t))
        try:
            walk(e, "+")
        except ValueError:
            return None
        return out if any(t is not None for _, _, t in out) and len(out) > 1 else None

    # -- shifts ------------------------------------------------------------------------

    def _sum_shift(self, total: ir.Reduce, t: Term, bound: dict) -> ir.Expr | None:
        """An intermediate holding the largest active exponent of ``total``'s terms over
        its indices (0 where none is active); None where it cannot be one."""
        if _shifted_by_max(t.a, self.defs):
            return None
        free = free_names(total, self.op.dims)
        keep, shape = [], []
        for n in [n for n in self.st.indices if n in free and n not in bound] + \
                sorted(n for n in free if n in bound):
            if n in bound:  # (an enclosing reduction's index, even where it shadows one
                r = bound[n]  # of the statement's)
                if r.lo is None or not _is_num(r.lo, 0) or free_names(r.hi, self.op.dims):
                    return None  # over a range an intermediate cannot be shaped by
                keep.append(n)
                shape.append(r.hi)
            elif n in self.st.indices:
                keep.append(n)
                shape.append(self.shape[n])
            else:
                return None
        body = t.a if t.cond is None else ir.Call("where", (t.cond, t.a, NEG_INF))
        access = self._intermediate(keep, shape, ir.Reduce("max", total.indices, body))
        if t.cond is None and all(self._never_empty(r) for r in total.indices):
            return access
        # no active term (masked, or an empty range): shift by 0; the sum is 0 either way,
        # and exp(a + inf) would make inf - inf or inf * 0 of it
        return self._intermediate(keep, shape, ir.Call(
            "where", (ir.Binary(">", access, NEG_INF), access, ir.Num(0.0))))

    def _never_empty(self, r: ir.IndexRange) -> bool:
        """``r`` is 0 .. D with D a dim whose test range starts at 1 or above."""
        from kdsl.sizes import ranges
        if r.lo is None or not _is_num(r.lo, 0) or not isinstance(r.hi, ir.Name):
            return False
        if self.op.test is None:
            return False
        lo = ranges(self.op).get(r.hi.name, (0, 0))[0]
        return lo >= 1

    def _intermediate(self, keep, shape, value) -> ir.Access:
        name = unique_name(self.tensors, f"kd_max{len(self.extra)}_{self.st.target}")
        self.tensors.append(ir.Tensor(name, "tmp", (ir.scratch_float(self.tensors),), None,
                                      tuple(shape)))
        self.extra.append(ir.Statement(name, tuple(keep), value))
        return ir.Access(name, tuple(ir.Name(n) for n in keep))

    def _sum_of_terms(self, e: ir.Expr, bound: dict):
        """(the shift, ``e`` shifted by it) where ``e`` is a sum of exponentials; None."""
        e = self._resolved(e)
        if isinstance(e, ir.Reduce) and e.op in ("sum", "mean"):
            e = _alpha(e)
            t = self.term(e.body)
            m = None if t is None else self._sum_shift(e, t, bound)
            return None if m is None else (m, self._shifted_sum(e, t, m, bound))
        terms = self.chain(e)
        if terms is None:
            return None
        exps = [t.a if t.cond is None else ir.Call("where", (t.cond, t.a, NEG_INF))
                for _, _, t in terms if t is not None]
        if any(_shifted_by_max(t.a, self.defs) for _, _, t in terms if t is not None):
            return None
        if any(t is None for _, _, t in terms):
            exps.append(ir.Num(0.0))
        m = exps[0]
        for x in exps[1:]:
            m = ir.Call("max", (m, x))
        if any(t is not None and t.cond is not None for _, _, t in terms):
            m = ir.Call("where", (ir.Binary(">", m, NEG_INF), m, ir.Num(0.0)))
        m = self.visit(m, bound)
        return m, self._shift_chain(terms, m, bound)

    def _shifted_sum(self, r: ir.Reduce, t: Term, m: ir.Expr, bound: dict) -> ir.Reduce:
        """``r`` (a sum or mean of the term ``t``, its indices fresh: ``_alpha``) with
        ``t`` shifted by ``m``."""
        inner = dict(bound)
        for x in r.indices:
            inner[x.name] = x
        return dataclasses.replace(r, body=self.visit(t.shifted(m), inner))

    def _shift_chain(self, terms, m, bound) -> ir.Expr:
        out = None
        for sign, leaf, t in terms:
            x = self.visit(t.shifted(m), bound) if t is not None else \
                ir.Binary("*", self.visit(leaf, bound),
                          ir.Call("exp", (ir.Unary("neg", m),)))
            out = x if out is None else ir.Binary(sign, out, x)
            if out is x and sign == "-":
                out = ir.Unary("neg", x)
        return out

    def _shift_numerator(self, e: ir.Expr, m: ir.Expr, bound: dict) -> ir.Expr | None:
        """``e * exp(-m)`` written without overflow, ``e`` a term or a sum of terms; None
        otherwise."""
        r = self._resolved(e)
        t = self.term(r)
        if t is not None:
            return self.visit(t.shifted(m), bound)
        if isinstance(r, ir.Reduce) and r.op in ("sum", "mean"):
            r = _alpha(r)  # (the shift reads indices its reductions may bind)
            t = self.term(r.body)
            return None if t is None else self._shifted_sum(r, t, m, bound)
        terms = self.chain(r)
        return None if terms is None else self._shift_chain(terms, m, bound)

    # -- the rewrite -------------------------------------------------------------------

    def visit(self, e: ir.Expr, bound: dict) -> ir.Expr:
        """``e`` rewritten; ``bound`` maps the indices enclosing reductions bind to their
        ranges."""
        if isinstance(e, ir.Call) and e.fn in ("log", "log1p") and len(e.args) == 1:
            found = self._log(e, bound)
            if found is not None:
                self.changed = True
                return found
        if isinstance(e, ir.Binary) and e.op in ("/", "*"):
            found = self._ratio(e, bound)
            if found is not None:
                self.changed = True
                return found
        if isinstance(e, ir.Reduce):
            inner = dict(bound)
            for r in e.indices:
                inner[r.name] = r
            return dataclasses.replace(e, body=self.visit(e.body, inner))
        if isinstance(e, (ir.Scan, ir.Collective)):
            return e
        return rebuild(e, lambda x: self.visit(x, bound))

    def _ratio(self, e: ir.Binary, bound: dict) -> ir.Expr | None:
        if e.op == "/":
            num, den = e.left, e.right
        else:  # N * (1 / D), the reciprocal often an intermediate of its own
            for num, other in ((e.left, e.right), (e.right, e.left)):
                den = self._reciprocal(self._resolved(other))
                if den is not None:
                    break
            else:
                return None
        if not self._carries_exp(num):
            return None  # c / D overflows to c / inf = 0, the limit: no shift needed
        found = self._sum_of_terms(den, bound)
        if found is None:
            return None
        m, den_shifted = found
        num_shifted = self._shift_numerator(num, m, bound)
        if num_shifted is None:
            return None
        return ir.Binary("/", num_shifted, den_shifted)

    def _log(self, e: ir.Call, bound: dict) -> ir.Expr | None:
        x = e.args[0]
        if e.fn == "log1p":
            t = self.term(x)
            if t is None or t.cond is not None or not _is_exp_call(self._resolved(x)):
                return None
            return _softplus(self.visit(t.a, bound))
        r = self._resolved(x)
        if isinstance(r, ir.Binary) and r.op == "+":
            for one, other in ((r.left, r.right), (r.right, r.left)):
                o = self._resolved(other)
                if _is_num(one, 1) and _is_exp_call(o):
                    return _softplus(self.visit(o.args[0], bound))
        if isinstance(r, ir.Binary) and r.op == "*":  # N * (1 / D) is N / D
            for num, other in ((r.left, r.right), (r.right, r.left)):
                den = self._reciprocal(self._resolved(other))
                if den is not None:
                    r = ir.Binary("/", num, den)
                    break
        if isinstance(r, ir.Binary) and r.op == "/":
            if self._positive(r.left) and self._positive(r.right):
                return ir.Binary("-", self.visit(ir.Call("log", (r.left,)), bound),
                                 self.visit(ir.Call("log", (r.right,)), bound))
            return None
        if _is_exp_call(r):
            return self.visit(r.args[0], bound)
        if isinstance(r, ir.Binary) and r.op == "*":  # log(exp(a) * y) = a + log(y)
            for x, y in ((r.left, r.right), (r.right, r.left)):
                x = self._resolved(x)
                if _is_exp_call(x) and not self._carries_exp(y):
                    return ir.Binary("+", self.visit(x.args[0], bound),
                                     ir.Call("log", (self.visit(y, bound),)))
        r = self._same_scan(r)
        if isinstance(r, ir.Scan) and r.op == "cumsum":
            return self._log_scan(r, bound)
        if self.term(r) is not None:
            return None
        found = self._sum_of_terms(r, bound)
        if found is not None:
            m, shifted = found
            return ir.Binary("+", m, ir.Call("log", (shifted,)))
        return None

    def _same_scan(self, e: ir.Expr) -> ir.Expr:
        """The scan an intermediate is defined as, where ``e`` reads it at the very indices
        of its statement and of this one (a scan runs along its statement's own index),
        else ``e``."""
        if isinstance(e, ir.Access) and e.tensor in self.defs and e.pad is None:
            d = self.defs[e.tensor]
            plain = tuple(x.name if isinstance(x, ir.Name) else None for x in e.subscripts)
            if isinstance(d.value, ir.Scan) and plain == tuple(d.indices) == \
                    tuple(self.st.indices):
                return d.value
        return e

    def _log_scan(self, r: ir.Scan, bound: dict) -> ir.Expr | None:
        """``log(cumsum(j) T)`` for a term T never negative: the running log-sum-exp of
        ``log T`` (``logcumsumexp``), whose combine, ``logaddexp``, keeps every partial sum
        in the log domain. No single shift serves a prefix: by the row's maximum, the early
        terms of a row that grows underflow to 0 and their logs to -inf."""
        exponent = self._log_of_term(r.body, bound)
        return None if exponent is None else ir.Scan("logcumsumexp", r.index, exponent)

    def _log_of_term(self, e: ir.Expr, bound: dict) -> ir.Expr | None:
        """``log(e)`` without its exponential, for a term never negative: ``exp(a)``
        gives ``a``; ``exp(a) * y`` and ``exp(a) / y``, ``a + log(y)`` and ``a - log(y)``;
        a term masked to 0 (``where(c, T, 0)``), ``-inf`` where it is masked."""
        r = self._resolved(e)
        t = self.term(r)
        if t is None or not t.positive:
            return None
        if _is_exp_call(r):
            return self.visit(r.args[0], bound)
        if isinstance(r, ir.Binary) and r.op in ("*", "/"):
            for k, (x, y) in enumerate(((r.left, r.right), (r.right, r.left))):
                if k == 1 and r.op == "/":
                    break
                if self._carries_exp(y):
                    continue
                inner = self._log_of_term(x, bound)
                if inner is not None:
                    return ir.Binary("+" if r.op == "*" else "-", inner,
                                     ir.Call("log", (self.visit(y, bound),)))
            return None
        if isinstance(r, ir.Call) and r.fn == "where":
            c, x, y = r.args
            for value, other, take in ((x, y, True), (y, x, False)):
                if _is_num(other, 0) or _is_num(other, 0.0):
                    inner = self._log_of_term(value, bound)
                    if inner is not None:
                        args = (c, inner, NEG_INF) if take else (c, NEG_INF, inner)
                        return ir.Call("where", (self.visit(args[0], bound),) + args[1:])
        return None

    def _positive(self, e: ir.Expr) -> bool:
        """A term or a sum of exponentials known never to be negative (so that the log of
        a ratio of two is the difference of their logs)."""
        r = self._resolved(e)
        t = self.term(r)
        if t is not None:
            return t.positive
        if isinstance(r, ir.Reduce) and r.op in ("sum", "mean"):
            t = self.term(r.body)
            return t is not None and t.positive
        terms = self.chain(r)
        return terms is not None and all(
            sign == "+" and (t.positive if t is not None else self._nonnegative(leaf))
            for sign, leaf, t in terms)

    def _nonnegative(self, e: ir.Expr) -> bool:
        """Known never to be negative: a number, an input whose domain starts at 0 or
        above, an absolute value, a cast or product of such."""
        if isinstance(e, ir.Num):
            return e.value >= 0
        if isinstance(e, ir.Access):
            t = self.op.tensor(e.tensor)
            if isinstance(t.domain, ir.Positive):
                return True
            if isinstance(t.domain, ir.ValueRange) and isinstance(t.domain.lo, ir.Num):
                return t.domain.lo.value >= 0
            return False
        if isinstance(e, ir.Call) and (e.fn == "abs" or e.fn in ("f32", "f64", "f16", "bf16")):
            return e.fn == "abs" or self._nonnegative(e.args[0])
        if isinstance(e, ir.Binary) and e.op in ("*", "/"):
            return self._nonnegative(e.left) and self._nonnegative(e.right)
        return False


def _is_exp_call(e: ir.Expr) -> bool:
    return isinstance(e, ir.Call) and e.fn == "exp" and len(e.args) == 1


def _and(a: ir.Expr | None, b: ir.Expr | None) -> ir.Expr | None:
    if a is None or b is None:
        return a if b is None else b
    return ir.Binary("and", a, b)


def _softplus(a: ir.Expr) -> ir.Expr:
    """log(1 + exp(a)) as ``max(a, 0) + log(1 + exp(-|a|))``: finite for every finite a.
    (``log`` rather than ``log1p``: as precise as the form written where a is very negative,
    and vectorized where ``log1p`` is not: the C softplus ran at half the speed with it.)"""
    tail = ir.Call("exp", (ir.Unary("neg", ir.Call("abs", (a,))),))
    return ir.Binary("+", ir.Call("max", (a, ir.Num(0.0))),
                     ir.Call("log", (ir.Binary("+", ir.Num(1.0), tail),)))


def _shifted_by_max(a: ir.Expr, defs) -> bool:
    """``a`` is ``x - m`` with ``m`` a maximum (read from an intermediate or inline)."""
    if not (isinstance(a, ir.Binary) and a.op == "-"):
        return False
    m = a.right
    if isinstance(m, ir.Access) and m.tensor in defs:
        m = defs[m.tensor].value
    return isinstance(m, ir.Reduce) and m.op == "max"
