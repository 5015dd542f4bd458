"""The typed, frozen IR of a .kspec file.

Every node is an immutable dataclass. Source locations ride along in fields
marked ``compare=False`` so that two specs that differ only in layout or
comments compare equal and share a structural hash: the hash is the cache key
of everything derived from an op (references, cases, measurements).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from dataclasses import dataclass, field
from typing import Union


@dataclass(frozen=True)
class Loc:
    line: int
    column: int


NO_LOC = Loc(0, 0)


def _loc() -> Loc:
    return field(default=NO_LOC, compare=False, repr=False)


# ---- expressions -----------------------------------------------------------

@dataclass(frozen=True)
class Num:
    value: Union[int, float]
    loc: Loc = _loc()


@dataclass(frozen=True)
class Name:
    """An index variable, a dim used as a value, or a constant (inf, pi)."""
    name: str
    loc: Loc = _loc()


@dataclass(frozen=True)
class Access:
    """``tensor[subscripts]``; ``pad`` is the value of out-of-range reads."""
    tensor: str
    subscripts: tuple["Expr", ...]
    pad: "Expr | None" = None
    loc: Loc = _loc()


@dataclass(frozen=True)
class Unary:
    op: str  # "neg" | "not"
    operand: "Expr"
    loc: Loc = _loc()


@dataclass(frozen=True)
class Binary:
    op: str  # + - * / // % ** < <= > >= == != and or
    left: "Expr"
    right: "Expr"
    loc: Loc = _loc()


@dataclass(frozen=True)
class Call:
    """An elementwise builtin or cast: ``exp(x)``, ``where(c, a, b)``, ``f32(x)``."""
    fn: str
    args: tuple["Expr", ...]
    loc: Loc = _loc()


@dataclass(frozen=True)
class IndexRange:
    """A bound index. ``lo``/``hi`` are None when the range is inferred from use."""
    name: str
    lo: "Expr | None" = None
    hi: "Expr | None" = None
    loc: Loc = _loc()


@dataclass(frozen=True)
class Reduce:
    """``op(indices) body``: sum, max, min, prod, mean, argmax, argmin."""
    op: str
    indices: tuple[IndexRange, ...]
    body: "Expr"
    loc: Loc = _loc()


@dataclass(frozen=True)
class Scan:
    """``cumsum(j) body``: inclusive prefix over the output index ``j``. ``factor``: the
    decay of a ``cumdecay`` (``y[j] = factor * y[j - 1] + body[j]``), a number, which the
    lowering writes for a sum weighted by ``pow(factor, j - k)``; None for every other
    scan."""
    op: str
    index: str
    body: "Expr"
    loc: Loc = _loc()
    factor: "Num | None" = field(default=None, metadata={"hash": "if_set"})


@dataclass(frozen=True)
class Collective:
    """``sort(j)``, ``argsort(j)``, ``topk(j, K)``, ``argtopk(j, K)`` over a body.

    sort/argsort are ascending and stable; topk/argtopk are descending with
    ties taken lowest index first. They stand alone on a statement's right side.
    """
    op: str
    index: IndexRange
    k: "Expr | None"
    body: "Expr"
    loc: Loc = _loc()


Expr = Union[Num, Name, Access, Unary, Binary, Call, Reduce, Scan, Collective]


# ---- declarations ----------------------------------------------------------

@dataclass(frozen=True)
class ValueRange:
    """Inputs draw values in [lo, hi) (integers) or [lo, hi] (floats)."""
    lo: Expr
    hi: Expr


@dataclass(frozen=True)
class Offsets:
    """Monotone offsets: start at 0, end at ``total``, non-decreasing."""
    total: Expr


@dataclass(frozen=True)
class Positive:
    pass


Domain = Union[ValueRange, Offsets, Positive]


@dataclass(frozen=True)
class Tensor:
    name: str
    role: str  # "in" | "out" | "tmp"
    dtypes: tuple[str, ...]  # empty when ``like`` is set
    like: str | None
    shape: tuple[Expr, ...]
    domain: Domain | None = None
    loc: Loc = _loc()


@dataclass(frozen=True)
class Statement:
    """``target[indices] = value``. ``ranges``: empty, or one entry per index: the
    ``IndexRange`` the left side declares for it (``t[b, oh in 0 .. OH] = ...``) or None."""
    target: str
    indices: tuple[str, ...]
    value: Expr
    loc: Loc = _loc()
    ranges: tuple["IndexRange | None", ...] = field(default=(), metadata={"hash": "if_set"})


@dataclass(frozen=True)
class Tolerance:
    """Per-dtype (rtol, atol); ``exact`` means bit-for-bit (after casting)."""
    exact: bool
    table: tuple[tuple[str, float, float], ...] = ()

    def for_dtype(self, dtype: str) -> tuple[float, float]:
        if self.exact:
            return (0.0, 0.0)
        for name, rtol, atol in self.table:
            if name == dtype:
                return (rtol, atol)
        raise KeyError(dtype)


@dataclass(frozen=True)
class SizeRange:
    dim: str
    lo: Expr
    hi: Expr  # inclusive
    loc: Loc = _loc()


@dataclass(frozen=True)
class TestSizes:
    ranges: tuple[SizeRange, ...]
    conditions: tuple[Expr, ...]


@dataclass(frozen=True)
class BenchPoint:
    device: str | None  # None: every device
    sizes: tuple[tuple[str, int], ...]
    dtype: str | None
    loc: Loc = _loc()

    def size_dict(self) -> dict[str, int]:
        return dict(self.sizes)


@dataclass(frozen=True)
class Baseline:
    source: str
    loc: Loc = _loc()


@dataclass(frozen=True)
class Op:
    name: str
    dims: tuple[str, ...]
    tensors: tuple[Tensor, ...]
    statements: tuple[Statement, ...]
    baseline: Baseline | None
    tolerance: Tolerance | None
    test: TestSizes | None
    bench: tuple[BenchPoint, ...]
    loc: Loc = _loc()
    source_file: str = field(default="", compare=False, repr=False)
    source_text: str = field(default="", compare=False, repr=False)

    # ---- convenient views ----
    def tensor(self, name: str) -> Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.role == "in")

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.role == "out")

    @property
    def dtype_choices(self) -> tuple[str, ...]:
        """The dtypes an instance of this op may take (the op's one type variable)."""
        for t in self.tensors:
            if t.like is None and len(t.dtypes) > 1:
                return t.dtypes
        for t in self.tensors:
            if t.role == "in" and t.like is None:
                return t.dtypes[:1]
        return ("f32",)

    def type_variable_input(self) -> str | None:
        """The input whose dtype picks the kernel variant: one declaring the type variable,
        else one ``like`` it (None: the op has one dtype)."""
        if len(self.dtype_choices) <= 1:
            return None
        for t in self.inputs:
            if t.like is None and len(t.dtypes) > 1:
                return t.name
        return next((t.name for t in self.inputs if t.like is not None), None)

    def dtype_of(self, name: str, dtype: str) -> str:
        """The concrete dtype of tensor ``name`` when the op's type variable is ``dtype``."""
        t = self.tensor(name)
        if t.like is not None:
            return self.dtype_of(t.like, dtype)
        return dtype if len(t.dtypes) > 1 else t.dtypes[0]

    def wide(self, dtype: str) -> bool:
        """Whether instance ``dtype`` has an f64 input or output: its floats compute in
        float64 (a spec declaring f64 asks for its precision)."""
        return any(self.dtype_of(t.name, dtype) == "f64" for t in self.tensors
                   if t.role != "tmp")

    @property
    def scratch_float(self) -> str:
        """The dtype an intermediate holding floats is stored in (``scratch_float``)."""
        return scratch_float(self.tensors)

    @functools.cached_property
    def hash(self) -> str:
        # cached on the instance: the op is frozen, and the hash keys every lookup
        return structural_hash(self)


def scratch_float(tensors) -> str:
    """The dtype an intermediate holding floats is stored in: f64 where an input or output
    may be f64 (a spec declaring f64 asks for its precision), else f32."""
    return "f64" if any("f64" in t.dtypes for t in tensors if t.role != "tmp") else "f32"


@dataclass(frozen=True)
class Spec:
    ops: tuple[Op, ...]
    path: str = field(default="", compare=False)

    def op(self, name: str) -> Op:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)


