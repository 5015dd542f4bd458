"""The seeded case generator: domains respected, edge sizes present, jagged and sorting
specs stressed, and the same seed giving the same bits."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kdsl import cases, dtypes, ir, spec
from kdsl.sizes import edge_values, evaluate, ranges, shape_of, valid

SPECS = Path(__file__).resolve().parent.parent / "specs"
OPS = {p.stem: spec.load(p).ops[0] for p in sorted(SPECS.glob("*.kspec"))}
JAGGED = ["embedding_bag_sum", "jagged_softmax", "jagged_to_padded_dense"]
SORTING = ["sort_rows", "topk_rows"]
SEEDS = (0, 1)

DOMAINS = """\
op domains
  dims N, V
  in  x: f32 | bf16 | f16 [N]
  in  p: like x [N] positive
  in  q: i32 [N] positive
  in  u: f32 [N] in -0.5..0.25
  in  k: i64 [N] in 3..V + 3
  in  w: i32 [N]
  in  flag: bool [N]
  out y: like x [N]
  y[i] = x[i] * p[i] + u[i] + f32(q[i] + k[i] + w[i]) + where(flag[i], 1.0, 0.0)
  baseline x * p + u + (q + k + w).float() + flag.float()
  tolerance f32(rtol=1e-5, atol=1e-5) bf16(rtol=1e-2, atol=1e-2) f16(rtol=1e-3, atol=1e-3)
  test  N in 1..3000, V in 1..50
  bench N=4096, V=10
