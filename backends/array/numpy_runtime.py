"""Helpers that numpy kernels rendered by ``numpy_backend`` call as ``rt.*``.

Every function here has a twin of the same name and signature in
``torch_runtime``, so ``array_lowering`` renders one call for both. Reductions
keep their axes (size 1), matching the grid model of the generator.
"""
from __future__ import annotations

import numpy as np
import torch

from kdsl.builtins import segment_of as _segment_of
from kdsl.reference import decayed as _decayed
from kdsl.builtins import splitmix64, triu_pairs

# ---- crossing the torch boundary -------------------------------------------------


def load(t: torch.Tensor, dtype) -> np.ndarray:
    """A CPU tensor as an array of ``dtype``, without a copy when the dtypes agree."""
    a = t.detach().float().numpy() if t.dtype == torch.bfloat16 else t.detach().numpy()
    return a.astype(dtype, copy=False)


def out_buffer(t: torch.Tensor) -> np.ndarray:
    """A writable array for output ``t``: a view of it, or a float32 stand-in for bf16."""
    if t.dtype == torch.bfloat16:
        return np.empty(tuple(t.shape), dtype=np.float32)
    return t.detach().numpy()


def finish(t: torch.Tensor, buf: np.ndarray) -> None:
    if t.dtype == torch.bfloat16:
        t.copy_(torch.from_numpy(buf))


def variant(t) -> str:
    """The code variant of an input tensor or an output buffer: 'float', 'float64', 'int'
    or 'bool' (``analysis.kind_variants``)."""
    if isinstance(t, torch.Tensor):
        if t.dtype == torch.float64:
            return "float64"
        return "bool" if t.dtype == torch.bool else "float" if t.is_floating_point() else "int"
    if t.dtype == np.float64:
        return "float64"
    return {"b": "bool", "f": "float"}.get(t.dtype.kind, "int")


# ---- grids -------------------------------------------------------------------------


def axis(lo: int, hi: int, pos: int, nd: int) -> np.ndarray:
    a = np.arange(lo, hi, dtype=np.int64)
    shape = [1] * nd
    shape[pos] = a.size
    return a.reshape(shape)


def full(shape, value, dtype) -> np.ndarray:
    return np.full(shape, value, dtype=dtype)


def empty(shape, dtype) -> np.ndarray:
    return np.empty(shape, dtype=dtype)


def settle(x, shape) -> np.ndarray:
    return np.broadcast_to(x, shape)


def expand(x: np.ndarray, pos: int, n: int) -> np.ndarray:
    shape = list(np.shape(x))
    shape[pos] = n
    return np.broadcast_to(x, shape)


def extent(length: np.ndarray) -> int:
    return int(length.max()) if length.size else 0


def nonneg(x):
    return np.maximum(x, 0)


def clip(s: np.ndarray, n: int) -> np.ndarray:
    return np.clip(s, 0, max(n - 1, 0))


def take(a: np.ndarray, index: tuple):
    """``a[index]`` with clipped indices; an empty ``a`` reads zeros (those lanes are masked)."""
    if a.size == 0:
        a = np.zeros([max(n, 1) if not isinstance(ix, slice) else n
                      for n, ix in zip(a.shape, index)], dtype=a.dtype)
    return a[index]


def window(a: np.ndarray, dim: int, base: int, coefs, extents, pad):
    """A view of ``a`` with dim ``dim`` replaced by one dim per term: element (.., t1, t2, ..)
    reads index ``base + sum(c * t)`` of that dim. Reads past either end give ``pad`` (None:
    the nearest element, as a clipped read does)."""
    shape = a.shape[:dim] + tuple(extents) + a.shape[dim + 1:]
    if 0 in extents:
        return np.zeros(shape, dtype=a.dtype)
    n = a.shape[dim]
    lo, hi = base, base + sum(c * (e - 1) for c, e in zip(coefs, extents)) + 1
    if lo < 0 or hi > n:
        before, after = max(0, -lo), max(0, hi - n)
        widths = [(0, 0)] * a.ndim
        widths[dim] = (before, after)
        a = np.pad(a, widths, mode="edge") if pad is None and n else \
            np.pad(a, widths, constant_values=0 if pad is None else pad)
        base += before
    a = a[(slice(None),) * dim + (slice(base, None),)]
    step = a.strides[dim]
    strides = a.strides[:dim] + tuple(c * step for c in coefs) + a.strides[dim + 1:]
    return np.lib.stride_tricks.as_strided(a, shape, strides, writeable=False)


# ---- reductions (axes kept) ----------------------------------------------------------


