"""Exported kernels as torch ops: eager and torch.compile (no graph break), input checks,
autograd, KernelBench's ModelNew at sizes other than the bench point.

Kernels here are the c backend's default genome of each op (no search), rendered and
exported the way ``kdsl export`` writes a run's best; tests/test_search_real.py exports
a searched one through the CLI.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from kdsl import backends, baseline, cases
from kdsl import spec as spec_mod
from kdsl.search.export import Kernel, write
from small_specs import rmsnorm

SMALL = rmsnorm()


def default_kernel(op) -> Kernel:
    c = backends.get("c")
    source = c.render(op, c.space(op, "cpu").default(), "cpu")
    bench = next((p for p in op.bench if p.device == "cpu"), op.bench[0] if op.bench else None)
    return Kernel(op, source, "c", "c", "cpu", "test: default genome",
                  bench.size_dict() if bench else None)


def load_module(path, name: str):
    """Import an exported file as a real module (torch.compile looks modules up by name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def exported(op, tmp_path, fmt: str = "kernelbench"):
    out = write(default_kernel(op), tmp_path / f"exp_{op.name}.py", fmt)
    return load_module(out, f"kdsl_test_export_{op.name}_{fmt}")


def library_op(name: str):
    return spec_mod.library_ops([name])[0][1]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    op = spec_mod.parse_text(SMALL).ops[0]
    return exported(op, tmp_path_factory.mktemp("small"))


def rms(x, w):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps=1e-6)


# ---- every library op: eager and compiled, against its baseline ----

def _case(op):
    """The largest of a few generated cases (f32 where the op takes it), kept small."""
    dts = ["f32"] if "f32" in op.dtype_choices else None
    cs = cases.generate(op, seed=3, per_dtype=6, dtype_list=dts)
    small_ones = [c for c in cs if sum(a.size for a in c.inputs.values()) < 200_000] or cs
    return max(small_ones, key=lambda c: sum(a.size for a in c.inputs.values()))


@pytest.mark.parametrize("name", [op.name for _, op in spec_mod.library_ops()])
def test_every_library_op_exports_as_a_compilable_torch_op(name, tmp_path):
    op = library_op(name)
    mod = exported(op, tmp_path)
    case = _case(op)
    ins = baseline.to_torch(op, case.dtype, case.inputs)
    given = {d: case.sizes[d] for d in mod.PASSED}
    want = list(baseline.outputs_of(op, baseline.baseline_callable(op, case.sizes, ins)())
                .values())

    def call(*args):
        return mod.run(*args, **given)

    def same(got):
        got = got if isinstance(got, tuple) else (got,)
        rtol, atol = op.tolerance.for_dtype(case.dtype) if op.tolerance else (1e-4, 1e-4)
        return len(got) == len(want) and all(
            g.shape == w.shape and torch.allclose(g.double(), w.double(), rtol=rtol * 10,
                                                  atol=atol * 10)
            for g, w in zip(got, want))

    assert same(call(*ins.values())), case.sizes
    torch._dynamo.reset()
    assert same(torch.compile(call, fullgraph=True, backend="eager")(*ins.values()))
    explained = torch._dynamo.explain(call)(*ins.values())
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    assert f"kdsl.{mod.NAME}" in str(explained.graphs[0].graph)


# ---- compile, dynamic shapes, autograd ----

def test_compiled_with_dynamic_shapes_and_aot_autograd(small):
    torch._dynamo.reset()
    f = torch.compile(small.run, fullgraph=True, dynamic=True, backend="aot_eager")
    for m, n in ((5, 7), (19, 33)):
        x, w = torch.randn(m, n), torch.randn(n)
        assert torch.allclose(f(x, w), rms(x, w), rtol=1e-4, atol=1e-4)


def test_gradients_flow_through_the_baseline_in_eager_and_compiled(small):
    x, w = torch.randn(6, 40), torch.randn(40)
    want = [t.clone().requires_grad_() for t in (x, w)]
    (rms(*want) * torch.arange(40.0)).sum().backward()
    for run in (small.run, torch.compile(small.run, fullgraph=True, backend="aot_eager")):
        torch._dynamo.reset()
        got = [t.clone().requires_grad_() for t in (x, w)]
        y = run(*got)
        assert y.requires_grad  # never silently detached
        (y * torch.arange(40.0)).sum().backward()
        for g, r in zip(got, want):
            assert torch.allclose(g.grad, r.grad, rtol=1e-4, atol=1e-4)


