"""Repairs to the Triton interpreter that kernels run in on the CPU, each applied only
where a probe shows the installed interpreter gets it wrong.

- ``tl.dot`` of bfloat16 operands: the interpreter holds bfloat16 as its 16 bits in a
  uint16 array and Triton 3.9's ``create_dot`` multiplied those integers (1.0 times 1.0
  came out 2.6e8), so every bf16 contraction failed its cases on the CPU while the same
  kernels were correct on a GPU. The repair widens such operands to float32 first: exact,
  as the GPU's tensor cores multiply bf16 into float32 accumulators.
"""
from __future__ import annotations

import functools


def _bf16_as_f32(handle, np, tl, TensorHandle):
    if handle.dtype != tl.bfloat16:
        return handle
    bits = handle.data.astype(np.uint32) << np.uint32(16)
    return TensorHandle(bits.view(np.float32), tl.float32)


@functools.cache
def repair() -> tuple[str, ...]:
    """Apply what the installed interpreter needs (once a process); the names applied."""
    try:
        import numpy as np
        import triton.language as tl
        from triton.runtime import interpreter
    except Exception:  # noqa: BLE001 - no interpreter, nothing to repair
        return ()
    builder = getattr(interpreter, "InterpreterBuilder", None)
    handle = getattr(interpreter, "TensorHandle", None)
    if builder is None or handle is None or not hasattr(builder, "create_dot"):
        return ()
    applied = []
    if not _bf16_dot_right(builder, handle, np, tl):
        original = builder.create_dot

        def create_dot(self, a, b, d, *rest):
            return original(self, _bf16_as_f32(a, np, tl, handle),
                            _bf16_as_f32(b, np, tl, handle), d, *rest)
        builder.create_dot = create_dot
        applied.append("bf16 dot")
    return tuple(applied)


def _bf16_dot_right(builder, TensorHandle, np, tl) -> bool:
    """Whether the interpreter's dot of two bfloat16 ones is one."""
    try:
        one = np.full((1, 1), 0x3F80, dtype=np.uint16)  # 1.0 in bfloat16
        acc = TensorHandle(np.zeros((1, 1), dtype=np.float32), tl.float32)
        out = builder.create_dot(builder.__new__(builder), TensorHandle(one, tl.bfloat16),
                                 TensorHandle(one.copy(), tl.bfloat16), acc, None, None)
        return float(np.asarray(out.data).reshape(-1)[0]) == 1.0
    except Exception:  # noqa: BLE001 - a probe that cannot run: leave the interpreter be
        return True
