"""The c backend: every library spec, under its default and a few seeded random genomes,
agrees with the float64 reference on small cases, and overwrites every poisoned output.

Builds run in a small thread pool up front (the compiler is a subprocess) and go
through the backend's on-disk cache, so a second run only re-checks.
"""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np
import pytest
import torch

from kdsl import baseline, cases, compare, dtypes, ir, reference, spec
from kdsl.backends import BuildError, Unsupported, get
from kdsl.sizes import shape_of

BACKEND = get("c")
pytestmark = pytest.mark.skipif(not BACKEND.available(), reason="no C compiler")

SPECS = {p.stem: p for p in spec.library()}
RANDOM_GENOMES = 2
MAX_CASE_ELEMENTS = 1 << 17
INT_POISON = -(1 << 62) + 12345


@lru_cache(maxsize=None)
def load_op(name: str):
    return spec.load(SPECS[name]).ops[0]


def genomes(op) -> list[dict]:
    """The default, every gene at its last value, then seeded random genomes."""
    space = BACKEND.space(op, "cpu")
    rng = random.Random(f"test_backend_c:{op.name}")
    last = {g.name: g.values[-1] for g in space.genes}
    return [space.default(), last] + [space.sample(rng) for _ in range(RANDOM_GENOMES)]


@lru_cache(maxsize=None)
def all_built() -> dict:
    """(op name, genome index) -> Built, or the exception its build raised."""
    jobs = [(name, k, g) for name in SPECS for k, g in enumerate(genomes(load_op(name)))]

    def build(job):
        name, k, g = job
        op = load_op(name)
        try:
            return (name, k), BACKEND.build(op, BACKEND.render(op, g, "cpu"), "cpu")
        except Exception as e:  # reported by the test that needs it
            return (name, k), e
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(build, jobs))


def case_elements(op, case) -> int:
    return sum(int(np.prod(shape_of(op, t.name, case.sizes), dtype=np.int64))
               for t in op.tensors if t.role != "tmp")


@lru_cache(maxsize=None)
def checked_cases(name: str) -> list:
    """Small cases with their reference outputs, shared by every genome of an op."""
    op = load_op(name)
    out = []
    for case in cases.generate(op, seed=7, per_dtype=4):
        if case_elements(op, case) <= MAX_CASE_ELEMENTS:
            out.append((case, reference.reference(op, case.sizes, case.inputs)))
    return out


def poisoned_outputs(op, case) -> dict:
    outs = {}
    for t in op.outputs:
        dt = dtypes.torch_dtype(op.dtype_of(t.name, case.dtype))
        o = torch.empty(shape_of(op, t.name, case.sizes), dtype=dt)
        o.fill_(float("nan") if o.is_floating_point() else
                INT_POISON if dt == torch.int64 else -(1 << 30) + 123)
        outs[t.name] = o
    return outs


def as_numpy(t: torch.Tensor) -> np.ndarray:
    return t.to(torch.float64).numpy() if t.is_floating_point() else t.numpy()


def run_case(op, built, case) -> dict:
    inputs = baseline.to_torch(op, case.dtype, case.inputs)
    before = {k: v.clone() for k, v in inputs.items()}
    outs = poisoned_outputs(op, case)
    built.fn(inputs, outs, case.sizes)
    for k, v in inputs.items():
        assert torch.equal(v, before[k]), f"input '{k}' was modified"
    return {k: as_numpy(v) for k, v in outs.items()}


@pytest.mark.parametrize("k", range(RANDOM_GENOMES + 2))
@pytest.mark.parametrize("name", sorted(SPECS))
def test_matches_reference(name, k):
    op = load_op(name)
    assert BACKEND.supports(op, "cpu") is None
    built = all_built()[(name, k)]
    if isinstance(built, Exception):
        raise built
    checked = checked_cases(name)
    assert checked, "no small cases"
    assert {c.dtype for c, _ in checked} == set(op.dtype_choices)
    for case, ref in checked:
        got = run_case(op, built, case)
        bad = compare.compare(op, case.dtype, got, ref, case.inputs)
        assert bad is None, f"{name} genome {genomes(op)[k]} on {case.shape.describe()}: {bad}"
        for t in op.outputs:
            g = got[t.name]
            if g.dtype.kind == "i":
                assert not (g == INT_POISON).any(), f"{t.name}: an element was never written"


