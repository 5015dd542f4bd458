"""Elementwise ATen ops: arithmetic, comparisons, activations, casts, constants."""
from __future__ import annotations

import math

from .errors import Unmapped
from .table import elementwise, maps
from .values import ELEMENTWISE, Value, number


def _unary(template: str):
    def fn(b, node, x, *rest, **kw):
        return elementwise(b, node, lambda a: template.format(a=a), x)
    return fn


for _name, _template in {
    "relu": "relu({a})", "sigmoid": "sigmoid({a})", "tanh": "tanh({a})", "exp": "exp({a})",
    "log": "log({a})", "log1p": "log1p({a})", "expm1": "expm1({a})", "sqrt": "sqrt({a})",
    "rsqrt": "rsqrt({a})", "abs": "abs({a})", "neg": "(-{a})", "erf": "erf({a})",
    "reciprocal": "(1.0 / {a})", "silu": "silu({a})", "logical_not": "(not {a})",
    "isnan": "({a} != {a})", "sign": "(where({a} > 0, 1.0, 0.0) - where({a} < 0, 1.0, 0.0))",
    "floor": "floor({a})", "ceil": "ceil({a})", "trunc": "trunc({a})", "round": "round({a})",
}.items():
    maps(f"aten.{_name}.default")(_unary(_template))

def _alpha(alpha) -> str:
    return "" if alpha in (None, 1) else f" * {number(alpha)}"


@maps("aten.add.Tensor", "aten.add.Scalar")
def add(b, node, x, y, alpha=1):
    return elementwise(b, node, lambda p, q: f"({p} + {q}{_alpha(alpha)})", x, y)


@maps("aten.sub.Tensor", "aten.sub.Scalar")
def sub(b, node, x, y, alpha=1):
    return elementwise(b, node, lambda p, q: f"({p} - {q}{_alpha(alpha)})", x, y)


@maps("aten.rsub.Scalar", "aten.rsub.Tensor")
def rsub(b, node, x, y, alpha=1):
    return elementwise(b, node, lambda p, q: f"({q} - {p}{_alpha(alpha)})", x, y)


@maps("aten.mul.Tensor", "aten.mul.Scalar")
def mul(b, node, x, y):
    return elementwise(b, node, lambda p, q: f"({p} * {q})", x, y)


@maps("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode")
def div(b, node, x, y, rounding_mode=None):
    if rounding_mode is not None:
        raise Unmapped(str(node.target), f"rounding_mode={rounding_mode!r}")
    return elementwise(b, node, lambda p, q: f"({p} / {q})", x, y)


