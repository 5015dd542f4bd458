"""Outputs past their dtype's range: where the float64 reference rounds to an infinity in
the output's dtype (``exp(100.0)`` in float32), that infinity is the right answer; and a
declared domain of large magnitudes catches a kernel that overflows where the math does
not (a softmax without its maximum subtracted)."""
from __future__ import annotations

import textwrap

import numpy as np

import fake_backend
from fake_backend import QUICK, SOFTMAX
from kdsl import agreement, compare, spec
from kdsl.search.candidate import Candidate
from kdsl.search.eval import evaluator
from kdsl.search.jobs import EvalJob

fake_backend.register()

EXP = """
op wide_exp
  dims N
  in  x: f32 | f16 [N] in -120 .. 120
  out y: like x [N]
  y[i] = exp(x[i])
  baseline torch.exp(x)
  tolerance f32(rtol=1e-5, atol=1e-6) f16(rtol=1e-3, atol=1e-3)
  test  N in 1..300
  bench N=1000
"""

WIDE_SOFTMAX = (fake_backend.SPECS / "softmax.kspec").read_text().replace(
    "in  x: f32 | bf16 | f16 [M, N]", "in  x: f32 | bf16 | f16 [M, N] in -200 .. 200")

NAIVE_SOFTMAX = '''
import numpy as np
import torch


def kernel(inputs, outputs, sizes):
    e = np.exp(inputs["x"].float().numpy())
    outputs["y"].copy_(torch.from_numpy(e / e.sum(axis=1, keepdims=True)))
'''


def _op(text):
    return spec.parse_text(text, "t.kspec").ops[0]


def test_the_dtypes_infinity_passes_where_the_reference_rounds_to_it():
    op = _op(EXP)
    r = np.array([np.exp(100.0), 5.0, np.exp(-100.0)])
    assert compare.compare(op, "f32", {"y": np.array([np.inf, 5.0, 0.0], np.float32)},
                           {"y": r}, {}) is None
    for wrong in ([-np.inf, 5.0, 0.0], [3.4e38, 5.0, 0.0], [np.inf, np.inf, 0.0]):
        assert compare.compare(op, "f32", {"y": np.array(wrong, np.float32)}, {"y": r},
                               {}) is not None
    # f16 holds 65504 at most: 65519 is 65504 there, and within f16's tolerance of 65520
    r16 = np.array([65519.0, 70000.0, 60000.0])
    assert compare.compare(op, "f16", {"y": np.array([np.inf, np.inf, 60000.0], np.float16)},
                           {"y": r16}, {}) is None
    assert compare.compare(op, "f16", {"y": np.array([65504, np.inf, np.inf], np.float16)},
                           {"y": r16}, {}) is not None


def test_a_baseline_that_overflows_as_the_dtype_does_agrees():
    assert agreement.check_agreement(_op(EXP)).ok


def _evaluate(op, source):
    candidate = Candidate.of("fakepy", {}, textwrap.dedent(source))
    return evaluator.evaluate(EvalJob(op, candidate, QUICK))


def test_a_wide_domain_rejects_the_softmax_that_overflows():
    op = _op(WIDE_SOFTMAX)
    assert agreement.check_agreement(op).ok
    assert _evaluate(op, SOFTMAX).ok
    naive = _evaluate(op, NAIVE_SOFTMAX)
    assert not naive.ok and "NaN" in naive.message


SUM_EXP = """
op wide_sum_exp
  dims M, N
  in  x: f32 [M, N] in -100 .. 100
  out s: f32 [M]
  s[i] = sum(j) exp(x[i, j])
  baseline torch.exp(x.double()).sum(dim=1).float()
  tolerance f32(rtol=1e-4, atol=1e-5)
  test  M in 1..8, N in 1..100
  bench M=16, N=64
"""


def test_the_judge_takes_the_rounded_infinity_end_to_end():
    """The correctness stage's own check for infinities (before the comparison) follows
    the same rule: a sum of exp(100) is infinite in float32, as the reference rounds."""
    op = _op(SUM_EXP)
    from kdsl.backends import get
    from kdsl.search.eval import correctness
    from kdsl.search.jobs import EvalConfig
    be = get("numpy")
    built = be.build(op, be.render(op, be.space(op, "cpu").default(), "cpu"), "cpu")
    outcome = correctness.check(op, built.fn, EvalConfig(seeds=(1,), cases_per_dtype=3,
                                                         time=False))
    assert outcome.message is None, outcome.message