def _unrolled(ufunc, x, axes):
    """A reduction over one short axis as a few whole-array ufunc calls: numpy's own
    reduce walks a short, strided axis one output element at a time."""
    if len(axes) != 1 or not 1 < np.shape(x)[axes[0]] <= 16 or np.size(x) < 1 << 15:
        return None
    lead = (slice(None),) * axes[0]
    out = x[lead + (slice(0, 1),)].copy()  # a copy, so the ufunc may write into it
    for k in range(1, x.shape[axes[0]]):
        ufunc(out, x[lead + (slice(k, k + 1),)], out=out)
    return out


def rsum(x, axes):
    out = _unrolled(np.add, x, axes)
    return np.sum(x, axis=axes, keepdims=True) if out is None else out


def rprod(x, axes):
    out = _unrolled(np.multiply, x, axes)
    return np.prod(x, axis=axes, keepdims=True) if out is None else out


def rmax(x, axes, ident):
    out = _unrolled(np.maximum, x, axes)
    return np.max(x, axis=axes, keepdims=True, initial=ident) if out is None else out


def rmin(x, axes, ident):
    out = _unrolled(np.minimum, x, axes)
    return np.min(x, axis=axes, keepdims=True, initial=ident) if out is None else out


def argmax(x, axis):
    if x.shape[axis] == 0:
        return np.zeros(_kept(x.shape, axis), dtype=np.int64)
    return np.argmax(x, axis=axis, keepdims=True)


def argmin(x, axis):
    if x.shape[axis] == 0:
        return np.zeros(_kept(x.shape, axis), dtype=np.int64)
    return np.argmin(x, axis=axis, keepdims=True)


def count(mask, like, axes, dtype):
    full_mask = np.broadcast_to(mask, np.broadcast_shapes(np.shape(mask), np.shape(like)))
    return full_mask.sum(axis=axes, keepdims=True).astype(dtype)


def _kept(shape, axis):
    shape = list(shape)
    shape[axis] = 1
    return shape


def segments(off, lo: int, hi: int):
    """Segments lo..hi of monotone offsets, read with the reference's clipping:
    (starts relative to the first, lengths, first, end)."""
    bounds = off[np.clip(np.arange(lo, hi + 1), 0, len(off) - 1)]
    base, top = int(bounds[0]), int(bounds[-1])
    return bounds[:-1] - base, bounds[1:] - bounds[:-1], base, top


_REDUCE = {"sum": np.sum, "mean": np.sum, "prod": np.prod, "max": np.max, "min": np.min}
_UFUNC = {"sum": np.add, "mean": np.add, "prod": np.multiply, "max": np.maximum,
          "min": np.minimum}


def segment_reduce(op, x, starts, lengths, axis, to_axis, ident, method="loop"):
    """Reduce ``x`` along ``axis`` per segment [starts[b], starts[b] + lengths[b]); the
    segments land on ``to_axis`` (where ``x`` has size 1).

    'loop' reduces each segment's slice in one call; 'reduceat' uses ``ufunc.reduceat``
    (one call, but numpy walks it column by column: slow for wide rows)."""
    nb = len(starts)
    shape = list(x.shape)
    shape[axis] = nb
    out = np.full(shape, ident, dtype=x.dtype)
    if method == "loop":
        fn = _REDUCE[op]
        rows, dest = np.moveaxis(x, axis, 0), np.moveaxis(out, axis, 0)
        for b, (s, n) in enumerate(zip(starts.tolist(), lengths.tolist())):
            if n:
                dest[b] = fn(rows[s:s + n], axis=0)
    else:
        live = int(np.searchsorted(starts, x.shape[axis], side="left"))  # starting before the end
        if live:
            where = [slice(None)] * x.ndim
            where[axis] = slice(0, live)
            out[tuple(where)] = _UFUNC[op].reduceat(x, starts[:live], axis=axis)
    along = [1] * x.ndim
    along[axis] = nb
    lengths = lengths.reshape(along)
    if method != "loop":  # reduceat gives an empty segment the element at its start
        out = np.where(lengths == 0, np.asarray(ident, dtype=x.dtype), out)
    if op == "mean":
        out = out / lengths.astype(x.dtype)
    return np.swapaxes(out, axis, to_axis)


# ---- scans and collectives ----------------------------------------------------------


def cumsum(x, axis):
    return np.cumsum(x, axis=axis)


def cumprod(x, axis):
    return np.cumprod(x, axis=axis)


