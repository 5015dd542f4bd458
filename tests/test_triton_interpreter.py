"""The Triton interpreter that Triton kernels run in on the CPU, repaired where the installed
one is wrong (``backends.triton.interpreter``): bfloat16 contractions are judged on their
math, not on the interpreter's multiplication of the values' bits."""
from __future__ import annotations

import numpy as np
import pytest

from kdsl import backends, spec

triton = pytest.importorskip("triton")

GEMM = """
op small_gemm
  dims M, N, K
  in  a: bf16 [M, K]
  in  b: like a [K, N]
  out c: like a [M, N]
  c[i, j] = sum(k) a[i, k] * b[k, j]
  baseline a @ b
  tolerance bf16(rtol=2e-2, atol=5e-2)
  test  M in 1..20, N in 1..20, K in 1..40
  bench M=64, N=64, K=64
"""


def test_a_bf16_dot_in_the_interpreter_multiplies_values(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from triton.runtime import interpreter as it
    import triton.language as tl
    from kdsl.backends.triton.interpreter import repair
    repair()
    two = np.full((1, 16), 0x4000, dtype=np.uint16)  # 2.0 in bfloat16
    three = np.full((16, 1), 0x4040, dtype=np.uint16)  # 3.0
    acc = it.TensorHandle(np.zeros((1, 1), dtype=np.float32), tl.float32)
    out = it.InterpreterBuilder.create_dot(
        it.InterpreterBuilder.__new__(it.InterpreterBuilder), it.TensorHandle(two, tl.bfloat16),
        it.TensorHandle(three, tl.bfloat16), acc, None, None)
    assert float(out.data[0, 0]) == 96.0  # 16 products of 2 and 3


def test_the_default_bf16_gemm_is_correct_in_the_interpreter():
    """Through the judge, as ``kdsl eval --backend triton`` runs it on the CPU (its candidate
    process interprets Triton): every bf16 case failed before."""
    from kdsl.search.candidate import Candidate
    from kdsl.search.executors import PoolExecutor
    from kdsl.search.jobs import EvalConfig, EvalJob
    op = spec.parse_text(GEMM, "g.kspec").ops[0]
    cand = Candidate.of("triton", backends.get("triton").space(op, "cpu").default(),
                          origin="default")
    pool = PoolExecutor(workers=1)
    try:
        res = pool.submit(EvalJob(op, cand, EvalConfig(seeds=(1,), time=False,
                                                       cases_per_dtype=2))).result()
    finally:
        pool.shutdown()
    assert res.ok, res.message
