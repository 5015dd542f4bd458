"""Integer outputs are judged exactly, except by one where they convert a float value to an
integer (``compare.int_slack``): the reference computes that float in float64, a kernel in
its own dtype, and a value within rounding of an integer boundary truncates to either side
(an outsider's ``i32(x * 3.0)`` failed on every backend, torch's own baseline included).
A float output of a rounding (``round(x / 0.05) * 0.05``) may likewise land a step either
side where its float is within rounding of a half, in the tests and at the bench point."""
from __future__ import annotations

import numpy as np
import torch

from kdsl import compare, spec
from kdsl.search.eval.timing import _close

OPS = """
op casts
  dims N
  in  x: f32 [N] in -50 .. 50
  in  k: i64 [N] in -50 .. 50
  out q: i32 [N]
  out s: i64 [N]
  out p: i64 [N]
  t[i] = x[i] * 3.0
  q[i] = i32(x[i] * 3.0)
  s[i] = i64(t[i]) + k[i]
  p[i] = k[i] * 3 + 1
  baseline ((x * 3.0).to(torch.int32), (x * 3.0).long() + k, k * 3 + 1)
  tolerance f32(rtol=1e-5, atol=1e-5)
  test  N in 1..100
  bench N=1000
"""


def test_a_cast_of_a_float_may_land_on_either_side_of_a_boundary():
    op = spec.parse_text(OPS, "t.kspec").ops[0]
    assert [compare.int_slack(op, n) for n in ("q", "s", "p")] == [1, 1, 0]
    r = {n: np.array([-99, 5, 7]) for n in ("q", "s", "p")}
    off = {n: np.array([-100, 5, 7]) for n in ("q", "s", "p")}
    far = {"q": np.array([-101, 5, 7]), "s": r["s"], "p": r["p"]}
    assert compare.compare(op, "f32", {**r, "p": off["p"]}, r, {}) is not None  # exact there
    assert compare.compare(op, "f32", {**off, "p": r["p"]}, r, {}) is None
    assert compare.compare(op, "f32", far, r, {}) is not None
    g, want = torch.tensor([-100, 5]), torch.tensor([-99, 5])
    assert _close(op, "f32", g, want, "q")[0] and not _close(op, "f32", g, want, "p")[0]


def test_the_slack_holds_only_where_rounding_could_carry_a_float_across_an_integer():
    """With the case's ``cast_bounds``, an element may be off by one only where its float
    lies within a few float32 rounding steps of an integer: a kernel off by one at every
    element (it passed under a slack for the whole output) fails."""
    from kdsl.reference import cast_bounds, reference
    op = spec.parse_text(OPS, "t.kspec").ops[0]
    x = np.array([np.float32(-100.0) / np.float32(3.0), 1.25, 7.4], dtype=np.float32)
    k = np.array([0, 1, 2])
    inputs = {"x": x, "k": k}
    sizes = {"N": 3}
    ref = reference(op, sizes, inputs)
    bounds = cast_bounds(op, sizes, inputs, "f32")
    assert set(bounds) == {"q", "s"}
    f32 = (x * np.float32(3.0)).astype(np.float32)  # what a float32 kernel computes
    got = {"q": np.trunc(f32).astype(np.int32), "s": np.trunc(f32).astype(np.int64) + k,
           "p": ref["p"]}
    assert got["q"][0] != ref["q"][0]  # -100 in float32, -99 in float64
    assert compare.compare(op, "f32", got, ref, inputs, bounds) is None
    off = {**got, "q": got["q"] + np.array([0, 1, 0], dtype=np.int32)}  # 3 -> 4: no rounding
    assert compare.compare(op, "f32", off, ref, inputs, bounds) is not None
    assert compare.compare(op, "f32", off, ref, inputs) is None  # (the whole-output slack)


