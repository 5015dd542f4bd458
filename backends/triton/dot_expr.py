"""Rendering IR expressions as Triton tile code.

A ``TileScope`` knows how one tile names things: the code of every index (a
1-D lane vector already broadcast to the tile, like ``i_j[None, :]``, or a
scalar for a batch index), and which tensor reads need which mask. Values are
computed in fp32 (the reference's float64 is the aim, fp32 the means); integer
reads widen to int64 like the reference's. Integer ``//`` and ``%`` follow
Python (floor) semantics through small helpers, whatever the Triton version's
own convention.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kdsl import dtypes, ir
from kdsl.builtins import CASTS, CONSTANTS, ELEMENTWISE

from kdsl.backends.triton import helpers as shared
from kdsl.backends.triton.dot_plan import ACC

HELPERS = {
    "floordiv": '''@triton.jit
def _kdsl_floordiv(a, b):
    # Python's floor division whichever way the backend rounds its own //.
    q = a // b
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)
''',
    "floormod": '''@triton.jit
def _kdsl_floormod(a, b):
    q = a // b
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
''',
    "below": '''@triton.jit
def _kdsl_below(v, n):
    # 0 <= v < n in one unsigned compare: a negative v wraps past any extent
    if v.dtype == tl.int64:
        return v.to(tl.uint64) < n
    else:
        return v.to(tl.uint32) < n
''',
    # libdevice's on a GPU, a portable form in the interpreter (helpers.py); the module
    # reads the 'gpu' block's constants only when a kernel compiles, so its order is free
    **{h: shared.HELPERS[h] for h in ("gpu", "log1p", "expm1")},
}

_UNARY_FLOAT = {"exp": "tl.exp", "log": "tl.log", "sqrt": "tl.sqrt", "rsqrt": "tl.rsqrt",
                "erf": "tl.erf", "sigmoid": "tl.sigmoid"}
_COMPARE = ("<", "<=", ">", ">=", "==", "!=")
_TL_KIND = {"float": "tl.float32", "int": "tl.int64", "bool": "tl.int1"}


@dataclass(frozen=True)
class Val:
    code: str
    kind: str  # 'float' | 'int' | 'bool'
    const: object = None  # the Python value when known at render time


@dataclass(frozen=True)
class Run:
    """A flattened group of axes (outermost first) and its flat lane in one tile context."""
    names: tuple[str, ...]
    extents: tuple[ir.Expr, ...]
    flat: str  # code of the flat lane, broadcast like the group's indices
    extent: str  # code of the product of the extents


@dataclass
class TileScope:
    op: ir.Op
    index: dict[str, str]  # index name -> code
    pair_masks: dict[str, str] = field(default_factory=dict)  # pair index -> its lane mask
    helpers: set[str] = field(default_factory=set)
    runs: tuple[Run, ...] = ()
    # a tile axis walked by stride phase: (o, S, code of t, code of r) with o = t * S + r,
    # so that (o + rest) // S reads as t + (r + rest) // S, one division a program
    phase: tuple | None = None

    # ---- integer index arithmetic ----
    def idx(self, e: ir.Expr) -> str:
        if isinstance(e, ir.Num):
            return str(int(e.value))
        if isinstance(e, ir.Name):
            if e.name in self.index:
                return self.index[e.name]
            return f"d_{e.name}"
        if isinstance(e, ir.Unary) and e.op == "neg":
            return f"(-{self.idx(e.operand)})"
        if isinstance(e, ir.Binary) and self.phase is not None and e.op in ("//", "%") \
                and e.right == self.phase[1]:
            phased = self._phased(e)
            if phased is not None:
                return phased
        if isinstance(e, ir.Binary):
            left, right = self.idx(e.left), self.idx(e.right)
            if e.op == "//":
                self.helpers.add("floordiv")
                return f"_kdsl_floordiv({left}, {right})"
            if e.op == "%":
                self.helpers.add("floormod")
                return f"_kdsl_floormod({left}, {right})"
            return f"({left} {e.op} {right})"
        if isinstance(e, ir.Call) and e.fn in ("triu_row", "triu_col"):
            return self.index[f"{e.fn}({e.args[0].name})"]
        raise AssertionError(f"not an index expression: {e}")

    def _phased(self, e: ir.Binary) -> str | None:
        from kdsl.backends.triton.dot_phases import linear
        o, stride, t, r = self.phase
        lin = linear(e.left, {o})
        if lin is None or lin[0].get(o) != ir.Num(1):
            return None
        rest = ir.Binary("+", ir.Name("@r"), lin[1])
        inner = TileScope(self.op, {**self.index, "@r": r}, helpers=self.helpers)
        name = "floordiv" if e.op == "//" else "floormod"
        self.helpers.add(name)
        part = f"_kdsl_{name}({inner.idx(rest)}, {inner.idx(stride)})"
        return f"({t} + {part})" if e.op == "//" else part

    def offset(self, a: ir.Access) -> str:
        """The flat element offset of a read of a contiguous tensor.

        Adjacent subscripts that are exactly one flattened axis group, in order and spanning
        their dims, index with the group's flat lane directly: that keeps the run's
        contiguity (and with it vector loads and cp.async) visible to the compiler, which
        cannot see through the division that unflattened it."""
        shape = self.op.tensor(a.tensor).shape
        terms = []  # (subscript code, extent code)
        p = 0
        while p < len(a.subscripts):
            run = self._run_at(a, shape, p)
            if run is not None:
                terms.append((run.flat, run.extent))
                p += len(run.names)
                continue
            terms.append((self.idx(a.subscripts[p]), self.idx(shape[p])))
            p += 1
        kinds = [broadcast_kind(sub) for sub, _ in terms]
        if not _mixes_before_last(kinds):
            code = None
            for sub, extent in terms:
                code = sub if code is None else f"({code}) * {extent} + {sub}"
            return code or "0"
        # a row index before a column one (a conv's channel before its window): Horner's
        # form would multiply whole tiles; each term scaled by its stride and summed by
        # broadcast kind adds a column vector to a row vector, once
        parts = []
        for p, (sub, _) in enumerate(terms):
            stride = " * ".join(ext for _, ext in terms[p + 1:])
            parts.append((kinds[p], f"{sub} * ({stride})" if stride else sub))
        return join_by_kind(parts, "+")

    def _run_at(self, a: ir.Access, shape, p: int):
        for run in self.runs:
            n = len(run.names)
            if n > 1 and tuple(a.subscripts[p:p + n]) == tuple(ir.Name(x) for x in run.names) \
                    and tuple(shape[p:p + n]) == run.extents:
                return run
        return None

    def inside(self, a: ir.Access, in_range: set[tuple[str, ir.Expr]]) -> list[str]:
        """Bound checks of a padded read; a plain index known to span its dim needs none."""
        if a.pad is None:
            return []
        shape = self.op.tensor(a.tensor).shape
        terms = []
        for s, extent in zip(a.subscripts, shape):
            if isinstance(s, ir.Name) and (s.name, extent) in in_range:
                continue
            sub = self.idx(s)
            terms.append(f"({sub} >= 0) & ({sub} < {self.idx(extent)})")
        return terms

    # ---- values ----
    def value(self, e: ir.Expr) -> Val:
        if e == ACC:
            return Val("acc", "float")
        if isinstance(e, ir.Num):
            return _literal(e.value)
        if isinstance(e, ir.Name):
            if e.name in CONSTANTS:
                return _literal(CONSTANTS[e.name])
            return Val(self.idx(e), "int")
        if isinstance(e, ir.Access):
            return self.load(e)
        if isinstance(e, ir.Unary):
            x = self.value(e.operand)
            if e.op == "not":
                return Val(f"({x.code} == 0)", "bool", _fold(np.logical_not, x))
            return Val(f"(-{x.code})", x.kind, _fold(np.negative, x))
        if isinstance(e, ir.Binary):
            return self.binary(e.op, self.value(e.left), self.value(e.right))
        if isinstance(e, ir.Call):
            if e.fn in ("triu_row", "triu_col"):
                return Val(self.idx(e), "int")
            return self.call(e.fn, [self.value(a) for a in e.args])
        raise AssertionError(f"not an elementwise value: {e}")

    def load(self, a: ir.Access) -> Val:
        """An epilogue read. Lanes past the tile's end hold wrapped (valid) indices, so only
        pair lanes off the triangle and padded reads need a mask."""
        kind = dtypes.kind(self.op.dtype_of(a.tensor, self.op.dtype_choices[0]))
        inside = self.inside(a, set())
        used = {n.name for s in a.subscripts for n in ir.walk(s) if isinstance(n, ir.Name)}
        mask = inside + [m for p, m in self.pair_masks.items() if p in used]
        ptr = f"t_{a.tensor} + ({self.offset(a)})"
        code = f"tl.load({ptr}, mask={' & '.join(mask)}, other=0)" if mask else f"tl.load({ptr})"
        code = f"{code}.to({_TL_KIND[kind]})"
        if inside:
            pad = self.value(a.pad)
            if pad.const != 0:
                code = f"tl.where({' & '.join(inside)}, {code}, {pad.code})"
        return Val(code, kind)

    def binary(self, op: str, x: Val, y: Val) -> Val:
        folded = _fold_binary(op, x.const, y.const)
        if folded is not None:
            return _literal(folded)
        if op in _COMPARE:
            return Val(f"({x.code} {op} {y.code})", "bool")
        if op in ("and", "or"):
            return Val(f"({_bool(x)} {'&' if op == 'and' else '|'} {_bool(y)})", "bool")
        if op == "/":
            return Val(f"({_f32(x)} / {_f32(y)})", "float")
        if op == "**":
            if y.const is not None and float(y.const) in (1.0, 2.0, 3.0, 4.0):
                return Val("(" + " * ".join([_f32(x)] * int(y.const)) + ")", "float")
            return Val(f"libdevice.pow({_f32(x)}, {_f32(y)})", "float")
        if op in ("//", "%"):
            if x.kind == "float" or y.kind == "float":
                q = f"tl.floor({_f32(x)} / {_f32(y)})"
                return Val(q if op == "//" else f"({_f32(x)} - {_f32(y)} * {q})", "float")
            name = "floordiv" if op == "//" else "floormod"
            self.helpers.add(name)
            return Val(f"_kdsl_{name}({x.code}, {y.code})", "int")
        return Val(f"({x.code} {op} {y.code})", _widest(x, y))

    def call(self, fn: str, args: list[Val]) -> Val:
        if fn in CASTS:
            return _cast(fn, args[0])
        if all(a.const is not None for a in args):
            with np.errstate(all="ignore"):
                return _literal(np.asarray(ELEMENTWISE[fn].numpy(*[a.const for a in args])).item())
        x = args[0]
        if fn in _UNARY_FLOAT:
            return Val(f"{_UNARY_FLOAT[fn]}({_f32(x)})", "float")
        if fn in ("log1p", "expm1"):
            self.helpers |= {"gpu", fn}
            return Val(f"_kd_{fn}({_f32(x)})", "float")
        if fn == "tanh":
            return Val(f"(2.0 * tl.sigmoid(2.0 * {_f32(x)}) - 1.0)", "float")
        if fn == "silu":
            return Val(f"({_f32(x)} * tl.sigmoid({_f32(x)}))", "float")
        if fn == "abs":
            return Val(f"tl.abs({x.code})", x.kind)
        if fn == "relu":
            return self.call("max", [x, _literal(0.0 if x.kind == "float" else 0)])
        if fn in ("min", "max"):
            kind = _widest(*args)
            a, b = (_f32(v) if kind == "float" else v.code for v in args)
            nan = ", propagate_nan=tl.PropagateNan.ALL" if kind == "float" else ""
            return Val(f"tl.{'minimum' if fn == 'min' else 'maximum'}({a}, {b}{nan})", kind)
        if fn == "pow":
            return Val(f"libdevice.pow({_f32(args[0])}, {_f32(args[1])})", "float")
        if fn == "where":
            kind = _widest(args[1], args[2])
            a, b = (_f32(v) if kind == "float" else v.code for v in args[1:])
            return Val(f"tl.where({_bool(args[0])}, {a}, {b})", kind)
        raise AssertionError(f"unsupported builtin {fn}")


def broadcast_kind(code: str) -> str:
    """Which tile axes an index expression's code varies along: 'r' (rows), 'c' (columns),
    'rc' (both) or 's' (a scalar), read from the lane vectors it names."""
    rows, cols = "[:, None]" in code, "[None, :]" in code
    return "rc" if rows and cols else "r" if rows else "c" if cols else "s"


def join_by_kind(parts: list[tuple[str, str]], op: str) -> str:
    """``parts`` (kind, code) joined by ``op``, scalars and rows first, then columns, then
    terms of both, each group in parentheses: one whole-tile operation a group boundary
    rather than one a term."""
    groups = []
    for kinds in (("s", "r"), ("c",), ("rc",)):
        codes = [c for k, c in parts if k in kinds]
        if codes:
            groups.append(codes[0] if len(codes) == 1 else "(" + f" {op} ".join(codes) + ")")
    return f" {op} ".join(groups)


def _mixes_before_last(kinds: list[str]) -> bool:
    """Would Horner's form carry a value varying along both tile axes into a multiply?"""
    seen = set()
    for k in kinds[:-1]:
        seen |= set(k) - {"s"}
    return seen >= {"r", "c"}


