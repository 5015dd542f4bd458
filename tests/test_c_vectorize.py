"""The c backend's elementwise loops over the prelude's transcendentals vectorize: a chain
of exp and log (softplus) stayed scalar under GCC's default flags, at 0.19x of torch; libm's
erff, log1pf, fmodf and powf have no vector forms, so a loop calling one stayed scalar
(exact GELU at 0.26x, mish at 0.25x, x % 1.0 at 0.36x of torch)."""
from __future__ import annotations

import re
import subprocess

import pytest

from kdsl import backends
from kdsl import spec as spec_mod
from kdsl.backends.c import build

SOFTPLUS = """
op softplus_chain
  dims M, N
  in  x: f32 [M, N]
  out y: like x [M, N]
  y[i, j] = where(x[i, j] > 20, x[i, j], log(1 + exp(x[i, j])))
  baseline F.softplus(x)
  tolerance f32(rtol=1e-5, atol=1e-6)
  test  M in 1..30, N in 1..500
  bench M=512, N=32768, dtype=f32
"""


# one output a builtin (or operator) whose C form is a call; every loop must vectorize
EACH = {"exp": "exp(x[i, j])", "log": "log(x[i, j])", "log1p": "log1p(x[i, j])",
        "expm1": "expm1(x[i, j])", "tanh": "tanh(x[i, j])", "erf": "erf(x[i, j])",
        "sigmoid": "sigmoid(x[i, j])", "silu": "silu(x[i, j])", "sqrt": "sqrt(x[i, j])",
        "rsqrt": "rsqrt(x[i, j])", "gelu": "0.5 * x[i, j] * (1 + erf(x[i, j] / sqrt(2.0)))",
        "mish": "x[i, j] * tanh(max(x[i, j], 0.0) + log1p(exp(-abs(x[i, j]))))",
        "mod": "x[i, j] % z[i, j]", "frac": "x[i, j] % 1.0", "floordiv": "x[i, j] // z[i, j]",
        "pow": "pow(x[i, j], z[i, j])", "pow15": "x[i, j] ** 1.5"}
EVERY = "\n".join(["op every_call", "  dims M, N", "  in  x: f32 [M, N]", "  in  z: f32 [M, N]"]
                  + [f"  out y_{k}: f32 [M, N]" for k in EACH]
                  + [f"  y_{k}[i, j] = {e}" for k, e in EACH.items()]
                  + ["  baseline x", "  tolerance f32(rtol=1e-5, atol=1e-6)",
                     "  test  M in 1..30, N in 1..500", "  bench M=512, N=32768, dtype=f32", ""])

gcc_only = pytest.mark.skipif("clang" in build.compiler_identity().lower(),
                              reason="the vectorizer report read here is GCC's")


def vectorized_lines(tmp_path, text: str, genome: dict | None = None) -> tuple[list, set, str]:
    """The kernel's source lines, the (1-based) lines of the loops GCC vectorized, its report."""
    op = spec_mod.parse_text(text).ops[0]
    c = backends.get("c")
    source = c.render(op, {**c.space(op, "cpu").default(), **(genome or {})}, "cpu")
    src = tmp_path / "k.c"
    src.write_text(source)
    out = subprocess.run([build.COMPILER, *build.CFLAGS, "-fopt-info-vec-optimized", "-o",
                          str(tmp_path / "k.so"), str(src)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    vectorized = {int(m.group(1)) for m in
                  re.finditer(r"k\.c:(\d+):\d+: optimized: loop vectorized", out.stderr)}
    return source.splitlines(), vectorized, out.stderr


@gcc_only
def test_a_chain_of_exp_and_log_vectorizes(tmp_path):
    lines, vectorized, report = vectorized_lines(tmp_path, SOFTPLUS)
    f32 = next(i for i, line in enumerate(lines) if line.startswith("void kdsl_f32"))
    body = next(i for i in range(f32, len(lines)) if "kd_exp(" in lines[i]) + 1
    assert vectorized & {body - 1, body, body + 1}, report[-2000:]


@gcc_only
@pytest.mark.parametrize("fuse", [True, False])
def test_every_elementwise_call_vectorizes(tmp_path, fuse):
    lines, vectorized, report = vectorized_lines(tmp_path, EVERY, {"fuse": fuse})
    f32 = next(i for i, line in enumerate(lines) if line.startswith("void kdsl_f32"))
    stores = {}
    for n in range(f32 + 1, len(lines) + 1):
        m = re.search(r"t_y_(\w+)\[", lines[n - 1])
        if m and " = " in lines[n - 1]:
            stores.setdefault(m.group(1), n)
        if lines[n - 1].startswith("}"):
            break
    assert set(stores) == set(EACH)
    scalar = {k: lines[n - 1].strip() for k, n in stores.items() if n not in vectorized}
    assert not scalar, scalar
    assert not re.search(r"\b(erff|expf|logf|log1pf|expm1f|tanhf|fmodf|powf)\(", "\n".join(lines))


def test_math_bound_ops_default_to_512_bit_vectors_where_the_cpu_has_them(monkeypatch):
    c = backends.get("c")
    gelu = spec_mod.parse_text(EVERY).ops[0]
    plain = spec_mod.parse_text(SOFTPLUS.replace("log(1 + exp(x[i, j]))", "x[i, j] * 2")).ops[0]
    monkeypatch.setattr(build, "native_macros", lambda: frozenset({"__AVX512F__"}))
    assert c.space(gelu, "cpu").default()["vec"] == 512
    assert c.space(plain, "cpu").default()["vec"] == 256
    assert c.space(plain, "cpu").gene("vec").values == (512, 256, 128)
    monkeypatch.setattr(build, "native_macros", lambda: frozenset({"__AVX2__"}))
    assert c.space(gelu, "cpu").gene("vec").values == (256, 128)
    assert c.space(gelu, "cpu").default()["vec"] == 256