def test_a_cast_of_a_sum_or_two_casts_keep_the_slack_at_every_element():
    """A float32 sum's error grows with its terms, not its result: a correct kernel summing
    in another order truncated 223.0015 to 222 where the nudged reference said 223; and two
    casts nudged together miss one rounding while the other does not. Those outputs get no
    bounds (the slack stands at every element); one elementwise cast does."""
    from kdsl.reference import cast_bounds
    op = spec.parse_text("""
op sumcast
  dims M, K
  in  x: f32 [M, K] in -50 .. 50
  out q: i32 [M]
  out d: i32 [M]
  out e: i32 [M]
  q[i] = i32(sum(k) x[i, k])
  d[i] = i32(x[i, 0] * 3.0) - i32(x[i, 1] * 3.0)
  e[i] = i32(x[i, 0] * 3.0) + 1
  baseline (x.sum(-1).to(torch.int32), (x[:, 0] * 3.0).to(torch.int32) - (x[:, 1] * 3.0).to(torch.int32), (x[:, 0] * 3.0).to(torch.int32) + 1)
  tolerance f32(rtol=1e-5, atol=1e-5)
  test  M in 1..20, K in 2..40
  bench M=8, K=8
""", "t.kspec").ops[0]
    x = np.random.default_rng(0).uniform(-50, 50, (4, 8)).astype(np.float32)
    bounds = cast_bounds(op, {"M": 4, "K": 8}, {"x": x}, "f32")
    assert set(bounds) == {"e"}
    ref = {"q": np.array([223, 5, 7, 9]), "d": np.array([1, 2, 3, 4]), "e": np.array([1, 2, 3, 4])}
    got = {**ref, "q": np.array([222, 5, 7, 9], dtype=np.int32)}  # the other side of 223
    assert compare.compare(op, "f32", got, ref, {"x": x}, bounds) is None


FAKE_QUANT = """
op fake_quant
  dims M, N
  in  x: f32 [M, N]
  out y: like x [M, N]
  y[i, j] = (min(max(round(x[i, j] / 0.05) + 128, 0), 255) - 128) * 0.05
  baseline torch.fake_quantize_per_tensor_affine(x, 0.05, 128, 0, 255)
  tolerance f32(rtol=1e-6, atol=1e-6)
  test  M in 1..30, N in 1..200
  bench M=512, N=2048
"""


def _quantized_in_f32(x):
    q = np.clip(np.round(x / np.float32(0.05)) + np.float32(128), 0, 255) - np.float32(128)
    return (q * np.float32(0.05)).astype(np.float32)