def test_an_op_whose_baseline_is_kdsls_own_refuses_backward_clearly(tmp_path):
    mod = exported(library_op("jagged_softmax"), tmp_path, "module")
    v = torch.randn(10, 4, requires_grad=True)
    y = mod.run(v, torch.tensor([0, 3, 10]))
    assert y.requires_grad
    with pytest.raises(NotImplementedError, match="kdsl export: no backward for jagged_softmax"):
        y.sum().backward()


def test_integer_outputs_carry_no_gradient(tmp_path):
    mod = exported(library_op("topk_rows"), tmp_path, "module")
    x = torch.randn(4, 30, requires_grad=True)
    vals, idx = mod.run(x, K=5)
    assert idx.dtype == torch.int64 and not idx.requires_grad
    vals.sum().backward()
    assert x.grad.sum().item() == 20.0  # one per selected element


# ---- input checks: errors name the input ----

@pytest.mark.parametrize("args, error, words", [
    ((torch.randn(3, 8).half(), torch.randn(8).half()), TypeError,
     "input 'x' is float16; this kernel takes float32 or bfloat16"),
    ((torch.randn(3, 8), torch.randn(8).double()), TypeError,
     "input 'w' must be float32 (like 'x'), got float64"),
    ((torch.randn(3, 8), torch.randn(7)), ValueError, "input 'w' has shape (7,), but [N] is (8,)"),
    ((torch.randn(8), torch.randn(8)), ValueError, "input 'x' must have 2 dims [M, N]"),
    ((torch.randn(3, 8), [1.0] * 8), TypeError, "input 'w' must be a torch.Tensor, got list"),
    ((torch.randn(3, 8, device="meta"), torch.randn(8, device="meta")), ValueError,
     "input 'x' is on meta; this kernel runs on cpu tensors"),
])
def test_bad_inputs_are_named(small, args, error, words):
    with pytest.raises(error) as e:
        small.run(*args)
    assert words in str(e.value)


def test_int32_indices_and_bad_offsets_are_refused(tmp_path):
    mod = exported(library_op("embedding_bag_sum"), tmp_path, "module")
    table, idx, offsets = torch.randn(10, 4), torch.tensor([1, 2, 9]), torch.tensor([0, 2, 3])
    want = torch.nn.functional.embedding_bag(idx, table, offsets, mode="sum",
                                             include_last_offset=True)
    assert torch.allclose(mod.run(table, idx, offsets), want)
    with pytest.raises(TypeError, match=r"input 'idx' must be int64, got int32 \(.long\(\)"):
        mod.run(table, idx.int(), offsets)
    with pytest.raises(TypeError, match="input 'offsets' must be int64"):
        mod.run(table, idx, offsets.int())
    with pytest.raises(ValueError, match=r"input 'idx' holds values outside 0 .. 9"):
        mod.run(table, torch.tensor([1, 2, 10]), offsets)
    with pytest.raises(ValueError, match="input 'offsets' must be offsets from 0 to 3"):
        mod.run(table, idx, torch.tensor([0, 2, 4]))
    with pytest.raises(ValueError, match="input 'offsets' must not decrease"):
        mod.run(table, torch.tensor([1, 2, 9, 3]), torch.tensor([0, 3, 2, 4]))


def test_empty_jagged_inputs(tmp_path):
    mod = exported(library_op("jagged_to_padded_dense"), tmp_path, "module")
    y = mod.run(torch.randn(0, 200), torch.zeros(4, dtype=torch.int64), T=5)
    assert y.shape == (3, 5, 200) and not y.any()


def test_sizes_that_break_the_specs_conditions_are_refused(tmp_path):
    mod = exported(library_op("topk_rows"), tmp_path, "module")
    with pytest.raises(ValueError, match="break the op's condition K <= N"):
        mod.run(torch.randn(2, 4), K=5)
    with pytest.raises(TypeError, match="size 'K' must be an int, got float"):
        mod.run(torch.randn(2, 4), K=2.0)


