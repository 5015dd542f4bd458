"""Sums over one-hot indicators lowered as scatter-adds (``lower.scatter``): which sums
match, and that the C, numpy and torch kernels built from them agree with the float64
reference (out-of-range keys, duplicate keys, several keyed indices, looped indices
before and after the keyed ones, extra factors, a jagged range, a nested reduction),
on every C run-time strategy. Specs without the pattern are left as they are."""
from __future__ import annotations

import dataclasses
from functools import lru_cache

import pytest

from kdsl import cases, compare, ir, reference, spec
from kdsl.backends import get
from kdsl.backends.lower import scatter as S
from test_backend_c import run_case
from test_backend_numpy import assert_correct, genomes_for, small_cases

OPS = """
op bincount
  dims N, NB
  in  idx: i64 [N] in 0..NB
  out h: i64 [NB]
  h[c] = sum(i) (idx[i] == c)
  baseline torch.bincount(idx, minlength=NB)
  tolerance exact
  test  N in 1..3000, NB in 1..300
  bench N=1000, NB=10

op bincount_outside
  dims N, NB
  in  idx: i32 [N] in -3..NB + 3
  out h: i64 [NB]
  h[c] = sum(i) (c == idx[i])
  baseline torch.bincount((idx.long() + 3), minlength=NB + 6)[3:NB + 3]
  tolerance exact
  test  N in 1..3000, NB in 1..300
  bench N=1000, NB=10

op weighted
  dims N, NB
  in  w: f32 | bf16 [N]
  in  idx: i64 [N] in 0..NB
  out h: like w [NB]
  h[c] = sum(i) w[i] * (idx[i] == c)
  baseline torch.zeros(NB, dtype=torch.float32).index_add_(0, idx, w.float()).to(w.dtype)
  tolerance f32(rtol=1e-4, atol=1e-4) bf16(rtol=2e-2, atol=5e-2)
  test  N in 1..3000, NB in 1..300
  bench N=1000, NB=10

op int_weighted
  dims N, NB
  in  v: i64 [N] in -1000..1000
  in  idx: i64 [N] in 0..NB
  out h: i64 [NB]
  h[c] = sum(i) where(idx[i] == c and v[i] > -500, v[i], 0)
  baseline torch.zeros(NB, dtype=torch.int64).index_add_(0, idx, torch.where(v > -500, v, 0))
  tolerance exact
  test  N in 1..3000, NB in 1..300
  bench N=1000, NB=10

op cast_count
  dims N, NB
  in  idx: i64 [N] in 0..NB
  out h: f32 [NB]
  h[c] = sum(i) f32(idx[i] // 2 == c)
  baseline torch.bincount(idx // 2, minlength=NB)[:NB].float()
  tolerance exact
  test  N in 1..3000, NB in 1..300
  bench N=1000, NB=10

op row_hist
  dims B, N, NB
  in  idx: i64 [B, N] in 0..NB
  out h: i64 [B, NB]
  h[b, c] = sum(i) (idx[b, i] == c)
  baseline torch.zeros(B, NB, dtype=torch.int64).scatter_add_(1, idx, torch.ones_like(idx))
  tolerance exact
  test  B in 1..40, N in 1..300, NB in 1..50
  bench B=4, N=100, NB=10

op hist2d
  dims N, P, Q
  in  a: i64 [N] in 0..P
  in  b: i64 [N] in 0..Q
  out h: i64 [P, Q]
  h[p, q] = sum(i) (a[i] == p) * (b[i] == q)
  baseline torch.bincount(a * Q + b, minlength=P * Q).reshape(P, Q)
  tolerance exact
  test  N in 1..3000, P in 1..20, Q in 1..20
  bench N=1000, P=4, Q=5

op emb_backward
  dims N, V, D
  in  dy: f32 [N, D]
  in  idx: i64 [N] in 0..V
  out g: f32 [V, D]
  g[v, d] = sum(i) (idx[i] == v) * dy[i, d]
  baseline torch.zeros(V, D).index_add_(0, idx, dy)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  N in 1..500, V in 1..60, D in 1..40
  bench N=100, V=10, D=8

op agree
  dims N, NB
  in  a: i64 [N] in 0..NB
  in  b: i64 [N] in 0..NB
  out h: i64 [NB]
  h[c] = sum(i) (a[i] == c) * (b[i] == c)
  baseline torch.bincount(torch.where(a == b, a, NB), minlength=NB + 1)[:NB]
  tolerance exact
  test  N in 1..3000, NB in 1..5
  bench N=1000, NB=3

op normalized
  dims N, NB
  in  w: f32 [N]
  in  idx: i64 [N] in 0..NB
  out y: f32 [NB]
  y[c] = (sum(i) w[i] * (idx[i] == c)) / N + 1.0
  baseline torch.zeros(NB).index_add_(0, idx, w) / N + 1.0
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  N in 1..3000, NB in 1..300
  bench N=1000, NB=10

op jagged_hist
  dims L, B, NB
  in  idx: i64 [L] in 0..NB
  in  offsets: i64 [B + 1] offsets(L)
  out h: i64 [B, NB]
  h[b, c] = sum(i in offsets[b] .. offsets[b + 1]) (idx[i] == c)
  baseline torch.zeros(B, NB, dtype=torch.int64).index_put_((torch.repeat_interleave(torch.arange(B), offsets.diff()), idx), torch.ones_like(idx), accumulate=True)
  tolerance exact
  test  L in 0..500, B in 1..20, NB in 1..30
  bench L=100, B=4, NB=10

op nested_value
  dims N, M, NB
  in  x: f32 [N, M]
  in  idx: i64 [N] in 0..NB
  out h: f32 [NB]
  h[c] = sum(i) (idx[i] == c) * sum(j) x[i, j]
  baseline torch.zeros(NB).index_add_(0, idx, x.sum(1))
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  N in 1..300, M in 1..30, NB in 1..30
  bench N=100, M=8, NB=10

op col_key
  dims N, D, NB
  in  idx: i64 [N, D] in 0..NB
  out h: i64 [NB, D]
  t[c, d] = sum(i) (idx[i, d] == c)
  h[c, d] = t[c, d] * 2 + 1
  baseline torch.zeros(NB, D, dtype=torch.int64).scatter_add_(0, idx, torch.ones_like(idx)) * 2 + 1
  tolerance exact
  test  N in 1..300, D in 1..20, NB in 1..30
  bench N=100, D=4, NB=10
"""

