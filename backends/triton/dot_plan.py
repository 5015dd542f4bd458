"""Recognising a contraction in checked IR, and laying it out as a (batched) GEMM.

A statement is a contraction when its value holds exactly one ``sum(k...)``
(or ``mean``) whose body is a product with exactly two factors that read
tensors at the reduced indices (``A[...] * B[...]``); every other factor and
everything around the reduction (bias adds, relu, casts) is elementwise.

The left-side indices then sort themselves by which factor reads them:
read by A only -> the tile's M axis, by B only -> N, by both (or neither)
-> batch, one program row each. A left-side index ``p`` that A reads only
through ``triu_row(p, F)`` and B only through ``triu_col(p, F)`` (or the other
way round) is a pair index: it splits into a virtual row index on one side
and a virtual column index on the other, the program computes the whole
F x F tile and stores the strict upper triangle into ``p``.

Factors are swapped when needed so that the output's last (contiguous) index
lies on N, which keeps stores coalesced.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from kdsl import ir
from kdsl.builtins import CASTS, CONSTANTS

# The accumulator inside an epilogue; '@' never appears in a spec name.
ACC = ir.Name("@acc")
FLOAT_CASTS = ("f16", "bf16", "f32", "f64")
DOT_DTYPES = ("f32", "f16", "bf16")
EPILOGUE_FNS = ("exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "tanh", "erf", "sigmoid",
                "silu", "relu", "abs", "min", "max", "pow", "where")
INDEX_OPS = ("+", "-", "*", "//", "%")
GUARD_OPS = ("<", "<=", ">", ">=", "==", "!=", "and", "or")


class NotAContraction(Exception):
    """Why an op is outside this generator's reach."""


@dataclass(frozen=True)
class Axis:
    """One index of the iteration space: ``name`` runs over ``lo .. lo + extent``."""
    name: str
    extent: ir.Expr
    lo: ir.Expr = ir.Num(0)
    virtual: bool = False  # a pair's row/column index, not a spec index


@dataclass(frozen=True)
class Pair:
    """Output index ``index`` enumerates the strict upper triangle of a ``size`` x ``size`` tile."""
    index: str
    size: ir.Expr
    row: str
    col: str


@dataclass(frozen=True)
class Contraction:
    target: str
    lhs: tuple[str, ...]
    shape: tuple[ir.Expr, ...]  # the target's shape, one extent per left-side index
    batch: tuple[Axis, ...]
    m: tuple[Axis, ...]
    n: tuple[Axis, ...]
    k: tuple[Axis, ...]
    a: ir.Access  # the [M, K] factor, pair calls replaced by virtual index names
    b: ir.Access  # the [K, N] factor
    epilogue: ir.Expr  # the statement's value with the reduction replaced by ACC
    pairs: tuple[Pair, ...]
    # a factor written ``where(cond, A[...], 0)``: its condition on indices and dims (a
    # transposed convolution's ``(o + P - k) % S == 0``), applied as the tile load's mask
    a_guard: ir.Expr | None = None
    b_guard: ir.Expr | None = None

    def side(self, name: str) -> str:
        """'b', 'm', 'n' or 'k': where index ``name`` lives."""
        for tag, axes in (("b", self.batch), ("m", self.m), ("n", self.n), ("k", self.k)):
            if any(a.name == name for a in axes):
                return tag
        raise KeyError(name)

    def extent_of(self, name: str) -> ir.Expr:
        return self.shape[self.lhs.index(name)]