def _halves(n: int):
    """float32 values nearest the halves of 0.05's steps: ``x / 0.05`` rounds to one
    integer in float32 and often to the next in float64 (-5.975: -120 and -119)."""
    return ((np.arange(n) - n // 2 + 0.5) * 0.05).astype(np.float32)


def test_a_float_output_of_a_rounding_may_land_a_step_either_side_where_its_float_is_a_half():
    """``round(x / 0.05)`` in float32 and in float64 differ where ``x / 0.05`` is within
    rounding of a half: a whole step (0.05) of the output, far outside any tolerance. With
    the case's ``cast_bounds`` such elements pass; a step off anywhere else still fails."""
    from kdsl.reference import cast_bounds, reference
    op = spec.parse_text(FAKE_QUANT, "t.kspec").ops[0]
    x = np.random.default_rng(0).standard_normal((64, 240)).astype(np.float32)
    x[0] = _halves(240)
    sizes, inputs = {"M": 64, "N": 240}, {"x": x}
    ref = reference(op, sizes, inputs)
    got = {"y": _quantized_in_f32(x)}
    assert compare.compare(op, "f32", got, ref, inputs) is not None
    bounds = cast_bounds(op, sizes, inputs, "f32")
    lo, hi = bounds["y"]
    # either way at the halves, and at the few random draws within 2**-19 of one
    assert (lo[0] != hi[0]).all() and (lo[1:] != hi[1:]).mean() < 1e-3
    assert compare.compare(op, "f32", got, ref, inputs, bounds) is None
    off = got["y"].copy()
    at = tuple(np.argwhere(lo == hi)[0])
    off[at] += np.float32(0.05)
    assert "1 of" in str(compare.compare(op, "f32", {"y": off}, ref, inputs, bounds))


def test_the_bench_check_judges_a_rounding_by_the_references_envelope():
    """At the bench point the oracle is the baseline in float64, which has no envelope: an
    element a step off there is judged again against the spec's own math rounded either
    way, from the inputs the kernel read."""
    from kdsl.reference import reference
    from kdsl.search.eval import timing
    op = spec.parse_text(FAKE_QUANT, "t.kspec").ops[0]
    case = timing.bench_case(op, timing.bench_point(op, "cpu"), "f32")
    x = np.asarray(case.inputs["x"], dtype=np.float32).copy()
    x[0, :240] = _halves(240)
    ins, pristine = {"x": torch.from_numpy(x.copy())}, {"x": torch.from_numpy(x.copy())}
    ref = {k: torch.from_numpy(v) for k, v in reference(op, case.sizes, {"x": x}).items()}
    got = _quantized_in_f32(x)
    assert (got[0, :240] != ref["y"][0, :240].numpy()).any()
    message, _ = timing.bench_judge(op, case, ins, {"y": torch.from_numpy(got)}, ref, 0,
                                    "cpu", pristine)
    assert message is None
    got[1, 1] = ref["y"][1, 1].item() + 0.05  # a step off where no rounding is near
    message, _ = timing.bench_judge(op, case, ins, {"y": torch.from_numpy(got)}, ref, 0,
                                    "cpu", pristine)
    assert message is not None and "[1, 1]" in message


ROUNDED = """
op rounded
  dims N
  in  x: f32 [N] in -50 .. 50
  in  k: i32 [N] in -50 .. 50
  out q: i32 [N]
  out r: f32 [N]
  out e: f32 [N]
  q[i] = i32(floor(x[i] * 3.0))
  r[i] = round(x[i]) + floor(k[i])
  e[i] = round(x[i] / 0.05) * 0.05 + floor(k[i])
  baseline (torch.floor(x * 3.0).to(torch.int32), torch.round(x) + k, torch.round(x / 0.05) * 0.05 + k)
  tolerance f32(rtol=1e-6, atol=1e-6)
  test  N in 1..100
  bench N=1000
"""


def test_a_rounding_is_nudged_only_where_a_kernel_computes_its_float():
    """Where the rounding's float is computed (``x * 3.0``, ``x / 0.05``) it moves; a cast of
    the rounding's whole number does not move again, a read (``round(x)`` of a stored 2.5,
    which is 2 in every dtype) or an integer (``floor(k)``) not at all: a kernel rounding
    halves away from zero, or off by one everywhere, still fails."""
    from kdsl.reference import cast_bounds, reference
    op = spec.parse_text(ROUNDED, "t.kspec").ops[0]
    x = np.array([2.5, 1.0, -1.5, 0.7, np.float32(100.0) / np.float32(3.0), 0.125],
                 dtype=np.float32)
    k = np.array([3, -2, 5, 0, 1, 7], dtype=np.int32)
    sizes, inputs = {"N": 6}, {"x": x, "k": k}
    ref = reference(op, sizes, inputs)
    bounds = cast_bounds(op, sizes, inputs, "f32")
    assert set(bounds) == {"q", "r", "e"}
    f32 = {"q": np.floor(x * np.float32(3.0)).astype(np.int32),
           "r": (np.round(x) + k).astype(np.float32),
           "e": (np.round(x / np.float32(0.05)) * np.float32(0.05) + k).astype(np.float32)}
    assert f32["q"][4] != ref["q"][4]  # 100 in float32, 99 in float64
    assert compare.compare(op, "f32", f32, ref, inputs, bounds) is None
    wrong = [{**f32, "q": np.ceil(x * np.float32(3.0)).astype(np.int32)},
             {**f32, "q": f32["q"] + 1},
             {**f32, "r": (np.sign(x) * np.floor(np.abs(x) + 0.5) + k).astype(np.float32)},
             {**f32, "r": f32["r"] - 1},
             {**f32, "e": f32["e"] - 1}]
    for got in wrong:
        assert compare.compare(op, "f32", got, ref, inputs, bounds) is not None


def test_a_value_between_the_two_roundings_is_neither():
    """The envelope of a float output is its two other values, not the interval between
    them: ``exp(3 * round(x / 0.05))`` at a half passes at either, not half way."""
    from kdsl.reference import cast_bounds, reference
    op = spec.parse_text(FAKE_QUANT.replace(
        "(min(max(round(x[i, j] / 0.05) + 128, 0), 255) - 128) * 0.05",
        "exp(0.5 * round(x[i, j] / 0.05))").replace(
        "torch.fake_quantize_per_tensor_affine(x, 0.05, 128, 0, 255)",
        "torch.exp(0.5 * torch.round(x / 0.05))"), "t.kspec").ops[0]
    x = _halves(40).reshape(1, 40)
    sizes, inputs = {"M": 1, "N": 40}, {"x": x}
    ref = reference(op, sizes, inputs)
    lo, hi = cast_bounds(op, sizes, inputs, "f32")["y"]
    at = int(np.argmax(lo != hi))
    for v, ok in ((lo[0, at], True), (hi[0, at], True), ((lo[0, at] + hi[0, at]) / 2, False)):
        got = ref["y"].copy()
        got[0, at] = v
        assert (compare.compare(op, "f32", {"y": got}, ref, inputs,
                                {"y": (lo, hi)}) is None) == ok
