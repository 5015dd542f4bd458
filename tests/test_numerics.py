"""Exponentials written as the math reads (``lower.numerics``): on inputs of magnitude 200,
where ``exp`` overflows float32, the c and numpy kernels of a softmax, log-softmax,
log-sum-exp, softplus, cross-entropy (per row and as a mean), masked softmax, causal
attention, entropy, logaddexp, tanh and sigmoid written through ``exp`` agree with the
float64 reference and with torch (the Triton interpreter runs two of them in
``test_backend_triton``)."""
from __future__ import annotations

import pytest

from default_kernels import assert_default_kernel_correct
from kdsl import ir, spec
from kdsl.agreement import check_agreement
from kdsl.backends.lower.numerics import stable_exponentials

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

op mean_xent
  dims M, C
  in  logits: f32 [M, C] in -200 .. 200
  in  target: i64 [M] in 0..C
  out loss: f32 []
  loss[] = -mean(i) log(exp(logits[i, target[i]]) / sum(j) exp(logits[i, j]))
  baseline F.cross_entropy(logits, target)
  tolerance f32(rtol=1e-5, atol=1e-4)
  test  M in 1..8, C in 1..200
  bench M=16, C=128

op masked_softmax
  dims M, N
  in  x: f32 [M, N] in -200 .. 200
  in  mask: i64 [M, N] in 0..2
  out y: like x [M, N]
  e[i, j] = exp(x[i, j]) * f32(mask[i, j])
  y[i, j] = e[i, j] / sum(k) e[i, k]
  baseline torch.softmax(x.masked_fill(mask == 0, float("-inf")), -1)
  tolerance f32(rtol=1e-5, atol=1e-6)
  test  M in 1..8, N in 1..200
  bench M=16, N=128

op causal_attention
  dims H, S, D
  in  q: f32 [H, S, D] in -10 .. 10
  in  k: like q [H, S, D] in -10 .. 10
  in  v: like q [H, S, D]
  out y: like q [H, S, D]
  s[h, i, j] = sum(d) q[h, i, d] * k[h, j, d] * rsqrt(f32(D))
  e[h, i, j] = where(j <= i, exp(s[h, i, j]), 0.0)
  y[h, i, d] = sum(j) e[h, i, j] * v[h, j, d] / sum(j) e[h, i, j]
  baseline F.scaled_dot_product_attention(q, k, v, is_causal=True)
  tolerance f32(rtol=2e-3, atol=2e-3)
  test  H in 1..2, S in 1..24, D in 1..16
  bench H=2, S=32, D=16

op entropy_recip
  dims M, N
  in  x: f32 [M, N] in -200 .. 200
  out h: f32 [M]
  out p: f32 [M, N]
  e[i, j] = exp(x[i, j])
  r[i] = 1.0 / sum(j) e[i, j]
  p[i, j] = e[i, j] * r[i]
  h[i] = -(sum(j) p[i, j] * log(p[i, j]))
  baseline (torch.distributions.Categorical(logits=x).entropy(), torch.softmax(x, -1))
  tolerance f32(rtol=1e-4, atol=1e-4)
  test  M in 1..8, N in 1..200
  bench M=16, N=128

op exp_chains
  dims M, N
  in  a: f32 [M, N] in -100 .. 100
  in  b: like a [M, N] in -100 .. 100
  in  w: f32 [N] positive
  out lae: like a [M, N]
  out th: like a [M, N]
  out sg: like a [M, N]
  out wl: f32 [M]
  lae[i, j] = log(exp(a[i, j]) + exp(b[i, j]))
  th[i, j] = (exp(a[i, j]) - exp(-a[i, j])) / (exp(a[i, j]) + exp(-a[i, j]))
  sg[i, j] = exp(a[i, j]) / (1.0 + exp(a[i, j]))
  wl[i] = log(mean(j) w[j] * exp(a[i, j]))
  baseline (torch.logaddexp(a, b), torch.tanh(a), torch.sigmoid(a), torch.logsumexp(a + torch.log(w), dim=-1) - math.log(a.shape[1]))
  tolerance f32(rtol=1e-5, atol=1e-4)
  test  M in 1..8, N in 1..200
  bench M=16, N=128