def analyze(op: ir.Op) -> Contraction:
    """The contraction ``op`` computes; NotAContraction says why it is not one."""
    if len(op.statements) != 1:
        raise NotAContraction("more than one statement")
    st = op.statements[0]
    target = op.tensor(st.target)
    if target.role != "out":
        raise NotAContraction("the statement does not assign an output")
    reduces = [n for n in ir.walk(st.value) if isinstance(n, (ir.Reduce, ir.Scan, ir.Collective))]
    if len(reduces) != 1 or not isinstance(reduces[0], ir.Reduce) \
            or reduces[0].op not in ("sum", "mean"):
        raise NotAContraction("the value is not exactly one sum or mean reduction")
    red = reduces[0]
    lhs, rnames = st.indices, tuple(r.name for r in red.indices)
    for r in red.indices:
        _require_dim_expr(op, r.lo)
        _require_dim_expr(op, r.hi)
    reads, scale, guards = _split_factors(op, red.body, set(rnames))
    a, b = reads
    for f in (a, b):
        _require_dot_operand(op, f, set(lhs) | set(rnames))
    for f, g in zip((a, b), guards):
        if g is not None:
            # a guard is its factor's load mask: it may name the factor's own indices, the
            # reduced ones and dims, not an output index only the other factor reads
            own = {n.name for n in _walk_access(f) if isinstance(n, ir.Name)}
            _require_guard(op, g, (set(lhs) & own) | set(rnames))
    a, b, pairs = _find_pairs(op, a, b, lhs, set(lhs) | set(rnames))
    known = set(lhs) | set(rnames) | {v for p in pairs for v in (p.row, p.col)}
    for f in (a, b):
        for s in f.subscripts:
            _require_index_expr(op, s, known, {})
    virtual_side = {}
    for p in pairs:
        virtual_side[p.row] = "a" if _uses(a, p.row) else "b"
        virtual_side[p.col] = "a" if virtual_side[p.row] == "b" else "b"
    shape = target.shape
    batch, m, n = [], [], []
    paired = {p.index: p for p in pairs}
    for pos, name in enumerate(lhs):
        if name in paired:
            p = paired[name]
            for v in (p.row, p.col):
                (m if virtual_side[v] == "a" else n).append(Axis(v, p.size, virtual=True))
            continue
        in_a, in_b = _uses(a, name), _uses(b, name)
        axis = Axis(name, shape[pos])
        (m if in_a and not in_b else n if in_b and not in_a else batch).append(axis)
    k = []
    for r in red.indices:
        if not (_uses(a, r.name) or _uses(b, r.name)):
            raise NotAContraction(f"reduced index '{r.name}' is read by neither factor")
        k.append(Axis(r.name, _sub(r.hi, r.lo), r.lo))
    epilogue = _replace(st.value, red, _scaled(red, scale))
    _require_epilogue(op, epilogue, set(lhs), paired)
    plan = Contraction(st.target, lhs, shape, tuple(batch), tuple(m), tuple(n), tuple(k),
                       a, b, epilogue, tuple(pairs), *guards)
    return _orient(plan)


def _orient(plan: Contraction) -> Contraction:
    """Swap the factors when the output's contiguous index would lie on M."""
    if not plan.lhs:
        return plan
    last = plan.lhs[-1]
    pair = next((p for p in plan.pairs if p.index == last), None)
    name = pair.col if pair else last
    if plan.side(name) != "m":
        return plan
    return swapped(plan)


def swapped(plan: Contraction) -> Contraction:
    """The same contraction with the factors' roles exchanged: M for N."""
    return replace(plan, a=plan.b, b=plan.a, m=plan.n, n=plan.m,
                   a_guard=plan.b_guard, b_guard=plan.a_guard)


# ---- factors ----------------------------------------------------------------

def _product(e: ir.Expr) -> list[ir.Expr]:
    if isinstance(e, ir.Binary) and e.op == "*":
        return _product(e.left) + _product(e.right)
    if isinstance(e, ir.Unary) and e.op == "neg":
        return [ir.Num(-1)] + _product(e.operand)
    return [e]


def _strip_casts(e: ir.Expr) -> ir.Expr:
    while isinstance(e, ir.Call) and e.fn in FLOAT_CASTS:
        e = e.args[0]
    return e


def _split_factors(op, body, reduced: set[str]):
    """(the two reads, the other factors, each read's guard or None)."""
    reads, scale, guards = [], [], []
    for f in _product(body):
        if _names(f) & reduced:
            f, guard = _guarded(_strip_casts(f))
            f = _strip_casts(f)
            if not isinstance(f, ir.Access):
                raise NotAContraction("a factor that depends on the reduced indices is not a read")
            reads.append(f)
            guards.append(guard)
        else:
            scale.append(f)
    if len(reads) != 2:
        raise NotAContraction(f"{len(reads)} factors depend on the reduced indices, not 2")
    return reads, scale, guards


