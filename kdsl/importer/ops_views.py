"""Views fold into indexing: permute, reshape, expand, slice, select, flip, pad, cat."""
from __future__ import annotations

import sympy

from .errors import Unmapped
from .table import dims_of, is_one, maps, norm_dim
from .values import Value, reindexed


@maps("aten.permute.default")
def permute(b, node, x, perm):
    perm = [norm_dim(p, x.rank) for p in perm]
    inverse = [perm.index(d) for d in range(x.rank)]
    return reindexed(x, b.shape(node), lambda idx: tuple(idx[inverse[d]] for d in range(x.rank)),
                     one_to_one=True)


@maps("aten.t.default")
def t(b, node, x):
    return reindexed(x, b.shape(node), lambda idx: tuple(reversed(idx)), one_to_one=True)


@maps("aten.transpose.int")
def transpose(b, node, x, d0, d1):
    d0, d1 = norm_dim(d0, x.rank), norm_dim(d1, x.rank)

    def m(idx):
        idx = list(idx)
        idx[d0], idx[d1] = idx[d1], idx[d0]
        return tuple(idx)
    return reindexed(x, b.shape(node), m, one_to_one=True)


@maps("aten.unsqueeze.default")
def unsqueeze(b, node, x, dim):
    dim = norm_dim(dim, x.rank + 1)
    return reindexed(x, b.shape(node), lambda idx: idx[:dim] + idx[dim + 1:], one_to_one=True)


