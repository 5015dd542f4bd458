"""Seeded test inputs that satisfy an op's declared domains.

Sizes come from the test ranges: the ranges' ends, edge sizes (1, primes,
non-powers of two) and log-uniform draws. Inputs follow each tensor's domain;
jagged offsets include empty and single-element segments; ops that sort get
cases full of duplicate keys. The same (op, seed) always gives the same cases.

``upper_shapes`` adds the upper ends, whatever a case budget says for the rest: each
range's dim at its maximum with the others small ('upper'), and the dims a domain
depends on at theirs ('longest': one segment spans an offsets tensor's whole total).
Their inputs hold the ends of every bounded domain (the largest index a range allows,
an integer type's extremes where no domain bounds it).
"""
from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from . import dtypes, ir
from .sizes import evaluate, ranges, sample, upper

UPPER_LABELS = ("upper", "longest", "all")
STYLES = ("low", "high", "one", "edge", "random", "random", "edge", "random")
# a positive f32 or f64 input's values: log-uniform from f16's least normal up to 4, so
# that every scale of a probability (a softmax row of 16,384 holds values near 6e-5) is
# drawn, and a kernel fitted to a narrow range (a log that clamped its input to 0.02 .. 9
# passed when positives were drawn from 0.05 .. 4) is not; f16 and bf16 keep 0.05 .. 4
POSITIVE = (2.0 ** -14, 4.0)
POSITIVE_HALF = (0.05, 4.0)


@dataclass(frozen=True)
class Shape:
    """One case's sizes and dtype, before any input is drawn."""
    sizes: dict[str, int]
    dtype: str
    label: str
    index: int

    def describe(self) -> str:
        dims = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        return f"{self.dtype:<5} {self.label:<10} {dims}"


@dataclass(frozen=True)
class Case:
    shape: Shape
    inputs: dict[str, np.ndarray] = field(repr=False)

    @property
    def sizes(self) -> dict[str, int]:
        return self.shape.sizes

    @property
    def dtype(self) -> str:
        return self.shape.dtype


def sorts(op: ir.Op) -> bool:
    return any(isinstance(n, ir.Collective) or (isinstance(n, ir.Reduce) and n.op.startswith("arg"))
               for st in op.statements for n in ir.walk(st.value))


def jagged(op: ir.Op) -> bool:
    return any(isinstance(t.domain, ir.Offsets) for t in op.inputs)


def shapes(op: ir.Op, seed: int, per_dtype: int = 8, dtype_list=None,
           styles: tuple[str, ...] = STYLES) -> list[Shape]:
    """``per_dtype`` shapes a dtype, the k-th of style ``styles[k]`` (cycled)."""
    out = []
    for dt in dtype_list or op.dtype_choices:
        for k in range(per_dtype):
            rng = random.Random(f"kdsl-cases:{seed}:{op.hash}:{dt}:{k}")
            style = styles[k % len(styles)]
            sizes = sample(op, rng, style)
            if sizes is None:
                continue
            label = "edge" if style == "one" else style
            if sorts(op) and k % 3 == 1:
                label = "duplicates"
            elif jagged(op) and k % 3 == 2:
                label = "segments"
            out.append(Shape(sizes, dt, label, k))
    return out


# The largest case an upper end gets. A dim whose maximum alone passes it (others small)
# takes the largest value that fits instead: such a case would cost every evaluation more
# than all its other cases together (the Triton interpreter runs a 1M-element softmax in
# ~1.5 s), and the bench point, checked against the float64 oracle, covers large sizes.
# The library's specs stay far below it (200,000 elements at most: hash_bucketize's N).
UPPER_CASE_ELEMENTS = 1 << 22
# the every-dim-large case: past the sizes the others reach together, small enough that
# the Triton interpreter runs it in seconds
ALL_CASE_ELEMENTS = 1 << 20
UPPER_INDEX = 200  # Shape.index of the first upper case (draws apart from the others)

_UPPER_SIZES: dict[tuple, list] = {}


def domain_dims(op: ir.Op) -> tuple[str, ...]:
    """Dims an input's domain depends on: a value range's bounds, an offsets total."""
    out = []
    for t in op.inputs:
        d = t.domain
        exprs = (d.total,) if isinstance(d, ir.Offsets) else \
            (d.lo, d.hi) if isinstance(d, ir.ValueRange) else ()
        for e in exprs:
            out += [n.name for n in ir.walk(e) if isinstance(n, ir.Name) and n.name in op.dims]
    return tuple(dict.fromkeys(out))