"""
OPS_WITH_DOMAINS = dict(OPS, domains=spec.parse_text(DOMAINS, "domains.kspec").ops[0])


def _too_big(shape: cases.Shape, op: ir.Op) -> bool:
    return sum(int(np.prod(shape_of(op, t.name, shape.sizes))) for t in op.inputs) > 3_000_000


def library_cases(name: str, seed: int):
    op = OPS_WITH_DOMAINS[name]
    return op, [cases.draw(op, s, seed) for s in cases.shapes(op, seed) if not _too_big(s, op)]


@pytest.fixture(scope="module", params=sorted(OPS_WITH_DOMAINS))
def generated(request):
    """(op, cases) for seed 0 and 1 of one op, drawn once per module."""
    op, a = library_cases(request.param, SEEDS[0])
    _, b = library_cases(request.param, SEEDS[1])
    return op, a + b


def test_shapes_satisfy_ranges_and_conditions(generated):
    op, cs = generated
    rs = ranges(op)
    assert cs, f"{op.name}: no cases"
    for c in cs:
        assert set(c.sizes) == set(op.dims)
        for dim, (lo, hi) in rs.items():
            assert lo <= c.sizes[dim] <= hi, (dim, c.sizes)
        assert valid(op, c.sizes)
        for cond in op.test.conditions:
            assert evaluate(cond, c.sizes), (c.sizes, cond)
        assert c.dtype in op.dtype_choices


def test_inputs_have_declared_shapes_and_storage(generated):
    op, cs = generated
    for c in cs:
        assert set(c.inputs) == {t.name for t in op.inputs}
        for t in op.inputs:
            a = c.inputs[t.name]
            dt = op.dtype_of(t.name, c.dtype)
            assert a.shape == shape_of(op, t.name, c.sizes), t.name
            assert a.dtype == dtypes.numpy_dtype(dt), (t.name, a.dtype, dt)
            if dt == "bf16":  # float32 holding bf16 values: the low 16 bits are zero
                assert not (a.view(np.uint32) & 0xFFFF).any()
            if a.dtype.kind == "f":
                assert np.isfinite(a).all()


def test_domains_are_respected(generated):
    op, cs = generated
    for c in cs:
        for t in op.inputs:
            a, d = c.inputs[t.name], t.domain
            if isinstance(d, ir.ValueRange) and a.size:
                lo = d.lo.value if isinstance(d.lo, ir.Num) else evaluate(d.lo, c.sizes)
                hi = d.hi.value if isinstance(d.hi, ir.Num) else evaluate(d.hi, c.sizes)
                assert a.min() >= lo, (t.name, a.min(), lo)
                assert a.max() < hi if a.dtype.kind in "iu" else a.max() <= hi, (t.name, hi)
            elif isinstance(d, ir.Offsets):
                assert len(a) >= 1 and a[0] == 0, (t.name, a)
                assert a[-1] == evaluate(d.total, c.sizes), (t.name, a, c.sizes)
                assert (np.diff(a) >= 0).all(), a
            elif isinstance(d, ir.Positive):
                assert (a > 0).all(), t.name


def test_domains_spec_draws_every_kind():
    """The hand-written spec above has every domain; its values look like their domains."""
    op, cs = library_cases("domains", 5)
    big = max(cs, key=lambda c: c.sizes["N"])
    assert big.sizes["N"] >= 100
    x = big.inputs
    assert x["flag"].dtype == np.bool_ and x["flag"].any() and not x["flag"].all()
    assert x["w"].dtype == np.int32 and x["w"].min() < -2 ** 20 and x["w"].max() > 2 ** 20
    assert (x["q"] >= 1).all() and x["q"].dtype == np.int32
    assert x["u"].min() >= -0.5 and x["u"].max() <= 0.25 and x["u"].min() < 0 < x["u"].max()
    assert x["x"].min() < 0 < x["x"].max()  # unconstrained floats take both signs


def test_edge_sizes_appear():
    for name, op in OPS.items():
        seen = {d: set() for d in op.dims}
        for seed in SEEDS:
            for s in cases.shapes(op, seed):
                for d, v in s.sizes.items():
                    seen[d].add(v)
        for d, (lo, hi) in ranges(op).items():
            if lo <= 1 <= hi:
                assert 1 in seen[d], (name, d)
            if not op.test.conditions:  # each range's ends, for ranges not tied by conditions
                assert {lo, hi} <= seen[d], (name, d, sorted(seen[d]))
        values = set().union(*seen.values())
        odd = {v for v in values if v > 2 and v & (v - 1)}  # non-powers of two
        primes = {v for v in values if v > 2 and all(v % p for p in range(2, int(v ** 0.5) + 1))}
        assert odd and primes, (name, sorted(values))


def test_edge_values():
    ev = edge_values(1, 300)
    assert ev == sorted(ev) and min(ev) == 1 and max(ev) == 300
    assert 293 in ev  # the largest prime in range
    assert {7, 9, 127, 129, 255, 257} <= set(ev)
    assert edge_values(5, 5) == [5]
    assert edge_values(0, 3) == [0, 1, 3]


@pytest.mark.parametrize("name", JAGGED)
def test_segments_cases_have_empty_and_single_segments(name):
    op = OPS[name]
    labelled = 0
    for seed in range(4):
        for s in cases.shapes(op, seed):
            if s.label != "segments":
                continue
            off = cases.draw(op, s, seed).inputs["offsets"]
            if len(off) > 3 and off[-1] >= 1:
                labelled += 1
                d = np.diff(off)
                assert (d == 0).any() and (d == 1).any(), off
    assert labelled >= 4


@pytest.mark.parametrize("name", JAGGED)
def test_jagged_offsets_reach_every_kind_of_segment(name):
    op, cs = library_cases(name, 0)
    lengths = np.concatenate([np.diff(c.inputs["offsets"]) for c in cs])
    assert (lengths == 0).any() and (lengths == 1).any() and (lengths > 1).any()
    assert any(c.sizes["L"] == 0 for c in cs)  # an empty jagged tensor


@pytest.mark.parametrize("name", SORTING)
def test_sorting_specs_get_duplicate_keys(name):
    op = OPS[name]
    dup_rows = 0
    for s in cases.shapes(op, 0):
        if s.label != "duplicates":
            continue
        x = cases.draw(op, s, 0).inputs["x"]
        for row in x[:50]:
            if len(row) > 6:
                assert len(set(row.tolist())) < len(row)
                dup_rows += 1
    assert dup_rows > 0
    assert any(s.label == "duplicates" for s in cases.shapes(op, 1))


def test_only_sorting_and_jagged_specs_get_those_labels():
    for name, op in OPS.items():
        labels = {s.label for s in cases.shapes(op, 0)}
        assert ("duplicates" in labels) == (name in SORTING), name
        assert ("segments" in labels) == (name in JAGGED), name
        assert labels >= {"low"}


def _digest(cs) -> str:
    h = hashlib.sha256()
    for c in cs:
        h.update(repr((sorted(c.sizes.items()), c.dtype, c.shape.label)).encode())
        for k in sorted(c.inputs):
            h.update(k.encode() + c.inputs[k].tobytes() + str(c.inputs[k].dtype).encode())
    return h.hexdigest()


@pytest.mark.parametrize("name", ["softmax", "embedding_bag_sum", "topk_rows", "hash_bucketize"])
def test_same_seed_same_cases_bitwise(name):
    a = library_cases(name, 7)[1]
    b = library_cases(name, 7)[1]
    assert [c.shape for c in a] == [c.shape for c in b]
    for x, y in zip(a, b):
        for k in x.inputs:
            assert x.inputs[k].dtype == y.inputs[k].dtype
            assert x.inputs[k].tobytes() == y.inputs[k].tobytes()
    assert _digest(a) == _digest(b)


@pytest.mark.parametrize("name", ["softmax", "embedding_bag_sum", "topk_rows", "hash_bucketize"])
def test_different_seed_different_cases(name):
    op = OPS[name]
    a, b = cases.shapes(op, 0), cases.shapes(op, 1)
    assert [s.sizes for s in a] != [s.sizes for s in b]
    s = a[0]  # the same shape, drawn with two seeds
    x, y = cases.draw(op, s, 0), cases.draw(op, s, 1)
    if any(v.size for v in x.inputs.values()):
        assert any(x.inputs[k].tobytes() != y.inputs[k].tobytes() for k in x.inputs)
    assert _digest(cases.generate(op, 0)) != _digest(cases.generate(op, 1))


def test_cases_are_the_same_in_another_process():
    code = ("import sys, hashlib; from kdsl import cases, spec; "
            "op = spec.load(sys.argv[1]).ops[0]; h = hashlib.sha256(); "
            "[h.update(repr(sorted(c.sizes.items())).encode() + c.inputs[k].tobytes()) "
            " for c in cases.generate(op, 3) for k in sorted(c.inputs)]; print(h.hexdigest())")
    path = SPECS / "topk_rows.kspec"
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True, env={"PYTHONHASHSEED": "999"})
    h = hashlib.sha256()
    for c in cases.generate(OPS["topk_rows"], 3):
        for k in sorted(c.inputs):
            h.update(repr(sorted(c.sizes.items())).encode() + c.inputs[k].tobytes())
    assert out.stdout.strip() == h.hexdigest()


def test_cases_depend_on_the_op():
    """Two ops with the same sizes but different hashes get different inputs for one seed."""
    a = OPS["softmax"]
    b = spec.parse_text(SPECS.joinpath("softmax.kspec").read_text().replace(
        "rtol=1e-5", "rtol=2e-5")).ops[0]
    assert a.hash != b.hash
    s = cases.Shape({"M": 3, "N": 5}, "f32", "random", 2)
    assert cases.draw(a, s, 0).inputs["x"].tobytes() != cases.draw(b, s, 0).inputs["x"].tobytes()


def test_per_dtype_and_dtype_list():
    op = OPS["softmax"]
    assert len(cases.shapes(op, 0, per_dtype=3)) == 9
    only = cases.shapes(op, 0, per_dtype=2, dtype_list=["f16"])
    assert [s.dtype for s in only] == ["f16", "f16"]
    assert [s.index for s in cases.shapes(op, 0, per_dtype=4)][:4] == [0, 1, 2, 3]


def test_bench_case():
    op = OPS["embedding_bag_sum"]
    small = ir.BenchPoint(None, (("V", 50), ("D", 4), ("B", 6), ("L", 40)), None)
    c = cases.bench_case(op, small, seed=1)
    assert c.sizes == {"V": 50, "D": 4, "B": 6, "L": 40} and c.dtype == op.dtype_choices[0]
    assert c.shape.label == "bench"
    assert c.inputs["offsets"][-1] == 40 and c.inputs["idx"].max() < 50
    assert cases.bench_case(op, small, seed=1).inputs["table"].tobytes() == \
        c.inputs["table"].tobytes()


def test_large_bench_tensors_draw_the_same_on_any_number_of_threads(monkeypatch):
    """Past AT_LEAST elements a bench tensor is drawn in chunks on threads; each chunk has
    its own child generator, so one thread or many give the same bytes, and the values keep
    their domain."""
    import os
    op = OPS["embedding_bag_sum"]
    point = ir.BenchPoint(None, (("V", 300), ("D", 16), ("B", 6), ("L", 40)), None)
    monkeypatch.setattr(cases._Chunked, "AT_LEAST", 1000)  # the 300 x 16 table is chunked
    drawn = []
    for cpus in (1, 8):
        monkeypatch.setattr(os, "cpu_count", lambda: cpus)
        drawn.append(cases.bench_case(op, point, seed=3).inputs)
    assert drawn[0]["table"].tobytes() == drawn[1]["table"].tobytes()
    table = drawn[0]["table"]
    assert table.shape == (300, 16) and table.dtype == np.float32
    assert abs(float(table.mean())) < 0.2 and 0.8 < float(table.std()) < 1.2
    assert len({table[i * 75, 0] for i in range(4)}) == 4  # chunks are not copies of one


# ---- the upper ends ----------------------------------------------------------------

def test_upper_ends_meet_the_conditions_with_the_other_dims_small():
    from kdsl.sizes import upper
    conv = OPS["conv1d"]  # LO == L + 2 * P - KW + 1 reaches 306 only at L=300, P=3, KW=1
    got = upper(conv, ("LO",), 1 << 22)
    assert got["LO"] == 306 and (got["L"], got["P"], got["KW"]) == (300, 3, 1)
    assert got["B"] == got["CI"] == got["CO"] == 1
    topk = upper(OPS["topk_rows"], ("K",), 1 << 22)  # K <= N: N no larger than it must be
    assert topk == {"M": 1, "N": 64, "K": 64}
    dlrm = upper(OPS["dlrm_interaction"], ("P",), 1 << 22)  # 2 * P == F * (F - 1)
    assert (dlrm["P"], dlrm["F"]) == (780, 40)
    bag = upper(OPS["embedding_bag_sum"], ("V", "L"), 1 << 22)  # a domain's dims together
    assert bag == {"V": 1000, "D": 1, "B": 1, "L": 2000}


def test_a_dim_whose_maximum_alone_is_enormous_takes_the_largest_size_that_fits():
    from kdsl.sizes import elements, upper
    op = spec.parse_text(SPECS.joinpath("softmax.kspec").read_text().replace(
        "M in 1..300, N in 1..5000", "M in 1..8, N in 1..4194304"), "huge.kspec").ops[0]
    got = upper(op, ("N",), cases.UPPER_CASE_ELEMENTS)
    assert got["M"] == 1 and elements(op, got) <= cases.UPPER_CASE_ELEMENTS
    assert elements(op, {"M": 1, "N": got["N"] + 1}) > cases.UPPER_CASE_ELEMENTS
    assert got["N"] == cases.UPPER_CASE_ELEMENTS // 2
    # the other dim's maximum is as cheap as ever
    assert upper(op, ("M",), cases.UPPER_CASE_ELEMENTS) == {"M": 8, "N": 1}


def test_upper_shapes_are_per_dtype_and_labelled():
    op = OPS["jagged_softmax"]
    shapes = cases.upper_shapes(op)
    assert {s.dtype for s in shapes} == set(op.dtype_choices)
    per_dtype = [s for s in shapes if s.dtype == "f32"]
    assert [s.label for s in per_dtype][0] == "longest"
    assert {s.label for s in per_dtype} == {"longest", "upper", "all"}
    assert len({s.index for s in per_dtype}) == len(per_dtype)
    longest = cases.draw(op, per_dtype[0], 0)
    assert longest.sizes["L"] == 2000 and list(longest.inputs["offsets"]) == [0, 2000]


POSITIVE_SPEC = """
op pos
  dims N
  in  p: f32 | f16 [N] positive
  out y: like p [N]
  y[i] = log(p[i])
  baseline torch.log(p)
  tolerance f32(rtol=1e-5, atol=1e-5) f16(rtol=1e-2, atol=1e-2)
  test N in 1..4096
  bench N=4096
"""


def test_positive_floats_span_every_scale_in_f32_and_stay_moderate_in_half_types():
    """A kernel fitted to a narrow range (a log clamped to 0.02 .. 9) meets values far below
    it in f32; f16 keeps 0.05 .. 4, where specs' test ranges were sized for its sums."""
    op = spec.parse_text(POSITIVE_SPEC).ops[0]
    shape = cases.Shape({"N": 4096}, "f32", "random", 0)
    p = cases.draw(op, shape, 3).inputs["p"]
    lo, hi = cases.POSITIVE
    assert p.min() >= np.float32(lo) and p.max() <= hi
    assert p.min() < 1e-4 and (p < 0.02).mean() > 0.4  # half of the decades lie below 0.02
    half = cases.draw(op, cases.Shape({"N": 4096}, "f16", "random", 0), 3).inputs["p"]
    assert half.min() >= np.float16(0.05) * 0.999 and half.max() <= 4
