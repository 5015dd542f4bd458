"""The torch backend: baseline and composed kernels match the reference on every spec.

Uses the numpy backend's harness (``assert_correct``: two poisons per run, the
float64 reference, the spec's tolerance). ``compile=True`` is exercised on one
small op only (torch.compile on CPU runs a C++ compiler: seconds per shape).
CUDA runs the same checks where a GPU is present.
"""
from __future__ import annotations

import pytest
import torch

from kdsl import cases
from kdsl.backends import Unsupported, get

from test_backend_numpy import EXTRA_SPECS, LIBRARY, assert_correct, genomes_for, load, small_cases

ALL = sorted(LIBRARY) + sorted(EXTRA_SPECS)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_baseline_mode_matches_reference(name):
    op = load(name)
    assert_correct("torch", op, [{"mode": "baseline", "compile": False}],
                   small_cases(op, per_dtype=2))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ALL)
def test_compose_mode_matches_reference(name, device):
    op = load(name)
    genomes = genomes_for("torch", op, fixed={"mode": "compose", "compile": False})
    assert_correct("torch", op, genomes, small_cases(op, per_dtype=3), device)


def test_every_library_spec_composes():
    for name in LIBRARY:
        assert get("torch").space(load(name), "cpu").gene("mode").values == ("baseline", "compose")


def test_space_and_devices():
    b = get("torch")
    op = load("embedding_bag_sum")
    space = b.space(op, "cuda")
    assert {"mode", "compile", "segment"} <= set(space.names)
    assert space.default()["mode"] == "baseline" and space.default()["compile"] is False
    assert b.supports(op, "tpu") is not None
    with pytest.raises(Unsupported):
        b.render(op, {}, "tpu")


def test_baseline_source_evaluates_the_spec_expression():
    op = load("layernorm")
    src = get("torch").render(op, {"mode": "baseline"}, "cpu")
    assert op.baseline.source in src and "def _baseline(x, w, b, M, N, **_)" in src


def test_compose_source_has_no_baseline_call():
    src = get("torch").render(load("topk_rows"), {"mode": "compose", "select": "sort"}, "cpu")
    assert "torch.topk" not in src and "rt.topk(" in src


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["compose", "baseline"])
def test_compiled_kernel_matches_reference(mode):
    op = load("swiglu")
    case = cases.draw(op, cases.Shape({"M": 3, "N": 17}, "f32", "edge", 0), 2)
    assert_correct("torch", op, [{"mode": mode, "compile": True}], [case])