@maps("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def squeeze(b, node, x, dims=None):
    gone = [d for d in dims_of(dims, x.rank) if is_one(x.shape[d])]

    def m(idx):
        it = iter(idx)
        return tuple("0" if d in gone else next(it) for d in range(x.rank))
    return reindexed(x, b.shape(node), m, one_to_one=True)


@maps("aten.expand.default")
def expand(b, node, x, sizes, implicit=False):
    shape = b.shape(node)
    extra = len(shape) - x.rank

    def m(idx):
        return tuple("0" if is_one(x.shape[d]) and not is_one(shape[extra + d]) else idx[extra + d]
                     for d in range(x.rank))
    return reindexed(x, shape, m, one_to_one=True)


@maps("aten.select.int")
def select(b, node, x, dim, index):
    dim = norm_dim(dim, x.rank)
    if isinstance(index, int) and index < 0:
        index = x.shape[dim] + index
    at = b.size(index)
    return reindexed(x, b.shape(node), lambda idx: idx[:dim] + (at,) + idx[dim:], one_to_one=True)


@maps("aten.slice.Tensor")
def slice_(b, node, x, dim=0, start=None, end=None, step=1):
    dim = norm_dim(dim, x.rank)
    start = 0 if start is None else start
    if isinstance(start, int) and start < 0:
        start = sympy.Max(x.shape[dim] + start, 0)
    lo = b.size(start)
    shape = b.shape(node)
    # a plain index must span its tensor's whole dim; a shortened slice reads through `i + 0`
    same = sympy.simplify(shape[dim] - x.shape[dim]) == 0

    def m(idx):
        i = idx[dim] if step == 1 else f"{idx[dim]} * {step}"
        i = i if lo == "0" and (same or step != 1) else f"{i} + {lo}"
        return idx[:dim] + (i,) + idx[dim + 1:]
    return reindexed(x, shape, m, one_to_one=True)


@maps("aten.flip.default")
def flip(b, node, x, dims):
    dims = dims_of(dims, x.rank)

    def m(idx):
        return tuple(f"{b.size(x.shape[d] - 1)} - {i}" if d in dims else i
                     for d, i in enumerate(idx))
    return reindexed(x, b.shape(node), m, one_to_one=True)


@maps("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def view(b, node, x, sizes):
    shape = b.shape(node)
    return reindexed(x, shape, _reshape_map(b, x.shape, shape))


def _reshape_map(b, src, dst):
    """Index mapping of a row-major reshape: dims group into blocks of equal products; a
    block's source indices come from its target indices through one linear offset."""
    blocks, i, j = [], 0, 0
    src_real = [d for d in range(len(src)) if not is_one(src[d])]
    dst_real = [d for d in range(len(dst)) if not is_one(dst[d])]
    while i < len(src_real) or j < len(dst_real):
        si, dj = [src_real[i]] if i < len(src_real) else [], [dst_real[j]] if j < len(dst_real) else []
        if not si or not dj:
            raise Unmapped("aten.view.default", "reshape whose sizes do not match")
        i, j = i + 1, j + 1
        ps, pt = src[si[0]], dst[dj[0]]
        while sympy.simplify(ps - pt) != 0:
            q = sympy.simplify(pt / ps)
            grow_src = q.is_number and q > 1 or not q.is_number and sympy.fraction(q)[1] == 1
            if grow_src and i < len(src_real):
                si.append(src_real[i])
                ps, i = ps * src[src_real[i]], i + 1
            elif j < len(dst_real):
                dj.append(dst_real[j])
                pt, j = pt * dst[dst_real[j]], j + 1
            elif i < len(src_real):
                si.append(src_real[i])
                ps, i = ps * src[src_real[i]], i + 1
            else:  # both sides used up: the products agree (torch checked the numel), though
                break  # sympy cannot show it (3 * (n // 3) == n under a divisibility guard)
        blocks.append((si, dj))

    def m(idx):
        out = ["0"] * len(src)
        for si, dj in blocks:
            if len(si) == 1 and len(dj) == 1:
                out[si[0]] = idx[dj[0]]
                continue
            flat = " + ".join(_scaled(_group(idx[d]), _product(b, [dst[e] for e in dj[k + 1:]]))
                              for k, d in enumerate(dj))
            flat = f"({flat})" if len(dj) > 1 else _group(flat)
            for k, d in enumerate(si):
                inner = _product(b, [src[e] for e in si[k + 1:]])
                part = flat if inner == "1" else f"{flat} // {inner}"
                out[d] = part if k == 0 else f"({part}) % {b.size(src[d])}"
        return tuple(out)
    return m


def _group(i: str) -> str:
    """An index expression safe as an operand of * // %."""
    return i if i.isidentifier() or i.isdigit() or (i.startswith("(") and i.endswith(")")
                                                    and i.count("(") == 1) else f"({i})"


def _product(b, sizes) -> str:
    p = sympy.Integer(1)
    for s in sizes:
        p = p * s
    return b.size(p)


def _scaled(i: str, stride: str) -> str:
    return i if stride == "1" else f"{i} * {stride}"


@maps("aten.constant_pad_nd.default")
def constant_pad(b, node, x, pad, value=0.0):
    read = b.padded_reader(x)
    shape = b.shape(node)
    before = {x.rank - 1 - k // 2: pad[k] for k in range(0, len(pad), 2)}

    def r(idx):
        return read(tuple(i if before.get(d, 0) == 0 else f"{i} - {b.size(before[d])}"
                          for d, i in enumerate(idx)), value)
    return Value(shape, x.dtype, r)


@maps("aten.cat.default")
def cat(b, node, tensors, dim=0):
    shape = b.shape(node)
    dim = norm_dim(dim, len(shape))
    readers = [b.padded_reader(t) for t in tensors]

    starts, total = [], sympy.Integer(0)
    for t in tensors:
        starts.append(total)
        total = total + t.shape[dim]
    ends = starts[1:] + [total]

    def r(idx):
        parts = []
        for t, read, start in zip(tensors, readers, starts):
            i = f"{idx[dim]} + 0" if start == 0 else f"{idx[dim]} - {b.size(start)}"
            parts.append(read(idx[:dim] + (i,) + idx[dim + 1:], 0))
        text = parts[-1]
        for k in range(len(parts) - 2, -1, -1):
            text = f"where({idx[dim]} < {b.size(ends[k])}, {parts[k]}, {text})"
        return text
    return Value(shape, b.dtype(node), r)
