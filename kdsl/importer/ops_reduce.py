"""Reductions, softmax, scans and gathers."""
from __future__ import annotations

import sympy

from .errors import Unmapped
from .table import dims_of, maps, norm_dim
from .values import COMPUTE, ELEMENTWISE, Value, number


def reduced(b, x: Value, dims, keepdim: bool, op: str, body=lambda a: a, dtype=None) -> Value:
    """``op`` (sum, mean, max, ...) of ``body(x)`` over ``dims``."""
    dims = dims_of(dims, x.rank)
    shape = tuple(sympy.Integer(1) if d in dims else s for d, s in enumerate(x.shape)
                  if keepdim or d not in dims)

    def read(idx):
        ks = {d: b.fresh("r") for d in dims}
        it = iter(idx)
        src = []
        for d in range(x.rank):
            if d in dims:
                src.append(ks[d])
                if keepdim:
                    next(it)
            else:
                src.append(next(it))
        ranges = ", ".join(f"{ks[d]} in 0 .. {b.size(x.shape[d])}" for d in dims)
        return f"({op}({ranges}) ({body(x.at(tuple(src)))}))"
    if x.rank == 0:
        return x
    kind = "i" if op in ("argmax", "argmin") else dtype or x.dtype
    return Value(shape, kind, read, COMPUTE)


@maps("aten.sum.dim_IntList", "aten.sum.default")
def sum_(b, node, x, dims=None, keepdim=False, dtype=None):
    return reduced(b, x, dims, keepdim, "sum")


@maps("aten.mean.dim", "aten.mean.default")
def mean(b, node, x, dims=None, keepdim=False, dtype=None):
    return reduced(b, x, dims, keepdim, "mean")


@maps("aten.prod.dim_int", "aten.prod.default")
def prod(b, node, x, dim=None, keepdim=False, dtype=None):
    return reduced(b, x, dim, keepdim, "prod")


@maps("aten.amax.default", "aten.max.default")
def amax(b, node, x, dims=None, keepdim=False):
    return reduced(b, x, dims, keepdim, "max")


@maps("aten.amin.default", "aten.min.default")
def amin(b, node, x, dims=None, keepdim=False):
    return reduced(b, x, dims, keepdim, "min")


@maps("aten.max.dim")
def max_dim(b, node, x, dim, keepdim=False):
    return reduced(b, x, dim, keepdim, "max"), reduced(b, x, dim, keepdim, "argmax")


@maps("aten.min.dim")
def min_dim(b, node, x, dim, keepdim=False):
    return reduced(b, x, dim, keepdim, "min"), reduced(b, x, dim, keepdim, "argmin")


@maps("aten.argmax.default")
def argmax(b, node, x, dim=None, keepdim=False):
    if dim is None:
        raise Unmapped(str(node.target), "over the flattened tensor (dim=None)")
    return reduced(b, x, dim, keepdim, "argmax")


@maps("aten.argmin.default")
def argmin(b, node, x, dim=None, keepdim=False):
    if dim is None:
        raise Unmapped(str(node.target), "over the flattened tensor (dim=None)")
    return reduced(b, x, dim, keepdim, "argmin")


@maps("aten.any.dim", "aten.any.dims", "aten.any.default")
def any_(b, node, x, dim=None, keepdim=False):
    r = reduced(b, x, dim, keepdim, "sum", lambda a: f"where({a}, 1, 0)")
    return Value(r.shape, "b", lambda idx: f"({r.at(idx)} > 0)", COMPUTE)


@maps("aten.var.correction", "aten.var.dim")
def var(b, node, x, dims=None, *, correction=None, keepdim=False, unbiased=None):
    return _var(b, x, dims, correction, keepdim)


def _var(b, x, dims, correction, keepdim):
    dims = dims_of(dims, x.rank)
    correction = 1 if correction is None else correction
    mu = b.store(reduced(b, x, dims, True, "mean"))
    n = sympy.Integer(1)
    for d in dims:
        n = n * x.shape[d]
    squares = Value(x.shape, "f", lambda idx: f"({x.at(idx)} - {mu.at(_kept(idx, dims))}) ** 2")
    s = reduced(b, squares, dims, keepdim, "sum")
    den = b.size(n - correction)
    return Value(s.shape, "f", lambda idx: f"({s.at(idx)} / {den})", COMPUTE)