def _literal(v) -> Val:
    if isinstance(v, (bool, np.bool_)):
        return Val("True" if v else "False", "bool", bool(v))
    if isinstance(v, (int, np.integer)):
        return Val(str(int(v)), "int", int(v))
    v = float(v)
    if math.isnan(v):
        return Val('float("nan")', "float", v)
    if math.isinf(v):
        return Val(f'float("{"-" if v < 0 else ""}inf")', "float", v)
    return Val(repr(v), "float", v)


_FOLD = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
         "/": lambda a, b: a / b, "//": lambda a, b: a // b, "%": lambda a, b: a % b,
         "**": lambda a, b: float(a) ** b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
         ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "==": lambda a, b: a == b,
         "!=": lambda a, b: a != b, "and": lambda a, b: bool(a) and bool(b),
         "or": lambda a, b: bool(a) or bool(b)}


def _fold_binary(op: str, a, b):
    """Python's value of a constant operation (floor // and %, as the reference); None when
    either side is not constant or Python refuses (division by zero: left to run time)."""
    if a is None or b is None:
        return None
    try:
        v = _FOLD[op](a, b)
    except (ArithmeticError, ValueError):
        return None
    return None if isinstance(v, complex) else v


def _fold(fn, x: Val):
    return None if x.const is None else np.asarray(fn(x.const)).item()


def _widest(*vals: Val) -> str:
    kinds = {v.kind for v in vals}
    return "float" if "float" in kinds else "int" if "int" in kinds else "bool"


def _f32(v: Val) -> str:
    if v.const is not None:
        return _literal(float(v.const)).code
    return v.code if v.kind == "float" else f"{v.code}.to(tl.float32)"


def _bool(v: Val) -> str:
    return v.code if v.kind == "bool" else f"({v.code} != 0)"


def _cast(fn: str, x: Val) -> Val:
    kind = CASTS[fn]
    if x.const is not None:
        c = x.const
        return _literal(float(c) if kind == "float" else
                        int(math.trunc(c)) if kind == "int" else bool(c))
    if kind == "float":
        return Val(_f32(x), "float")
    if kind == "bool":
        return Val(_bool(x), "bool")
    return Val(x.code if x.kind == "int" else f"{x.code}.to(tl.int64)", "int")
