"""The language's defined builtins in torch, for baselines (``kt`` in a baseline).

Ops that torch lacks (a 64-bit hash, jagged softmax) are written here as the
idiomatic torch composition a user would otherwise write; they run on CPU and
CUDA alike.
"""
from __future__ import annotations

import torch

_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_M1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_M2 = 0x94D049BB133111EB - (1 << 64)


def _shr(z: torch.Tensor, r: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (z >> r) & ((1 << (64 - r)) - 1)


def hash64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64 finalizer of int64 values (wrapping arithmetic), as int64."""
    z = x.to(torch.int64) + _GOLDEN
    z = (z ^ _shr(z, 30)) * _M1
    z = (z ^ _shr(z, 27)) * _M2
    return z ^ _shr(z, 31)


def segment_ids(offsets: torch.Tensor, total: int) -> torch.Tensor:
    lengths = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(torch.arange(len(lengths), device=offsets.device), lengths,
                                   output_size=total)


def jagged_softmax(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Softmax over each segment of a jagged [N, D] tensor (fbgemm's jagged_softmax)."""
    n, d = values.shape
    seg = segment_ids(offsets, n)
    b = len(offsets) - 1
    x = values.float()
    m = torch.full((b, d), float("-inf"), device=x.device)
    m = m.scatter_reduce(0, seg[:, None].expand(n, d), x, reduce="amax", include_self=True)
    e = torch.exp(x - m[seg])
    s = torch.zeros((b, d), device=x.device).index_add_(0, seg, e)
    return (e / s[seg]).to(values.dtype)


def jagged_to_padded_dense(values: torch.Tensor, offsets: torch.Tensor, length: int,
                           pad: float = 0.0) -> torch.Tensor:
    """[N, D] jagged values -> [B, length, D], truncating long segments and padding short ones."""
    n, d = values.shape
    b = len(offsets) - 1
    out = torch.full((b, length, d), pad, dtype=values.dtype, device=values.device)
    seg = segment_ids(offsets, n)
    pos = torch.arange(n, device=values.device) - offsets[seg]
    keep = pos < length
    out[seg[keep], pos[keep]] = values[keep]
    return out