op naive_logcumsumexp
  dims M, N
  in  x: f32 [M, N] in -200 .. 200
  out y: like x [M, N]
  y[i, j] = log(cumsum(j) exp(x[i, j]))
  baseline torch.logcumsumexp(x, dim=1)
  tolerance f32(rtol=1e-5, atol=1e-4)
  test  M in 1..8, N in 1..200
  bench M=16, N=128

op naive_logcumsumexp_masked
  dims M, N
  in  x: f32 [M, N] in -200 .. 200
  in  w: f32 [N] in 0.5 .. 2
  out y: f32 [M, N]
  e[i, j] = where(j % 3 != 1, exp(x[i, j]) * w[j], 0.0)
  s[i, j] = cumsum(j) e[i, j]
  y[i, j] = log(s[i, j])
  baseline torch.logcumsumexp(torch.where(torch.arange(x.shape[1], device=x.device) % 3 != 1, x + torch.log(w), float("-inf")), dim=1)
  tolerance f32(rtol=1e-5, atol=1e-4)
  test  M in 1..8, N in 1..200
  bench M=16, N=128

"""
OPS = {o.name: o for o in spec.parse_text(NAIVE, "naive.kspec").ops}


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_naive_exponentials_pass_where_exp_overflows(name, backend):
    op = OPS[name]
    assert check_agreement(op, per_dtype=2).ok  # torch's own forms are stable
    assert_default_kernel_correct(op, backend)


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


def test_the_log_of_a_running_sum_of_exponentials_is_a_running_log_sum_exp():
    # no single shift serves a prefix: each partial sum keeps its own maximum
    for name in ("naive_logcumsumexp", "naive_logcumsumexp_masked"):
        op = stable_exponentials(OPS[name])
        scans = [n for st in op.statements for n in ir.walk(st.value) if isinstance(n, ir.Scan)]
        assert [s.op for s in scans] == ["logcumsumexp"], name
        assert not any(isinstance(n, ir.Call) and n.fn == "exp"
                       for st in op.statements for n in ir.walk(st.value)), name
        assert [st.target for st in op.statements] == ["y"], name  # e and s dropped


SPECIAL_ROWS = "[[1.0, nan, 2.0, 3.0, 0.0, 1.0], [inf, inf, 1.0, -inf, 2.0, 0.0], " \
               "[-inf] * 6, [-inf, 3.0, -inf, inf, 1.0, nan]]"
RUN_SPECIAL_ROWS = f"""
import sys, numpy as np, torch
from kdsl import spec, backends
from test_numerics import OPS
op = OPS["naive_logcumsumexp"]
nan, inf = float("nan"), float("inf")
rows = np.array({SPECIAL_ROWS}, dtype=np.float32)
be = backends.get(sys.argv[1])
genome = {{**be.space(op, "cpu").default(), **eval(sys.argv[2])}}
built = be.build(op, be.render(op, genome, "cpu"), "cpu")
x = torch.tensor(rows)
y = torch.empty_like(x)
built.fn({{"x": x}}, {{"y": y}}, {{"M": 4, "N": 6}})
want = np.logaddexp.accumulate(rows.astype(np.float64), axis=1)
assert np.allclose(y.numpy(), want, equal_nan=True, atol=1e-5), (y, want)
"""


@pytest.mark.parametrize("backend, genome", [
    ("c", "{}"), ("numpy", "{}"), ("torch", "{'mode': 'compose'}"),
    # the Triton interpreter: one tile, and chunks of 4 whose carry crosses a NaN and inf
    ("triton", "{}"),
    ("triton", "{'reduce': 'looped', 'BLOCK_R': 2, 'BLOCK_C': 4, 'num_warps': 1}")])
def test_a_running_log_sum_exp_carries_nan_and_infinities(backend, genome):
    """As numpy's logaddexp.accumulate: a NaN stays, two infinities are one (not inf - inf),
    an empty or -inf prefix is -inf. (A review found the first Triton combine turning a
    NaN into -inf and restarting the next chunk, and inf, inf giving NaN in C.)"""
    import os
    import subprocess
    import sys
    from pathlib import Path
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": f"{here.parent}{os.pathsep}{here}"}
    env.pop("TRITON_INTERPRET", None)
    if backend == "triton":
        env["TRITON_INTERPRET"] = "1"  # (read when triton is imported: a process of its own)
    done = subprocess.run([sys.executable, "-c", RUN_SPECIAL_ROWS, backend, genome], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


INTEGER_SCANS = """
op int_decay
  dims M, N
  in  x: i32 [M, N] in -50 .. 50
  out y: f32 [M, N]
  out z: f32 [M, N]
  y[i, j] = sum(k in j .. N) pow(0.9, k - j) * x[i, k]
  z[i, j] = log(cumsum(j) exp(f32(x[i, j]) * 4.0))
  baseline (x.double() @ torch.where(torch.arange(x.shape[1], device=x.device)[:, None] >= torch.arange(x.shape[1], device=x.device)[None, :], 0.9 ** (torch.arange(x.shape[1], device=x.device)[:, None] - torch.arange(x.shape[1], device=x.device)[None, :]).clamp(min=0).double(), 0.0), torch.logcumsumexp(x.double() * 4.0, dim=1))
  tolerance f32(rtol=1e-4, atol=1e-3)
  test  M in 1..8, N in 1..100
  bench M=16, N=128
