"""Triton source for IR expressions over a program's tile, with common subexpressions shared.

Every value is a scalar or a 2-D tensor: ``[BLOCK_R, 1]`` along the row axis
('R'), ``[1, BLOCK_C]`` along the column ('C'), or both. Floats are computed in
the compute type (f32), integers in int64 and booleans as int1, as the
reference does in float64/int64 (the tolerances cover f32). A value is emitted
once per scope: its generated text is its key, so two reads of ``x[i, j]`` are
one load.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

from kdsl import dtypes, ir

from kdsl.backends.base import Unsupported

INT64_MIN = "(-9223372036854775807 - 1)"
INT64_MAX = "9223372036854775807"


@dataclass(frozen=True)
class Val:
    code: str
    kind: str  # 'float' | 'int' | 'bool'
    axes: frozenset = frozenset()
    plain: bool = False  # a Python literal or a dim argument: no .to(), may be a constexpr


def literal(value) -> Val:
    if isinstance(value, bool):
        return Val(str(value), "bool", plain=True)
    if isinstance(value, int):
        return Val(str(value) if value >= 0 else f"({value})", "int", plain=True)
    if math.isinf(value):
        return Val("float('inf')" if value > 0 else "float('-inf')", "float", plain=True)
    if math.isnan(value):
        return Val("float('nan')", "float", plain=True)
    return Val(repr(float(value)), "float", plain=True)


class Emitter:
    """Lines of a function body, with nested scopes for loops."""

    def __init__(self, depth: int = 1):
        self.lines: list[str] = []
        self.depth = depth
        self.scopes: list[dict[str, Val]] = [{}]
        self.count = 0
        self.helpers: set[str] = set()

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def name(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def let(self, code: str, kind: str, axes=frozenset(), prefix: str = "v") -> Val:
        for scope in reversed(self.scopes):
            if code in scope:
                return scope[code]
        var = self.name(prefix)
        self.emit(f"{var} = {code}")
        v = Val(var, kind, frozenset(axes))
        self.scopes[-1][code] = v
        return v

    @contextmanager
    def block(self, header: str):
        self.emit(header)
        self.depth += 1
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()
            self.depth -= 1


def tensor_kind(op: ir.Op, name: str, dtype: str) -> str:
    t = op.tensor(name)
    return dtypes.kind(t.dtypes[0] if t.role == "tmp" else op.dtype_of(name, dtype))


def compute_type(op: ir.Op, dtype: str) -> str:
    floats = {op.dtype_of(t.name, dtype) for t in op.tensors if t.role != "tmp"}
    return "tl.float64" if "f64" in floats else "tl.float32"


def variants(op: ir.Op) -> list[tuple[str, list[str]]]:
    """The op's dtypes grouped by what a kernel must know (each tensor's kind, f64 or not):
    [(representative dtype, members)]. One kernel is rendered per group."""
    groups: dict[tuple, list[str]] = {}
    for d in op.dtype_choices:
        key = tuple(tensor_kind(op, t.name, d) for t in op.tensors if t.role != "tmp")
        groups.setdefault(key + (compute_type(op, d),), []).append(d)
    return [(members[0], members) for members in groups.values()]


class ExprGen:
    """Emits the value of an expression in an environment of index and row values."""

    def __init__(self, em: Emitter, op: ir.Op, env: dict[str, Val], masks: dict[str, Val],
                 dtype: str):
        self.em, self.op, self.env, self.masks, self.dtype = em, op, env, masks, dtype
        self.extents: dict[str, ir.Expr] = {}  # program axis -> its extent
        # (flat index, ranges) while a pass walks several reduction indices as one column
        self.flat_column: tuple[Val, tuple] | None = None
        # tanh: 'libdevice'; 'fast' (exp and a fast division); 'approx' (the hardware's
        # tanh.approx.f32 where the first output is 16-bit, libdevice otherwise)
        self.math = "libdevice"
        # exp: 'tl' (triton's, which guards subnormals: three more instructions an element)
        # or 'ftz' (the hardware's ex2.approx.ftz.f32 on f32 values)
        self.exp = "tl"
        # cache eviction policies ("evict_last", "evict_first"; "" for none) for the loads of
        # row data along the column (a subscript names one of ``row_names``) and for the
        # stores: each pass of a looped row kernel sets its own
        self.load_policy = self.store_policy = ""
        self.row_names: frozenset[str] = frozenset()
        self.ct = compute_type(op, dtype)
        self.scan: Callable[[ir.Scan], Val] | None = None

    # ---- conversions ----
    def to_float(self, v: Val) -> Val:
        if v.kind == "float":
            return v
        if v.plain:
            if v.code in ("True", "False"):
                return literal(float(v.code == "True"))
            try:
                return literal(float(int(v.code.strip("()"))))
            except ValueError:
                return Val(f"({v.code} * 1.0)", "float", v.axes, plain=True)
        return self.em.let(f"{v.code}.to({self.ct})", "float", v.axes)

    def to_int(self, v: Val) -> Val:
        if v.kind == "int":
            return v
        if v.kind == "bool":
            if v.plain:
                return literal(int(v.code == "True"))
            return self.em.let(f"{v.code}.to(tl.int64)", "int", v.axes)
        if v.plain:
            raise Unsupported("an integer cast of a float constant")
        return self.em.let(f"{v.code}.to(tl.int64)", "int", v.axes)  # truncates toward 0

    def to_bool(self, v: Val) -> Val:
        if v.kind == "bool":
            return v
        return self.em.let(f"({v.code} != 0)", "bool", v.axes)

    def common(self, *vals: Val) -> tuple[str, list[Val]]:
        kinds = {v.kind for v in vals}
        if "float" in kinds:
            return "float", [self.to_float(v) for v in vals]
        if "int" in kinds:
            return "int", [self.to_int(v) for v in vals]
        return "bool", list(vals)

    def mask_for(self, axes) -> str | None:
        parts = [self.masks[a].code for a in ("R", "C") if a in axes and a in self.masks]
        return " & ".join(parts) if parts else None

    # ---- expressions ----
    def __call__(self, e: ir.Expr) -> Val:
        if isinstance(e, ir.Num):
            return literal(e.value)
        if isinstance(e, ir.Name):
            if e.name in self.env:
                return self.env[e.name]
            if e.name in self.op.dims:
                return Val(f"d_{e.name}", "int", plain=True)
            if e.name == "inf":
                return literal(math.inf)
            if e.name == "pi":
                return literal(math.pi)
            raise Unsupported(f"name '{e.name}' is not a program axis")
        if isinstance(e, ir.Access):
            return self.load(e)
        if isinstance(e, ir.Unary):
            v = self(e.operand)
            if e.op == "not":
                return self.em.let(f"({self.to_bool(v).code} == 0)", "bool", v.axes)
            v = self.to_int(v) if v.kind == "bool" else v
            if v.plain:
                return Val(f"(-{v.code})", v.kind, plain=True)
            return self.em.let(f"(-{v.code})", v.kind, v.axes)
        if isinstance(e, ir.Binary):
            return self.binary(e.op, self(e.left), self(e.right))
        if isinstance(e, ir.Call):
            return self.call(e)
        if isinstance(e, ir.Scan) and self.scan is not None:
            return self.scan(e)
        raise Unsupported(f"{type(e).__name__} here")

    def address(self, tensor: str, subs: list[Val]) -> tuple[str, frozenset]:
        shape = self.op.tensor(tensor).shape
        terms, axes = [], frozenset()
        for p, s in enumerate(subs):
            axes |= s.axes
            s = self.to_int(s)
            later = [self.size(d) for d in shape[p + 1:]]
            if not later:
                terms.append(s.code)
            else:
                base = s.code if s.plain else f"{s.code}.to(tl.int64)"
                terms.append(" * ".join([base] + [f"({x})" for x in later]))
        return " + ".join(terms) or "0", axes

    def _flat_tail(self, e: ir.Access, t: ir.Tensor):
        """(address, axes) of a read whose trailing subscripts are the reduction indices of
        a flattened column, in order and over the tensor's whole trailing dims (batch
        norm's x[n, c, h, w] summed over (h, w)): the flat column index is the offset of
        those dims, so no index is decoded by division. None otherwise."""
        flat = self.flat_column
        if flat is None or e.pad is not None:
            return None
        k, ranges = flat
        n = len(ranges)
        names = tuple(ir.Name(f"__k{p}") for p in range(n))
        if len(e.subscripts) < n or tuple(e.subscripts[-n:]) != names or \
                any(lo != ir.Num(0) for lo, _ in ranges) or \
                tuple(t.shape[-n:]) != tuple(hi for _, hi in ranges):
            return None
        lead = [self(s) for s in e.subscripts[:-n]]
        terms, axes = [], frozenset(k.axes)
        for p, s in enumerate(lead):
            axes |= s.axes
            s = self.to_int(s)
            later = [self.size(d) for d in t.shape[p + 1:]]
            base = s.code if s.plain else f"{s.code}.to(tl.int64)"
            terms.append(" * ".join([base] + [f"({x})" for x in later]))
        return " + ".join(terms + [k.code]), axes

    def size(self, e: ir.Expr) -> str:
        v = self(e)
        return v.code

    def load(self, e: ir.Access) -> Val:
        if e.tensor in self.env:
            raise Unsupported(f"'{e.tensor}' is both a tensor and an index")
        t = self.op.tensor(e.tensor)
        if t.role != "in":
            raise Unsupported(f"a read of the output '{e.tensor}'")
        flat = self._flat_tail(e, t)
        if flat is not None:
            addr, axes = flat
        else:
            subs = [self(s) for s in e.subscripts]
            addr, axes = self.address(e.tensor, subs)
        mask = self.mask_for(axes)
        inside = None
        if e.pad is not None:
            checks, scalar, tensor = [], False, False
            for sub, s, d in zip(e.subscripts, subs, t.shape):
                if isinstance(sub, ir.Name) and self.extents.get(sub.name) == d:
                    continue  # a program axis over exactly this dim: always inside
                checks.append(f"({s.code} >= 0) & ({s.code} < {self.size(d)})")
                scalar, tensor = scalar or not s.axes, tensor or bool(s.axes)
            if checks:
                # the interpreter turns (scalar bool) & (tensor bool) into int32: re-compare
                code = " & ".join(checks)
                code = f"(({code}) != 0)" if scalar and tensor else code
                inside = self.em.let(code, "bool", axes)
                if mask is not None:
                    mask = f"{mask} & {inside.code}" if tensor else \
                        f"(({mask} & {inside.code}) != 0)"
                else:
                    mask = inside.code
        kind = tensor_kind(self.op, e.tensor, self.dtype)
        conv = {"float": f".to({self.ct})", "int": ".to(tl.int64)", "bool": ""}[kind]
        hint = f', eviction_policy="{self.load_policy}"' if self.load_policy and "C" in axes \
            and any(isinstance(n, ir.Name) and n.name in self.row_names
                    for s in e.subscripts for n in ir.walk(s)) else ""
        if mask is None:
            v = self.em.let(f"tl.load(p_{e.tensor} + {addr}{hint}){conv}", kind, axes)
        else:
            v = self.em.let(f"tl.load(p_{e.tensor} + {addr}, mask={mask}, other=0{hint}){conv}",
                            kind, axes)
        if inside is not None:
            kind, (v, pad) = self.common(v, self(e.pad))
            v = self.em.let(f"tl.where({inside.code}, {v.code}, {pad.code})", kind,
                            v.axes | pad.axes | inside.axes)
        return v

    def binary(self, op: str, a: Val, b: Val) -> Val:
        axes = a.axes | b.axes
        if op in ("and", "or"):
            a, b = self.to_bool(a), self.to_bool(b)
            code = f"({a.code} {'&' if op == 'and' else '|'} {b.code})"
            if bool(a.axes) != bool(b.axes):  # the interpreter makes scalar & tensor an int32
                code = f"({code} != 0)"
            return self.em.let(code, "bool", axes)
        if op in ("<", "<=", ">", ">=", "==", "!="):
            if not a.kind == b.kind == "bool":
                _, (a, b) = self.common(a, b)
            return self.em.let(f"({a.code} {op} {b.code})", "bool", axes)
        if op == "/":
            a, b = self.to_float(a), self.to_float(b)
            if "C" in a.axes and "C" not in b.axes and not b.plain:
                # a per-row divisor: one reciprocal per row, a multiply per element
                r = self.em.let(f"(1.0 / {b.code})", "float", b.axes)
                return self.em.let(f"({a.code} * {r.code})", "float", axes)
            return self.em.let(f"({a.code} / {b.code})", "float", axes)
        if op == "**":
            return self.power(self.to_float(a), b)
        kind, (a, b) = self.common(a, b)
        if kind == "bool":
            kind, a, b = "int", self.to_int(a), self.to_int(b)
        if op in ("+", "-", "*"):
            if a.plain and b.plain:  # dims and numbers stay inline: a dim may be a constexpr
                return Val(f"({a.code} {op} {b.code})", kind, plain=True)
            return self.em.let(f"({a.code} {op} {b.code})", kind, axes)
        if op == "//":
            if kind == "float":
                return self.em.let(f"tl.floor({a.code} / {b.code})", kind, axes)
            self.em.helpers.add("floordiv")
            return self.em.let(f"_kd_floordiv({a.code}, {b.code})", kind, axes)
        if op == "%":
            self.em.helpers.add("mod")
            return self.em.let(f"_kd_mod({a.code}, {b.code})", kind, axes)
        raise Unsupported(f"operator {op}")

    def power(self, a: Val, b: Val) -> Val:
        if b.plain and b.kind in ("int", "float"):
            try:
                p = float(b.code.strip("()"))
            except ValueError:
                p = None
            if p is not None and p == int(p) and 0 <= p <= 8:
                if p == 0:
                    return literal(1.0)
                return self.em.let("(" + " * ".join([a.code] * int(p)) + ")", "float", a.axes)
            if p == 0.5:
                return self.em.let(f"tl.sqrt({a.code})", "float", a.axes)
        self.em.helpers.add("pow")
        b = self.to_float(b)
        return self.em.let(f"_kd_pow({a.code}, {b.code})", "float", a.axes | b.axes)

    def exp_of(self, code: str) -> str:
        """Source of exp(``code``) for a float value, as the ``exp`` choice says."""
        if self.exp == "ftz":
            self.em.helpers.add("exp_ftz")
            return f"_kd_exp_ftz({code})"
        return f"tl.exp({code})"

    def call(self, e: ir.Call) -> Val:
        fn = e.fn
        if fn in ("f32", "f16", "bf16", "f64"):
            return self.to_float(self(e.args[0]))
        if fn in ("i32", "i64"):
            return self.to_int(self(e.args[0]))
        if fn == "bool":
            return self.to_bool(self(e.args[0]))
        if fn in ("segment_of", "triu_row", "triu_col"):
            raise Unsupported(f"{fn} outside a jagged enumeration")
        args = [self(a) for a in e.args]
        axes = frozenset().union(*(a.axes for a in args))
        unary_float = {"exp": "tl.exp({})", "log": "tl.log({})", "sqrt": "tl.sqrt({})",
                       "log1p": "_kd_log1p({})", "expm1": "_kd_expm1({})",
                       "rsqrt": "tl.rsqrt({})", "erf": "tl.erf({})",
                       "sigmoid": "tl.sigmoid({})", "silu": "({0} * tl.sigmoid({0}))",
                       "tanh": "_kd_tanh({})", "floor": "tl.floor({})", "ceil": "tl.ceil({})",
                       "trunc": "_kd_trunc({})", "round": "_kd_round_even({})"}
        if fn in unary_float:
            if fn == "tanh":
                out = self.op.outputs[0].name
                helper, call = {
                    "libdevice": ("tanh", "_kd_tanh({})"),
                    "fast": ("tanh_fast", "_kd_tanh_fast({})"),
                    "approx": ("tanh_approx", "_kd_tanh_approx({}, p_%s.dtype.element_ty"
                               ".primitive_bitwidth < 32)" % out)}[self.math]
                self.em.helpers.add(helper)
                unary_float = dict(unary_float, tanh=call)
            if fn in ("log1p", "expm1"):  # libdevice's, accurate near 0 (helpers.py)
                self.em.helpers.add(fn)
            if fn in ("trunc", "round"):  # (plain ops: the interpreter has no libdevice)
                self.em.helpers.add({"trunc": "trunc", "round": "round_even"}[fn])
            a = self.to_float(args[0])
            if self.exp == "ftz" and fn in ("exp", "sigmoid", "silu") and not a.plain:
                # (a constant or a dim stays with tl.exp: the helper reads its operand's dtype)
                sig = f"(1.0 / (1.0 + {self.exp_of('-' + a.code)}))"
                code = {"exp": self.exp_of(a.code), "sigmoid": sig,
                        "silu": f"({a.code} * {sig})"}[fn]
                return self.em.let(code, "float", axes)
            return self.em.let(unary_float[fn].format(a.code), "float", axes)
        if fn == "hash64":
            self.em.helpers.add("hash64")
            return self.em.let(f"_kd_hash64({self.to_int(args[0]).code})", "int", axes)
        if fn == "pow":
            return self.power(self.to_float(args[0]), args[1])
        if fn in ("relu", "abs"):
            a = self.to_int(args[0]) if args[0].kind == "bool" else args[0]
            zero = "0.0" if a.kind == "float" else "0"
            code = f"tl.maximum({a.code}, {zero})" if fn == "relu" else f"tl.abs({a.code})"
            return self.em.let(code, a.kind, axes)
        if fn in ("min", "max"):
            kind, (a, b) = self.common(*args)
            if kind == "bool":
                return self.em.let(f"({a.code} {'&' if fn == 'min' else '|'} {b.code})",
                                   "bool", axes)
            return self.em.let(f"tl.{'minimum' if fn == 'min' else 'maximum'}({a.code}, "
                               f"{b.code})", kind, axes)
        if fn == "where":
            c = self.to_bool(args[0])
            kind, (a, b) = self.common(args[1], args[2])
            return self.em.let(f"tl.where({c.code}, {a.code}, {b.code})", kind, axes)
        raise Unsupported(f"builtin {fn}")
