"""IR facts the array generators (numpy, torch) share: kinds, rewrites, patterns.

Everything here is pure IR in, IR or facts out; nothing renders code. The
kinds follow what ``kdsl.reference`` computes with numpy promotion on the
concrete dtypes of one instance (``f32 | i64`` ops sort ints as ints), not
the union the checker declares for intermediates.
"""
from __future__ import annotations

import dataclasses
import itertools

from kdsl import dtypes, ir
from kdsl.builtins import CASTS, CONSTANTS, ELEMENTWISE, INDEX_BUILTINS
from kdsl.backends.lower.rewrite import subst_range as _subst_range
from kdsl.backends.lower.rewrite import substitute  # noqa: F401  (aa.substitute)

COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
SEGMENT_OPS = ("sum", "prod", "max", "min", "mean")


# ---- kinds -------------------------------------------------------------------

def kind_variants(op: ir.Op) -> dict[str, tuple[str, ...]]:
    """The variant of the op's type variable -> its dtypes: its kind ('float', 'int',
    'bool'), with f64 apart as 'float64'.

    Code is rendered once per variant: f32, bf16 and f16 share float code; f64 has its
    own, which computes in float64 (a spec that declares f64 asks for its precision)."""
    out: dict[str, tuple[str, ...]] = {}
    for dt in op.dtype_choices:
        key = variant(dt)
        out[key] = out.get(key, ()) + (dt,)
    return out


def variant(dtype: str) -> str:
    """The code variant of a dtype: its kind, f64 apart (see ``kind_variants``)."""
    return "float64" if dtype == "f64" else dtypes.kind(dtype)


def type_var_tensor(op: ir.Op) -> ir.Tensor | None:
    """The tensor whose dtype is the op's type variable (None: the op has one dtype)."""
    for t in op.tensors:
        if t.like is None and len(t.dtypes) > 1:
            return t
    return None


def result_kind(op: str, kinds: list[str]) -> str:
    """The kind of ``a <op> b``: numpy promotion, with bool arithmetic counted as int."""
    if op in COMPARISONS or op in ("and", "or"):
        return "bool"
    if op in ("/", "**") or "float" in kinds:
        return "float"
    return "int"


def call_kind(fn: str, kinds: list[str]) -> str:
    if fn in CASTS:
        return CASTS[fn]
    if fn in INDEX_BUILTINS:
        return "int"
    b = ELEMENTWISE[fn]
    if b.result != "same":
        return b.result
    kinds = kinds[1:] if fn == "where" else kinds
    return "float" if "float" in kinds else "int" if "int" in kinds else "bool"


# ---- substitution ------------------------------------------------------------

_fresh = itertools.count()


def rename_binders(e: ir.Expr) -> ir.Expr:
    """``e`` with every reduction index renamed to a fresh name (before inlining it elsewhere)."""
    if isinstance(e, ir.Reduce):
        ranges, body, names = [], e.body, {}
        for r in e.indices:
            new = f"{r.name}__{next(_fresh)}"
            ranges.append(dataclasses.replace(_subst_range(r, names), name=new))
            names[r.name] = ir.Name(new)
        return dataclasses.replace(e, indices=tuple(ranges),
                                   body=rename_binders(substitute(body, names)))
    return ir.map_operands(e, rename_binders)


FUSION = ("none", "elementwise", "all")


def inline_intermediates(op: ir.Op, level: str) -> ir.Op:
    """``op`` with intermediates substituted into their readers.

    'elementwise' inlines intermediates without reductions; 'all' also inlines
    reductions that are read only at plain indices (so they are not recomputed
    per element of a gather). Padded reads, scans and collectives stay
    materialized. Semantics are unchanged: the reference never rounds an
    intermediate."""
    if level == "none":
        return op
    defs: dict[str, tuple[tuple[str, ...], ir.Expr]] = {}
    statements = []
    for st in op.statements:
        value = _inline_reads(st.value, defs)
        if op.tensor(st.target).role == "tmp" and _inlinable(op, st, level):
            defs[st.target] = (st.indices, rename_binders(value))
        else:
            statements.append(dataclasses.replace(st, value=value))
    return dataclasses.replace(op, statements=tuple(statements))