"""


@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_scans_of_integers_that_the_lowering_writes_are_computed_in_floats(backend):
    # numpy's decay was cast to the input's integer type (0.9 -> 0): the scan gave x back
    op = spec.parse_text(INTEGER_SCANS, "t.kspec").ops[0]
    assert_default_kernel_correct(op, backend)


def test_a_running_sum_of_terms_that_may_be_negative_is_left_as_written():
    # log(cumsum(j) w * exp(x)) with w < 0 somewhere is no log-sum-exp (its log may be NaN)
    text = NAIVE.split("op naive_logcumsumexp_masked")[1].split("\n\n")[0]
    text = text.replace("in 0.5 .. 2", "in -1 .. 1")
    op = spec.parse_text("op signed" + text, "t.kspec").ops[0]
    assert stable_exponentials(op) is op


def test_a_sum_inside_another_reduction_gets_a_maximum_over_both_indices():
    op = stable_exponentials(OPS["mean_xent"])
    first = op.statements[0]
    assert first.target.startswith("kd_max") and first.indices == ("i",)
    assert op.tensor(first.target).shape == (ir.Name("M"),)


def test_a_ratio_without_exponentials_above_is_left_as_written():
    # 1 / (1 + exp(-x)) overflows to 1 / inf = 0, the right limit: no shift, no cost
    text = NAIVE.split("op naive_softplus")[1].split("\n\n")[0]
    text = text.replace("log(1 + exp(x[i, j]))", "1.0 / (1.0 + exp(-x[i, j]))")
    text = text.replace("F.softplus(x)", "torch.sigmoid(x)")
    op = spec.parse_text("op sigmoid" + text, "t.kspec").ops[0]
    assert stable_exponentials(op) is op


# forms an adversarial pass found the rewrite getting wrong (each fixed): signs that make a
# log of a ratio not the difference of logs, a shift captured by a reduction binding the
# same index, a scan read at another index, an empty range, an enclosing reduction that
# shadows an output index, a mask multiplied in past the float range
TRICKY = """
op signed_log_ratio
  dims M
  in  x: f32 [M]
  in  z: f32 [M]
  out y: like x [M]
  y[i] = log((exp(x[i]) - 1) / (exp(z[i]) - 1))
  baseline torch.log(torch.expm1(x) / torch.expm1(z))
  tolerance f32(rtol=1e-4, atol=1e-5)
  test  M in 1..64
  bench M=8

op captured_shift
  dims M, N
  in  x: f32 [M, N]
  out y: like x [M, N]
  y[i, j] = (sum(j) exp(x[i, j])) / (exp(x[i, j]) + 1)
  baseline torch.exp(x).sum(-1, keepdim=True) / (torch.exp(x) + 1)
  tolerance f32(rtol=1e-4, atol=1e-5)
  test  M in 1..8, N in 1..50
  bench M=8, N=8

op scan_read_elsewhere
  dims M, N
  in  x: f32 [M, N] positive
  out y: f32 [M]
  r[i, j] = 1 / cumsum(j) x[i, j]
  y[i] = 2 * r[i, N - 1]
  baseline 2 / x.sum(-1)
  tolerance f32(rtol=1e-4, atol=1e-5)
  test  M in 1..8, N in 1..50
  bench M=8, N=8

