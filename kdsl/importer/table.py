"""The mapping table: ATen op name -> a function building its index-notation value.

Each entry has one signature, ``fn(b, node, *args, **kwargs) -> Value | tuple``: ``b`` is
the emitter (shapes, fresh index names, statements), ``node`` the fx node, and the node's
arguments with graph tensors turned into ``Value``s and symbolic sizes into sympy. The
families live in the ``ops_*`` modules; importing them fills ``TABLE``.
"""
from __future__ import annotations

import sympy

from .errors import Unmapped
from .values import ELEMENTWISE, Value, number

TABLE: dict = {}


def maps(*names: str):
    def register(fn):
        for n in names:
            TABLE[n] = fn
        return fn
    return register


def lookup(name: str):
    # the families register themselves on import
    from . import ops_elementwise, ops_linear, ops_norm, ops_pool, ops_reduce, ops_views  # noqa: F401,E501
    if name not in TABLE:
        raise Unmapped(name)
    return TABLE[name]


def broadcast_index(v: Value, out_shape, idx) -> tuple:
    """``v``'s indices for the output indices ``idx`` under torch broadcasting."""
    extra = len(out_shape) - v.rank
    sub = []
    for d, size in enumerate(v.shape):
        o = out_shape[extra + d]
        sub.append("0" if size == 1 and o != 1 else idx[extra + d])
    return tuple(sub)


def operand(x, out_shape, idx) -> str:
    if isinstance(x, Value):
        return x.at(broadcast_index(x, out_shape, idx))
    return number(x)


def elementwise(b, node, fn, *operands, dtype: str | None = None) -> Value:
    shape = b.shape(node)
    operands = [_scalar(b, x) for x in operands]

    def read(idx):
        return fn(*[operand(x, shape, idx) for x in operands])
    return Value(shape, dtype or b.dtype(node), read, ELEMENTWISE)


def norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def dims_of(dims, rank: int) -> list[int]:
    if dims is None or dims == []:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(norm_dim(d, rank) for d in dims)


def is_one(size) -> bool:
    return sympy.sympify(size) == 1


def _scalar(b, x):
    """A symbolic scalar (a size, or a float made of sizes, like 1 / sqrt(D)) as a 0-d value."""
    if isinstance(x, sympy.Basic) and not x.is_Number:
        text = b.size(x)
        return Value((), "f", lambda idx: text, ELEMENTWISE)
    if isinstance(x, sympy.Basic):
        return float(x) if not x.is_Integer else int(x)
    return x