def _inlinable(op: ir.Op, st: ir.Statement, level: str) -> bool:
    nodes = list(ir.walk(st.value))
    if any(isinstance(n, (ir.Scan, ir.Collective)) for n in nodes):
        return False
    reads = [n for s in op.statements for n in ir.walk(s.value)
             if isinstance(n, ir.Access) and n.tensor == st.target]
    if any(r.pad is not None for r in reads):
        return False
    if any(isinstance(n, ir.Reduce) for n in nodes):
        return level == "all" and all(isinstance(s, ir.Name) for r in reads for s in r.subscripts)
    return True


def _inline_reads(e: ir.Expr, defs) -> ir.Expr:
    if isinstance(e, ir.Access) and e.tensor in defs:
        indices, value = defs[e.tensor]
        subs = tuple(_inline_reads(s, defs) for s in e.subscripts)
        return rename_binders(substitute(value, dict(zip(indices, subs))))
    return ir.map_operands(e, lambda c: _inline_reads(c, defs))


# ---- patterns ------------------------------------------------------------------

def product_factors(e: ir.Expr) -> list[ir.Expr]:
    """The factors of a product tree ``a * b * c`` (one factor if ``e`` is no product)."""
    if isinstance(e, ir.Binary) and e.op == "*":
        return product_factors(e.left) + product_factors(e.right)
    return [e]


def segment_pattern(op: ir.Op, e: ir.Reduce) -> tuple[str, str] | None:
    """(offsets tensor, outer index) when ``e`` reduces over ``off[s] .. off[s + 1]``.

    Such a reduction is a segment reduction over a flat axis: the body can be
    evaluated once per element of the jagged dimension, not padded to the longest
    segment."""
    if e.op not in SEGMENT_OPS or len(e.indices) != 1:
        return None
    r = e.indices[0]
    lo, hi = r.lo, r.hi
    if not (isinstance(lo, ir.Access) and isinstance(hi, ir.Access) and lo.tensor == hi.tensor
            and lo.pad is None and hi.pad is None and len(lo.subscripts) == 1):
        return None
    t = op.tensor(lo.tensor)
    if t.role != "in" or not isinstance(t.domain, ir.Offsets):
        return None
    s = lo.subscripts[0]
    if not isinstance(s, ir.Name):
        return None
    plus_one = (ir.Binary("+", s, ir.Num(1)), ir.Binary("+", ir.Num(1), s))
    if hi.subscripts[0] not in plus_one:
        return None
    return lo.tensor, s.name


def bound_depth(e: ir.Expr) -> int:
    """How many bound axes are open at once, at most, while ``e`` is evaluated."""
    inner = max((bound_depth(c) for c in _children(e)), default=0)
    if isinstance(e, ir.Reduce):
        return len(e.indices) + inner
    if isinstance(e, ir.Collective) and e.op in ("topk", "argtopk"):
        return 1 + inner
    return inner


def _children(e: ir.Expr) -> list[ir.Expr]:
    if isinstance(e, ir.Access):
        return list(e.subscripts) + ([e.pad] if e.pad is not None else [])
    if isinstance(e, ir.Unary):
        return [e.operand]
    if isinstance(e, ir.Binary):
        return [e.left, e.right]
    if isinstance(e, ir.Call):
        return list(e.args[1:] if e.fn == "segment_of" else e.args)
    if isinstance(e, ir.Reduce):
        return [x for r in e.indices for x in (r.lo, r.hi) if x is not None] + [e.body]
    if isinstance(e, (ir.Scan,)):
        return [e.body]
    if isinstance(e, ir.Collective):
        return [x for x in (e.index.lo, e.index.hi, e.k) if x is not None] + [e.body]
    return []