def _guarded(f: ir.Expr):
    """``where(cond, X, 0)`` -> (X, cond); any other factor -> (f, None)."""
    if isinstance(f, ir.Call) and f.fn == "where" and isinstance(f.args[2], ir.Num) \
            and f.args[2].value == 0:
        return f.args[1], f.args[0]
    return f, None


def _require_guard(op, e, indices: set[str]) -> None:
    """A guard is integer arithmetic and comparisons on indices and dims: no reads."""
    for n in ir.walk(e):
        if isinstance(n, ir.Name) and n.name not in indices and n.name not in op.dims:
            raise NotAContraction(f"a factor's condition reads '{n.name}'")
        if isinstance(n, ir.Num) and not isinstance(n.value, int):
            raise NotAContraction("a factor's condition is not integer arithmetic")
        if not isinstance(n, (ir.Name, ir.Num, ir.Binary, ir.Unary)) or \
                isinstance(n, ir.Binary) and n.op not in INDEX_OPS + GUARD_OPS:
            raise NotAContraction("a factor's condition is not integer arithmetic")


def _require_dot_operand(op: ir.Op, f: ir.Access, indices: set[str]) -> None:
    t = op.tensor(f.tensor)
    if t.role != "in":
        raise NotAContraction(f"factor '{f.tensor}' is not an input")
    for dt in op.dtype_choices:
        if op.dtype_of(f.tensor, dt) not in DOT_DTYPES:
            raise NotAContraction(f"factor '{f.tensor}' may be {op.dtype_of(f.tensor, dt)}")
    if f.pad is not None:
        _require_value(op, f.pad, set(), {})
    for s in f.subscripts:
        _require_index_expr(op, s, indices)


def _find_pairs(op, a: ir.Access, b: ir.Access, lhs, taken: set[str]):
    pairs = []
    for p in lhs:
        calls = {which: {(n.fn, n.args[1]) for n in _walk_access(f)
                         if isinstance(n, ir.Call) and n.fn in ("triu_row", "triu_col")
                         and n.args[0] == ir.Name(p)}
                 for which, f in (("a", a), ("b", b))}
        if not calls["a"] and not calls["b"]:
            continue
        ok = len(calls["a"]) == 1 and len(calls["b"]) == 1
        if ok:
            (fa, size_a), = calls["a"]
            (fb, size_b), = calls["b"]
            ok = fa != fb and size_a == size_b
        if ok:
            row, col = _fresh(f"row_{p}", taken), _fresh(f"col_{p}", taken)
            names = {"triu_row": row, "triu_col": col}
            a2, b2 = (_replace_calls(f, p, names) for f in (a, b))
            ok = not _uses(a2, p) and not _uses(b2, p)
        if not ok:
            raise NotAContraction(f"index '{p}' is read through triu_row/triu_col in a way "
                                  "that is not one row factor and one column factor")
        _require_dim_expr(op, size_a)
        pairs.append(Pair(p, size_a, row, col))
        a, b = a2, b2
    return a, b, pairs


def _fresh(name: str, taken) -> str:
    while name in taken:
        name += "_"
    return name


def _replace_calls(e: ir.Expr, p: str, names: dict[str, str]) -> ir.Expr:
    if isinstance(e, ir.Call) and e.fn in names and e.args[0] == ir.Name(p):
        return ir.Name(names[e.fn])
    return _map_children(e, lambda c: _replace_calls(c, p, names))


# ---- epilogue ---------------------------------------------------------------

def _scaled(red: ir.Reduce, scale: list[ir.Expr]) -> ir.Expr:
    e = ACC
    for f in scale:
        e = ir.Binary("*", e, f)
    if red.op == "mean":
        count = ir.Num(1)
        for r in red.indices:
            count = ir.Binary("*", count, _sub(r.hi, r.lo))
        e = ir.Binary("/", e, count)
    return e


def _require_epilogue(op, e, lhs: set[str], paired: dict[str, Pair]) -> None:
    if sum(1 for n in ir.walk(e) if n == ACC) != 1:
        raise NotAContraction("the reduction appears more than once")
    _require_value(op, e, lhs, paired)