def cummax(x, axis):  # (np.maximum carries a NaN along, as the reference's max does)
    return np.maximum.accumulate(x, axis=axis)


def cummin(x, axis):
    return np.minimum.accumulate(x, axis=axis)


def logcumsumexp(x, axis):  # (the running log-sum-exp: numerics.py writes it)
    return np.logaddexp.accumulate(x, axis=axis)


def cumdecay(x, axis, c):  # (y[j] = c * y[j - 1] + x[j]: scans.py writes it)
    return _decayed(x, axis, c, x.dtype)


def sort(x, axis):
    return np.sort(x, axis=axis)  # values only: which of equal keys comes first is invisible


def argsort(x, axis):
    return np.argsort(x, axis=axis, kind="stable")


def _descending_key(x):
    return ~x if x.dtype.kind in "iub" else -x


def topk(x, k: int, axis: int, method: str):
    """The k largest along ``axis``, descending, ties lowest index first: (values, indices).

    'partition' selects with ``np.partition`` and breaks ties at the threshold by
    index, so it returns exactly what the full stable sort ('sort') returns (NaN keys,
    which sort last, take the sort)."""
    key = _descending_key(x)
    n = x.shape[axis]
    if method == "partition" and 0 < k < n and not (key.dtype.kind == "f" and np.isnan(key).any()):
        thr = np.take(np.partition(key, k - 1, axis=axis), [k - 1], axis=axis)
        better, tied = key < thr, key == thr
        need = k - better.sum(axis=axis, keepdims=True)
        if (tied.sum(axis=axis, keepdims=True) > need).any():  # keep the first `need` ties
            tied &= np.cumsum(tied, axis=axis) <= need
        chosen = np.moveaxis(better | tied, axis, -1)
        idx = np.nonzero(chosen)[-1].reshape(chosen.shape[:-1] + (k,))
        idx = np.moveaxis(idx, -1, axis)
        order = np.argsort(np.take_along_axis(key, idx, axis=axis), axis=axis, kind="stable")
        idx = np.take_along_axis(idx, order, axis=axis)
    else:
        idx = np.take(np.argsort(key, axis=axis, kind="stable"), np.arange(min(k, n)), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx


def swap(x, a: int, b: int):
    return np.swapaxes(x, a, b)


# ---- builtins ------------------------------------------------------------------------


def segment_of(offsets, i):
    return _segment_of(offsets, i)


def triu(p, f: int, which: int):
    table = triu_pairs(f)[which]
    if not len(table):
        return p * 0
    return table[np.clip(p, 0, len(table) - 1)]


def hash64(x):
    return splitmix64(x)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x / (1.0 + np.exp(-x))


_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
         0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def erf(x):
    """erf: float64 arrays through torch's (libm's precision); others from the Chebyshev fit
    of erfc (Numerical Recipes), relative error < 1.2e-7, enough for float32."""
    if isinstance(x, np.ndarray) and x.dtype == np.float64:
        return torch.erf(torch.from_numpy(x)).numpy()
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.zeros_like(t)
    for c in reversed(_ERFC):
        poly = poly * t + c
    r = 1.0 - t * np.exp(-z * z + poly)
    return np.where(x >= 0, r, -r)


# ---- scatter-adds ------------------------------------------------------------------


def scatter_add(shape, keys, keyed, value, grid, dtype) -> np.ndarray:
    """An array of ``shape``: ``value`` (an array of the ``grid``, or a number) added at
    ``keys`` (one array per dim, broadcast to the grid) where each ``keyed`` key is in
    its dim's range (a key outside lands in a spare element, dropped). Counts and integer
    weights are exact (int64, wrapping); float weights are summed in float64."""
    size = int(np.prod(shape, dtype=np.int64))
    flat, bad = np.zeros((), dtype=np.int64), np.zeros((), dtype=bool)
    for k, n, test in zip(keys, shape, keyed):
        k = np.asarray(k, dtype=np.int64)
        flat = flat * n + k
        if test:
            bad = bad | (k < 0) | (k >= n)
    flat = np.broadcast_to(np.where(bad, size, flat), grid).ravel()
    if np.ndim(value) == 0:
        out = np.bincount(flat, minlength=size + 1) * value
    elif np.asarray(value).dtype.kind == "f":
        out = np.bincount(flat, weights=np.asarray(value, dtype=np.float64).ravel(),
                          minlength=size + 1)
    else:
        out = np.zeros(size + 1, dtype=np.int64)
        np.add.at(out, flat, np.asarray(value, dtype=np.int64).ravel())
    return out[:size].reshape(shape).astype(dtype)
