"""Ranged reductions that are prefix or suffix scans, rewritten as scans.

``y[i, j] = sum(k in 0 .. j + 1) x[i, k]`` is an inclusive prefix sum and
``y[i, j] = sum(k in j .. N) x[i, k]`` (N the extent of j) a suffix sum. Rendered as
written, every output point walks its own range: quadratic work. As scans they are one
pass: the prefix form becomes ``cumsum(j) x[i, j]``; the suffix form a prefix scan of
the reversed row, read back reversed, ``r[i, j] = cumsum(j) x[i, N - 1 - j]`` and
``y[i, j] = r[i, N - 1 - j]`` (the stage splitter materializes ``r``, a scan read at a
computed index). Sums become cumsum, products cumprod, maxima cummax and minima cummin (a
running maximum written as ``max(k in 0 .. j + 1)`` was quadratic: 0.11x of torch.cummax
on the CPU); mean and the arg-reductions stay as written. A sum weighted by
``pow(c, j - k)`` (prefix) or ``pow(c, k - j)`` (suffix), c a number, is a decayed scan,
``cumdecay``: ``y[j] = c * y[j - 1] + x[j]`` (a discounted return was 0.01x of torch on
the CPU, quadratic). An exclusive sum (``k in 0 .. j``,
``k in j + 1 .. N``) is the inclusive scan less the point itself.
"""
from __future__ import annotations

import dataclasses

from kdsl import ir
from kdsl.backends.lower.rewrite import free_names, rebuild, subst

SCAN_OF = {"sum": "cumsum", "prod": "cumprod", "max": "cummax", "min": "cummin"}


def ranges_as_scans(op: ir.Op) -> ir.Op:
    """``op`` with every prefix or suffix ranged sum, product, maximum or minimum over an
    output index rewritten;
    ``op`` itself when there is none."""
    tensors = list(op.tensors)
    statements: list[ir.Statement] = []
    changed = False
    for st in op.statements:
        shape = dict(zip(st.indices, op.tensor(st.target).shape))
        extra: list[ir.Statement] = []

        def visit(e: ir.Expr) -> ir.Expr:
            nonlocal changed
            e = rebuild(e, visit)
            found = _scan_form(e, shape, op.dims)
            if found is None:
                return e
            kind, j, body, exclusive, decay = found
            changed = True
            scanned = _scanned(kind, j, body, e.op, shape, extra, tensors, st, op, decay)
            # an exclusive range is the inclusive scan less the point itself (sums only)
            return ir.Binary("-", scanned, body) if exclusive else scanned

        value = visit(st.value)
        statements += extra + [dataclasses.replace(st, value=value)]
    if not changed:
        return op
    return dataclasses.replace(op, tensors=tuple(tensors), statements=tuple(statements))


def _scanned(kind, j, body, red_op, shape, extra, tensors, st, op, decay=None) -> ir.Expr:
    """The inclusive prefix scan of ``body`` along ``j`` (decayed by ``decay``, a number,
    where not None), or the suffix scan as a reversed prefix scan in an intermediate
    (appended to ``extra``) read back reversed."""
    scan_op = "cumdecay" if decay is not None else SCAN_OF[red_op]
    if kind == "prefix":
        return ir.Scan(scan_op, j, body, factor=decay)
    flip = ir.Binary("-", ir.Binary("-", shape[j], ir.Num(1)), ir.Name(j))
    name = f"kd_rev{len(extra)}_{st.target}"
    # of the target's kind (an intermediate's dtype is its kind's: f32, i64 or bool): an
    # i64 running minimum kept in f32 lost its low bits. (An op whose dtypes span kinds,
    # ``f32 | i64``, keeps its first one's.)
    tensors.append(ir.Tensor(name, "tmp", (op.dtype_of(st.target, op.dtype_choices[0]),),
                             None, op.tensor(st.target).shape))
    extra.append(ir.Statement(name, st.indices,
                              ir.Scan(scan_op, j, subst(body, {j: flip}), factor=decay)))
    return ir.Access(name, tuple(flip if n == j else ir.Name(n) for n in st.indices))


def _scan_form(e: ir.Expr, shape: dict, dims):
    """('prefix' | 'suffix', output index j, body at k = j, exclusive, decay) of a ranged
    sum or product over one index k whose body reads j only through k: k in 0 .. j + 1 or
    j .. extent(j) (inclusive), and, for sums, k in 0 .. j or j + 1 .. extent(j). A sum's
    body may also read j in one factor ``pow(c, j - k)`` (a prefix) or ``pow(c, k - j)``
    (a suffix), c a number: a decayed sum, ``y[j] = c * y[j -+ 1] + x[j]`` (a discounted
    return, an exponential moving sum), whose ``decay`` is c (None otherwise)."""
    if not isinstance(e, ir.Reduce) or e.op not in SCAN_OF or len(e.indices) != 1:
        return None
    r = e.indices[0]
    for j, extent in shape.items():
        body, decay = e.body, None
        if j in free_names(e.body, dims):
            if e.op != "sum":
                continue
            split = _decay_split(e.body, r.name, j, dims)
            if split is None:
                continue
            body, decay, toward = split
        after = ir.Binary("+", ir.Name(j), ir.Num(1))
        forms = {("prefix", False): r.lo == ir.Num(0) and r.hi == after,
                 ("suffix", False): r.lo == ir.Name(j) and r.hi == extent,
                 ("prefix", True): e.op == "sum" and r.lo == ir.Num(0) and r.hi == ir.Name(j),
                 ("suffix", True): e.op == "sum" and r.lo == after and r.hi == extent}
        for (kind, exclusive), hit in forms.items():
            if hit and (decay is None or toward == kind):
                return kind, j, subst(body, {r.name: ir.Name(j)}), exclusive, decay
    return None


def _decay_split(body: ir.Expr, k: str, j: str, dims):
    """(the rest, c, 'prefix' | 'suffix') of a product ``pow(c, j - k) * rest`` or
    ``pow(c, k - j) * rest`` (either order, in a chain of products), c a number and the
    rest free of j; None otherwise."""
    factors: list[ir.Expr] = []

    def flatten(x):
        if isinstance(x, ir.Binary) and x.op == "*":
            flatten(x.left)
            flatten(x.right)
        else:
            factors.append(x)
    flatten(body)
    for n, f in enumerate(factors):
        if not (isinstance(f, ir.Call) and f.fn == "pow" and len(f.args) == 2 and
                isinstance(f.args[0], ir.Num) and isinstance(f.args[1], ir.Binary) and
                f.args[1].op == "-"):
            continue
        a, b = f.args[1].left, f.args[1].right
        toward = "prefix" if (a, b) == (ir.Name(j), ir.Name(k)) else \
            "suffix" if (a, b) == (ir.Name(k), ir.Name(j)) else None
        rest = factors[:n] + factors[n + 1:]
        if toward is None or any(j in free_names(x, dims) for x in rest):
            continue
        out = rest[0] if rest else ir.Num(1.0)
        for x in rest[1:]:
            out = ir.Binary("*", out, x)
        return out, f.args[0], toward
    return None