op empty_range
  dims M, N
  in  x: f32 [M, N]
  in  z: f32 [M]
  out y: f32 [M]
  y[i] = (exp(z[i]) - 1) / sum(j in 1 .. N) exp(x[i, j])
  baseline torch.expm1(z) / torch.exp(x[:, 1:]).sum(-1)
  tolerance f32(rtol=1e-4, atol=1e-5)
  test  M in 1..8, N in 1..5
  bench M=8, N=8

op shadowed_index
  dims M, N, K
  in  x: f32 [M, N]
  in  z: f32 [M, N]
  in  w: f32 [M, K]
  out y: f32 [M, K]
  y[i, j] = w[i, j] + sum(j) exp(x[i, j]) / sum(k) exp(x[i, k] + z[i, j])
  baseline w + (torch.softmax(x, -1) * torch.exp(-z)).sum(-1, keepdim=True)
  tolerance f32(rtol=1e-4, atol=1e-5)
  test  M in 1..4, N in 1..30, K in 1..30
  bench M=8, N=8, K=8

op multiplied_mask
  dims M, N
  in  x: f32 [M, N] in -200 .. 200
  in  mk: i32 [M, N] in 0 .. 2
  out y: like x [M, N]
  y[i, j] = exp(x[i, j]) * f32(mk[i, j]) / sum(k) exp(x[i, k]) * f32(mk[i, k])
  baseline torch.softmax(x.masked_fill(mk == 0, -float('inf')), dim=-1).nan_to_num(nan=0.0) * (mk != 0).any(-1, keepdim=True).float() + torch.where((mk != 0).any(-1, keepdim=True), 0.0, float('nan'))
  tolerance f32(rtol=1e-4, atol=1e-5)
  test  M in 1..8, N in 1..50
  bench M=8, N=8
"""
TRICKY_OPS = {o.name: o for o in spec.parse_text(TRICKY, "tricky.kspec").ops}


@pytest.mark.parametrize("name", sorted(TRICKY_OPS))
@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_forms_the_rewrite_once_got_wrong(name, backend):
    op = TRICKY_OPS[name]
    assert_default_kernel_correct(op, backend)


@pytest.mark.parametrize("name", sorted(OPS) + sorted(TRICKY_OPS))
def test_the_rewrite_is_the_same_math_where_nothing_overflows(name):
    """The oracle evaluates the rewritten forms (``kdsl.reference``), so the rewrite is held
    here to the op as written, on inputs a tenth of the domain's size (|x| <= 20), where
    float64's exp does not overflow: the two references agree to rounding."""
    import numpy as np

    from kdsl import cases
    from kdsl.reference import Reference
    op = {**OPS, **TRICKY_OPS}[name]
    for seed in (1, 2):
        for shape in cases.shapes(op, seed, 2, op.dtype_choices):
            case = cases.draw(op, shape, seed)
            ins = {k: np.asarray(v, dtype=np.float64) / 10 if np.asarray(v).dtype.kind == "f"
                   else np.asarray(v) for k, v in case.inputs.items()}
            sizes = dict(case.sizes)
            plain = Reference(op, sizes).run(ins)
            stable = Reference(stable_exponentials(op), sizes).run(ins)
            for out, want in plain.items():
                np.testing.assert_allclose(stable[out], want, rtol=1e-9, atol=1e-12,
                                           equal_nan=True, err_msg=f"{name}.{out}")


def test_the_oracle_of_a_naive_log_sum_exp_past_float64s_exp_is_finite():
    """log(sum(j) exp(x)) over inputs to 800: float64's exp overflows past 709, and the oracle
    said inf where the math (and torch's logsumexp) is 800 and more."""
    import numpy as np

    from kdsl.reference import reference
    op = OPS["naive_lse"]
    x = np.array([[800.0, 799.0, -800.0], [-800.0, -801.0, 0.0]])
    got = reference(op, {"M": 2, "N": 3}, {"x": x})["y"]
    want = np.array([800 + np.log1p(np.exp(-1.0)), np.log(np.exp(-800.0) + np.exp(-801.0) + 1)])
    np.testing.assert_allclose(got, want, rtol=1e-12)