def test_non_contiguous_inputs_are_copied_first(small):
    x = torch.randn(40, 9).t()  # 9 x 40, column-major
    w = torch.randn(80)[::2]
    assert not x.is_contiguous() and not w.is_contiguous()
    assert torch.allclose(small.run(x, w), rms(x, w), rtol=1e-4, atol=1e-4)


# ---- KernelBench's ModelNew ----

def test_model_new_reads_its_sizes_from_its_inputs(small):
    assert small.BENCH_SIZES == {}  # nothing fixed: the bench point is 256 x 512
    x, w = torch.randn(37, 300), torch.randn(300)
    assert torch.allclose(small.ModelNew(7, "ignored")(x, w), rms(x, w), rtol=1e-4, atol=1e-4)


def test_model_new_takes_the_sizes_no_input_gives(tmp_path):
    mod = exported(library_op("jagged_to_padded_dense"), tmp_path)
    assert mod.PASSED == ["T"] and mod.BENCH_SIZES == {"T": 128}
    values, offsets = torch.randn(7, 3), torch.tensor([0, 2, 7])
    assert mod.ModelNew()(values, offsets).shape == (2, 128, 3)
    y = mod.ModelNew(T=4)(values, offsets)
    assert y.shape == (2, 4, 3) and torch.equal(y[1, :4], values[2:6])
    with pytest.raises(TypeError, match="ModelNew takes the sizes"):
        mod.ModelNew(Q=3)


# ---- bench/kernelbench_exported.py: its ModelNew, and its refusal without CUDA ----

def bench_script():
    path = Path(__file__).resolve().parents[1] / "bench" / "kernelbench_exported.py"
    return load_module(path, "kdsl_test_kernelbench_exported")


PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super(Model, self).__init__()
        self.ln = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64]
'''


def test_the_bench_scripts_model_new_is_the_problems_model_with_kdsls_forward(tmp_path):
    from kdsl.search.export import module_text
    source = module_text(default_kernel(library_op("layernorm"))) + \
        bench_script().ADAPTER.format(problem=PROBLEM)
    (tmp_path / "kb_new.py").write_text(source)
    mod = load_module(tmp_path / "kb_new.py", "kdsl_test_kb_new")
    torch.manual_seed(0)
    ref = mod.Model(*mod.get_init_inputs())
    torch.manual_seed(0)
    new = mod.ModelNew(*mod.get_init_inputs())  # the same parameters, made the same way
    with torch.no_grad():
        ref.ln.weight.normal_(), ref.ln.bias.normal_()
    new.load_state_dict(ref.state_dict())
    x = torch.randn(5, 64)
    with torch.no_grad():
        assert torch.allclose(new(x), ref(x), rtol=1e-4, atol=1e-4)
    assert type(new).forward is not type(ref).forward


def test_the_bench_script_refuses_clearly_without_cuda(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the refusal is for machines without one")
    kb = tmp_path / "kb"
    (kb / "src" / "kernelbench").mkdir(parents=True)
    (kb / "src" / "kernelbench" / "eval.py").write_text("")
    run = tmp_path / "run"
    run.mkdir()
    (run / "lineage.msgpack").write_bytes(b"")
    script = bench_script()
    assert script.main(["--kernelbench", str(kb), "--runs", str(run), "--out",
                        str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs on a CUDA GPU" in err[0], err
    assert script.main(["--kernelbench", str(tmp_path), "--runs", str(run), "--out",
                        str(tmp_path / "out")]) == 2
    assert "not a KernelBench checkout" in capsys.readouterr().err


def test_dims_come_from_shapes_equalities_and_divided_axes_before_the_caller():
    from kdsl.search.export import dims
    conv = dims.plan(library_op("conv1d"))
    assert conv.passed == ("P",)  # LO then follows from LO == L + 2 * P - KW + 1
    assert any(r.dim == "LO" and "condition" in r.why for r in conv.rules)
    path = spec_mod.library_dir() / "kernelbench" / "level1" / "64_conv_transposed_1d.kspec"
    grouped = dims.plan(spec_mod.load(path).ops[0])
    assert grouped.passed == ("G", "S", "P", "OP")  # CO: w's [CI, CO // G, K] times G
    assert [r.why for r in grouped.rules if r.dim == "CO"] == ["w.shape[1] * G"]
