"""A group whose statements have no loop of their own besides their reductions, reduced
down the slow axis (a column softmax's max and sum, ``m[j] = max(i) x[i, j]``), runs its
parallel loop over tiles of ``j``, each reduction step reading a contiguous run of a row
(``plan.tiled_index``), and agrees with the reference at every size, tiles cut short too."""
from __future__ import annotations

import pytest

from kdsl import spec
from kdsl.backends import get
from kdsl.backends.c import plan as c_plan
from kdsl.backends.c.backend import canonical
from kdsl.search.eval import correctness
from kdsl.search.jobs import EvalConfig

BACKEND = get("c")
pytestmark = pytest.mark.skipif(not BACKEND.available(), reason="no C compiler")

OPS = """
op col_softmax
  dims M, N
  in  x: f32 | bf16 [M, N]
  out y: like x [M, N]
  m[j] = max(i) x[i, j]
  s[j] = sum(i) exp(x[i, j] - m[j])
  y[i, j] = exp(x[i, j] - m[j]) / s[j]
  baseline torch.softmax(x.float(), dim=0).to(x.dtype)
  tolerance f32(rtol=1e-5, atol=1e-6) bf16(rtol=2e-2, atol=1e-2)
  test  M in 1..70, N in 1..300
  bench M=4096, N=4096, dtype=f32

op col_stats
  dims M, N
  in  x: f32 [M, N]
  out lo: f32 [N]
  out arg: i64 [N]
  lo[j] = min(i) x[i, j]
  arg[j] = argmax(i) x[i, j]
  baseline (x.min(0).values, x.argmax(0))
  tolerance f32(rtol=1e-6, atol=1e-6)
  test  M in 1..70, N in 1..300
  bench M=4096, N=4096, dtype=f32
"""


def ops() -> dict:
    return {op.name: op for op in spec.parse_text(OPS, "<test_c_tiles>").ops}


def test_a_column_reduction_group_runs_in_tiles_of_its_parallel_index():
    op = canonical(ops()["col_softmax"])
    plan = c_plan.plan(op, True, False)
    assert [c_plan.tiled_index(plan, g) for g in plan.groups] == ["j", None]
    source = BACKEND.render(op, BACKEND.space(op, "cpu").default(), "cpu")
    assert "p1 += 128" in source, source
    inner = BACKEND.render(op, dict(BACKEND.space(op, "cpu").default(), reduce_order="inner"),
                           "cpu")
    assert "p1 += 128" not in inner  # the search can still take the column walk


@pytest.mark.parametrize("name", ["col_softmax", "col_stats"])
@pytest.mark.parametrize("order", ["auto", "inner"])
def test_tiled_and_walked_columns_pass_the_judge(name, order):
    op = ops()[name]
    genome = dict(BACKEND.space(op, "cpu").default(), reduce_order=order)
    built = BACKEND.build(op, BACKEND.render(op, genome, "cpu"), "cpu")
    outcome = correctness.check(op, built.fn, EvalConfig(seeds=(1, 2), time=False))
    assert outcome.message is None, outcome.message