# Constructs the library does not use: a 0-d output, argmax/argmin, min, a jagged mean,
# cumprod, integer // % abs max where, casts, a data-dependent-free sum over a dim,
# argsort with topk, an intermediate read at a shifted row (not fusable), a full reduction,
# bool inputs and column reductions.
EXTRA = """
op total_sum
  dims N
  in  x: f32 | bf16 [N]
  out s: f32 []
  s[] = sum(i) x[i]
  baseline x.float().sum()
  tolerance f32(rtol=1e-4, atol=1e-4) bf16(rtol=1e-3, atol=1e-3)
  test N in 1..3000
  bench N=1000

op row_argmax
  dims M, N
  in  x: f32 | i64 [M, N]
  out a: i64 [M]
  out lo: like x [M]
  a[i] = argmax(j) x[i, j]
  lo[i] = min(j) x[i, j]
  baseline (torch.argmax(x, dim=-1), torch.min(x, dim=-1).values)
  tolerance exact
  test M in 1..50, N in 1..300
  bench M=10, N=10

op jagged_mean
  dims L, D, B
  in  values: f32 [L, D]
  in  offsets: i64 [B + 1] offsets(L)
  out y: f32 [B, D]
  out c: f32 [L, D]
  y[b, d] = mean(i in offsets[b] .. offsets[b + 1]) values[i, d] * 2
  c[i, d] = cumprod(i) values[i, d]
  baseline (values, values)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test L in 0..50, D in 1..20, B in 1..10
  bench L=10, D=3, B=2

op int_mix
  dims N, K
  in  a: i64 [N] in -1000..1000
  in  x: f32 [N]
  out y: i64 [N]
  out z: f32 [N]
  out w: i64 [N]
  y[i] = a[i] // 7 + a[i] % 5 - abs(a[i]) * 3 + max(a[i], 2) + where(a[i] > 0, 1, 0)
  z[i] = relu(x[i]) + sigmoid(x[i]) * silu(x[i]) - erf(x[i]) + pow(abs(x[i]) + 1, 1.5) + log(abs(x[i]) + 1) + f32(a[i]) / 3 + x[i] % 0.7 + x[i] // 0.3
  w[i] = i64(x[i] * 10) + sum(k in 0 .. K) (k * a[i])
  baseline (a, x, a)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test N in 1..500, K in 0..5
  bench N=10, K=2

op argsort_rows
  dims M, N
  in  x: f32 | i64 [M, N]
  out y: i64 [M, N]
  out t: like x [M, 3]
  y[i, j] = argsort(j) x[i, j]
  t[i, r] = topk(j, 3) x[i, j]
  baseline (torch.argsort(x, dim=-1, stable=True), torch.topk(x, 3, dim=-1).values)
  tolerance exact
  test M in 1..20, N in 3..200
  bench M=4, N=8

op two_level
  dims M, N
  in  x: f32 [M, N]
  out y: f32 [M, N]
  out r: f32 [M]
  r[i] = sum(j) x[i, j] * x[i, j]
  t[i, j] = x[i, j] / (r[i] + 1)
  y[i, j] = t[i, j] + t[(i + 1) % M, j] + sum(k, q) x[k, q] / (M * N)
  baseline (x, x.sum(-1))
  tolerance f32(rtol=1e-4, atol=1e-4)
  test M in 1..40, N in 1..70
  bench M=4, N=8

op col_ops
  dims M, N
  in  x: f32 [M, N]
  in  m: bool [M, N]
  out y: f32 [N]
  out c: i64 [N]
  y[j] = sum(i) (where(m[i, j], x[i, j], 0.0)) - min(i) x[i, j]
  c[j] = sum(i) m[i, j]
  baseline (x, x)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test M in 1..60, N in 1..70
  bench M=4, N=8

op mm_both_t
  dims M, K, N
  in  a: f32 | bf16 [K, M]
  in  b: like a [N, K]
  out c: like a [M, N]
  c[i, j] = sum(k) a[k, i] * b[j, k]
  baseline a.T @ b.T
  tolerance f32(rtol=1e-4, atol=1e-4) bf16(rtol=2e-2, atol=5e-2)
  test M in 1..40, K in 1..50, N in 1..40
  bench M=4, K=4, N=8

op suffix_sum
  dims M, N
  in  x: f32 [M, N]
  out y: f32 [M, N]
  y[i, j] = sum(k in j .. N) x[i, k]
  baseline torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1])
  tolerance f32(rtol=1e-4, atol=1e-4)
  test M in 1..20, N in 1..300
  bench M=4, N=8

op prefix_max
  dims M, N
  in  x: f32 [M, N]
  out y: f32 [M, N]
  y[i, j] = max(k in 0 .. j + 1) x[i, k]
  baseline torch.cummax(x, dim=1).values
  tolerance exact
  test M in 1..20, N in 1..300
  bench M=4, N=8

op suffix_min_i64
  dims M, N
  in  x: i64 [M, N]
  out y: i64 [M, N]
  y[i, j] = min(k in j .. N) x[i, k]
  baseline torch.flip(torch.cummin(torch.flip(x, [1]), 1).values, [1])
  tolerance exact
  test M in 1..20, N in 1..300
  bench M=4, N=8
"""


@lru_cache(maxsize=1)
def extra_ops() -> dict:
    return {op.name: op for op in spec.parse_text(EXTRA, "<test_backend_c>").ops}


@pytest.mark.parametrize("which", ("default", "last"))
@pytest.mark.parametrize("name", ("total_sum", "row_argmax", "jagged_mean", "int_mix",
                                  "argsort_rows", "two_level", "col_ops", "mm_both_t",
                                  "suffix_sum", "prefix_max", "suffix_min_i64"))
