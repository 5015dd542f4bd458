"""The float64 oracle a slice of a batch axis at a time (``search/eval/oracle_chunks.py``):
which specs have such an axis, and that the slices' oracle is the whole one's."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kdsl import cases, spec
from kdsl.search.eval import correctness as corr
from kdsl.search.eval import oracle_chunks, timing

ROOT = Path(__file__).resolve().parent.parent
L1 = ROOT / "specs" / "kernelbench" / "level1"


def load(path: Path):
    return spec.load(str(path)).ops[0]


def level1(prefix: str):
    return load(next(L1.glob(f"{prefix}_*.kspec")))


@pytest.mark.parametrize("prefix", ["35", "36", "40", "23", "48", "02", "89", "41"])
def test_ops_whose_outputs_split_along_a_batch_axis_have_one(prefix):
    """Group, RMS and layer norm, softmax, a mean over the middle axis, a GEMM's rows, a
    scan's rows, a pool's batch."""
    assert oracle_chunks.batch_dim(level1(prefix)) is not None


@pytest.mark.parametrize("prefix", ["01", "94", "95", "100"])
def test_ops_without_an_axis_whose_slices_do_not_meet_have_none(prefix):
    """Losses reduced to a scalar (MSE, cross-entropy, hinge); a square GEMM, whose one dim
    sizes every axis (a slice of it would cut the reduced axis too)."""
    assert oracle_chunks.batch_dim(level1(prefix)) is None


def test_offsets_and_a_dim_used_as_a_value_give_no_axis():
    assert oracle_chunks.batch_dim(load(ROOT / "specs" / "jagged_softmax.kspec")) is None
    op = spec.parse_text("""\
op scaled
  dims M, N
  in  x: f32 [M, N]
  out y: like x [M, N]
  y[i, j] = x[i, j] / M
  baseline x / M
  tolerance f32(rtol=1e-5, atol=1e-5)
  test  M in 1..4, N in 1..4
  bench M=8, N=8
""", "t.kspec").ops[0]
    found = oracle_chunks.batch_dim(op)
    assert found is None or found[0] == "N"  # (M is a value; N's columns do not meet)


def test_a_shifted_or_reduced_read_of_the_axis_gives_no_axis():
    shifted = spec.parse_text("""\
op diff
  dims M, N
  in  x: f32 [M, N]
  out y: like x [M, N]
  y[i, j] = x[i, j] - x[(i + 1) % M, j]
  baseline x - torch.roll(x, -1, 0)
  tolerance f32(rtol=1e-5, atol=1e-5)
  test  M in 1..4, N in 1..4
  bench M=8, N=8
""", "t.kspec").ops[0]
    assert oracle_chunks.batch_dim(shifted) in (None,) or \
        oracle_chunks.batch_dim(shifted)[0] == "N"
    total = spec.parse_text("""\
op colsum
  dims M, N
  in  x: f32 [M, N]
  out y: like x [N]
  y[j] = sum(i) x[i, j]
  baseline x.sum(0)
  tolerance f32(rtol=1e-5, atol=1e-5)
  test  M in 1..4, N in 1..4
  bench M=8, N=8
""", "t.kspec").ops[0]
    assert oracle_chunks.batch_dim(total) == ("N", {"x": 1, "y": 0})


def widest(op, dim: str):
    """The test case of ``op`` (f32) with the most slices along ``dim``."""
    case = max(cases.generate(op, 5, per_dtype=8, dtype_list=["f32"]), key=lambda c: c.sizes[dim])
    assert case.sizes[dim] >= 2, case.sizes
    return case


@pytest.mark.parametrize("prefix", ["35", "40", "23", "48", "02", "89", "41", "97"])
def test_the_slices_oracle_is_the_whole_ones(prefix):
    op = level1(prefix)
    found = oracle_chunks.batch_dim(op)
    assert found is not None
    dim, where = found
    case = widest(op, dim)
    ins = corr.fresh_inputs(op, "f32", case.inputs, "cpu")
    whole = timing._oracle_at(op, case.sizes, "f32", ins, "cpu")  # noqa: SLF001
    for pieces in (2, 3, case.sizes[dim] + 1):
        sliced = oracle_chunks.sliced_oracle(
            op, case.sizes, ins, dim, where, pieces,
            lambda at, part: timing._oracle_at(op, at, "f32", part, "cpu"))  # noqa: SLF001
        for name, v in whole.items():
            assert sliced[name].shape == v.shape
            torch.testing.assert_close(sliced[name], v, rtol=1e-12, atol=1e-12)


def test_the_device_slices_more_finely_until_a_slice_fits(monkeypatch):
    """Where a slice runs out of memory the next finer split is tried; where none fits the
    caller falls back to the host (None)."""
    op = level1("23")
    dim = oracle_chunks.batch_dim(op)[0]
    case = widest(op, dim)
    ins = corr.fresh_inputs(op, "f32", case.inputs, "cpu")
    real = timing._oracle_at  # noqa: SLF001
    seen = []

    class OutOfMemoryError(RuntimeError):
        pass

    def tight(op_, at, dtype, part, device, hold=None):
        seen.append(at[dim])
        if at[dim] > limit[0]:
            raise OutOfMemoryError("CUDA out of memory")
        return real(op_, at, dtype, part, "cpu")

    monkeypatch.setattr(timing, "_oracle_at", tight)
    monkeypatch.setattr(timing, "ORACLE_SLICES", (2, 4, 64))
    limit = [-(-case.sizes[dim] // 4)]
    got = timing._sliced_on_device(op, case.sizes, "f32", ins, "cpu", None)  # noqa: SLF001
    assert got is not None and max(seen) > limit[0]  # the halves failed, the quarters did
    torch.testing.assert_close(got["y"], real(op, case.sizes, "f32", ins, "cpu")["y"],
                               rtol=1e-12, atol=1e-12)
    limit[0] = 0
    assert timing._sliced_on_device(op, case.sizes, "f32", ins, "cpu", None) is None  # noqa: SLF001
