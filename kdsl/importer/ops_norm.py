"""Normalizations: layer, group, batch (training and eval) and instance norm.

Statistics are statements of their own (a mean, then a biased variance about it), and
the normalized value is elementwise, so the emitter may fuse it into its consumer.
"""
from __future__ import annotations

import sympy

from .table import maps
from .values import Value, number
from .ops_reduce import reduced


def _normalize(b, x, mu, var, eps, stat_index, weight=None, bias=None, param_index=None):
    def read(idx):
        s = stat_index(idx)
        text = f"({x.at(idx)} - {mu.at(s)}) * rsqrt({var.at(s)} + {number(eps)})"
        if weight is not None:
            text = f"{text} * {weight.at(param_index(idx))}"
        if bias is not None:
            text = f"{text} + {bias.at(param_index(idx))}"
        return f"({text})"
    return Value(x.shape, "f", read)


def _stats(b, x, dims):
    mu = b.store(reduced(b, x, dims, True, "mean"))
    kept = _kept_fn(dims)
    sq = Value(x.shape, "f", lambda idx: f"({x.at(idx)} - {mu.at(kept(idx))}) ** 2")
    var = b.store(reduced(b, sq, dims, True, "mean"))
    return mu, var, kept


def _kept_fn(dims):
    return lambda idx: tuple("0" if d in dims else i for d, i in enumerate(idx))


@maps("aten.native_layer_norm.default")
def layer_norm(b, node, x, normalized_shape, weight, bias, eps):
    n = len(normalized_shape)
    dims = list(range(x.rank - n, x.rank))
    mu, var, kept = _stats(b, x, dims)
    y = _normalize(b, x, mu, var, eps, kept, weight, bias, lambda idx: idx[x.rank - n:])
    return y, mu, var


@maps("aten._native_batch_norm_legit_functional.default", "aten.native_batch_norm.default",
      "aten._native_batch_norm_legit.default")
def batch_norm(b, node, x, weight, bias, running_mean, running_var, training, momentum, eps):
    if not training:
        return _eval_norm(b, x, weight, bias, running_mean, running_var, eps)
    return _train_norm(b, x, weight, bias, eps)


@maps("aten._native_batch_norm_legit_no_training.default")
def batch_norm_eval(b, node, x, weight, bias, running_mean, running_var, momentum, eps):
    return _eval_norm(b, x, weight, bias, running_mean, running_var, eps)


@maps("aten._native_batch_norm_legit.no_stats")
def batch_norm_no_stats(b, node, x, weight, bias, training, momentum, eps):
    return _train_norm(b, x, weight, bias, eps)


def _train_norm(b, x, weight, bias, eps):
    dims = [d for d in range(x.rank) if d != 1]
    mu, var, kept = _stats(b, x, dims)
    y = _normalize(b, x, mu, var, eps, kept, weight, bias, lambda idx: (idx[1],))
    return (y, mu, var, mu, var)


def _eval_norm(b, x, weight, bias, mean, var, eps):
    b.positive(var)
    y = _normalize(b, x, mean, var, eps, lambda idx: (idx[1],), weight, bias, lambda idx: (idx[1],))
    return (y, mean, var, mean, var)


@maps("aten.native_group_norm.default")
def group_norm(b, node, x, weight, bias, n, c, hw, groups, eps):
    c = int(sympy.sympify(x.shape[1]))
    per = c // groups
    spatial = list(range(2, x.rank))
    # the statistics of sample n, group g: over the group's channels and every position
    grouped_shape = (x.shape[0], sympy.Integer(groups), sympy.Integer(per)) + tuple(x.shape[2:])
    grouped = Value(grouped_shape, "f",
                    lambda idx: x.at((idx[0], f"{idx[1]} * {per} + {idx[2]}") + idx[3:]))
    mu, var, _ = _stats(b, grouped, [2] + [d + 1 for d in spatial])

    def stat(idx):
        g = f"{idx[1]} // {per}" if groups > 1 else "0"
        return (idx[0], g) + ("0",) * (len(grouped_shape) - 2)
    y = _normalize(b, x, mu, var, eps, stat, weight, bias, lambda idx: (idx[1],))
    return y, mu, var