def upper_sizes(op: ir.Op, budget: int = UPPER_CASE_ELEMENTS) -> list[tuple[str, dict]]:
    """(label, sizes) of the upper ends: the domains' dims together ('longest'), then each
    range's dim alone ('upper'), the others as small as the conditions allow; then every
    dim together as large as ``ALL_CASE_ELEMENTS`` allows ('all'). Searched
    once a process per op (a spec of 19 dims and 8 conditions takes under a second)."""
    key = (op.hash, budget)
    if key not in _UPPER_SIZES:
        out = []
        if op.test is not None:
            wanted = [("longest", domain_dims(op))] if domain_dims(op) else []
            wanted += [("upper", (d,)) for d in ranges(op)]
            if len(ranges(op)) > 1:  # every dim large at once: a kernel wrong only when
                wanted.append(("all", tuple(ranges(op))))  # the problem is large overall
            for label, dims in wanted:
                sizes = upper(op, dims, ALL_CASE_ELEMENTS if label == "all" else budget)
                if sizes is not None and all(sizes != s for _, s in out):
                    out.append((label, sizes))
        _UPPER_SIZES[key] = out
    return _UPPER_SIZES[key]


def upper_shapes(op: ir.Op, dtype_list=None, budget: int = UPPER_CASE_ELEMENTS) -> list[Shape]:
    """The upper-end cases of ``upper_sizes``, for each dtype."""
    return [Shape(dict(sizes), dt, label, UPPER_INDEX + k)
            for dt in dtype_list or op.dtype_choices
            for k, (label, sizes) in enumerate(upper_sizes(op, budget))]


def draw(op: ir.Op, shape: Shape, seed: int) -> Case:
    """The inputs of one case, deterministic in (op, shape, seed)."""
    key = [seed, shape.index, op.dtype_choices.index(shape.dtype)
           if shape.dtype in op.dtype_choices else 0, int(op.hash[:8], 16)]
    rng = np.random.default_rng(key)
    inputs = {t.name: _tensor(op, t, shape, rng) for t in op.inputs}
    return Case(shape, inputs)


def generate(op: ir.Op, seed: int, per_dtype: int = 8, dtype_list=None) -> list[Case]:
    return [draw(op, s, seed) for s in shapes(op, seed, per_dtype, dtype_list)]


def bench_case(op: ir.Op, point: ir.BenchPoint, seed: int = 0) -> Case:
    shape = Shape(point.size_dict(), point.dtype or op.dtype_choices[0], "bench", 0)
    return draw(op, shape, seed)


def _tensor(op: ir.Op, t: ir.Tensor, shape: Shape, rng: np.random.Generator) -> np.ndarray:
    dims = tuple(evaluate(e, shape.sizes) for e in t.shape)
    dt = op.dtype_of(t.name, shape.dtype)
    kind = dtypes.kind(dt)
    dom = t.domain
    # bench tensors are large (a 10M x 128 table): drawn in float32 unless they are f64,
    # which halves the draw and skips a float64 copy (57 s -> ~20 s for that table)
    f32 = {"dtype": np.float32} if shape.label == "bench" and dt != "f64" else {}
    if shape.label == "bench" and int(np.prod(dims)) >= _Chunked.AT_LEAST:
        rng = _Chunked(rng)
    if isinstance(dom, ir.Offsets):
        return _offsets(dims[0], evaluate(dom.total, shape.sizes), shape.label, rng)
    ends = None  # the domain's least and greatest values, for the upper-end cases
    if isinstance(dom, ir.ValueRange):
        lo, hi = domain_bound(dom.lo, shape.sizes), domain_bound(dom.hi, shape.sizes)
        if kind == "int":
            a = rng.integers(int(lo), max(int(hi), int(lo) + 1), size=dims, dtype=np.int64)
            ends = (int(lo), max(int(hi) - 1, int(lo)))
        else:
            a = _uniform(rng, lo, hi, dims, f32)
            ends = (lo, hi)
    elif isinstance(dom, ir.Positive):
        if kind != "float":
            a = rng.integers(1, 1000, size=dims, dtype=np.int64)
        elif dt in ("f32", "f64"):
            a = _log_uniform(rng, *POSITIVE, dims, f32)
        else:  # (half types: sums of logs of such values overflow f16 where specs' test
            a = _uniform(rng, *POSITIVE_HALF, dims, f32)  # ranges were sized for these)
    elif kind == "bool":
        a = rng.random(dims) < 0.5
    elif shape.label == "duplicates":
        a = rng.integers(0, 6, size=dims, dtype=np.int64)
    elif kind == "int":
        info = np.iinfo(np.int32 if dt == "i32" else np.int64)
        a = rng.integers(info.min, info.max, size=dims, dtype=np.int64, endpoint=True)
        ends = (int(info.min), int(info.max))
    else:
        a = rng.standard_normal(dims, **f32)
    a = np.asarray(a)
    if ends is not None and shape.label in UPPER_LABELS and a.size:
        a.reshape(-1)[-1] = ends[1]  # the greatest value last, the least first
        if a.size > 1:
            a.reshape(-1)[0] = ends[0]
    return _store(a, dt)


