"""The Triton backend's exp choice and its helpers, and compiling ahead through the JIT."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from kdsl import spec
from kdsl.backends import get
from kdsl.backends.triton.helpers import HELPERS, with_needs

SPECS = Path(__file__).resolve().parent.parent / "specs"

SCALED_EXP = """
op scaled_exp
  dims M, N
  in  x: f32 | bf16 [M, N]
  out y: like x [M, N]
  y[i, j] = exp(x[i, j]) * exp(1.0) + sigmoid(x[i, j])
  baseline torch.exp(x) * 2.718281828459045 + torch.sigmoid(x)
  tolerance f32(rtol=1e-5, atol=1e-6) bf16(rtol=1.6e-2, atol=1e-2)
  test  M in 1..8, N in 1..40
  bench M=1024, N=1024, dtype=bf16
"""


def _op(text: str):
    return spec.parse_text(textwrap.dedent(text).strip() + "\n", "t.kspec").ops[0]


def _library(name: str):
    return spec.load(SPECS / f"{name}.kspec").ops[0]


def test_the_exp_gene_is_offered_where_an_exp_is_and_defaults_to_ftz():
    be = get("triton")
    for name in ("softmax", "cross_entropy", "swiglu", "jagged_softmax"):
        space = be.space(_library(name), "cuda")
        assert space.gene("exp").values == ("tl", "ftz") and space.default()["exp"] == "ftz"
    assert "exp" not in be.space(_library("layernorm"), "cuda").names


def test_ftz_reads_variables_by_the_hardware_exp_and_leaves_constants_to_tl_exp():
    be, op = get("triton"), _op(SCALED_EXP)
    ftz = be.render(op, {"exp": "ftz"}, "cuda")
    body = ftz[ftz.index("def _kd_scaled_exp"):]
    assert "_kd_exp_ftz(" in body and "tl.exp(1.0)" in body  # a constant has no dtype to read
    assert "tl.sigmoid" not in body  # sigmoid as 1 / (1 + exp(-x)), its exp the hardware's
    assert "ex2.approx.ftz.f32" in ftz and ftz.index("_KD_PTX =") < ftz.index("def _kd_exp_ftz")
    plain = be.render(op, {"exp": "tl"}, "cuda")
    assert "_kd_exp_ftz" not in plain and "tl.sigmoid" in plain


def test_helpers_come_with_what_they_need_constants_first():
    assert with_needs({"exp_ftz"}) == ["gpu", "exp_ftz"]
    assert with_needs({"tanh_approx", "hash64"}) == ["gpu", "hash64", "tanh", "tanh_approx"]
    assert all(h in HELPERS for h in with_needs(set(HELPERS)))


# In a process of its own, without the interpreter: real jit functions, a fake compile.
WARM = r'''
import json
import triton
import triton.language as tl
from triton.runtime import _async_compile
from triton.runtime.jit import JITFunction
from kdsl.backends.triton.compile import warm

@triton.jit
def k(x, n, BLOCK: tl.constexpr):
    tl.store(x + tl.arange(0, BLOCK), tl.arange(0, BLOCK), mask=tl.arange(0, BLOCK) < n)

def kernel(inputs, outputs, sizes):
    n = sizes["N"]
    k[(1,)](outputs["y"], n, BLOCK=triton.next_power_of_2(n))

compiled = []
def fake_warmup(self, *args, grid, **kwargs):
    if kwargs["BLOCK"] == 64:
        raise RuntimeError("compile failed at 64")
    compiled.append(kwargs["BLOCK"])
    return "kernel"
JITFunction.warmup = fake_warmup

def example(n):
    return {"sizes": {"N": n}, "dtype": "f32",
            "tensors": {"y": {"role": "out", "shape": [n], "dtype": "float32"}}}

ns = globals()  # a loaded module's namespace: kernel() finds k through it
out = {"empty": warm(ns, [], report=False)}
try:
    warm(ns, [example(5), example(40)], threads=2, report=False)
    out["raised"] = None
except RuntimeError as e:
    out["raised"] = str(e)
out["mode_left_active"] = _async_compile.active_mode.get() is not None
compiled.clear()
warm(ns, [example(3), example(100)], threads=2, report=False)
out["after"] = sorted(compiled)
print("RESULTS " + json.dumps(out))
'''


def test_warm_compiles_every_shape_and_a_failed_compile_leaves_nothing_behind(tmp_path):
    script = tmp_path / "warm_check.py"  # triton reads a jit function's source from its file
    script.write_text(WARM)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")), None)
    assert line, proc.stderr[-3000:]
    import json
    got = json.loads(line[len("RESULTS "):])
    assert got["empty"] == {}  # no shapes: nothing compiled (not the module's EXAMPLES)
    assert got["raised"] == "compile failed at 64"  # the failure reaches the caller
    assert got["mode_left_active"] is False  # and later compiles are not sent to a dead pool
    assert got["after"] == [4, 128]  # one compile per launch