# ---- structural hash -------------------------------------------------------

def _canonical(node) -> object:
    if dataclasses.is_dataclass(node):
        # a field added to the language later enters the hash only when set, so the specs
        # written before it keep their hash (which seeds their test cases)
        items = [(f.name, _canonical(getattr(node, f.name)))
                 for f in dataclasses.fields(node) if f.compare and not _unset(node, f)]
        return (type(node).__name__, tuple(items))
    if isinstance(node, tuple):
        return tuple(_canonical(x) for x in node)
    if isinstance(node, float):
        return ("float", node.hex())
    return node


def _unset(node, f: dataclasses.Field) -> bool:
    return f.metadata.get("hash") == "if_set" and getattr(node, f.name) == f.default


def structural_hash(node) -> str:
    """A stable hex digest of a node's structure (locations and comments excluded)."""
    return hashlib.sha256(repr(_canonical(node)).encode()).hexdigest()[:16]


def walk(expr: Expr):
    """Every sub-expression of ``expr``, parents before children."""
    yield expr
    if isinstance(expr, Access):
        for s in expr.subscripts:
            yield from walk(s)
        if expr.pad is not None:
            yield from walk(expr.pad)
    elif isinstance(expr, Unary):
        yield from walk(expr.operand)
    elif isinstance(expr, Binary):
        yield from walk(expr.left)
        yield from walk(expr.right)
    elif isinstance(expr, Call):
        for a in expr.args:
            yield from walk(a)
    elif isinstance(expr, Reduce):
        for r in expr.indices:
            if r.lo is not None:
                yield from walk(r.lo)
                yield from walk(r.hi)
        yield from walk(expr.body)
    elif isinstance(expr, Scan):
        yield from walk(expr.body)
    elif isinstance(expr, Collective):
        if expr.index.lo is not None:
            yield from walk(expr.index.lo)
            yield from walk(expr.index.hi)
        if expr.k is not None:
            yield from walk(expr.k)
        yield from walk(expr.body)


