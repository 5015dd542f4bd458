"""The Triton backend: plans and spaces from the IR, kernels checked against the reference.

Three kinds of test:
- in-process, no kernel runs: plans, search spaces, rendering, dispatch, build errors;
- the interpreter (``TRITON_INTERPRET=1``, which must be set before triton is imported, so
  it runs in worker subprocesses): every non-contraction spec, plus a few specs written
  here that no template could know, at the default genome and two random genomes, on
  small cases, against ``kdsl.reference``. bf16 is skipped here (checked on a GPU;
  the interpreter's bf16 dot, wrong in Triton 3.9, is repaired: test_triton_interpreter);
- static compiles of every default kernel for sm_90 and gfx942 (no GPU needed), with
  their register and spill counts.

The heavy parts run as three subprocesses at once (two interpreter workers, one compiler).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kdsl import ir
from kdsl import spec as kspec
from kdsl.backends import BuildError, get

SPECS = Path(__file__).resolve().parent.parent / "specs"
CONTRACTIONS = {"matmul", "matmul_bias_relu", "conv1d", "dlrm_interaction"}
KINDS = {"swiglu": "pointwise", "gelu_tanh": "pointwise", "hash_bucketize": "pointwise",
         "jagged_to_padded_dense": "pointwise", "softmax": "rows", "log_softmax": "rows",
         "layernorm": "rows", "rmsnorm": "rows", "cross_entropy": "rows", "cumsum_rows": "rows",
         "embedding_bag_sum": "rows", "jagged_softmax": "rows", "max_pool1d": "rows",
         "sort_rows": "collective", "topk_rows": "collective"}

# Ops of known classes that no spec in specs/ has: they must work with no new code.
NOVEL = {
    "row_argmax": """
        op row_argmax
          dims M, N
          in  x: f32 | f16 [M, N]
          out idx: i64 [M]
          idx[i] = argmax(j) x[i, j]
          baseline torch.argmax(x, dim=-1)
          tolerance exact
          test  M in 1..64, N in 1..300
          bench M=4096, N=4096, dtype=f32
        """,
    "segment_mean": """
        op segment_mean
          dims L, D, B
          in  values: f32 | f16 [L, D]
          in  offsets: i64 [B + 1] offsets(L)
          out y: like values [B, D]
          y[b, d] = mean(i in offsets[b] .. offsets[b + 1]) values[i, d]
          baseline torch.segment_reduce(values, "mean", offsets=offsets)
          tolerance f32(rtol=1e-5, atol=1e-5) f16(rtol=1e-3, atol=1e-3)
          test  L in 0..200, D in 1..40, B in 1..20
          bench L=1048576, D=128, B=16384, dtype=f32
        """,
    # a running maximum written as a max over a prefix range: a scan, not a range a point
    "prefix_max": """
        op prefix_max
          dims M, N
          in  x: f32 | f16 [M, N]
          out y: like x [M, N]
          y[i, j] = max(k in 0 .. j + 1) x[i, k]
          baseline torch.cummax(x, dim=1).values
          tolerance exact
          test  M in 1..8, N in 1..100
          bench M=4096, N=4096, dtype=f32
        """,
    "shifted_cumprod": """
        op shifted_cumprod
          dims M, N
          in  x: f32 [M, N] in 0.5 .. 1.5
          out y: like x [M, N]
          y[i, j] = 1 + cumprod(j) x[i, j]
          baseline 1 + torch.cumprod(x, dim=-1)
          tolerance f32(rtol=1e-4, atol=1e-5)
          test  M in 1..64, N in 1..300
          bench M=4096, N=4096, dtype=f32
        """,
    "row_argsort": """
        op row_argsort
          dims M, N
          in  x: f32 | i64 [M, N]
          out y: i64 [M, N]
          y[i, j] = argsort(j) x[i, j]
          baseline torch.argsort(x, dim=-1, stable=True)
          tolerance exact
          test  M in 1..64, N in 1..300
          bench M=4096, N=1024, dtype=i64
        """,
    "seg_sum_1d": """
        op seg_sum_1d
          dims L, B
          in  v: f32 | f16 [L]
          in  offsets: i64 [B + 1] offsets(L)
          out y: like v [B]
          y[b] = sum(i in offsets[b] .. offsets[b + 1]) v[i]
          baseline torch.segment_reduce(v, "sum", offsets=offsets)
          tolerance f32(rtol=1e-5, atol=1e-5) f16(rtol=1e-3, atol=1e-3)
          test  L in 0..200, B in 1..30
          bench L=1048576, B=16384, dtype=f32
        """,
    "jagged_center": """
        op jagged_center
          dims L, B
          in  v: f32 | f16 [L]
          in  offsets: i64 [B + 1] offsets(L)
          out y: like v [L]
          s[b] = max(k in offsets[b] .. offsets[b + 1]) v[k]
          y[i] = v[i] - s[segment_of(offsets, i)]
          baseline v
          tolerance f32(rtol=1e-5, atol=1e-5) f16(rtol=1e-3, atol=1e-3)
          test  L in 0..200, B in 1..30
          bench L=1048576, B=16384, dtype=f32
        """,
    "avg_pool1d": """
        op avg_pool1d
          dims B, L, KW, S, LO
          in  x: f32 | f16 [B, L]
          out y: like x [B, LO]
          y[b, o] = mean(k in 0 .. KW) x[b, o * S + k]
          baseline F.avg_pool1d(x[:, None, :], KW, stride=S)[:, 0, :]
          tolerance f32(rtol=1e-5, atol=1e-5) f16(rtol=1e-3, atol=1e-3)
          test  B in 1..8, L in 1..300, KW in 1..6, S in 1..5, LO in 1..300 where KW <= L, LO == (L - KW) // S + 1
          bench B=64, L=65536, KW=4, S=3, LO=21845, dtype=f32
        """,
    # staged (lower.stages): statistics broadcast over program axes, peeled at the bench
    "channel_norm": """
        op channel_norm
          dims N, C, H, W
          in  x: f32 | f16 [N, C, H, W]
          in  g: like x [C]
          out y: like x [N, C, H, W]
          mu[c]  = mean(n, h, w) x[n, c, h, w]
          var[c] = mean(n, h, w) (x[n, c, h, w] - mu[c]) ** 2
          y[n, c, h, w] = (x[n, c, h, w] - mu[c]) * rsqrt(var[c] + 1e-5) * g[c]
          baseline F.batch_norm(x, None, None, g, None, training=True, eps=1e-5)
          tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=2e-3, atol=4e-3)
          test  N in 2..3, C in 1..3, H in 1..6, W in 1..9
          bench N=64, C=64, H=512, W=512, dtype=f32
        """,
    # a reduction to a scalar whose body holds a reduction of its own (staged, peeled)
    # the batch mean in chunks of 256 rows at the bench point: tests cross chunk edges
    "batch_nll": """
        op batch_nll
          dims M, C
          in  z: f32 | f16 [M, C]
          in  t: i64 [M] in 0..C
          out loss: f32 []
          loss[] = mean(i) (log(sum(j) exp(f32(z[i, j]))) - f32(z[i, t[i]]))
          baseline F.cross_entropy(z.float(), t)
          tolerance f32(rtol=1e-5, atol=1e-5) f16(rtol=1e-4, atol=1e-4)
          test  M in 1..700, C in 1..40
          bench M=32768, C=4096, dtype=f32
        """,
    "mean_sq": """
        op mean_sq
          dims M, N
          in  a: f32 | f16 [M, N]
          in  b: like a [M, N]
          out loss: f32 []
          loss[] = mean(i, j) f32((a[i, j] - b[i, j]) ** 2)
          baseline F.mse_loss(a.float(), b.float())
          tolerance f32(rtol=1e-5, atol=1e-6) f16(rtol=1e-3, atol=1e-4)
          test  M in 1..12, N in 1..40
          bench M=32768, N=32768, dtype=f32
        """,
    # a reduction over a middle axis, kept as a dim of one: many rows a program
    "sum_middle": """
        op sum_middle
          dims B, D1, D2
          in  x: f32 | f16 [B, D1, D2]
          out y: like x [B, 1, D2]
          y[b, z, j] = sum(i) x[b, i, j]
          baseline torch.sum(x, dim=1, keepdim=True)
          tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=5e-3, atol=5e-3)
          test  B in 1..3, D1 in 1..40, D2 in 1..70
          bench B=128, D1=4096, D2=4095, dtype=f32
        """,
    "suffix_sum": """
        op suffix_sum
          dims M, N
          in  x: f32 | f16 [M, N]
          out y: like x [M, N]
          y[i, j] = sum(k in j .. N) x[i, k]
          baseline torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1])
          tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=5e-3, atol=5e-2)
          test  M in 1..8, N in 1..100
          bench M=4096, N=4096, dtype=f32
        """,
    # a softmax along the slow axis: row lanes across the contiguous one
    "softmax_dim0": """
        op softmax_dim0
          dims M, N
          in  x: f32 | f16 [M, N]
          out y: like x [M, N]
          m[j] = max(i) x[i, j]
          e[i, j] = exp(x[i, j] - m[j])
          y[i, j] = e[i, j] / sum(i) e[i, j]
          baseline torch.softmax(x, dim=0)
          tolerance f32(rtol=1e-5, atol=1e-6) f16(rtol=1e-3, atol=1e-3)
          test  M in 1..40, N in 1..40
          bench M=4096, N=4096, dtype=f32
        """,
    # a statistic over two axes that are not adjacent, broadcast back (staged)
    "center_cols": """
        op center_cols
          dims B, C, L
          in  x: f32 [B, C, L]
          out y: f32 [B, C, L]
          y[b, c, l] = x[b, c, l] - mean(bb, ll) x[bb, c, ll]
          baseline x - x.mean(dim=(0, 2), keepdim=True)
          tolerance f32(rtol=1e-4, atol=1e-5)
          test  B in 1..4, C in 1..6, L in 1..20
          bench B=64, C=128, L=8192, dtype=f32
        """,
    # a contraction stage, then row statistics of its result (staged: a GEMM and rows)
    "gram_softmax": """
        op gram_softmax
          dims N, D
          in  x: f32 [N, D]
          out y: f32 [N, N]
          s[i, j] = sum(d) x[i, d] * x[j, d]
          y[i, j] = exp(s[i, j] - max(k) s[i, k]) / sum(k) exp(s[i, k] - max(kk) s[i, kk])
          baseline torch.softmax(x @ x.T, dim=1)
          tolerance f32(rtol=1e-3, atol=1e-4)
          test  N in 1..30, D in 1..8
          bench N=4096, D=64, dtype=f32
        """,
    # a reduction over a range that grows with an outer index, inside another (staged)
    "nested_dependent": """
        op nested_dependent
          dims M, N
          in  x: f32 [M, N]
          out y: f32 [M]
          y[i] = sum(j) x[i, j] * max(k in 0 .. j + 1) x[i, k]
          baseline (x * torch.cummax(x, -1).values).sum(-1)
          tolerance f32(rtol=1e-5, atol=1e-5)
          test  M in 1..8, N in 1..30
          bench M=8, N=8, dtype=f32
        """,
    # outputs no single kernel can share: a stage each
    "two_scans": """
        op two_scans
          dims M, N
          in  x: f32 [M, N]
          out y: f32 [M, N]
          out z: f32 [M, N]
          y[i, j] = cumsum(j) x[i, j]
          z[i, j] = cumsum(i) x[i, j]
          baseline (torch.cumsum(x, 1), torch.cumsum(x, 0))
          tolerance f32(rtol=1e-5, atol=1e-5)
          test  M in 1..20, N in 1..20
          bench M=4096, N=4096, dtype=f32
        """,
    # a row dot product and norms, averaged to a scalar: row reductions, not GEMM tiles
    "cos_loss": """
        op cos_loss
          dims N, D
          in  a: f32 [N, D]
          in  b: f32 [N, D]
          out y: f32 []
          dot[i] = sum(d) a[i, d] * b[i, d]
          na[i] = sqrt(sum(d) a[i, d] ** 2)
          nb[i] = sqrt(sum(d) b[i, d] ** 2)
          y[] = mean(i) (1 - dot[i] / max(na[i] * nb[i], 1e-8))
          baseline torch.mean(1 - F.cosine_similarity(a, b, dim=1, eps=1e-8))
          tolerance f32(rtol=1e-4, atol=1e-5)
          test  N in 1..20, D in 1..50
          bench N=32768, D=4096, dtype=f32
        """,
    # a reverse cumsum by flips: the scan read at a computed index is a stage of its own
    "flip_cumsum": """
        op flip_cumsum
          dims M, N
          in  x: f32 [M, N]
          out y: f32 [M, N]
          r[i, j] = cumsum(j) x[i, N - 1 - j]
          y[i, j] = r[i, N - 1 - j]
          baseline torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1])
          tolerance f32(rtol=1e-4, atol=1e-4)
          test  M in 1..8, N in 1..100
          bench M=4096, N=4096, dtype=f32
        """,
    # a long vector reduced to a scalar: chunks of its range, then their sum
    "vec_mean": """
        op vec_mean
          dims N
          in  x: f32 | f16 [N]
          out y: f32 []
          y[] = mean(i) exp(f32(x[i]) * 0.1)
          baseline torch.exp(x.float() * 0.1).mean()
          tolerance f32(rtol=1e-5, atol=1e-5) f16(rtol=1e-3, atol=1e-3)
          test  N in 1..40000
          bench N=16777216, dtype=f32
        """,
    # a scan along the slow axis: row lanes across the contiguous one
    "cumsum_dim0": """
        op cumsum_dim0
          dims M, N
          in  x: f32 | f16 [M, N]
          out y: like x [M, N]
          y[i, j] = cumsum(i) x[i, j]
          baseline torch.cumsum(x, 0)
          tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=5e-3, atol=5e-2)
          test  M in 1..30, N in 1..30
          bench M=4096, N=4096, dtype=f32
        """,
    # a top-k read by another statement (a softmax over a router's chosen logits): the
    # top-k and its indices are one stage, the softmax reads its output
    "topk_router": """
        op topk_router
          dims T, E, K
          in  logits: f32 [T, E]
          out w: f32 [T, K]
          out ids: i64 [T, K]
          v[t, r]   = topk(e, K) logits[t, e]
          ids[t, r] = argtopk(e, K) logits[t, e]
          w[t, r]   = exp(v[t, r] - v[t, 0]) / sum(q) exp(v[t, q] - v[t, 0])
          baseline (torch.softmax(torch.topk(logits, K, dim=-1).values, dim=-1), torch.topk(logits, K, dim=-1).indices)
          tolerance f32(rtol=1e-5, atol=1e-6)
          test  T in 1..20, E in 1..16, K in 1..4 where K <= E
          bench T=65536, E=64, K=2, dtype=f32
        """,
    # a cross-entropy's picked logit written as a one-hot sum: read directly
    # (lower.select), not a pass over the row
    "one_hot_pick": """
        op one_hot_pick
          dims B, C
          in  p: f32 [B, C]
          in  t: i64 [B] in 0..C
          out y: f32 [B]
          y[i] = log(sum(j) exp(p[i, j])) - sum(j) where(j == t[i], p[i, j], 0.0)
          baseline F.cross_entropy(p, t, reduction="none")
          tolerance f32(rtol=1e-5, atol=1e-5)
          test  B in 1..30, C in 1..300
          bench B=32768, C=4096, dtype=f32
        """,
    # sums over an indicator with many keys: scatter-adds (atomics into a wide
    # accumulator), keys out of range dropped, a float total, a count, and one inside a
    # larger right side
    "histogram": """
        op histogram
          dims N, NB
          in  idx: i64 [N] in -3..NB + 3
          in  w: f32 | f16 [N]
          out h: like w [NB]
          out c: i64 [NB]
          out y: f32 [NB]
          h[b] = sum(i) w[i] * (idx[i] == b)
          c[b] = sum(i) (idx[i] == b)
          y[b] = (sum(i) where(idx[i] == b and w[i] > 0, w[i], 0.0)) / N + 1.0
          baseline (torch.zeros(NB, dtype=torch.float64).index_add_(0, idx.clamp(0, NB - 1), torch.where((idx >= 0) & (idx < NB), w.double(), 0.0)).to(w.dtype), torch.bincount(idx[(idx >= 0) & (idx < NB)], minlength=NB), torch.zeros(NB, dtype=torch.float64).index_add_(0, idx.clamp(0, NB - 1), torch.where((idx >= 0) & (idx < NB) & (w > 0), w.double(), 0.0)).float() / N + 1.0)
          tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=1e-2, atol=1e-2)
          test  N in 1..2000, NB in 1..300
          bench N=1048576, NB=4096, dtype=f32
        """,
    # a padded read of an elementwise intermediate: the intermediate materialized
    "pool_of_scaled": """
        op pool_of_scaled
          dims M, N
          in  x: f32 [M, N]
          out y: like x [M, (N + 2 - 3) // 2 + 1]
          t[i, j] = x[i, j] * 2.0
          y[i, o] = max(k in 0 .. 3) t[i, o * 2 + k - 1] pad(-inf)
          baseline F.max_pool1d((x * 2.0).unsqueeze(1), 3, stride=2, padding=1).squeeze(1)
          tolerance exact
          test  M in 1..64, N in 2..200
          bench M=4096, N=8192, dtype=f32
        """,
    # exponentials written naively on inputs where exp overflows float32 (lower.numerics)
    "naive_log_softmax": """
        op naive_log_softmax
          dims M, N
          in  x: f32 [M, N] in -200 .. 200
          out y: like x [M, N]
          y[i, j] = log(exp(x[i, j]) / sum(k) exp(x[i, k]))
          baseline torch.log_softmax(x, dim=1)
          tolerance f32(rtol=1e-5, atol=1e-5)
          test  M in 1..8, N in 1..200
          bench M=16, N=128
        """,
    "naive_softmax_tmp": """
        op naive_softmax_tmp
          dims M, N
          in  x: f32 [M, N] in -200 .. 200
          out y: like x [M, N]
          e[i, j] = exp(x[i, j])
          s[i] = sum(j) e[i, j]
          y[i, j] = e[i, j] / s[i]
          baseline torch.softmax(x, dim=1)
          tolerance f32(rtol=1e-5, atol=1e-6)
          test  M in 1..8, N in 1..200
          bench M=16, N=128
        """,
    # the log of a running sum of exponentials: a running log-sum-exp (lower.numerics)
    "naive_logcumsumexp": """
        op naive_logcumsumexp
          dims M, N
          in  x: f32 [M, N] in -200 .. 200
          out y: like x [M, N]
          y[i, j] = log(cumsum(j) exp(x[i, j]))
          baseline torch.logcumsumexp(x, dim=1)
          tolerance f32(rtol=1e-5, atol=1e-4)
          test  M in 1..8, N in 1..300
          bench M=16, N=128
        """,
    # a sum weighted by a power of the distance: a decayed scan of pairs (lower.scans)
    "discounted": """
        op discounted
          dims M, N
          in  x: f32 [M, N]
          out y: like x [M, N]
          y[i, j] = sum(k in j .. N) pow(0.9, k - j) * x[i, k]
          baseline x @ torch.where(torch.arange(x.shape[1], device=x.device)[:, None] >= torch.arange(x.shape[1], device=x.device)[None, :], 0.9 ** (torch.arange(x.shape[1], device=x.device)[:, None] - torch.arange(x.shape[1], device=x.device)[None, :]).clamp(min=0).to(x.dtype), 0.0)
          tolerance f32(rtol=1e-4, atol=1e-4)
          test  M in 1..8, N in 1..300
          bench M=16, N=128
        """,
    # a GEMM's columns summed: summed factor by factor (lower.factor)
    "gemm_column_sum": """
        op gemm_column_sum
          dims B, K, O
          in  x: f32 [B, K]
          in  w: f32 [O, K]
          out y: f32 [B, 1]
          t[b, o] = sum(k) x[b, k] * w[o, k]
          y[b, z] = sum(o) t[b, o] / 2 * 1.5
          baseline torch.sum(torch.matmul(x, w.T) / 2, dim=1, keepdim=True) * 1.5
          tolerance f32(rtol=1e-3, atol=1e-3)
          test  B in 1..12, K in 1..40, O in 1..40
          bench B=128, K=512, O=512
        """,
    "gemm_softmax_f64": """
        op gemm_softmax_f64
          dims M, N
          in  x: f64 [M, N]
          in  w: f64 [N, N]
          out y: f64 [M, N]
          h[i, k] = sum(j) x[i, j] * w[j, k]
          y[i, j] = exp(h[i, j]) / sum(j) exp(h[i, j])
          baseline torch.softmax(x @ w, dim=-1)
          tolerance f64(rtol=1e-10, atol=1e-12)
          test  M in 1..6, N in 1..24
          bench M=64, N=128
        """,
    "embedding_grad": """
        op embedding_grad
          dims N, V, D
          in  idx: i64 [N] in 0..V
          in  dy: f32 [N, D]
          out g: f32 [V, D]
          g[v, d] = sum(i) (idx[i] == v) * dy[i, d]
          baseline torch.zeros(V, D).index_add_(0, idx, dy)
          tolerance f32(rtol=1e-4, atol=1e-4)
          test  N in 1..300, V in 1..50, D in 1..20
          bench N=65536, V=10000, D=128
        """,
    # a scalar input read inside a row reduction (its access has no subscript)
    "any_above": """
        op any_above
          dims M, N
          in  x: f32 [M, N]
          in  t: f32 [] in 0 .. 4
          out y: bool [M]
          y[i] = max(j) (x[i, j] > t)
          baseline (x > t).any(dim=1)
          tolerance exact
          test  M in 1..40, N in 1..300
          bench M=32768, N=4096, dtype=f32
        """,
    "int_mix": """
        op int_mix
          dims N
          in  x: i64 [N]
          out y: i64 [N]
          y[i] = (x[i] // 7) % 5 - abs(x[i]) % 3 + i
          baseline (x // 7) % 5 - torch.abs(x) % 3 + torch.arange(N)
          tolerance exact
          test  N in 0..5000
          bench N=1048576
        """,
}

# Worker: runs kernels under the interpreter on small cases; prints one JSON list.
WORKER = r'''
import dataclasses, json, random, sys, traceback
import numpy as np, torch
import kdsl.spec as S
from kdsl import cases, compare, dtypes, ir, reference, sizes as SZ
from kdsl.backends import get
from kdsl.backends.triton.plan import make_plan

ROW_PROGRAMS, COLUMN_CAP = 12, 40

def small_shapes(op, per_dtype, seed):
    """Cases of the op's own test ranges, shrunk: few program rows, short columns."""
    try:
        plan = make_plan(op)
        axes = list(plan.scalar_axes) + ([plan.row_axis] if plan.row_axis else [])
    except Exception:  # a staged op (no one plan): every dim is capped as a column
        axes = []
    row_dims = {n.name for _, e in axes for n in ir.walk(e) if isinstance(n, ir.Name)}
    cap_rows = max(1, int(ROW_PROGRAMS ** (1 / max(len(axes), 1))))
    ranges = []
    for r in op.test.ranges:
        lo, hi = SZ.evaluate(r.lo, {}), SZ.evaluate(r.hi, {})
        cap = cap_rows if r.dim in row_dims else COLUMN_CAP
        ranges.append(dataclasses.replace(r, hi=ir.Num(max(lo, min(hi, cap)))))
    small = dataclasses.replace(op, test=dataclasses.replace(op.test, ranges=tuple(ranges)))
    out = []
    for dt in [d for d in op.dtype_choices if d != "bf16"]:
        styles = ["high", "edge", "random", "low"][:per_dtype]
        for k, style in enumerate(styles):
            sizes = SZ.sample(small, random.Random(f"{seed}:{dt}:{k}"), style)
            if sizes is None:
                continue
            label = "duplicates" if cases.sorts(op) and k % 2 == 0 else \
                "segments" if cases.jagged(op) and k % 2 == 1 else style
            out.append(cases.Shape(sizes, dt, label, k))
    return out

def poisoned(op, c):
    outs = {}
    for t in op.outputs:
        dt = dtypes.torch_dtype(op.dtype_of(t.name, c.dtype))
        shape = SZ.shape_of(op, t.name, c.sizes)
        outs[t.name] = torch.full(shape, float("nan") if dt.is_floating_point else -7777,
                                  dtype=dt)
    return outs

def main(job):
    be, results = get("triton"), []
    for item in job:
        op = S.load(item["path"]).ops[0]
        for genome in item["genomes"]:
            failures, ran = [], 0
            try:
                built = be.build(op, be.render(op, genome, "cpu"), "cpu")
                for shape in small_shapes(op, item["per_dtype"], item["seed"]):
                    c = cases.draw(op, shape, item["seed"])
                    ins = {k: torch.from_numpy(np.ascontiguousarray(v))
                           for k, v in c.inputs.items()}
                    outs = poisoned(op, c)
                    built.fn(ins, outs, dict(c.sizes))
                    got = {k: v.double().numpy() if v.dtype.is_floating_point else v.numpy()
                           for k, v in outs.items()}
                    ref = reference.reference(op, c.sizes, c.inputs)
                    bad = compare.compare(op, c.dtype, got, ref, c.inputs)
                    ran += 1
                    if bad is not None:
                        failures.append(f"{c.shape.describe()}: {bad}")
            except Exception:
                failures.append(traceback.format_exc()[-3000:])
            results.append({"op": op.name, "genome": genome, "cases": ran, "failures": failures})
    print("RESULTS " + json.dumps(results))

main(json.loads(sys.argv[1]))
'''

# Compiler: every op's default kernel for Hopper and MI300; prints one JSON dict.
COMPILER = r'''
import json, sys, traceback
import kdsl.spec as S
from kdsl.backends import get
from kdsl.backends.triton.compile import CUDA_H100, HIP_MI300, compile_for, example_for
be, out = get("triton"), {}
for path in json.loads(sys.argv[1]):
    op = S.load(path).ops[0]
    source = be.render(op, be.space(op, "cuda").default(), "cuda")
    for name, tgt in (("sm_90", CUDA_H100), ("gfx942", HIP_MI300)):
        try:
            out.setdefault(op.name, {})[name] = compile_for(source, tgt, [example_for(op)])
        except Exception:
            out.setdefault(op.name, {})[name] = {"error": traceback.format_exc()[-3000:]}
# the launches the JIT warm-up compiles: a loaded module's own kernels, fallbacks on request
try:
    from kdsl.backends.triton.compile import example_at, launches, load_module
    op = next(S.load(p).ops[0] for p in json.loads(sys.argv[1]) if p.endswith("/softmax.kspec"))
    ns = vars(load_module(be.render(op, be.space(op, "cuda").default(), "cuda"), "softmax"))
    shapes = [example_at(op, {"M": 3, "N": 5}, "f32"),
              example_at(op, {"M": 2, "N": 70000}, "bf16")]
    calls = launches("", shapes, ns, fallbacks=False)
    out["__launches__"] = {
        "own": all(ns[fn.__name__] is fn for fn, _, _, _ in calls),
        "names": [fn.__name__ for fn, _, _, _ in calls],
        "with_fallbacks": len(launches("", shapes, ns, fallbacks=True)),
        "shapes": [list(a[0].shape) for _, _, a, _ in calls]}
except Exception:
    out["__launches__"] = {"error": traceback.format_exc()[-3000:]}
print("RESULTS " + json.dumps(out))
'''


def _load(path) -> ir.Op:
    return kspec.load(path).ops[0]


def _library() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SPECS.glob("*.kspec"))}


def _covered() -> list[str]:
    return [n for n in _library() if n not in CONTRACTIONS]


def _genomes(op: ir.Op, seed: int = 0) -> list[dict]:
    """The default genome and two random ones; the random ones take the other values of
    strategy genes, so every reduction strategy and top-k method is run."""
    space = get("triton").space(op, "cpu")
    out = [space.default()]
    for i in range(2):
        g = space.sample(random.Random(f"{seed}:{op.name}:{i}"))
        for gene in space.genes:
            if not gene.ordered and len(gene.values) > 1:
                rest = [v for v in gene.values if v != out[0][gene.name]]
                g[gene.name] = rest[i % len(rest)]
        out.append(g)
    return out


@pytest.fixture(scope="session")
def novel_specs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("novel_specs")
    paths = {}
    for name, text in NOVEL.items():
        paths[name] = folder / f"{name}.kspec"
        paths[name].write_text(textwrap.dedent(text).strip() + "\n")
    return paths


def _env(interpret: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    return env


def _parse(proc: subprocess.Popen, what: str):
    stdout, stderr = proc.communicate(timeout=600)
    for line in stdout.splitlines():
        if line.startswith("RESULTS "):
            return json.loads(line[len("RESULTS "):])
    raise AssertionError(f"{what} worker printed no results (exit {proc.returncode}):\n"
                         f"{stderr[-4000:]}")


@pytest.fixture(scope="session")
def runs(novel_specs):
    """Starts the two interpreter workers and the compiler together; waits for all three."""
    lib = _library()
    # sorting networks are slow to interpret: one case per dtype, a worker of their own
    networks = {"sort_rows", "topk_rows", "row_argsort", "topk_router"}
    items = [(n, lib[n]) for n in _covered()] + list(novel_specs.items())
    jobs: list[list] = [[], []]
    for name, path in items:
        job = {"path": str(path), "genomes": _genomes(_load(path)),
               "per_dtype": 1 if name in networks else 2, "seed": 1}
        jobs[0 if name in networks else 1].append(job)
    cmd = [sys.executable, "-c"]
    procs = [subprocess.Popen(cmd + [WORKER, json.dumps(j)], env=_env(True), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for j in jobs]
    procs.append(subprocess.Popen(cmd + [COMPILER, json.dumps([str(lib[n]) for n in _covered()])],
                                  env=_env(False), text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE))
    interp = _parse(procs[0], "interpreter") + _parse(procs[1], "interpreter")
    return {"interp": interp, "compile": _parse(procs[2], "compiler")}


# ---- in-process: plans, spaces, rendering ----------------------------------

@pytest.mark.parametrize("name", sorted(KINDS))
def test_plan_class_comes_from_the_ir(name):
    from kdsl.backends.triton.plan import make_plan
    assert make_plan(_load(_library()[name])).kind == KINDS[name]


def test_fusable_patterns_are_found():
    from kdsl.backends.triton.plan import make_plan
    lib = _library()
    assert [f.pattern for f in make_plan(_load(lib["softmax"])).fused] == ["maxsum"]
    assert [f.pattern for f in make_plan(_load(lib["cross_entropy"])).fused] == ["maxsum"]
    assert [f.pattern for f in make_plan(_load(lib["layernorm"])).fused] == ["welford"]
    assert make_plan(_load(lib["rmsnorm"])).fused == ()


def test_jagged_outputs_are_enumerated_by_segment():
    from kdsl.backends.triton.plan import SEG, make_plan
    plan = make_plan(_load(_library()["jagged_softmax"]))
    assert [a for a, _ in plan.scalar_axes] == [SEG] and plan.row_axis[0] == "d"
    assert plan.inner == "i" and not plan.onepass


def test_short_static_windows_unroll_and_segments_cache():
    from kdsl.backends.triton.plan import make_plan
    from kdsl.backends.triton.rows import strategies
    lib = _library()
    assert {"unrolled", "phases"} <= set(strategies(make_plan(_load(lib["max_pool1d"]))))
    assert "phases" not in strategies(make_plan(_load(lib["softmax"])))
    assert "cached" in strategies(make_plan(_load(lib["jagged_softmax"])))
    # a static row already fits onepass; a segment sum writes nothing back to cache for
    assert "cached" not in strategies(make_plan(_load(lib["softmax"])))
    assert "cached" not in strategies(make_plan(_load(lib["embedding_bag_sum"])))
    be = get("triton")
    pool = be.render(_load(lib["max_pool1d"]), {"reduce": "unrolled"}, "cuda")
    assert "tl.static_range(0, NCOL, BLOCK_C)" in pool and \
        "{'NCOL': max(d_KW - 0, 1)} if unroll" in pool
    phased = be.render(_load(lib["max_pool1d"]), {"reduce": "phases"}, "cuda")
    assert "tl.static_range(QLO, QHI + 1)" in phased and "WS = d_S" in phased
    assert phased.count("tl.load(p_x") == 1  # one flat load per phase, not one per tap
    jag = be.render(_load(lib["jagged_softmax"]), {"reduce": "cached"}, "cuda")
    fits, rest = jag.split("def _kd_jagged_softmax", 1)[1].split("    else:\n", 1)
    assert "<= BLOCK_C:" in fits and fits.count("tl.load(p_values") == 1  # one read if it fits
    # online: a max+sum pass (whole chunks unmasked, then the masked tail), the write pass
    assert rest.count("tl.load(p_values") == 3 and "// BLOCK_C * BLOCK_C" in rest


def test_window_phases_need_an_affine_strided_index():
    from kdsl.backends.triton.plan import make_plan
    from kdsl.backends.triton.window import window_of

    def pool(body: str, bench: str = "B=4, L=50, KW=3, S=2, LO=20") -> ir.Op:
        text = f"""
            op w
              dims B, L, KW, S, LO
              in  x: f32 [B, L]
              out y: like x [B, LO]
              y[b, o] = {body}
              baseline x
              tolerance f32(rtol=1e-5, atol=1e-5)
              test  B in 1..4, L in 1..50, KW in 1..4, S in 1..3, LO in 1..50
              bench {bench}
            """
        return kspec.parse_text(textwrap.dedent(text)).ops[0]

    def window(body: str):
        return window_of(make_plan(pool(body)))

    def default_strategy(body: str, bench: str) -> str:
        return get("triton").space(pool(body, bench), "cuda").default()["reduce"]

    body = "max(k in 0 .. KW) x[b, o * S + k] pad(-inf)"
    assert default_strategy(body, "B=4, L=4096, KW=3, S=2, LO=2047") == "phases"
    # a stride far wider than the window: phases would load mostly untouched inputs
    assert default_strategy(body, "B=4, L=65536, KW=3, S=64, LO=1024") == "unrolled"

    w = window("max(k in 0 .. KW) x[b, S * o + k - 1] pad(-inf)")
    assert w is not None and w.op == "max" and w.stride == ir.Name("S")
    assert window("sum(k in 0 .. KW) 2 * x[b, o * S + k] pad(0)") is not None
    assert window("max(k in 0 .. KW) x[b, o * S + 2 * k] pad(-inf)") is None  # dilated
    assert window("max(k in 0 .. KW) x[b, o + S * k] pad(-inf)") is None
    assert window("max(k in 0 .. KW) x[b, o * S + k] pad(-inf) * x[b, o * S + k] pad(0)") \
        is not None  # one input read at the same place twice
    assert window("max(k in 0 .. KW) x[b, o * S + k] pad(-inf) * x[b, o * S + k + 1] pad(0)") \
        is None  # two windows
    assert window("max(k in 0 .. KW) (x[b, o * S + k] pad(-inf) + o)") is None  # o elsewhere
    assert window("max(k in 0 .. KW) x[b, o * S + k] pad(-inf) + o") is not None  # after it


@pytest.mark.slow
def test_cached_segments_take_both_branches_correctly():
    """Chunks of 4 rows: most test segments are longer, some fit; both paths must agree."""
    genome = {"reduce": "cached", "BLOCK_C": 4, "BLOCK_R": 128, "num_warps": 2}
    proc = subprocess.run([sys.executable, "-m", "kdsl", "eval", str(SPECS / "jagged_softmax.kspec"),
                           "--backend", "triton", "--device", "cpu",
                           "--genome", json.dumps(genome)],
                          capture_output=True, text=True, timeout=600, env=_env(False))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.parametrize("name", _covered())
def test_every_genome_in_the_space_renders(name):
    be = get("triton")
    op = _load(_library()[name])
    assert be.supports(op, "cuda") is None
    space = be.space(op, "cuda")
    default = space.default()
    assert all(default[g.name] in g.values for g in space.genes)
    rng = random.Random(name)
    for genome in [default] + [space.sample(rng) for _ in range(6)]:
        source = be.render(op, genome, "cuda")
        compile(source, name, "exec")  # valid Python
        assert "@triton.jit" in source and "def kernel(inputs, outputs, sizes)" in source


def test_contractions_go_to_triton_dot():
    dot = pytest.importorskip("kdsl.backends.triton.dot")
    be = get("triton")
    for name in CONTRACTIONS:
        op = _load(_library()[name])
        if dot.matches(op):
            genome = be.space(op, "cuda").default()
            assert be.render(op, genome, "cuda") == dot.render(op, genome)


@pytest.mark.parametrize("name", ["topk_rows", "sort_rows"])
def test_sorting_networks_hold_at_most_32_keys_a_thread(name):
    """More rows a program are dropped, then warps added: a longer network spills and
    compiles longer (the old clamp allowed 256 keys a thread when a top-k search stalled)."""
    from kdsl.backends.triton.backend import interpreting
    from kdsl.backends.triton.compile import example_at, launches
    if interpreting():
        pytest.skip("this process runs the interpreter")
    be = get("triton")
    op = _load(_library()[name])
    space = be.space(op, "cuda")
    seen = set()
    for genome, n in (({"BLOCK_R": 16, "num_warps": 1}, 1024), ({"BLOCK_R": 1, "num_warps": 1},
                                                                  2048),
                      ({"BLOCK_R": 4, "num_warps": 4}, 1024), ({"BLOCK_R": 1, "num_warps": 1}, 100)):
        source = be.render(op, space.complete(genome), "cuda")
        sizes = {"M": 64, "N": n, "K": 64 if name == "topk_rows" else 0}
        (fn, grid, args, kw), = launches(source, [example_at(op, {k: v for k, v in sizes.items()
                                                                  if k in op.dims}, "i64")])
        keys = kw["BLOCK_R"] * kw["BLOCK_C"] // (32 * kw["num_warps"])
        seen.add((kw["BLOCK_R"], kw["BLOCK_C"], kw["num_warps"]))
        assert keys <= 32 or kw["BLOCK_R"] == 1 and kw["num_warps"] == 32, kw
        assert kw["num_warps"] >= genome["num_warps"], kw
    # 16 rows of 1024 on one warp: one row; 2048 on one warp: two warps; 4 x 1024 on 4 kept
    assert seen == {(1, 1024, 1), (1, 2048, 2), (4, 1024, 4), (1, 128, 1)}


def test_unrolled_columns_past_the_unroll_cap_take_the_looped_kernel():
    """cross_entropy's 32768 columns unrolled in 32 chunks spilled thousands of registers
    and compiled for minutes: past UNROLL_MAX values a thread over all chunks the launcher
    runs the looped fallback, and a static compile reaches both kernels."""
    from kdsl.backends.triton.backend import interpreting
    from kdsl.backends.triton.compile import example_at, launches
    if interpreting():
        pytest.skip("this process runs the interpreter")
    be = get("triton")
    op = _load(_library()["cross_entropy"])
    source = be.render(op, be.space(op, "cuda").complete(
        {"reduce": "unrolled", "BLOCK_C": 1024, "num_warps": 1}), "cuda")

    def launched(c):
        return [(fn.__name__, kw.get("NCOL")) for fn, _, _, kw in launches(
            source, [example_at(op, {"M": 8, "C": c}, "bf16")], fallbacks=False)]
    assert launched(4096) == [("_kd_cross_entropy", 4096)]  # 4 chunks, 128 a thread
    assert launched(8192) == [("_kd_cross_entropy_looped", None)]  # 256 a thread
    assert launched(32768) == [("_kd_cross_entropy_looped", None)]
    # few values a thread, but 128 chunks of 256 on 8 warps: a minute of compile
    wide = be.render(op, be.space(op, "cuda").complete(
        {"reduce": "unrolled", "BLOCK_C": 256, "num_warps": 8}), "cuda")
    (fn, _, _, kw), = launches(wide, [example_at(op, {"M": 8, "C": 32768}, "bf16")],
                               fallbacks=False)
    assert fn.__name__ == "_kd_cross_entropy_looped" and "NCOL" not in kw
    names = {fn.__name__ for fn, *_ in launches(source, [example_at(op, {"M": 8, "C": 4096},
                                                                     "bf16")])}
    assert names == {"_kd_cross_entropy", "_kd_cross_entropy_looped"}


def test_sort_relabels_columns_so_most_layers_stay_in_registers():
    """A row sorts the same in any order, so the sort relabels its columns: the bits each
    thread holds in registers become the network's low bits. In the sm_90 compile of the
    bench kernel that leaves 15 of 55 layers across lanes (960 shuffles, from 2240), and
    a pair in one thread is compared once."""
    from kdsl.backends.triton.backend import interpreting
    from kdsl.backends.triton.compile import CUDA_H100, compile_for, example_at
    if interpreting():
        pytest.skip("this process runs the interpreter")
    be = get("triton")
    op = _load(_library()["sort_rows"])
    source = be.render(op, be.space(op, "cuda").complete({}), "cuda")
    assert "_kd_hc_relabel(" in source.split("def kernel(")[0].split("def _kd_sort_rows")[1]
    (meta,) = compile_for(source, CUDA_H100, [example_at(op, {"M": 64, "N": 1024}, "i64")],
                          asm=("ptx",)).values()
    # 15 layers x 32 keys x two 32-bit halves
    assert meta["asm"]["ptx"].count("shfl.sync") == 960


def test_register_cap_reaches_ptxas_on_nvidia_only(monkeypatch):
    """The maxnreg gene: an sm_90 compile keeps to it (the one-warp sort of 1024 keys uses
    over 96 registers uncapped); a cap of 64, no longer offered to searches, spills and the
    report counts the spills; on ROCm the launcher leaves the option out, since HIP's
    launcher refuses it."""
    import torch
    from kdsl.backends.triton.backend import interpreting
    from kdsl.backends.triton.compile import CUDA_H100, compile_for, example_at, launches
    if interpreting():
        pytest.skip("this process runs the interpreter")
    be = get("triton")
    op = _load(_library()["sort_rows"])
    space = be.space(op, "cuda")
    example = example_at(op, {"M": 64, "N": 1024}, "i64")

    def report(source):
        (meta,) = compile_for(source, CUDA_H100, [example]).values()
        return meta
    source = be.render(op, space.complete({"maxnreg": 96}), "cuda")
    assert report(be.render(op, space.default(), "cuda"))["n_regs"] > 96
    assert report(source)["n_regs"] <= 96
    assert "'maxnreg': 96" in source  # the same module with a tighter cap written in
    tight = report(source.replace("'maxnreg': 96", "'maxnreg': 64"))
    assert tight["n_regs"] <= 64 and tight["n_spills"] > 0, tight
    (_, _, _, kw), = launches(source, [example])
    assert kw["maxnreg"] == 96
    monkeypatch.setattr(torch.version, "hip", "6.4")
    (_, _, _, kw), = launches(source, [example])
    assert "maxnreg" not in kw


def test_gemm_launcher_uses_the_copy_engine_only_where_there_is_one(monkeypatch):
    """The default GEMM reads by TMA on NVIDIA from sm_90 on. On meta tensors (compiling
    ahead, static reports) the launcher asks this machine or the static compile's target,
    never on ROCm; a wrong answer would compile ahead a kernel that never runs."""
    import torch
    from kdsl.backends.triton.backend import interpreting
    from kdsl.backends.triton.compile import example_at, launches, load_module
    if interpreting():
        pytest.skip("this process runs the interpreter")
    be = get("triton")
    op = _load(_library()["matmul"])
    source = be.render(op, be.space(op, "cuda").default(), "cuda")
    example = example_at(op, {"M": 256, "N": 256, "K": 256}, "bf16")

    def tma(**module_globals):
        ns = vars(load_module(source))
        ns.update(module_globals)
        (_, _, _, kw), = launches(source, [example], namespace=ns)
        return kw["TMA"]
    if not torch.cuda.is_available():
        assert tma() is True  # no GPU here: a static compile's sm_90
    assert tma(COPY_ENGINE=False) is False and tma(COPY_ENGINE=True) is True
    monkeypatch.setattr(torch.version, "hip", "6.4")
    assert tma() is False


def test_evict_hints_mark_only_the_row_data_a_looped_kernel_reads_again():
    be = get("triton")
    op = _load(_library()["layernorm"])
    space = be.space(op, "cuda")

    def lines(genome, what):
        source = be.render(op, space.complete(genome), "cuda")
        return [ln for ln in source.splitlines() if what in ln]
    loads = lines({"reduce": "looped", "evict": "reread"}, "tl.load(")
    x = [ln for ln in loads if "p_x" in ln]
    # x: kept by the reduction passes (mean, variance), streamed by the write-back pass
    assert x and all("eviction_policy" in ln for ln in x)
    assert x[-1].count('"evict_first"') == 1 and 'evict_last' in x[0]
    # w and b, read alike by every row, keep the default policy
    assert [ln for ln in loads if "p_w" in ln or "p_b" in ln]
    assert not any("eviction_policy" in ln for ln in loads if "p_w" in ln or "p_b" in ln)
    assert all('"evict_first"' in ln for ln in lines({"reduce": "looped", "evict": "reread"},
                                                       "tl.store("))
    # no hints without the gene, nor where the column is read once: a one-pass module's
    # own kernel (its wide-row fallback is a looped kernel, and has them)
    assert not any("eviction_policy" in ln for ln in lines({"reduce": "looped", "evict": "none"},
                                                            "tl."))
    onepass = be.render(op, space.complete({"reduce": "onepass", "evict": "reread"}), "cuda")
    kernels = {part.split("(", 1)[0]: part for part in onepass.split("def ")[1:]}
    assert "eviction_policy" not in kernels["_kd_layernorm"]
    assert "eviction_policy" in kernels["_kd_layernorm_looped"]


def test_bench_identity_is_what_runs_at_the_bench_point():
    from kdsl.backends.triton.backend import interpreting
    if interpreting():
        pytest.skip("this process runs the interpreter")
    be = get("triton")
    sort = _load(_library()["sort_rows"])

    def runs(op, genome, device="cuda"):
        return be.bench_identity(op, be.space(op, device).complete(genome), device)
    # two rows a program on one warp: clamped to one row, the default kernel
    assert runs(sort, {"BLOCK_R": 2}) == runs(sort, {}) is not None
    assert runs(sort, {"num_warps": 2}) != runs(sort, {})
    assert runs(sort, {}, "cpu") is None  # interpreted: nothing is timed
    # a one-pass softmax's hints would be in its wide-row fallback only, which the bench
    # point does not launch
    softmax = _load(_library()["softmax"])
    assert runs(softmax, {"evict": "reread"}) == runs(softmax, {})
    assert runs(softmax, {"reduce": "looped", "evict": "reread"}) != \
        runs(softmax, {"reduce": "looped", "evict": "none"})
    # an unrolled column past the unroll cap runs its looped fallback: the online kernel
    # under another name
    ce = _load(_library()["cross_entropy"])
    assert runs(ce, {"reduce": "unrolled", "BLOCK_C": 1024, "num_warps": 1}) == \
        runs(ce, {"reduce": "online", "BLOCK_C": 1024, "num_warps": 1})


def test_cpu_build_needs_the_interpreter():
    from kdsl.backends.triton.backend import interpreting
    if interpreting():
        pytest.skip("this process runs the interpreter")
    be = get("triton")
    op = _load(_library()["swiglu"])
    with pytest.raises(BuildError, match="TRITON_INTERPRET=1"):
        be.build(op, be.render(op, be.space(op, "cpu").default(), "cpu"), "cpu")


def test_unsupported_is_a_reason_not_a_crash():
    be = get("triton")
    text = textwrap.dedent("""
        op scan_of_scan
          dims M, N
          in  x: f32 [M, N]
          out y: f32 [M, N]
          y[i, j] = cumsum(j) (cumsum(j) x[i, j])
          baseline torch.cumsum(torch.cumsum(x, 1), 1)
          tolerance f32(rtol=1e-5, atol=1e-5)
          test  M in 1..8, N in 1..8
          bench M=8, N=8, dtype=f32
        """).strip() + "\n"
    op = kspec.parse_text(text).ops[0]
    reason = be.supports(op, "cuda")
    assert reason is not None and "scan of a scan" in reason


# ---- subprocesses: the interpreter and static compiles ----------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", _covered() + sorted(NOVEL))
def test_interpreter_matches_reference(runs, name):
    mine = [r for r in runs["interp"] if r["op"] == name]
    assert len(mine) == 3, f"{name}: expected 3 genomes, got {len(mine)}"
    for r in mine:
        assert r["cases"] > 0 or r["failures"], f"{name}: no cases ran"
        assert not r["failures"], f"{name} {r['genome']}:\n" + "\n".join(r["failures"][:3])


@pytest.mark.slow
def test_warm_up_launches_are_the_modules_own_kernels_at_each_shape(runs):
    got = runs["compile"]["__launches__"]
    assert "error" not in got, got.get("error")
    assert got["own"]  # the JIT objects the cases will call, so their compiles are reused
    # a 5-wide f32 row runs one pass; a 70000-wide bf16 row is past ONEPASS_MAX: the fallback
    assert got["names"] == ["_kd_softmax", "_kd_softmax_looped"], got
    assert got["shapes"] == [[3, 5], [2, 70000]]
    assert got["with_fallbacks"] == 4  # each shape again with ONEPASS_MAX at 0


@pytest.mark.slow
@pytest.mark.parametrize("name", _covered())
def test_default_kernel_compiles_for_hopper_and_mi300(runs, name, record_property):
    result = runs["compile"][name]
    for target in ("sm_90", "gfx942"):
        kernels = result[target]
        assert "error" not in kernels, f"{name} on {target}:\n{kernels.get('error')}"
        assert kernels, f"{name}: nothing was launched on {target}"
        for kname, meta in kernels.items():
            assert meta["n_regs"] > 0, (name, target, kname, meta)
            record_property(f"{target}:{kname}", f"regs={meta['n_regs']} "
                                                 f"spills={meta['n_spills']} "
                                                 f"shared={meta['shared']}")
    # Hopper gives a thread at most 255 registers; the defaults must not spill there
    assert all(m["n_spills"] == 0 for m in result["sm_90"].values()), result["sm_90"]