# sums that look alike but are no scatter: each must keep its dense lowering
NOT_SCATTERS = """
op not_scatters
  dims N, NB, C
  in  idx: i64 [N] in 0..NB
  in  x: f32 [N]
  in  w: f32 [NB]
  in  t: i64 [NB] in 0..C
  in  logits: f32 [NB, C]
  out a: f32 [NB]
  out b: f32 [NB]
  out d: i64 [NB]
  out e: f32 [NB]
  out f: f32 [NB]
  out g: i64 [NB]
  out k: f32 [NB]
  a[c] = sum(i) (idx[i] == c) * w[c]
  b[c] = sum(i) where(idx[i] == c, x[i], 1.0)
  d[c] = sum(i) (idx[i] != c)
  e[c] = sum(i) (x[i] == c)
  f[c] = max(i) where(idx[i] == c, x[i], 0.0)
  g[c] = sum(i) (idx[i] == c or idx[i] == 0)
  k[r] = sum(j) where(j == t[r], logits[r, j], 0.0)
  baseline (w, w, idx, w, w, idx, w)
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  N in 1..30, NB in 1..30, C in 1..10
  bench N=10, NB=10, C=3
"""


@lru_cache(maxsize=None)
def ops() -> dict:
    return {op.name: op for op in spec.parse_text(OPS, "<test_scatter>").ops}


def scatter_of(name: str, target: str | None = None) -> S.Scatter:
    op = S.scatter_form(ops()[name])
    found = S.scatters(op)
    return found[target or op.outputs[0].name]


