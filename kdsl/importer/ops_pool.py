"""Pooling: max (padded with -inf) and average (zeros counted or not) windows, 1-3 d.

torch lowers 1-d pooling to 2-d over an unsqueezed axis; the unsqueeze folds into the
window's reads.
"""
from __future__ import annotations

from .errors import Unmapped
from .table import maps
from .values import COMPUTE, Value


def _per_axis(v, n):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    if not v:
        return None
    return v * n if len(v) == 1 else v


def _windows(b, outs, ks, kernel, stride, padding, dilation):
    pos = []
    for o, k, s, p, d in zip(outs, ks, stride, padding, dilation):
        text = o if s == 1 else f"{o} * {s}"
        text = f"{text} + {k}" if d == 1 else f"{text} + {k} * {d}"
        pos.append(text if p == 0 else f"{text} - {p}")
    return pos


def _pool(b, node, x, kernel, stride, padding, dilation, reduce_op, pad_value, divisor=None):
    n = len(kernel)
    read_x = b.padded_reader(x)
    lead = x.rank - n

    def read(idx):
        ks = [b.fresh("k") for _ in range(n)]
        pos = _windows(b, idx[lead:], ks, kernel, stride, padding, dilation)
        ranges = ", ".join(f"{k} in 0 .. {size}" for k, size in zip(ks, kernel))
        text = f"({reduce_op}({ranges}) ({read_x(tuple(idx[:lead]) + tuple(pos), pad_value)}))"
        return text if divisor is None else f"({text} / ({divisor(idx[lead:])}))"
    return Value(b.shape(node), x.dtype, read, COMPUTE)


@maps("aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default",
      "aten.max_pool1d_with_indices.default")
def max_pool(b, node, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    n = len(kernel)
    stride = _per_axis(stride, n) or list(kernel)
    padding, dilation = _per_axis(padding, n), _per_axis(dilation, n)
    y = _pool(b, node, x, kernel, stride, padding, dilation, "max", float("-inf"))

    def indices(idx):
        raise Unmapped(str(node.target), "its indices output")
    return y, Value(y.shape, "i", indices, COMPUTE)


@maps("aten.avg_pool2d.default", "aten.avg_pool3d.default", "aten.avg_pool1d.default")
def avg_pool(b, node, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
    n = len(kernel)
    stride = _per_axis(stride, n) or list(kernel)
    padding = _per_axis(padding, n)
    spatial = x.shape[x.rank - n:]
    if divisor_override:
        return _pool(b, node, x, kernel, stride, padding, [1] * n, "sum", 0.0,
                     lambda outs: str(divisor_override))
    if count_include_pad and not ceil_mode:
        return _pool(b, node, x, kernel, stride, padding, [1] * n, "sum", 0.0,
                     lambda outs: str(_prod(kernel)))

    # the window's size: clipped to the padded input (count_include_pad) or to the input
    def divisor(outs):
        parts = []
        for o, k, s, p, size in zip(outs, kernel, stride, padding, spatial):
            start = f"{o} * {s} - {p}"
            hi = f"{b.size(size)} + {p}" if count_include_pad else b.size(size)
            lo = start if count_include_pad else f"max({start}, 0)"
            parts.append(f"(min({start} + {k}, {hi}) - {lo})")
        return " * ".join(parts)
    return _pool(b, node, x, kernel, stride, padding, [1] * n, "sum", 0.0, divisor)


def _prod(v):
    p = 1
    for a in v:
        p *= a
    return p
