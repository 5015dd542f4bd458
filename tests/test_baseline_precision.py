"""The baseline held to the spec's tolerance (``search/eval/baseline_precision.py``).

CI has no GPU, so the TF32 a CUDA baseline would use is played by a baseline expression
that reads torch's own switch: wrong while ``torch.backends.cudnn.allow_tf32`` is on, right
once it is off, as cuDNN's f32 convolutions are against a 1e-3 tolerance. Only the check
that TF32 could apply (an f32 operand on CUDA) is patched; the timing, the oracle, the
tolerance check against the float64 oracle and torch's switches are the real ones.
"""
from __future__ import annotations

import torch

from kdsl.search.eval import baseline_precision as precision
from kdsl.search.eval import timing
from kdsl.search.jobs import EvalConfig
from kdsl.spec import parse_text

SPEC = """op scaled
  dims N
  in  x: f32 [N]
  out y: like x [N]
  y[i] = x[i] * 2
  baseline x * {factor}
  tolerance f32(rtol=1e-3, atol=1e-3)
  test  N in 1..64
  bench N=4096, dtype=f32
"""
# off by 1% in f32 with TF32 on (the switch's default), exact with it off; the oracle, the
# baseline on float64 copies, is exact either way (as cuDNN's f64 convolutions are)
SWITCHED = "(2.02 if torch.backends.cudnn.allow_tf32 and x.dtype == torch.float32 else 2.0)"
# wrong in f32 whatever the switch says
WRONG = "(3 if x.dtype == torch.float32 else 2)"


def time_of(factor: str, monkeypatch):
    return time_with(parse_text(SPEC.format(factor=factor), "<precision>").ops[0], monkeypatch,
                     {})


def time_with(op, monkeypatch, cache: dict):
    monkeypatch.setattr(precision, "applies", lambda *a: True)
    config = EvalConfig(device="cpu", warmup=1, reps=3, baseline="eager")
    point = timing.bench_point(op, "cpu")
    case = timing.bench_case(op, point, "f32")
    timing._ORACLES.clear()
    return timing.time_baseline(op, case, "cpu", "eager", config, timing.default_timer("cpu"),
                                cache)


def test_a_baseline_outside_the_tolerance_at_defaults_is_timed_with_tf32_off(monkeypatch):
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    base = time_of(SWITCHED, monkeypatch)
    assert base.precision.startswith("torch's default TF32 failed the spec's tolerance")
    assert "timed with TF32 off" in base.precision and base.default_ms is not None
    assert base.ms > 0
    # torch's switches are as they were
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == before


def test_a_baseline_within_the_tolerance_is_left_alone(monkeypatch):
    base = time_of("2", monkeypatch)
    assert base.precision == "" and base.default_ms is None


def test_a_baseline_wrong_either_way_keeps_the_defaults_and_says_so(monkeypatch):
    base = time_of(WRONG, monkeypatch)
    assert "with TF32 on" in base.precision and "and off" in base.precision
    assert base.default_ms is None


def test_a_check_out_of_device_memory_keeps_the_defaults_and_is_tried_again(monkeypatch):
    calls = []

    def no_room(*a, **k):
        calls.append(1)
        raise MemoryError("out of memory")
    monkeypatch.setattr(timing, "oracle", no_room)
    op = parse_text(SPEC.format(factor=SWITCHED), "<precision>").ops[0]
    cache: dict = {}
    for _ in range(2):
        base = time_with(op, monkeypatch, cache)
        assert "not checked" in base.precision and "out of device memory" in base.precision
        assert base.default_ms is None and base.ms > 0
    assert len(calls) == 2  # a shortage this once is not kept for the process's later jobs


def test_any_other_failure_of_the_check_keeps_the_baseline_time(monkeypatch):
    def broken(*a, **k):
        raise ValueError("no oracle today")
    monkeypatch.setattr(timing, "oracle", broken)
    base = time_of(SWITCHED, monkeypatch)
    assert "not checked" in base.precision and "ValueError: no oracle today" in base.precision
    assert base.ms > 0


BOOL_SPEC = """op thr
  dims N
  in  x: f32 [N]
  out y: bool [N]
  y[i] = x[i] > 0
  baseline (x + (0.02 if torch.backends.cudnn.allow_tf32 and x.dtype == torch.float32 else 0.0)) > 0
  tolerance f32(rtol=1e-3, atol=1e-3)
  test  N in 1..64
  bench N=4096, dtype=f32
"""


def test_a_baseline_with_only_a_bool_output_is_held_too(monkeypatch):
    op = parse_text(BOOL_SPEC, "<bool>").ops[0]
    base = time_with(op, monkeypatch, {})
    # x's values near 0 flip with the shift: wrong at torch's defaults, right with TF32 off
    assert "timed with TF32 off" in base.precision, base.precision
    assert "not a float" in base.precision


def test_the_largest_error_is_found_a_chunk_at_a_time(monkeypatch):
    monkeypatch.setitem(timing.COMPARE_CHUNK, "cpu", 7)
    got, ref = torch.zeros(50), torch.zeros(50, dtype=torch.float64)
    got[33] = 0.5
    assert precision._max_error(got, ref) == 0.5
    got[44] = float("nan")
    assert precision._max_error(got, ref) == float("inf")


def test_the_check_is_for_float_operands_on_cuda():
    op = parse_text(SPEC.format(factor="2"), "<precision>").ops[0]
    assert not precision.applies(op, "f32", "cpu")
    assert precision.applies(op, "f32", "cuda") == precision.tf32_enabled()
    ints = parse_text(SPEC.format(factor="2").replace("x: f32", "x: i32").replace(
        "out y: like x", "out y: i32").replace("f32(rtol=1e-3, atol=1e-3)", "exact").replace(
        "dtype=f32", "dtype=i32"), "<ints>").ops[0]
    assert not precision.applies(ints, "i32", "cuda")


def legacy():
    return torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32


def test_the_switches_are_restored():
    before, matmul = legacy(), torch.get_float32_matmul_precision()
    with precision.tf32_off():
        assert legacy() == (False, False)
    assert legacy() == before and torch.get_float32_matmul_precision() == matmul
    torch.set_float32_matmul_precision("medium")
    try:
        with precision.tf32_off():
            assert legacy() == (False, False)
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(matmul)
    assert legacy() == before


def test_switches_set_through_the_newer_api_are_restored_string_by_string():
    import subprocess
    import sys
    # in a process of its own: torch keeps no way back to its untouched defaults
    code = """
import torch
from kdsl.search.eval import baseline_precision as precision
torch.backends.cudnn.conv.fp32_precision = "ieee"  # a mix the legacy view refuses to read
strings = lambda: [o.fp32_precision for o in precision._precision_switches(torch)]
before = strings()
assert precision.tf32_enabled()  # unreadable: the check runs
with precision.tf32_off():
    assert torch.backends.cudnn.rnn.fp32_precision == "ieee"
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
assert strings() == before, (strings(), before)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_switches_are_restored_even_when_the_block_raises():
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        with precision.tf32_off():
            assert not torch.backends.cudnn.allow_tf32
            assert not torch.backends.cuda.matmul.allow_tf32
            raise RuntimeError("inside")
    except RuntimeError:
        pass
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == before


def test_what_the_check_cannot_judge_is_said_only_where_it_is_missing():
    assert precision.verdict((None, ""), None) == precision.Held()  # index outputs
    held = precision.verdict((None, "no float64 oracle"), None)
    assert "not checked" in held.note and "no float64 oracle" in held.note and not held.tf32_off