def loops(sc: S.Scatter) -> tuple[list[str], list[str], list[str]]:
    return ([r.name for r in sc.outer], [r.name for r in sc.summed], [r.name for r in sc.inner])


# ---- the pattern -------------------------------------------------------------------

def test_a_count_is_a_scatter_of_ones_at_the_index():
    sc = scatter_of("bincount")
    assert sc.keys == (ir.Access("idx", (ir.Name("i"),)),) and sc.keyed == (True,)
    assert loops(sc) == ([], ["i"], []) and sc.value == ir.Num(1)
    assert scatter_of("bincount_outside").keys == sc.keys  # (c == e) as well as (e == c)
    assert S.kind(ops()["bincount"], sc.reduce) == "int"


def test_factors_casts_and_where_guards_stay_as_the_value():
    assert scatter_of("weighted").value == ir.Access("w", (ir.Name("i"),))
    sc = scatter_of("int_weighted")
    assert sc.value == ir.Call("where", (ir.Binary(">", ir.Access("v", (ir.Name("i"),)),
                                                   ir.Num(-500)),
                                         ir.Access("v", (ir.Name("i"),)), ir.Num(0)))
    sc = scatter_of("cast_count")
    assert sc.value == ir.Num(1) and S.kind(ops()["cast_count"], sc.reduce) == "float"
    assert sc.keys[0] == ir.Binary("//", ir.Access("idx", (ir.Name("i"),)), ir.Num(2))


def test_looped_indices_run_outside_or_inside_the_summed_ones():
    sc = scatter_of("row_hist")  # b before the keyed c: disjoint rows of h
    assert loops(sc) == (["b"], ["i"], []) and sc.keyed == (False, True)
    assert scatter_of("emb_backward").keyed == (True, False)
    assert loops(scatter_of("emb_backward")) == ([], ["i"], ["d"])
    assert loops(scatter_of("jagged_hist")) == (["b"], ["i"], [])  # the range reads b
    sc = scatter_of("hist2d")
    assert sc.keyed == (True, True) and loops(sc) == ([], ["i"], [])


def test_a_second_indicator_on_one_index_is_a_condition_on_the_first_key():
    sc = scatter_of("agree")
    a, b = (ir.Access(n, (ir.Name("i"),)) for n in "ab")
    assert sc.keys == (a,) and sc.value == ir.Binary("==", b, a)


def test_a_sum_inside_a_larger_right_side_gets_an_intermediate_of_its_own():
    op = S.scatter_form(ops()["normalized"])
    tmp = op.tensor("kd_sc0_y")
    assert tmp.role == "tmp" and tmp.dtypes == ("f32",) and tmp.shape == (ir.Name("NB"),)
    y = next(st for st in op.statements if st.target == "y")
    assert ir.Access("kd_sc0_y", (ir.Name("c"),)) in list(ir.walk(y.value))
    assert set(S.scatters(op)) == {"kd_sc0_y"}
    assert S.scatter_form(op) is op  # once is enough


def test_sums_that_only_look_alike_are_left_alone():
    """A factor that reads c elsewhere, a where whose other branch is not 0, an
    inequality, a float key, a max, a disjunction, and an indicator on the summed index
    (a one-hot selection, not a scatter)."""
    op = spec.parse_text(NOT_SCATTERS, "<not>").ops[0]
    assert S.scatters(op) == {} and S.scatter_form(op) is op
    for st in op.statements:
        assert S.match(op, st) is None, st.target


def test_no_library_spec_has_the_pattern():
    """So no kernel of specs/ changes (their sources were compared before and after)."""
    for path in sorted(spec.library_dir().rglob("*.kspec")):
        for op in spec.load(path).ops:
            assert S.scatter_form(op) is op and S.scatters(op) == {}, op.name


# ---- the kernels -------------------------------------------------------------------

def check_c(op, genome: dict) -> None:
    c = get("c")
    source = c.render(op, genome, "cpu")
    assert ("scatter-add" in source) == genome.get("scatter", True)
    built = c.build(op, source, "cpu")
    for case in cases.generate(op, seed=3, per_dtype=4):
        ref = reference.reference(op, case.sizes, case.inputs)
        bad = compare.compare(op, case.dtype, run_case(op, built, case), ref, case.inputs)
        assert bad is None, f"{op.name} {genome} on {case.shape.describe()}: {bad}"