def _require_value(op, e, lhs: set[str], paired) -> None:
    """Elementwise, renderable as a tile: the epilogue and pad values."""
    if e == ACC or isinstance(e, ir.Num):
        return
    if isinstance(e, ir.Name):
        if e.name in lhs or e.name in op.dims or e.name in CONSTANTS:
            return
        raise NotAContraction(f"unknown name '{e.name}'")
    if isinstance(e, ir.Access):
        if op.tensor(e.tensor).role != "in":
            raise NotAContraction(f"the epilogue reads '{e.tensor}', not an input")
        for s in e.subscripts:
            _require_index_expr(op, s, lhs, paired)
        if e.pad is not None:
            _require_value(op, e.pad, lhs, paired)
        return
    if isinstance(e, ir.Unary):
        return _require_value(op, e.operand, lhs, paired)
    if isinstance(e, ir.Binary):
        _require_value(op, e.left, lhs, paired)
        return _require_value(op, e.right, lhs, paired)
    if isinstance(e, ir.Call) and (e.fn in EPILOGUE_FNS or e.fn in CASTS):
        for x in e.args:
            _require_value(op, x, lhs, paired)
        return
    if isinstance(e, ir.Call) and e.fn in ("triu_row", "triu_col") and e.args[0] in \
            [ir.Name(p) for p in paired] and e.args[1] == paired[e.args[0].name].size:
        return
    raise NotAContraction(f"the epilogue holds {type(e).__name__} "
                          f"{getattr(e, 'fn', getattr(e, 'op', ''))}, not supported")


def _require_index_expr(op, e, indices: set[str], paired=None) -> None:
    if isinstance(e, ir.Num) and isinstance(e.value, int):
        return
    if isinstance(e, ir.Name) and (e.name in indices or e.name in op.dims):
        return
    if isinstance(e, ir.Binary) and e.op in INDEX_OPS:
        _require_index_expr(op, e.left, indices, paired)
        return _require_index_expr(op, e.right, indices, paired)
    if isinstance(e, ir.Unary) and e.op == "neg":
        return _require_index_expr(op, e.operand, indices, paired)
    if isinstance(e, ir.Call) and e.fn in ("triu_row", "triu_col"):
        if paired is None or (e.args[0] in [ir.Name(p) for p in paired]
                              and e.args[1] == paired[e.args[0].name].size):
            return
    raise NotAContraction("a subscript is not integer arithmetic on indices and dims")


def _require_dim_expr(op, e) -> None:
    for n in ir.walk(e):
        if isinstance(n, ir.Name) and n.name not in op.dims:
            raise NotAContraction("a range or size depends on more than dims")
        if isinstance(n, (ir.Access, ir.Call, ir.Reduce)):
            raise NotAContraction("a range or size depends on more than dims")


# ---- tree helpers -----------------------------------------------------------

def _sub(hi: ir.Expr, lo: ir.Expr) -> ir.Expr:
    return hi if lo == ir.Num(0) else ir.Binary("-", hi, lo)


def _names(e: ir.Expr) -> set[str]:
    return {n.name for n in ir.walk(e) if isinstance(n, ir.Name)}


def _walk_access(f: ir.Access):
    for s in f.subscripts:
        yield from ir.walk(s)


def _uses(f: ir.Access, name: str) -> bool:
    return any(isinstance(n, ir.Name) and n.name == name for n in _walk_access(f))


def _replace(e: ir.Expr, old: ir.Expr, new: ir.Expr) -> ir.Expr:
    if e is old:
        return new
    return _map_children(e, lambda c: _replace(c, old, new))


def _map_children(e: ir.Expr, fn) -> ir.Expr:
    if isinstance(e, ir.Access):
        return replace(e, subscripts=tuple(fn(s) for s in e.subscripts),
                       pad=None if e.pad is None else fn(e.pad))
    if isinstance(e, ir.Unary):
        return replace(e, operand=fn(e.operand))
    if isinstance(e, ir.Binary):
        return replace(e, left=fn(e.left), right=fn(e.right))
    if isinstance(e, ir.Call):
        return replace(e, args=tuple(fn(a) for a in e.args))
    return e
