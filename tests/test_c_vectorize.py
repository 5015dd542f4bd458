"""The c backend's elementwise loops over the prelude's transcendentals vectorize: a chain
of exp and log (softplus) stayed scalar under GCC's default flags, at 0.19x of torch."""
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


@pytest.mark.skipif("clang" in build.compiler_identity().lower(),
                    reason="the vectorizer report read here is GCC's")
def test_a_chain_of_exp_and_log_vectorizes(tmp_path):
    op = spec_mod.parse_text(SOFTPLUS).ops[0]
    c = backends.get("c")
    source = c.render(op, c.space(op, "cpu").default(), "cpu")
    src = tmp_path / "k.c"
    src.write_text(source)
    out = subprocess.run([build.COMPILER, *build.CFLAGS, "-fopt-info-vec-optimized", "-o",
                          str(tmp_path / "k.so"), str(src)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = source.splitlines()
    f32 = next(i for i, line in enumerate(lines) if line.startswith("void kdsl_f32"))
    body = next(i for i in range(f32, len(lines)) if "kd_exp(" in lines[i]) + 1
    vectorized = {int(m.group(1)) for m in
                  re.finditer(r"k\.c:(\d+):\d+: optimized: loop vectorized", out.stderr)}
    assert vectorized & {body - 1, body, body + 1}, out.stderr[-2000:]