def operands(expr: Expr) -> list:
    """The value sub-expressions of ``expr``: a reduction, scan or collective contributes
    its body only (not its range bounds), and ``segment_of`` its index (not the tensor)."""
    if isinstance(expr, Access):
        return list(expr.subscripts) + ([expr.pad] if expr.pad is not None else [])
    if isinstance(expr, Unary):
        return [expr.operand]
    if isinstance(expr, Binary):
        return [expr.left, expr.right]
    if isinstance(expr, Call):
        return list(expr.args[1:]) if expr.fn == "segment_of" else list(expr.args)
    if isinstance(expr, (Reduce, Scan, Collective)):
        return [expr.body]
    return []


def map_operands(expr: Expr, fn) -> Expr:
    """``expr`` with ``fn`` applied to each of its ``operands`` (the same ones, in place)."""
    if isinstance(expr, Access):
        return dataclasses.replace(expr, subscripts=tuple(fn(s) for s in expr.subscripts),
                                   pad=None if expr.pad is None else fn(expr.pad))
    if isinstance(expr, Unary):
        return dataclasses.replace(expr, operand=fn(expr.operand))
    if isinstance(expr, Binary):
        return dataclasses.replace(expr, left=fn(expr.left), right=fn(expr.right))
    if isinstance(expr, Call):
        if expr.fn == "segment_of":
            return dataclasses.replace(expr, args=(expr.args[0], fn(expr.args[1])))
        return dataclasses.replace(expr, args=tuple(fn(a) for a in expr.args))
    if isinstance(expr, (Reduce, Scan, Collective)):
        return dataclasses.replace(expr, body=fn(expr.body))
    return expr
