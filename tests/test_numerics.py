"""Exponentials written as the math reads (``lower.numerics``): on inputs of magnitude 200,
where ``exp`` overflows float32, the c and numpy kernels of a softmax, log-softmax,
log-sum-exp, softplus and cross-entropy written naively agree with the float64 reference
and with torch (the Triton interpreter runs two of them in ``test_backend_triton``)."""
from __future__ import annotations

import pytest

from kdsl import ir, spec
from kdsl.agreement import check_agreement
from kdsl.backends import get
from kdsl.backends.lower.numerics import stable_exponentials
from kdsl.search.eval import correctness
from kdsl.search.jobs import EvalConfig

from fake_backend import SPECS

NAIVE = """
op naive_softmax
  dims M, N
  in  x: f32 [M, N] in -200 .. 200
  out y: like x [M, N]
  y[i, j] = exp(x[i, j]) / sum(j) exp(x[i, j])
  baseline torch.softmax(x, dim=1)
  tolerance f32(rtol=1e-5, atol=1e-6)
  test  M in 1..8, N in 1..200
  bench M=16, N=128

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

op naive_log_softmax
  dims M, N
  in  x: f32 [M, N] in -200 .. 200
  out y: like x [M, N]
  y[i, j] = log(exp(x[i, j]) / sum(k) exp(x[i, k]))
  baseline torch.log_softmax(x, dim=1)
  tolerance f32(rtol=1e-5, atol=1e-5)
  test  M in 1..8, N in 1..200
  bench M=16, N=128

op naive_lse
  dims M, N
  in  x: f32 [M, N] in -200 .. 200
  out y: f32 [M]
  y[i] = log(sum(j) exp(x[i, j]))
  baseline torch.logsumexp(x, dim=1)
  tolerance f32(rtol=1e-5, atol=1e-5)
  test  M in 1..8, N in 1..200
  bench M=16, N=128

op naive_softplus
  dims M, N
  in  x: f32 [M, N] in -200 .. 200
  out y: like x [M, N]
  y[i, j] = log(1 + exp(x[i, j]))
  baseline F.softplus(x)
  tolerance f32(rtol=1e-5, atol=1e-5)
  test  M in 1..8, N in 1..200
  bench M=16, N=128

op naive_xent
  dims M, N
  in  x: f32 [M, N] in -200 .. 200
  in  t: i64 [M] in 0 .. N
  out loss: f32 [M]
  loss[i] = -log(exp(x[i, t[i]]) / sum(j) exp(x[i, j]))
  baseline F.cross_entropy(x, t, reduction="none")
  tolerance f32(rtol=1e-5, atol=1e-5)
  test  M in 1..8, N in 1..200
  bench M=16, N=128
"""
OPS = {o.name: o for o in spec.parse_text(NAIVE, "naive.kspec").ops}


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_naive_exponentials_pass_where_exp_overflows(name, backend):
    op = OPS[name]
    assert check_agreement(op, per_dtype=2).ok  # torch's own forms are stable
    be = get(backend)
    built = be.build(op, be.render(op, be.space(op, "cpu").default(), "cpu"), "cpu")
    outcome = correctness.check(op, built.fn, EvalConfig(seeds=(1,), cases_per_dtype=3,
                                                         time=False))
    assert outcome.message is None, f"{backend}: {outcome.message}"


def _reads_max(op: ir.Op) -> bool:
    return any(isinstance(n, ir.Reduce) and n.op == "max"
               for st in op.statements for n in ir.walk(st.value))


def test_a_softmax_through_intermediates_is_shifted_and_they_are_dropped():
    op = stable_exponentials(OPS["naive_softmax_tmp"])
    assert [st.target for st in op.statements] == ["kd_max0_y", "y"]
    assert _reads_max(op) and {t.name for t in op.tensors} == {"x", "y", "kd_max0_y"}


def test_forms_already_shifted_by_their_maximum_are_left_as_written():
    for path in sorted(SPECS.glob("*.kspec")) + sorted((SPECS / "kernelbench" / "level1").glob("*.kspec")):
        for op in spec.load(path).ops:
            if op.name.endswith("softplus"):
                continue  # its log(1 + exp(x)) is rewritten (the where around it aside)
            assert stable_exponentials(op) is op, op.name


def test_a_sum_inside_another_reduction_is_left_as_written():
    text = NAIVE.split("op naive_xent")[1].replace("out loss: f32 [M]", "out loss: f32 []")
    text = text.replace("loss[i] = -log(", "loss[] = -sum(i) log(")
    text = text.replace('reduction="none"', 'reduction="sum"')
    op = spec.parse_text("op naive_xent" + text, "t.kspec").ops[0]
    assert stable_exponentials(op) is op
