"""Contractions: matrix products and convolutions (plain, strided, dilated, grouped,
transposed), written as sums over the contracted indices."""
from __future__ import annotations

from .table import broadcast_index, maps
from .values import COMPUTE, Value, number


def _contract(b, node, a: Value, w: Value, batch: int, bias=None, beta=1, alpha=1) -> Value:
    shape = b.shape(node)
    k_size = a.shape[-1]

    def read(idx):
        k = b.fresh("k")
        lead = idx[:batch]
        body = f"{a.at(lead + (idx[-2], k))} * {w.at(lead + (k, idx[-1]))}"
        text = f"(sum({k} in 0 .. {b.size(k_size)}) ({body}))"
        if alpha != 1:
            text = f"({number(alpha)} * {text})"
        if bias is not None and beta != 0:
            c = bias.at(broadcast_index(bias, shape, idx)) if isinstance(bias, Value) else number(bias)
            text = f"({text} + {c})" if beta == 1 else f"({text} + {number(beta)} * {c})"
        return text
    return Value(shape, b.dtype(node), read, COMPUTE, notes={"contraction": True})


@maps("aten.mm.default")
def mm(b, node, a, w):
    return _contract(b, node, a, w, 0)


@maps("aten.bmm.default")
def bmm(b, node, a, w):
    return _contract(b, node, a, w, 1)


@maps("aten.addmm.default")
def addmm(b, node, bias, a, w, beta=1, alpha=1):
    return _contract(b, node, a, w, 0, bias, beta, alpha)


@maps("aten.baddbmm.default")
def baddbmm(b, node, bias, a, w, beta=1, alpha=1):
    return _contract(b, node, a, w, 1, bias, beta, alpha)


@maps("aten.mv.default")
def mv(b, node, a, v):
    def read(idx):
        k = b.fresh("k")
        return f"(sum({k} in 0 .. {b.size(a.shape[1])}) ({a.at((idx[0], k))} * {v.at((k,))}))"
    return Value(b.shape(node), b.dtype(node), read, COMPUTE, notes={"contraction": True})


@maps("aten.dot.default")
def dot(b, node, a, v):
    def read(idx):
        k = b.fresh("k")
        return f"(sum({k} in 0 .. {b.size(a.shape[0])}) ({a.at((k,))} * {v.at((k,))}))"
    return Value(b.shape(node), b.dtype(node), read, COMPUTE, notes={"contraction": True})


@maps("aten.convolution.default")
def convolution(b, node, x, w, bias, stride, padding, dilation, transposed, output_padding,
                groups):
    shape = b.shape(node)
    nsp = x.rank - 2
    stride, padding, dilation = (_per_axis(v, nsp) for v in (stride, padding, dilation))
    if transposed or any(padding):
        read_x = b.padded_reader(x)
    else:  # every window lies inside the input
        def read_x(idx, pad):
            return x.at(idx)
    if transposed:
        ci_g, co_g = x.shape[1] // groups, w.shape[1]
    else:
        ci_g, co_g = w.shape[1], shape[1] // groups

    def read(idx):
        n, co, outs = idx[0], idx[1], idx[2:]
        c = b.fresh("c")
        ks = [b.fresh("k") for _ in range(nsp)]
        g_base = "" if groups == 1 else f"{co} // {b.size(co_g)} * {b.size(ci_g)} + "
        channel = f"{g_base}{c}"
        if not transposed:
            pos = [_window(o, k, s, p, d) for o, k, s, p, d in zip(outs, ks, stride, padding, dilation)]
            xs = read_x((n, channel) + tuple(pos), 0)
            ws = w.at((co, c) + tuple(ks))
            term = f"{xs} * {ws}"
        else:
            num = [f"{_plus(o, p)} - {_times(k, d)}" for o, k, p, d in zip(outs, ks, padding, dilation)]
            pos = [n_ if s == 1 else f"({n_}) // {s}" for n_, s in zip(num, stride)]
            xs = read_x((n, channel) + tuple(pos), 0)
            conds = [f"({n_}) % {s} == 0" for n_, s in zip(num, stride) if s != 1]
            if conds:
                xs = f"where({' and '.join(conds)}, {xs}, 0.0)"
            co_in = co if groups == 1 else f"{co} % {b.size(co_g)}"
            ws = w.at((channel, co_in) + tuple(ks))
            term = f"{xs} * {ws}"
        ranges = ", ".join([f"{c} in 0 .. {b.size(ci_g)}"] +
                           [f"{k} in 0 .. {b.size(w.shape[2 + a])}" for a, k in enumerate(ks)])
        text = f"(sum({ranges}) ({term}))"
        if bias is not None:
            text = f"({text} + {bias.at((co,))})"
        return text
    return Value(shape, b.dtype(node), read, COMPUTE, notes={"contraction": True})


def _per_axis(v, n: int) -> list[int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v


def _times(k: str, d: int) -> str:
    return k if d == 1 else f"{k} * {d}"


def _plus(o: str, p: int) -> str:
    return o if p == 0 else f"{o} + {p}"


def _window(o: str, k: str, s: int, p: int, d: int) -> str:
    text = o if s == 1 else f"{o} * {s}"
    text = f"{text} + {_times(k, d)}"
    return text if p == 0 else f"{text} - {p}"