def free_names(e: ir.Expr) -> frozenset[str]:
    """Index and dim names ``e`` reads from its context (bound names excluded)."""
    if isinstance(e, ir.Name):
        return frozenset() if e.name in CONSTANTS else frozenset({e.name})
    if isinstance(e, ir.Reduce):
        out, bound = set(), set()
        for r in e.indices:
            for x in (r.lo, r.hi):
                if x is not None:
                    out |= free_names(x) - bound
            bound.add(r.name)
        return frozenset(out | (free_names(e.body) - bound))
    if isinstance(e, ir.Collective) and e.op in ("topk", "argtopk"):
        out = set(free_names(e.k)) if e.k is not None else set()
        for x in (e.index.lo, e.index.hi):
            if x is not None:
                out |= free_names(x)
        return frozenset(out | (free_names(e.body) - {e.index.name}))
    if isinstance(e, ir.Scan):
        return free_names(e.body) | {e.index}
    out = frozenset()
    for c in _children(e):
        out |= free_names(c)
    return out


# ---- which genes matter for an op --------------------------------------------

@dataclasses.dataclass(frozen=True)
class Features:
    contraction: bool   # a sum over a product of two or more factors
    bound_axes: bool    # a statement with two or more output indices and a bound one
    segments: bool      # a reduction over offsets[s] .. offsets[s + 1]
    stencils: bool      # a read at an affine form of indices (o * S + k - P)
    topk: bool
    intermediates: bool
    floats: bool
    chunkable: bool     # a statement whose first output index may be split into blocks


def features(op: ir.Op) -> Features:
    nodes = [(st, n) for st in op.statements for n in ir.walk(st.value)]
    reduces = [n for _, n in nodes if isinstance(n, ir.Reduce)]
    floats = any(dtypes.kind(op.dtype_of(t.name, d)) == "float"
                 for t in op.inputs + op.outputs for d in op.dtype_choices) or \
        any(isinstance(n, ir.Num) and isinstance(n.value, float) for _, n in nodes) or \
        any(isinstance(n, ir.Reduce) and n.op == "mean" for _, n in nodes)
    return Features(
        contraction=any(r.op == "sum" and len(product_factors(r.body)) > 1 for r in reduces),
        bound_axes=any(len(st.indices) > 1 and bound_depth(st.value) > 0
                       for st in op.statements),
        segments=any(segment_pattern(op, r) is not None for r in reduces),
        stencils=any(_stencil(op, n) for _, n in nodes if isinstance(n, ir.Access)),
        topk=any(isinstance(n, ir.Collective) and n.op in ("topk", "argtopk") for _, n in nodes),
        intermediates=any(op.tensor(st.target).role == "tmp" for st in op.statements),
        floats=floats,
        chunkable=any(chunkable(st) for st in op.statements),
    )


def _stencil(op: ir.Op, a: ir.Access) -> bool:
    for s in a.subscripts:
        indices = free_names(s) - set(op.dims)
        if not isinstance(s, ir.Name) and indices and (
                len(indices) > 1 or a.pad is not None
                or any(isinstance(n, ir.Binary) and n.op == "*" for n in ir.walk(s))):
            return True
    return False


def chunkable(st: ir.Statement) -> bool:
    """Rows of the first output index are independent unless a scan or collective runs along it."""
    if not st.indices:
        return False
    for n in ir.walk(st.value):
        if isinstance(n, ir.Collective) or (isinstance(n, ir.Scan) and n.index == st.indices[0]):
            return False
    return True


def unsupported_reason(op: ir.Op) -> str | None:
    """What the array generators cannot express in ``op``, or None."""
    for st in op.statements:
        for n in ir.walk(st.value):
            if isinstance(n, ir.Reduce) and n.op in ("argmax", "argmin") and len(n.indices) > 1:
                return f"{n.op} over {len(n.indices)} indices (only one is defined)"
            if isinstance(n, ir.Collective) and n.op in ("topk", "argtopk") and \
                    (free_names(n.index.lo) | free_names(n.index.hi)) - set(op.dims):
                return (f"{n.op} over a data-dependent range: the reference does not mask it, "
                        "so its meaning is not settled")
    return None
