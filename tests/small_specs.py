"""Small specs that several test files run real searches and exports on."""
from __future__ import annotations


def rmsnorm(name: str = "rmsnorm_small") -> str:
    """RMSNorm with a small bench point: a real c-backend search of it takes seconds."""
    return f"""
op {name}
  dims M, N
  in  x: f32 | bf16 [M, N]
  in  w: like x [N]
  out y: like x [M, N]
  ms[i]   = mean(j) x[i, j] * x[i, j]
  y[i, j] = x[i, j] * rsqrt(ms[i] + 1e-6) * w[j]
  baseline F.rms_norm(x, (N,), w, eps=1e-6)
  tolerance f32(rtol=1e-4, atol=1e-4) bf16(rtol=2e-2, atol=3e-2)
  test  M in 1..40, N in 1..300
  bench M=256, N=512, dtype=f32
"""
