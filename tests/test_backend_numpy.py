"""The numpy backend: every library spec, on every dtype, matches the reference.

Each spec runs the default genome and two random ones on a few small cases
(low, edge and random sizes; duplicate keys and empty segments where the spec
sorts or is jagged). Every kernel runs twice, with different poison in the
outputs, and both runs must match: an element the kernel never writes keeps a
poison that one of the two comparisons rejects. ``assert_correct`` and ``EXTRA_SPECS`` are shared with the torch
backend's tests.
"""
from __future__ import annotations

import functools
import random

import numpy as np
import pytest
import torch

from kdsl import baseline, cases, dtypes, spec
from kdsl.backends import Unsupported, get
from kdsl.backends.array.analysis import features
from kdsl.compare import compare
from kdsl.reference import reference
from kdsl.sizes import shape_of

LIBRARY = {p.stem: p for p in spec.library()}
MAX_ELEMENTS = 40_000   # per tensor, so the float64 reference stays quick

# Specs of known classes that are not in the library: a new spec needs no new code.
EXTRA_SPECS = {
    "mixed_rows": """
op mixed_rows
  dims M, N
  in  x: f32 | bf16 [M, N]
  in  k: i64 [M, N] in 0..N
  out a: i64 [M]
  out p: like x [M, N]
  out s: like x [M]
  out q: i64 [M, N]
  a[i] = argmax(j) x[i, j]
  p[i, j] = cumprod(j) (where(abs(x[i, j]) < 1.5, 1 + 0.1 * x[i, j], 1.0))
  s[i] = mean(j in 0 .. i + 1) erf(x[i, j] pad(0)) + min(j) pow(abs(x[i, j]), 0.5) - max(0, N - 3)
  q[i, j] = argsort(j) k[i, j] // 2 % 7
  baseline (torch.argmax(x, dim=-1), x, x.sum(-1), torch.argsort(k, -1))
  tolerance f32(rtol=1e-4, atol=1e-4) bf16(rtol=2e-2, atol=2e-2)
  test M in 1..40, N in 1..50
  bench M=8, N=8
""",
    "jagged_mix": """
op jagged_mix
  dims L, D, B, K
  in  v: f32 | f16 [L, D]
  in  w: like v [B]
  in  off: i64 [B + 1] offsets(L)
  in  c: i64 [L] in 0..5
  out mu: like v [B, D]
  out mx: i64 [B]
  out top: like v [B, K]
  out tot: f32 [1]
  out big: bool [B, D]
  mu[b, d] = mean(i in off[b] .. off[b + 1]) v[i, d] * w[b]
  mx[b] = max(i in off[b] .. off[b + 1]) c[i] + prod(i in off[b] .. off[b + 1]) (c[i] + 1) % 3
  h[b, d] = mu[b, d] * 2
  top[b, r] = topk(d in 1 .. D, K) h[b, d]
  t0[] = sum(b, d) mu[b, d] pad(0)
  tot[z] = t0[] + 0 * z
  big[b, d] = mu[b, d] > tot[0] / (B * D)
  baseline (w, off, w, w, w)
  tolerance f32(rtol=1e-4, atol=1e-4) f16(rtol=1e-2, atol=1e-2)
  test L in 1..300, D in 2..20, B in 1..30, K in 1..19 where K <= D - 1
  bench L=8, D=8, B=2, K=2
""",
}


@functools.cache
def load(name: str):
    if name in EXTRA_SPECS:
        return spec.parse_text(EXTRA_SPECS[name], f"<{name}>").ops[0]
    return spec.load(LIBRARY[name]).ops[0]


def small_cases(op, per_dtype: int = 4) -> tuple[cases.Case, ...]:
    """A few small cases on every dtype (the same sizes for each dtype)."""
    return _small_cases(op)[:per_dtype * len(op.dtype_choices)]


@functools.cache
def _small_cases(op, seed: int = 0) -> tuple[cases.Case, ...]:
    shapes = cases.shapes(op, seed, per_dtype=8, dtype_list=op.dtype_choices[:1])
    small = [s for s in shapes
             if all(np.prod(shape_of(op, t.name, s.sizes)) <= MAX_ELEMENTS for t in op.tensors
                    if t.role != "tmp")]
    return tuple(cases.draw(op, cases.Shape(s.sizes, dt, s.label, s.index), seed)
                 for s in small[:4] for dt in op.dtype_choices)