@maps("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def pow_(b, node, x, y):
    if isinstance(y, (int, float)) and float(y).is_integer() and 0 <= y <= 4:
        return elementwise(b, node, lambda p: f"({p} ** {int(y)})", x)
    if isinstance(y, (int, float)) and y == 0.5:
        return elementwise(b, node, lambda p: f"sqrt({p})", x)
    return elementwise(b, node, lambda p, q: f"pow({p}, {q})", x, y)


@maps("aten.maximum.default", "aten.fmax.default")
def maximum(b, node, x, y):
    return elementwise(b, node, lambda p, q: f"max({p}, {q})", x, y)


@maps("aten.minimum.default", "aten.fmin.default")
def minimum(b, node, x, y):
    return elementwise(b, node, lambda p, q: f"min({p}, {q})", x, y)


def _compare(symbol: str):
    def fn(b, node, x, y):
        return elementwise(b, node, lambda p, q: f"({p} {symbol} {q})", x, y, dtype="b")
    return fn


for _name, _symbol in {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}.items():
    maps(f"aten.{_name}.Scalar", f"aten.{_name}.Tensor")(_compare(_symbol))


@maps("aten.logical_and.default")
def logical_and(b, node, x, y):
    return elementwise(b, node, lambda p, q: f"({p} and {q})", x, y, dtype="b")


@maps("aten.logical_or.default")
def logical_or(b, node, x, y):
    return elementwise(b, node, lambda p, q: f"({p} or {q})", x, y, dtype="b")


@maps("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def where(b, node, c, x, y):
    return elementwise(b, node, lambda k, p, q: f"where({k}, {p}, {q})", c, x, y)


@maps("aten.clamp.default", "aten.clamp.Tensor", "aten.clamp_min.default",
      "aten.clamp_max.default", "aten.hardtanh.default")
def clamp(b, node, x, lo=None, hi=None):
    name = str(node.target)
    if name == "aten.clamp_max.default":
        lo, hi = None, lo
    if name == "aten.hardtanh.default":
        lo = -1.0 if lo is None else lo
        hi = 1.0 if hi is None else hi

    def fn(a, *bounds):
        k = 0
        if lo is not None:
            a, k = f"max({a}, {bounds[k]})", k + 1
        if hi is not None:
            a = f"min({a}, {bounds[k]})"
        return a
    return elementwise(b, node, fn, x, *[v for v in (lo, hi) if v is not None])


@maps("aten.gelu.default")
def gelu(b, node, x, approximate="none"):
    if approximate == "tanh":
        c = number(math.sqrt(2.0 / math.pi))
        return elementwise(b, node, lambda a: f"(0.5 * {a} * (1.0 + tanh({c} * ({a} + 0.044715 * {a} ** 3))))", x)
    return elementwise(b, node, lambda a: f"(0.5 * {a} * (1.0 + erf({a} * {number(math.sqrt(0.5))})))", x)


@maps("aten.elu.default")
def elu(b, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    s, al, ins = number(scale), number(alpha), number(input_scale)
    return elementwise(b, node, lambda a: f"({s} * where({a} > 0, {a}, {al} * expm1({a} * {ins})))", x)


@maps("aten.leaky_relu.default")
def leaky_relu(b, node, x, slope=0.01):
    return elementwise(b, node, lambda a: f"where({a} > 0, {a}, {a} * {number(slope)})", x)


@maps("aten.softplus.default")
def softplus(b, node, x, beta=1.0, threshold=20.0):
    be, th = number(beta), number(threshold)
    return elementwise(b, node, lambda a: f"where({a} * {be} > {th}, {a}, log1p(exp({a} * {be})) / {be})", x)


@maps("aten.hardsigmoid.default")
def hardsigmoid(b, node, x):
    return elementwise(b, node, lambda a: f"min(max({a} / 6.0 + 0.5, 0.0), 1.0)", x)


@maps("aten.hardswish.default")
def hardswish(b, node, x):
    return elementwise(b, node, lambda a: f"({a} * min(max({a} + 3.0, 0.0), 6.0) / 6.0)", x)


@maps("aten.mish.default")
def mish(b, node, x):
    return elementwise(b, node, lambda a: f"({a} * tanh(log1p(exp({a}))))", x)


_CASTS = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
          "int64": "i64", "int32": "i32", "bool": "bool"}


@maps("aten._to_copy.default", "aten.clone.default", "aten.alias.default",
      "aten.lift_fresh_copy.default", "aten.detach.default", "aten.contiguous.default")
def copy(b, node, x, *rest, dtype=None, **kw):
    if dtype is None:
        return x
    cast = _CASTS.get(str(dtype).replace("torch.", ""))
    if cast is None:
        raise Unmapped(str(node.target), f"dtype {dtype}")
    if cast == "f32" and x.dtype == "f":  # the reference is float64 either way
        return x
    return elementwise(b, node, lambda a: f"{cast}({a})", x)


@maps("aten.full_like.default", "aten.full.default")
def full(b, node, x, value, **kw):
    return Value(b.shape(node), b.dtype(node), lambda idx: number(value), ELEMENTWISE)


@maps("aten.zeros_like.default", "aten.zeros.default")
def zeros(b, node, *a, **kw):
    return Value(b.shape(node), b.dtype(node), lambda idx: "0", ELEMENTWISE)


@maps("aten.ones_like.default", "aten.ones.default")
def ones(b, node, *a, **kw):
    return Value(b.shape(node), b.dtype(node), lambda idx: "1", ELEMENTWISE)


@maps("aten.scalar_tensor.default")
def scalar_tensor(b, node, value, **kw):
    return Value((), b.dtype(node), lambda idx: number(value), ELEMENTWISE)


@maps("aten.arange.start_step", "aten.arange.start", "aten.arange.default")
def arange(b, node, *args, **kw):
    args = [a for a in args if not hasattr(a, "is_floating_point")]
    start, step = (0, 1) if len(args) == 1 else (args[0], args[2] if len(args) > 2 else 1)
    start_t = b.size(start) if not isinstance(start, (int, float)) else number(start)
    return Value(b.shape(node), b.dtype(node),
                 lambda idx: f"({start_t} + {idx[0]} * {number(step)})", ELEMENTWISE)


@maps("aten.native_dropout.default")
def dropout(b, node, x, p, train):
    if train and p > 0:
        raise Unmapped(str(node.target), f"random in training mode with p={p}; call .eval() "
                       "or use p=0")
    return (x, Value(x.shape, "b", lambda idx: "1", ELEMENTWISE))