class _Chunked:
    """A generator's draws for one large bench tensor, in ``CHUNKS`` parts on threads (numpy
    fills without the GIL): each part from its own child generator, so the values do not
    depend on how many threads there are."""
    CHUNKS = 64
    AT_LEAST = 1 << 22  # elements; smaller tensors draw fast enough in one piece

    def __init__(self, rng: np.random.Generator):
        self.children = rng.spawn(self.CHUNKS)

    def _draw(self, dims, dtype, fill) -> np.ndarray:
        out = np.empty(dims, dtype=dtype)
        flat = out.reshape(-1)
        edges = np.linspace(0, flat.size, self.CHUNKS + 1).astype(np.int64)
        with ThreadPoolExecutor(min(self.CHUNKS, os.cpu_count() or 1)) as pool:
            list(pool.map(lambda i: fill(self.children[i], flat[edges[i]:edges[i + 1]]),
                          range(self.CHUNKS)))
        return out

    def standard_normal(self, dims, dtype=np.float64) -> np.ndarray:
        return self._draw(dims, dtype, lambda g, part: g.standard_normal(out=part, dtype=dtype))

    def random(self, dims, dtype=np.float64) -> np.ndarray:
        return self._draw(dims, dtype, lambda g, part: g.random(out=part, dtype=dtype))

    def uniform(self, lo, hi, size) -> np.ndarray:
        return self._draw(size, np.float64, lambda g, part: _put(part, g.uniform(lo, hi,
                                                                               part.size)))

    def integers(self, lo, hi, size, dtype=np.int64, endpoint=False) -> np.ndarray:
        return self._draw(size, dtype, lambda g, part: _put(part, g.integers(
            lo, hi, size=part.size, dtype=dtype, endpoint=endpoint)))


def _put(part: np.ndarray, values: np.ndarray) -> None:
    part[:] = values


def _uniform(rng: np.random.Generator, lo: float, hi: float, dims, f32: dict) -> np.ndarray:
    if not f32:
        return rng.uniform(lo, hi, size=dims)
    a = rng.random(dims, dtype=np.float32)
    a *= np.float32(hi - lo)
    a += np.float32(lo)
    return np.minimum(a, np.float32(hi), out=a)  # float32 rounding may pass hi by an ulp


def _log_uniform(rng, lo: float, hi: float, dims, f32: dict) -> np.ndarray:
    a = _uniform(rng, np.log(lo), np.log(hi), dims, f32)
    return np.minimum(np.exp(a, out=a), a.dtype.type(hi), out=a)


def domain_bound(e: ir.Expr, sizes) -> float:
    """An end of a value range at ``sizes`` (a float literal kept a float)."""
    if isinstance(e, ir.Num):
        return float(e.value)
    if isinstance(e, ir.Unary) and isinstance(e.operand, ir.Num):
        return -float(e.operand.value)
    return float(evaluate(e, sizes))


def _offsets(n: int, total: int, label: str, rng: np.random.Generator) -> np.ndarray:
    """n monotone offsets from 0 to total: n-1 segments, some empty or single in 'segments';
    in 'longest' one segment spans the whole total (the middle one; the others empty)."""
    if n <= 1:
        return np.zeros(n, dtype=np.int64)
    if label == "longest":
        return np.where(np.arange(n) < n // 2, 0, total).astype(np.int64)
    cuts = np.sort(rng.integers(0, total + 1, size=n - 2)) if n > 2 else np.zeros(0, np.int64)
    off = np.concatenate([[0], cuts, [total]]).astype(np.int64)
    if label == "segments" and n > 2:
        off[1] = 0  # an empty first segment
        if n > 3 and total >= 1:
            off[2] = 1  # a single-element second segment
        off[1:-1] = np.sort(off[1:-1])
        off = np.maximum.accumulate(off)
    return off


def _store(a: np.ndarray, dt: str) -> np.ndarray:
    if dt == "bf16":
        import torch
        f = np.ascontiguousarray(a, dtype=np.float32).reshape(a.shape)  # (0-d stays 0-d)
        t = torch.from_numpy(f).to(torch.bfloat16)
        return t.to(torch.float32).numpy()
    return a.astype(dtypes.numpy_dtype(dt), copy=False)  # drawn as stored: no second copy