def _poisoned(op, case: cases.Case, device: str, variant: int) -> dict[str, torch.Tensor]:
    out = {}
    for t in op.outputs:
        dt = dtypes.torch_dtype(op.dtype_of(t.name, case.dtype))
        shape = shape_of(op, t.name, case.sizes)
        if dt.is_floating_point:
            fill = (float("nan"), 1234.5)[variant]
        elif dt == torch.bool:
            fill = bool(variant)
        else:
            fill = (-(1 << 62) + 7, 4242)[variant]
        out[t.name] = torch.full(shape, fill, dtype=dt, device=device)
    return out


def _as_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    return t.to(torch.float64).numpy() if t.is_floating_point() else t.numpy()


def assert_correct(backend: str, op, genomes, case_list, device: str = "cpu") -> None:
    """Every genome's kernel matches the reference on every case and writes every element."""
    b = get(backend)
    kernels = [(g, b.build(op, b.render(op, g, device), device).fn) for g in genomes]
    for case in case_list:
        ref = _reference(op, case)
        for genome, kernel in kernels:
            for variant in (0, 1):  # an unwritten element keeps its poison: NaN, then 1234.5
                inputs = baseline.to_torch(op, case.dtype, case.inputs, device)
                outputs = _poisoned(op, case, device, variant)
                kernel(inputs, outputs, dict(case.sizes))
                got = {k: _as_numpy(v) for k, v in outputs.items()}
                bad = compare(op, case.dtype, got, ref, case.inputs)
                assert bad is None, f"{op.name} {case.shape.describe()} genome {genome}: {bad}"


_REFERENCES: dict = {}


def _reference(op, case: cases.Case) -> dict:
    key = (op.hash, id(case))
    if key not in _REFERENCES:
        _REFERENCES[key] = (case, reference(op, case.sizes, case.inputs))
    return _REFERENCES[key][1]


def genomes_for(backend: str, op, n_random: int = 2, fixed=None) -> list[dict]:
    space = get(backend).space(op, "cpu")
    rng = random.Random(f"{backend}:{op.name}")
    out = [space.default()] + [space.sample(rng) for _ in range(n_random)]
    return [{**g, **(fixed or {})} for g in out]


@pytest.mark.parametrize("name", sorted(LIBRARY) + sorted(EXTRA_SPECS))
def test_numpy_matches_reference(name):
    op = load(name)
    assert_correct("numpy", op, genomes_for("numpy", op), small_cases(op))


def test_every_gene_value_is_exercised_somewhere():
    """Across the library, each value of each numpy gene renders and runs correctly."""
    ops = {n: load(n) for n in ("softmax", "embedding_bag_sum", "topk_rows", "matmul_bias_relu",
                                "jagged_softmax")}
    for op in ops.values():
        space = get("numpy").space(op, "cpu")
        genomes = [{**space.default(), g.name: v} for g in space.genes for v in g.values[1:]]
        assert_correct("numpy", op, genomes, small_cases(op, per_dtype=2))


def test_space_reflects_the_op():
    b = get("numpy")
    names = lambda n: set(b.space(load(n), "cpu").names)  # noqa: E731
    assert {"contract", "optimize"} <= names("matmul")
    assert "segment" in names("embedding_bag_sum") and "contract" not in names("embedding_bag_sum")
    assert "select" in names("topk_rows")
    assert "precision" not in names("hash_bucketize")
    assert features(load("softmax")).intermediates


def test_numpy_is_cpu_only():
    b = get("numpy")
    op = load("softmax")
    assert b.supports(op, "cuda") is not None
    with pytest.raises(Unsupported):
        b.render(op, {}, "cuda")


def test_rendered_source_is_generic():
    """The generator reads the IR: the source never names the op's kind of computation."""
    b = get("numpy")
    src = b.render(load("matmul"), {"contract": "einsum", "optimize": True}, "cpu")
    assert "np.einsum('ab,bc->ac', in_a, in_b, optimize=True)" in src
    for method in ("loop", "reduceat"):
        src = b.render(load("embedding_bag_sum"), {"segment": method}, "cpu")
        assert "rt.segment_reduce('sum'" in src and f"'{method}')" in src
    src = b.render(load("embedding_bag_sum"), {"segment": "mask"}, "cpu")
    assert "segment_reduce" not in src and "rt.extent(" in src


def test_chunked_statements_cover_every_row():
    op = load("layernorm")
    case = cases.draw(op, cases.Shape({"M": 37, "N": 19}, "f32", "edge", 0), 3)
    assert_correct("numpy", op, [{"chunk": 16}, {"chunk": 16, "precision": "f64"}], [case])


def test_bf16_outputs_are_written_through_a_buffer():
    op = load("swiglu")
    case = cases.draw(op, cases.Shape({"M": 3, "N": 5}, "bf16", "edge", 0), 1)
    assert_correct("numpy", op, [{}], [case])