def test_constructs_beyond_the_library(name, which):
    op = extra_ops()[name]
    space = BACKEND.space(op, "cpu")
    genome = space.default() if which == "default" else {g.name: g.values[-1] for g in space.genes}
    built = BACKEND.build(op, BACKEND.render(op, genome, "cpu"), "cpu")
    for case in cases.generate(op, seed=3, per_dtype=4):
        ref = reference.reference(op, case.sizes, case.inputs)
        got = run_case(op, built, case)
        bad = compare.compare(op, case.dtype, got, ref, case.inputs)
        assert bad is None, f"{name} {which} on {case.shape.describe()}: {bad}"


def test_shared_lowering_reshapes_what_a_loop_nest_reads_badly():
    """A contraction factor read across its contiguous axis is copied transposed first
    (lower.layouts); a suffix sum is a reversed scan (lower.scans)."""
    from kdsl.backends.c.backend import canonical
    mm = canonical(extra_ops()["mm_both_t"])
    copy = next(st for st in mm.statements if st.target.startswith("kd_t"))
    assert copy.value.tensor == "b" and copy.indices == ("kd_a1", "kd_a0")
    c = next(st for st in mm.statements if st.target == "c")
    reads = {n.tensor: n.subscripts for n in ir.walk(c.value) if isinstance(n, ir.Access)}
    assert reads[copy.target] == (ir.Name("k"), ir.Name("j"))  # j last: contiguous rows
    scans = canonical(extra_ops()["suffix_sum"])
    assert any(isinstance(st.value, ir.Scan) for st in scans.statements)


def test_poison_is_overwritten_at_edge_sizes():
    """Rows that are not a multiple of any tile or vector width, and a single element."""
    op = load_op("softmax")
    built = all_built()[("softmax", 0)]
    for m, n in ((1, 1), (3, 7), (5, 129), (2, 1000)):
        x = torch.randn(m, n)
        y = torch.full((m, n), float("nan"))
        built.fn({"x": x}, {"y": y}, {"M": m, "N": n})
        assert not torch.isnan(y).any()
        torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


def test_empty_tensors():
    op = load_op("embedding_bag_sum")
    built = all_built()[("embedding_bag_sum", 0)]
    table = torch.randn(5, 3)
    idx = torch.zeros(0, dtype=torch.int64)
    offsets = torch.zeros(4, dtype=torch.int64)
    y = torch.full((3, 3), float("nan"))
    built.fn({"table": table, "idx": idx, "offsets": offsets}, {"y": y},
             {"V": 5, "D": 3, "B": 3, "L": 0})
    assert torch.equal(y, torch.zeros(3, 3))
    assert op.name == "embedding_bag_sum"


def test_build_error_carries_the_compiler_log():
    op = load_op("softmax")
    with pytest.raises(BuildError) as err:
        BACKEND.build(op, "void kdsl_f32(void) { this is not C }\n", "cpu")
    assert "error" in err.value.log


def test_build_records_flags_and_time():
    built = all_built()[("rmsnorm", 0)]
    assert "-O3" in built.meta["cflags"] and "-fopenmp" in built.meta["cflags"]
    assert built.meta["compile_s"] >= 0.0


def test_only_cpu():
    op = load_op("softmax")
    assert BACKEND.supports(op, "cuda")
    with pytest.raises(Unsupported):
        BACKEND.render(op, {}, "cuda")


def test_wrong_dtype_is_refused():
    built = all_built()[("softmax", 0)]
    x = torch.randn(4, 4, dtype=torch.float64)
    with pytest.raises(TypeError):
        built.fn({"x": x}, {"y": torch.empty_like(x)}, {"M": 4, "N": 4})


@pytest.mark.parametrize("name", sorted(SPECS))
def test_space_is_data(name):
    op = load_op(name)
    space = BACKEND.space(op, "cpu")
    default = space.default()
    assert space.complete(default) == default
    for gene in space.genes:
        assert default[gene.name] in gene.values
    assert {"threads", "vec", "simdlen", "unroll"} <= set(space.names)


def test_genes_change_the_source():
    op = load_op("embedding_bag_sum")
    space = BACKEND.space(op, "cpu")
    base = BACKEND.render(op, space.default(), "cpu")
    for gene in ("reduce_order", "tile", "threads", "vec"):
        value = next(v for v in space.gene(gene).values if v != space.default()[gene])
        other = dict(space.default(), **{gene: value})
        assert BACKEND.render(op, other, "cpu") != base, gene


def test_a_running_extreme_is_one_pass_not_a_range_per_point():
    # (written as a max over a prefix range it walked that range at every point: quadratic)
    src = BACKEND.render(extra_ops()["prefix_max"], BACKEND.space(
        extra_ops()["prefix_max"], "cpu").default(), "cpu")
    assert "(j2 + INT64_C(1))" not in src and "-INFINITY" in src
