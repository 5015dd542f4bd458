"""Expressions of checked IR as C, with loop-invariant hoisting.

Emission walks an expression under a *scope* (each visible index name -> its C
variable and the depth of the block that binds it) and a *stack* of blocks, one
per depth (0: before the parallel region, 1: one iteration of the parallel
loops, deeper: inner and reduction loops). A sub-expression that does not depend
on the innermost bindings is computed once in the shallowest block that binds
everything it reads, and memoized there; reductions and collectives always get
their own loops. Index arithmetic is plain ``int64_t``; value arithmetic on
integers wraps like numpy's int64.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kdsl import dtypes, ir
from kdsl.builtins import CASTS, ELEMENTWISE

from kdsl.backends.c.code import Block, Loop
from kdsl.backends.c.plan import binders, free_names

CTYPE = {"f64": "double", "f32": "float", "f16": "uint16_t", "bf16": "uint16_t",
         "i64": "int64_t", "i32": "int32_t", "bool": "uint8_t"}
TMP_CTYPE = {"float": "float", "int": "int64_t", "bool": "uint8_t"}
KIND = {"float": "f", "int": "i", "bool": "b"}
# a stored element as a value (floats widened to float), and a value as the stored type
LOAD = {"f32": "{}", "f64": "(float)({})", "bf16": "kd_ld_bf16({})", "f16": "kd_ld_f16({})",
        "i64": "{}", "i32": "(int64_t)({})", "bool": "(int)({})"}
STORE = {"f32": "(float)({})", "f64": "(double)({})", "bf16": "kd_st_bf16((float)({}))",
         "f16": "kd_st_f16((float)({}))", "i64": "(int64_t)({})", "i32": "(int32_t)({})",
         "bool": "(uint8_t)(({}) != 0)"}
VAL_CTYPE = {"f": "float", "i": "int64_t", "b": "int"}


@dataclass(frozen=True)
class C:
    """A C expression and its kind: 'f' float, 'i' int64, 'b' bool (0/1 int)."""
    text: str
    kind: str


@dataclass(frozen=True)
class Var:
    text: str
    depth: int


def as_float(c: C) -> str:
    return c.text if c.kind == "f" else f"(float)({c.text})"


def as_int(c: C) -> str:
    return c.text if c.kind != "f" else f"(int64_t)({c.text})"


def literal(v, wide: bool = False) -> C:
    """A number as C; a float one suffixed ``f`` but in an f64 kernel (``wide``)."""
    if isinstance(v, bool):
        return C(str(int(v)), "b")
    if isinstance(v, int):
        return C(f"INT64_C({v})" if -(1 << 63) <= v < (1 << 63) else "0", "i")
    if math.isinf(v):
        return C("INFINITY" if v > 0 else "(-INFINITY)", "f")
    if math.isnan(v):
        return C("NAN", "f")
    text = repr(v) if "e" in repr(v) or "." in repr(v) else f"{v!r}.0"
    return C(text if wide else text + "f", "f")


class Emitter:
    """Turns expressions into C text inside a block stack; see the module docstring."""

    def __init__(self, kernel):
        self.k = kernel  # the statement renderer: tensors, storage, options, reductions
        self.n = 0

    def fresh(self, stem: str) -> str:
        self.n += 1
        return f"{stem}{self.n}"

    # ---- scope helpers ----
    def depth(self, e: ir.Expr, scope: dict) -> int:
        names = free_names(e)
        deps = [scope[n].depth for n in names if n in scope]
        return max(deps, default=0)

    def key(self, e: ir.Expr, scope: dict, tag: str = "") -> tuple:
        names = sorted(n for n in free_names(e) if n in scope)
        return (tag, e, tuple((n, scope[n].text) for n in names))

    def hoist(self, stack: list, depth: int, ctype: str, text: str, key, stem="h") -> str:
        blk: Block = stack[depth]
        if key in blk.memo:
            return blk.memo[key]
        var = self.fresh(stem)
        blk.pre.append(f"const {ctype} {var} = {text};")
        blk.memo[key] = var
        return var

    # ---- entry ----
    def emit(self, e: ir.Expr, scope: dict, stack: list, idx: bool = False) -> C:
        if isinstance(e, ir.Num):
            return literal(e.value, self.k.wide)
        if isinstance(e, ir.Name):
            return self.name(e, scope)
        if isinstance(e, ir.Collective):
            return self.k.collective(e, scope, stack)
        if isinstance(e, ir.Scan):
            return self.k.scan(e, scope, stack)
        d = self.depth(e, scope)
        if isinstance(e, ir.Reduce):
            override = self.k.overrides.get(self.key(e, scope)) if self.k.overrides else None
            if override is not None:
                return override
            key = self.key(e, scope, "reduce")
            blk = stack[d]
            if key not in blk.memo:
                blk.memo[key] = self.k.reduce(e, scope, stack[:d + 1])
            return blk.memo[key]
        if d < len(stack) - 1:
            c = self.compute(e, scope, stack[:d + 1], idx)
            var = self.hoist(stack, d, VAL_CTYPE[c.kind], c.text, self.key(e, scope, str(idx)))
            return C(var, c.kind)
        return self.compute(e, scope, stack, idx)

    def name(self, e: ir.Name, scope: dict) -> C:
        if e.name in scope:
            return C(scope[e.name].text, "i")
        if e.name in self.k.op.dims:
            return C(f"D_{e.name}", "i")
        if e.name == "inf":
            return C("INFINITY", "f")
        if e.name == "pi":
            return C("3.14159265358979323846" + ("" if self.k.wide else "f"), "f")
        raise KeyError(e.name)

    def compute(self, e: ir.Expr, scope: dict, stack: list, idx: bool) -> C:
        rec = lambda x, i=idx: self.emit(x, scope, stack, i)  # noqa: E731
        if isinstance(e, ir.Access):
            return self.access(e, scope, stack)
        if isinstance(e, ir.Unary):
            a = rec(e.operand)
            if e.op == "not":
                return C(f"(!({a.text}))", "b")
            if a.kind == "f":
                return C(f"(-({a.text}))", "f")
            return C(f"(-({a.text}))" if idx else f"kd_neg({a.text})", "i")
        if isinstance(e, ir.Binary):
            return self.binary(e, scope, stack, idx)
        if isinstance(e, ir.Call):
            return self.call(e, scope, stack, idx)
        raise AssertionError(e)

    # ---- pieces ----
    def access(self, e: ir.Access, scope: dict, stack: list) -> C:
        k = self.k
        subs = [self.emit(s, scope, stack, True) for s in e.subscripts]
        shape = k.shape_c(e.tensor)
        storage = k.plan.storage[e.tensor]
        kind = k.kind_of_tensor(e.tensor)
        if storage == "scalar":
            return C(k.scalar_name(e.tensor), kind)
        first = k.group_p if storage == "row" else 0
        bare = [isinstance(s, ir.Name) and s.name in scope for s in e.subscripts]
        # Unpadded reads clamp what the checker cannot see is in range (a read may be hoisted
        # out of the loop that guarded it). A padded read is guarded by its own bounds test,
        # so it keeps the raw, affine address that masked vector loads need.
        clamped = [c.text if (b or e.pad is not None) else self.clamp(s, c, n, scope, stack)
                   for s, c, b, n in zip(e.subscripts, subs, bare, shape)]
        off = k.offset(e.tensor, clamped[first:], first)
        value = k.load(e.tensor, off)
        if e.pad is None:
            return C(value, kind)
        pad = self.emit(e.pad, scope, stack)
        tests = []
        for s, c, n in zip(e.subscripts[first:], subs[first:], shape[first:]):
            text = f"({as_int(c)} >= 0) & ({as_int(c)} < {n})"
            d = self.depth(s, scope)
            if d < len(stack) - 1:  # a bounds test that does not change in this loop
                text = self.hoist(stack, d, "int", text, self.key(s, scope, "inside " + n), "in")
            tests.append(text)
        cond = " & ".join(tests) or "1"
        if kind == "f" or pad.kind == "f":
            return C(f"(({cond}) ? {as_float(C(value, kind))} : {as_float(pad)})", "f")
        return C(f"(({cond}) ? {value} : {pad.text})", "i" if "i" in (kind, pad.kind) else "b")

    def clamp(self, s: ir.Expr, c: C, n: str, scope: dict, stack: list) -> str:
        """``c`` (the value of subscript ``s``) clamped into 0..n-1, hoisted with ``s``."""
        text = f"kd_clamp({as_int(c)}, {n})"
        d = self.depth(s, scope)
        if d < len(stack) - 1:
            return self.hoist(stack, d, "int64_t", text, self.key(s, scope, "clamp " + n), "c")
        return text

    def binary(self, e: ir.Binary, scope: dict, stack: list, idx: bool) -> C:
        op = e.op
        a = self.emit(e.left, scope, stack, idx)
        if op == "/" and self.k.fast_div and self.depth(e.right, scope) < len(stack) - 1:
            d = self.depth(e.right, scope)
            b = self.emit(e.right, scope, stack[:d + 1], idx)
            inv = self.hoist(stack, d, "float", f"1.0f / {as_float(b)}",
                             self.key(e.right, scope, "recip"), "inv")
            return C(f"({as_float(a)} * {inv})", "f")
        b = self.emit(e.right, scope, stack, idx)
        if op in ("and", "or"):
            sym = "&" if op == "and" else "|"
            return C(f"((({a.text}) != 0) {sym} (({b.text}) != 0))", "b")
        if op in ("<", "<=", ">", ">=", "==", "!="):
            if "f" in (a.kind, b.kind):
                return C(f"({as_float(a)} {op} {as_float(b)})", "b")
            return C(f"({a.text} {op} {b.text})", "b")
        if op == "**":
            return self.power(a, e.right, b)
        if op == "/":
            return C(f"({as_float(a)} / {as_float(b)})", "f")
        if "f" in (a.kind, b.kind):
            x, y = as_float(a), as_float(b)
            if op == "//":
                return C(f"kd_floordiv_f({x}, {y})", "f")
            if op == "%":
                return C(f"kd_mod_f({x}, {y})", "f")
            return C(f"({x} {op} {y})", "f")
        if op == "//":
            return C(f"kd_floordiv({a.text}, {b.text})", "i")
        if op == "%":
            return C(f"kd_mod({a.text}, {b.text})", "i")
        if idx:
            return C(f"({a.text} {op} {b.text})", "i")
        fn = {"+": "kd_add", "-": "kd_sub", "*": "kd_mul"}[op]
        return C(f"{fn}({a.text}, {b.text})", "i")

    def power(self, a: C, exponent: ir.Expr, b: C) -> C:
        if a.kind != "f" and b.kind != "f":
            return C(f"(int64_t)pow((double)({a.text}), (double)({b.text}))", "i")
        x = as_float(a)
        if isinstance(exponent, ir.Num):
            v = exponent.value
            table = {2: f"kd_sq({x})", 3: f"kd_cube({x})", 1: f"({x})", 0: "1.0f",
                     0.5: f"sqrtf({x})", -1: f"(1.0f / ({x}))"}
            if v in table:
                return C(table[v], "f")
        return C(f"kd_pow({x}, {as_float(b)})", "f")

    def call(self, e: ir.Call, scope: dict, stack: list, idx: bool) -> C:
        fn = e.fn
        if fn == "segment_of":
            name = e.args[0].name
            v = self.emit(e.args[1], scope, stack, True)
            self.k.need_segment(name)
            n = self.k.shape_c(name)[0]
            return C(f"kd_seg_{name}({self.k.ptr(name)}, {n}, {as_int(v)})", "i")
        args = [self.emit(a, scope, stack, idx or fn in ("triu_row", "triu_col"))
                for a in e.args]
        if fn in ("triu_row", "triu_col"):
            return C(f"kd_{fn}({as_int(args[0])}, {as_int(args[1])})", "i")
        if fn in CASTS:
            kind = CASTS[fn]
            if kind == "float":
                return C(f"((float)({args[0].text}))", "f")
            if kind == "int":
                return C(f"((int64_t)({args[0].text}))", "i")
            return C(f"(({args[0].text}) != 0)", "b")
        if fn == "hash64":
            return C(f"kd_hash64({as_int(args[0])})", "i")
        if fn == "where":
            c, x, y = args
            if "f" in (x.kind, y.kind):
                return C(f"(({c.text}) ? {as_float(x)} : {as_float(y)})", "f")
            kind = "i" if "i" in (x.kind, y.kind) else "b"
            return C(f"(({c.text}) ? {x.text} : {y.text})", kind)
        if fn in ("min", "max"):
            x, y = args
            if "f" in (x.kind, y.kind):
                return C(f"kd_f{fn}({as_float(x)}, {as_float(y)})", "f")
            return C(f"kd_{fn}64({x.text}, {y.text})", "i" if "i" in (x.kind, y.kind) else "b")
        if fn == "abs":
            x = args[0]
            return C(f"fabsf({x.text})", "f") if x.kind == "f" else C(f"kd_iabs({x.text})", "i")
        if fn == "relu":
            x = args[0]
            return C(f"kd_relu({x.text})", "f") if x.kind == "f" else \
                C(f"kd_max64({x.text}, 0)", "i")
        if fn == "pow":
            return self.power(args[0], e.args[1], args[1])
        floats = {"exp": "kd_exp", "log": "kd_log", "log1p": "kd_log1p", "expm1": "kd_expm1",
                  "sqrt": "sqrtf", "rsqrt": "kd_rsqrt", "floor": "floorf", "ceil": "ceilf",
                  "trunc": "truncf", "round": "nearbyintf",  # (halves to even, by default)
                  "tanh": "kd_tanh", "erf": "kd_erf", "sigmoid": "kd_sigmoid", "silu": "kd_silu"}
        if fn in floats:
            return C(f"{floats[fn]}({as_float(args[0])})", "f")
        raise NotImplementedError(f"builtin {fn}")  # checked against ELEMENTWISE in supports()


SUPPORTED_CALLS = set(ELEMENTWISE) | set(CASTS) | {"segment_of", "triu_row", "triu_col"}


def kind_of(op: ir.Op, dtype: str, e: ir.Expr, scope_names: set) -> str:
    """The kind ('f', 'i', 'b') an expression evaluates to (the checker's rules)."""
    rec = lambda x, s=scope_names: kind_of(op, dtype, x, s)  # noqa: E731
    if isinstance(e, ir.Num):
        return "i" if isinstance(e.value, int) else "f"
    if isinstance(e, ir.Name):
        return "f" if e.name in ("inf", "pi") and e.name not in scope_names else "i"
    if isinstance(e, ir.Access):
        t = op.tensor(e.tensor)
        dt = t.dtypes[0] if t.role == "tmp" else op.dtype_of(t.name, dtype)
        return KIND[dtypes.kind(dt)]
    if isinstance(e, ir.Unary):
        return "b" if e.op == "not" else rec(e.operand)
    if isinstance(e, ir.Binary):
        if e.op in ("<", "<=", ">", ">=", "==", "!=", "and", "or"):
            return "b"
        a, b = rec(e.left), rec(e.right)
        if e.op == "/" or (e.op == "**" and "f" in (a, b)):
            return "f"
        return "f" if "f" in (a, b) else "i"
    if isinstance(e, ir.Call):
        if e.fn in CASTS:
            return KIND[CASTS[e.fn]]
        if e.fn in ("segment_of", "triu_row", "triu_col", "hash64"):
            return "i"
        b = ELEMENTWISE[e.fn]
        if b.result != "same":
            return KIND[b.result]
        args = e.args[1:] if e.fn == "where" else e.args
        kinds = {rec(a) for a in args}
        return "f" if "f" in kinds else ("i" if "i" in kinds else "b")
    if isinstance(e, ir.Reduce):
        if e.op in ("argmax", "argmin"):
            return "i"
        if e.op == "mean":
            return "f"
        body = kind_of(op, dtype, e.body, scope_names | set(binders(e)))
        return "i" if body == "b" else body
    if isinstance(e, ir.Scan):
        body = rec(e.body)
        return "i" if body == "b" else body
    if isinstance(e, ir.Collective):
        return "i" if e.op.startswith("arg") else \
            kind_of(op, dtype, e.body, scope_names | {e.index.name})
    raise AssertionError(e)
