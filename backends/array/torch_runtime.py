"""Helpers that torch kernels rendered by ``torch_backend`` call as ``rt.*``.

The twin of ``numpy_runtime``: same names, same signatures (plus a ``dev``
argument where a helper allocates), on CPU and CUDA tensors.
"""
from __future__ import annotations

import torch

from kdsl.torch_ops import hash64  # noqa: F401  (the language's one torch definition)

# ---- grids -------------------------------------------------------------------------


def load(t: torch.Tensor, dtype) -> torch.Tensor:
    return t.to(dtype)


def variant(t: torch.Tensor) -> str:
    """The code variant of a tensor: 'float', 'float64', 'int' or 'bool'
    (``analysis.kind_variants``)."""
    if t.dtype == torch.float64:
        return "float64"
    return "bool" if t.dtype == torch.bool else "float" if t.is_floating_point() else "int"


def axis(lo: int, hi: int, pos: int, nd: int, dev) -> torch.Tensor:
    a = torch.arange(lo, hi, dtype=torch.int64, device=dev)
    shape = [1] * nd
    shape[pos] = a.numel()
    return a.reshape(shape)


def full(shape, value, dtype, dev) -> torch.Tensor:
    return torch.full(shape, value, dtype=dtype, device=dev)


def empty(shape, dtype, dev) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=dev)


def settle(x: torch.Tensor, shape) -> torch.Tensor:
    return x.expand(shape)


def expand(x: torch.Tensor, pos: int, n: int) -> torch.Tensor:
    shape = list(x.shape)
    shape[pos] = n
    return x.expand(shape)


def extent(length: torch.Tensor) -> int:
    return int(length.max()) if length.numel() else 0


def nonneg(x):
    return torch.clamp(x, min=0)


def clip(s: torch.Tensor, n: int) -> torch.Tensor:
    return torch.clamp(s, 0, max(n - 1, 0))


def take(a: torch.Tensor, index: tuple):
    """``a[index]`` with clipped indices; an empty ``a`` reads zeros (those lanes are masked)."""
    if a.numel() == 0:
        a = torch.zeros([max(n, 1) if not isinstance(ix, slice) else n
                         for n, ix in zip(a.shape, index)], dtype=a.dtype, device=a.device)
    return a[index]


def window(a: torch.Tensor, dim: int, base: int, coefs, extents, pad):
    """A view of ``a`` with dim ``dim`` replaced by one dim per term: element (.., t1, t2, ..)
    reads index ``base + sum(c * t)`` of that dim. Reads past either end give ``pad`` (None:
    the nearest element, as a clipped read does)."""
    shape = a.shape[:dim] + tuple(extents) + a.shape[dim + 1:]
    if 0 in extents:
        return torch.zeros(shape, dtype=a.dtype, device=a.device)
    n = a.shape[dim]
    lo, hi = base, base + sum(c * (e - 1) for c, e in zip(coefs, extents)) + 1
    if lo < 0 or hi > n:
        before, after = max(0, -lo), max(0, hi - n)
        blocks = [_pad_block(a, dim, before, pad, 0), a, _pad_block(a, dim, after, pad, n - 1)]
        a = torch.cat(blocks, dim=dim)
        base += before
    stride = a.stride()
    strides = stride[:dim] + tuple(c * stride[dim] for c in coefs) + stride[dim + 1:]
    return a.as_strided(shape, strides, a.storage_offset() + base * stride[dim])


def _pad_block(a, dim, width, pad, edge):
    shape = list(a.shape)
    shape[dim] = width
    if pad is not None or a.shape[dim] == 0:
        return torch.full(shape, 0 if pad is None else pad, dtype=a.dtype, device=a.device)
    return a.narrow(dim, edge, 1).expand(shape)


# ---- reductions (axes kept) ----------------------------------------------------------


def _empty_along(x, axes) -> bool:
    return any(x.shape[a] == 0 for a in axes)


def _kept(x, axes):
    shape = list(x.shape)
    for a in axes:
        shape[a] = 1
    return shape


def rsum(x, axes):
    return torch.sum(x, dim=axes, keepdim=True)


def rprod(x, axes):
    for a in axes:
        x = torch.prod(x, dim=a, keepdim=True)
    return x


def rmax(x, axes, ident):
    if _empty_along(x, axes):
        return torch.full(_kept(x, axes), ident, dtype=x.dtype, device=x.device)
    return torch.amax(x, dim=axes, keepdim=True)


def rmin(x, axes, ident):
    if _empty_along(x, axes):
        return torch.full(_kept(x, axes), ident, dtype=x.dtype, device=x.device)
    return torch.amin(x, dim=axes, keepdim=True)


def argmax(x, axis):
    if x.shape[axis] == 0:
        return torch.zeros(_kept(x, (axis,)), dtype=torch.int64, device=x.device)
    return torch.argmax(x, dim=axis, keepdim=True)


def argmin(x, axis):
    if x.shape[axis] == 0:
        return torch.zeros(_kept(x, (axis,)), dtype=torch.int64, device=x.device)
    return torch.argmin(x, dim=axis, keepdim=True)


def count(mask, like, axes, dtype):
    full_mask = mask.expand(torch.broadcast_shapes(mask.shape, like.shape))
    return full_mask.sum(dim=axes, keepdim=True).to(dtype)


def segments(off, lo: int, hi: int):
    """Segments lo..hi of monotone offsets, read with the reference's clipping:
    (starts relative to the first, lengths, first, end)."""
    index = torch.clamp(torch.arange(lo, hi + 1, device=off.device), 0, off.numel() - 1)
    bounds = off[index]
    base, top = int(bounds[0]), int(bounds[-1])
    return bounds[:-1] - base, bounds[1:] - bounds[:-1], base, top