def _kept(idx, dims):
    return tuple("0" if d in dims else i for d, i in enumerate(idx))


@maps("aten.linalg_vector_norm.default")
def vector_norm(b, node, x, ord=2, dim=None, keepdim=False, dtype=None):
    if ord == 2:
        s = reduced(b, x, dim, keepdim, "sum", lambda a: f"{a} ** 2")
        return Value(s.shape, "f", lambda idx: f"sqrt({s.at(idx)})", COMPUTE)
    if ord == 1:
        return reduced(b, x, dim, keepdim, "sum", lambda a: f"abs({a})")
    if ord == float("inf"):
        return reduced(b, x, dim, keepdim, "max", lambda a: f"abs({a})")
    p = number(ord)
    s = reduced(b, x, dim, keepdim, "sum", lambda a: f"pow(abs({a}), {p})")
    return Value(s.shape, "f", lambda idx: f"pow({s.at(idx)}, 1.0 / {p})", COMPUTE)


@maps("aten.logsumexp.default")
def logsumexp(b, node, x, dims, keepdim=False):
    dims = dims_of(dims, x.rank)
    m = b.store(reduced(b, x, dims, True, "max"))

    def read(idx):
        full = idx if keepdim else _expand(idx, dims, x.rank)
        return f"({m.at(_kept(full, dims))} + log({_sum_exp(b, x, dims, m, full)}))"
    return Value(b.shape(node), "f", read, COMPUTE)


def _expand(idx, dims, rank):
    it = iter(idx)
    return tuple("0" if d in dims else next(it) for d in range(rank))


def _sum_exp(b, x, dims, m, full):
    ks = {d: b.fresh("r") for d in dims}
    src = tuple(ks[d] if d in dims else i for d, i in enumerate(full))
    ranges = ", ".join(f"{ks[d]} in 0 .. {b.size(x.shape[d])}" for d in dims)
    return f"sum({ranges}) (exp({x.at(src)} - {m.at(_kept(full, dims))}))"


@maps("aten._softmax.default", "aten.softmax.int")
def softmax(b, node, x, dim, half_to_float=False):
    dim = norm_dim(dim, x.rank)
    m = b.store(reduced(b, x, [dim], True, "max"))
    e = b.store(Value(x.shape, "f", lambda idx: f"exp({x.at(idx)} - {m.at(_kept(idx, [dim]))})"))
    s = b.store(reduced(b, e, [dim], True, "sum"))
    return Value(x.shape, "f", lambda idx: f"({e.at(idx)} / {s.at(_kept(idx, [dim]))})",
                 ELEMENTWISE)


@maps("aten._log_softmax.default", "aten.log_softmax.int")
def log_softmax(b, node, x, dim, half_to_float=False):
    dim = norm_dim(dim, x.rank)
    m = b.store(reduced(b, x, [dim], True, "max"))

    def lse_read(idx):
        return f"({m.at(idx)} + log({_sum_exp(b, x, [dim], m, idx)}))"
    lse = b.store(Value(m.shape, "f", lse_read, COMPUTE))
    return Value(x.shape, "f", lambda idx: f"({x.at(idx)} - {lse.at(_kept(idx, [dim]))})",
                 ELEMENTWISE)


def _scan(op):
    def fn(b, node, x, dim, dtype=None):
        dim = norm_dim(dim, x.rank)
        return Value(b.shape(node), x.dtype, lambda idx: f"({op}({idx[dim]}) ({x.at(idx)}))",
                     COMPUTE, notes={"scan": True})
    return fn


maps("aten.cumsum.default")(_scan("cumsum"))
maps("aten.cumprod.default")(_scan("cumprod"))


@maps("aten.gather.default")
def gather(b, node, x, dim, index, sparse_grad=False):
    dim = norm_dim(dim, x.rank)
    b.index_domain(index, x.shape[dim], b.inputs)

    def read(idx):
        return x.at(idx[:dim] + (index.at(idx),) + idx[dim + 1:])
    return Value(b.shape(node), x.dtype, read, ELEMENTWISE)