NAMES = [op.name for op in spec.parse_text(OPS, "<names>").ops]


@pytest.mark.parametrize("name", NAMES)
def test_c_scatter_and_dense_agree_with_the_reference(name):
    op = ops()[name]
    space = get("c").space(op, "cpu")
    assert space.gene("scatter").values == (True, False)
    check_c(op, space.default())
    check_c(op, dict(space.default(), scatter=False, acc="double", threads=1))


@pytest.mark.parametrize("strategy", ("outer", "private", "atomic"))
def test_every_c_run_time_strategy_agrees(monkeypatch, strategy):
    """Small cases run serially; with the work threshold at 0 they take the parallel
    paths: the outer loop split (row_hist's B reaches 40), private copies, or atomics."""
    from kdsl.backends.c import render, scatter
    monkeypatch.setattr(render, "PARALLEL_MIN_WORK", 0)
    if strategy != "outer":
        monkeypatch.setattr(scatter, "OUTER_PER_THREAD", 1 << 40)
    if strategy == "atomic":
        monkeypatch.setattr(scatter, "PRIVATE_AT_MOST", 0)
    for name in ("bincount_outside", "weighted", "int_weighted", "row_hist", "hist2d",
                 "emb_backward", "jagged_hist", "col_key"):
        op = ops()[name]
        check_c(op, dict(get("c").space(op, "cpu").default(), threads=2))


@pytest.mark.parametrize("backend", ("numpy", "torch"))
@pytest.mark.parametrize("name", NAMES)
def test_array_scatters_agree_with_the_reference(backend, name):
    """The default genome, every gene at its last value (fusion: all inlines col_key's
    intermediate, which is then moved out again) and two random ones."""
    op = ops()[name]
    fixed = {"mode": "compose"} if backend == "torch" else {}
    last = {g.name: g.values[-1] for g in get(backend).space(op, "cpu").genes}
    genomes = genomes_for(backend, op, 2, fixed) + [{**last, **fixed}]
    for genome in genomes:
        source = get(backend).render(op, genome, "cpu")
        # a jagged range keeps the dense sum in the array backends
        assert ("rt.scatter_add(" in source) == (name != "jagged_hist"), genome
    assert_correct(backend, op, genomes, small_cases(op))


def test_triton_scatters_where_the_keys_are_many_and_the_ranges_are_sizes():
    """The Triton lowering stages each sum over an indicator with at least MIN_KEYS keyed
    elements at the bench point as a scatter-add (atomics into a wide accumulator, then
    its conversion); fewer keys, or a range of another index (a jagged segment), keep the
    dense rows; a sum inside a larger right side is a scatter stage and a pointwise one."""
    from kdsl.backends.triton import backend as tb
    from kdsl.backends.triton import scatter as ts

    def kinds(name: str, **bench) -> list[str]:
        op = ops()[name]
        if bench:
            point = dataclasses.replace(op.bench[0], sizes=tuple(
                (k, bench.get(k, v)) for k, v in op.bench[0].sizes))
            op = dataclasses.replace(op, bench=(point,))
        lowered = tb._lowered(op)
        if not isinstance(lowered, tb.Staged):
            return [lowered if isinstance(lowered, str) else lowered.kind]
        return [tb._stage_kind(s) for s in lowered.stages]

    assert kinds("bincount") == ["rows"]  # bench NB=10
    assert kinds("bincount", NB=ts.MIN_KEYS) == ["scatter"]
    assert kinds("normalized", NB=4096) == ["scatter", "pointwise"]
    assert kinds("emb_backward", V=64) == ["scatter"]  # not a GEMM with a one-hot side
    assert "scatter" not in kinds("jagged_hist", NB=4096)
    source = get("triton").render(ops()["weighted"], {}, "cuda")
    assert "tl.atomic_add" not in source  # NB=10 at its bench point
