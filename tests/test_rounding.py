"""floor, ceil, trunc and round (halves to even, as torch.round): the reference and every
generator agree on whole numbers, on halves and on negative values."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROUNDING = """
op rounding
  dims M, N
  in  x: f32 [M, N] in -8 .. 8
  out y: like x [M, N]
  out z: like x [M, N]
  y[i, j] = floor(x[i, j]) + 2.0 * ceil(x[i, j]) + 3.0 * trunc(x[i, j])
  z[i, j] = round(x[i, j])
  baseline (torch.floor(x) + 2.0 * torch.ceil(x) + 3.0 * torch.trunc(x), torch.round(x))
  tolerance f32(rtol=1e-6, atol=1e-6)
  test  M in 1..8, N in 1..100
  bench M=64, N=64
"""

# halves either side of zero, whole numbers, and values just off a half
VALUES = "[[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.5], [-2.0, 0.0, 2.0, -0.49, 0.51, " \
         "-1.51, 7.25, -7.75]]"
RUN = f"""
import sys, numpy as np, torch
from kdsl import backends, spec
from kdsl.reference import reference
from test_rounding import ROUNDING
op = spec.parse_text(ROUNDING, "t.kspec").ops[0]
x = np.array({VALUES}, dtype=np.float32)
be = backends.get(sys.argv[1])
built = be.build(op, be.render(op, {{**be.space(op, "cpu").default(), **eval(sys.argv[2])}},
                                "cpu"), "cpu")
outs = {{"y": torch.empty(2, 8), "z": torch.empty(2, 8)}}
built.fn({{"x": torch.tensor(x)}}, outs, {{"M": 2, "N": 8}})
want = reference(op, {{"M": 2, "N": 8}}, {{"x": x.astype(np.float64)}})
assert np.array_equal(want["z"], torch.round(torch.tensor(x)).numpy()), want["z"]
for k in ("y", "z"):
    assert np.array_equal(outs[k].numpy(), want[k]), (k, outs[k], want[k])
"""


@pytest.mark.parametrize("backend, genome", [("c", "{}"), ("numpy", "{}"),
                                             ("torch", "{'mode': 'compose'}"),
                                             ("triton", "{}")])
def test_rounding_builtins_agree_on_halves_and_whole_numbers(backend, genome):
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": f"{here.parent}{os.pathsep}{here}"}
    env.pop("TRITON_INTERPRET", None)
    if backend == "triton":  # (the interpreter: read when triton is imported)
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, "-c", RUN, backend, genome], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
