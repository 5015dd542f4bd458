"""A sum that selects one term by an equality (``sum(j) where(j == t[i], x[i, j], 0)``) is
read directly by every generator (``lower.select``), and the kernels agree with the
reference; the product form and keys that move with the sum are left as written."""
from __future__ import annotations

import pytest

from kdsl import ir, spec
from kdsl.backends import get
from kdsl.backends.lower.select import selections_as_reads
from kdsl.search.eval import correctness
from kdsl.search.jobs import EvalConfig
from kdsl.show import format_expr

ONE_HOT = """\
op ce_onehot
  dims B, C
  in  p: f32 | bf16 [B, C]
  in  t: i64 [B] in 0..C
  out loss: f32 []
  m[i]   = max(j) p[i, j]
  lse[i] = m[i] + log(sum(j) exp(p[i, j] - m[i]))
  picked[i] = sum(j) where(j == t[i], p[i, j], 0.0)
  loss[] = mean(i) (lse[i] - picked[i])
  baseline F.cross_entropy(p.float(), t)
  tolerance f32(rtol=1e-5, atol=1e-5) bf16(rtol=1e-5, atol=1e-5)
  test  B in 1..30, C in 1..300
  bench B=64, C=256, dtype=f32
"""


def _op(text: str) -> ir.Op:
    return spec.parse_text(text, "t.kspec").ops[0]


def _picked(op: ir.Op) -> str:
    return format_expr(next(s for s in op.statements if s.target == "picked").value)


def test_a_selecting_sum_is_one_read_guarded_by_the_range():
    assert _picked(selections_as_reads(_op(ONE_HOT))) == \
        "where(0 <= t[i] and t[i] < C, p[i, t[i]], 0.0)"


@pytest.mark.parametrize("old,new", [
    ("where(j == t[i], p[i, j], 0.0)", "(j == t[i]) * p[i, j]"),      # NaN elsewhere counts
    ("where(j == t[i], p[i, j], 0.0)", "where(j == t[i], p[i, j], 1.0)"),  # not a selection
    ("where(j == t[i], p[i, j], 0.0)", "where(j < t[i], p[i, j], 0.0)"),
])
def test_other_forms_are_left_as_written(old, new):
    op = _op(ONE_HOT.replace(old, new))
    assert selections_as_reads(op) is op


@pytest.mark.parametrize("backend", ["c", "numpy", "torch"])
def test_kernels_of_a_selecting_sum_pass_the_judge(backend):
    # (Triton's, in the interpreter: "one_hot_pick" in test_backend_triton.py)
    op = _op(ONE_HOT)
    be = get(backend)
    built = be.build(op, be.render(op, be.space(op, "cpu").default(), "cpu"), "cpu")
    outcome = correctness.check(op, built.fn, EvalConfig(seeds=(1,), time=False,
                                                         cases_per_dtype=3))
    assert outcome.message is None, f"{backend}: {outcome.message}"