_SCATTER = {"max": "amax", "min": "amin", "prod": "prod"}


def segment_reduce(op, x, starts, lengths, axis, to_axis, ident, method="scatter"):
    """Reduce ``x`` along ``axis`` per segment [starts[b], starts[b] + lengths[b]); the
    segments land on ``to_axis`` (where ``x`` has size 1). One method: a scatter by
    segment id (``index_add_``, ``scatter_reduce``)."""
    n, nb = x.shape[axis], starts.numel()
    seg = torch.repeat_interleave(torch.arange(nb, device=x.device), lengths, output_size=n)
    shape = list(x.shape)
    shape[axis] = nb
    if op in ("sum", "mean"):
        out = torch.zeros(shape, dtype=x.dtype, device=x.device).index_add_(axis, seg, x)
        if op == "mean":
            along = [1] * x.ndim
            along[axis] = nb
            out = out / lengths.reshape(along).to(x.dtype)
    else:
        along = [1] * x.ndim
        along[axis] = n
        index = seg.reshape(along).expand(x.shape)
        out = torch.full(shape, ident, dtype=x.dtype, device=x.device)
        out = out.scatter_reduce(axis, index, x, reduce=_SCATTER[op], include_self=True)
    return out.transpose(axis, to_axis)


# ---- scans and collectives ----------------------------------------------------------


def cumsum(x, axis):
    return torch.cumsum(x, dim=axis)


def cumprod(x, axis):
    return torch.cumprod(x, dim=axis)


def cummax(x, axis):
    return torch.cummax(x, dim=axis).values


def cummin(x, axis):
    return torch.cummin(x, dim=axis).values


def logcumsumexp(x, axis):  # (the running log-sum-exp: numerics.py writes it)
    return torch.logcumsumexp(x, dim=axis)


def cumdecay(x, axis, c):  # (y[j] = c * y[j - 1] + x[j]: scans.py writes it)
    x = x.movedim(axis, 0)
    out = torch.empty_like(x)
    acc = torch.zeros_like(x[0])
    for n in range(x.shape[0]):
        acc = acc * c + x[n]
        out[n] = acc
    return out.movedim(0, axis)


def sort(x, axis):
    return torch.sort(x, dim=axis).values


def argsort(x, axis):
    return torch.sort(x, dim=axis, stable=True).indices


def topk(x, k: int, axis: int, method: str):
    """The k largest along ``axis``, descending, ties lowest index first: (values, indices).

    Keys sort ascending as the reference sorts them (``-x``, or ``~x`` for integers, so
    NaN comes last). 'partition' selects with ``torch.topk`` and breaks ties at the
    threshold by index, so it returns exactly what the full stable sort ('sort') does."""
    key = -x if x.is_floating_point() else ~x
    n = x.shape[axis]
    k = min(k, n)
    if method == "partition" and 0 < k < n and not (x.is_floating_point() and x.isnan().any()):
        thr = torch.topk(key, k, dim=axis, largest=False).values.narrow(axis, k - 1, 1)
        better, tied = key < thr, key == thr
        need = k - better.sum(dim=axis, keepdim=True)
        chosen = (better | (tied & (torch.cumsum(tied, dim=axis) <= need))).movedim(axis, -1)
        idx = torch.nonzero(chosen)[:, -1].reshape(chosen.shape[:-1] + (k,)).movedim(-1, axis)
        order = torch.sort(torch.take_along_dim(key, idx, dim=axis), dim=axis, stable=True).indices
        idx = torch.take_along_dim(idx, order, dim=axis)
    else:
        idx = torch.sort(key, dim=axis, stable=True).indices.narrow(axis, 0, k)
    return torch.take_along_dim(x, idx, dim=axis), idx


def swap(x, a: int, b: int):
    return x.transpose(a, b)


# ---- builtins ------------------------------------------------------------------------


def segment_of(offsets, i):
    return torch.searchsorted(offsets, i.contiguous(), right=True) - 1


def triu(p, f: int, which: int):
    table = torch.triu_indices(f, f, 1, device=p.device)[which]
    if not table.numel():
        return p * 0
    return table[torch.clamp(p, 0, table.numel() - 1)]


# ---- scatter-adds ------------------------------------------------------------------


def scatter_add(shape, keys, keyed, value, grid, dtype) -> torch.Tensor:
    """The twin of ``numpy_runtime.scatter_add``: counts by ``bincount``, weights by
    ``index_add_`` into int64 (exact) or float64, cast to ``dtype``."""
    size = 1
    for n in shape:
        size *= n
    flat, bad = 0, None
    for k, n, test in zip(keys, shape, keyed):
        k = torch.as_tensor(k, dtype=torch.int64)
        flat = flat * n + k
        if test:
            out_of = (k < 0) | (k >= n)
            bad = out_of if bad is None else bad | out_of
    flat = torch.as_tensor(flat)
    if bad is not None:
        flat = torch.where(bad, size, flat)
    flat = flat.expand(grid).reshape(-1)
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    if not isinstance(value, torch.Tensor):
        out = torch.bincount(flat, minlength=size + 1).to(wide) * value
    else:
        out = torch.zeros(size + 1, dtype=wide, device=flat.device)
        out.index_add_(0, flat, value.to(wide).reshape(-1))
    return out[:size].reshape(shape).to(dtype)
