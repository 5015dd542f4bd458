"""The baseline held to the spec's tolerance, as every candidate is.

torch runs f32 convolutions on cuDNN in TF32 by default (``torch.backends.cudnn.allow_tf32``
is on, while cuBLAS's matmuls default to full f32): operands rounded to 10 bits of mantissa.
On KernelBench's 2-D convolution 55 at its bench point that is 0.045 away from the float64
oracle where the spec allows 1e-3 plus 1e-3 of the value (H100, 2026-12-05), so the time
torch reports is for a computation the spec would reject from any candidate. A speedup
against it compares unequal work.

So the baseline's own output at the bench point goes through the candidate's check. Where
it fails under torch's defaults with TF32 on, it is run again with TF32 off in cuDNN and
cuBLAS; if that passes, the TF32-off time is the baseline, and the result says so (with
the default's time beside it). A baseline that fails either way keeps torch's defaults:
the spec, not the precision, is then in question, and the note says that too. Where the
check itself finds no room on the device (the oracle and a second output beside the
candidate's), torch's defaults stand, and the note says the check could not run.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from kdsl import baseline, ir


@dataclass(frozen=True)
class Held:
    """What the check found: ``note`` for the result; ``tf32_off``: time with TF32 off."""
    note: str = ""
    tf32_off: bool = False


def tf32_enabled() -> bool:
    import torch
    return bool(torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32)


@contextlib.contextmanager
def tf32_off():
    """cuDNN and cuBLAS in full f32 inside the block; torch's switches restored after."""
    import torch
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def applies(op: ir.Op, dtype: str, device: str) -> bool:
    """Could TF32 have touched this baseline? An f32 operand on a CUDA device."""
    return device == "cuda" and any(op.dtype_of(t.name, dtype) == "f32" for t in op.inputs) \
        and tf32_enabled()


def judge(op: ir.Op, dtype: str, result, ref: dict | None) -> tuple[bool | None, float]:
    """(within the spec's tolerance of the oracle?, largest error); None: no oracle."""
    from .timing import close_on_device
    if ref is None:
        return None, 0.0
    got = baseline.outputs_of(op, result)
    ok, error = close_on_device(op, dtype, got, ref)
    if ok is False:  # close_on_device stops at the first bad chunk: the worst element
        error = max(_max_error(got[k], ref[k]) for k in ref if got[k].is_floating_point())
    return ok, error


def _max_error(g, r) -> float:
    """The largest |g - r| (NaN counted as infinite), a chunk at a time: the float64
    difference of a whole bench output would take as much memory again as the oracle."""
    import torch

    from .timing import COMPARE_CHUNK
    g, r = g.reshape(-1), r.reshape(-1)
    chunk = COMPARE_CHUNK["cuda" if g.is_cuda else "cpu"]
    worst = 0.0
    for at in range(0, g.numel(), chunk):
        d = (g[at:at + chunk].double() - r[at:at + chunk].double()).abs()
        worst = max(worst, float(torch.nan_to_num(d, nan=float("inf")).max()))
    return worst


def verdict(default: tuple[bool | None, float], strict: tuple[bool | None, float] | None
            ) -> Held:
    """Which precision the baseline is timed in, from its checks at torch's defaults and,
    where those failed, with TF32 off."""
    ok, error = default
    if ok is not False:
        return Held()
    if strict is not None and strict[0]:
        return Held(f"torch's default TF32 failed the spec's tolerance at the bench point "
                    f"(max error {error:.3g}); timed with TF32 off (max error "
                    f"{strict[1]:.3g})", tf32_off=True)
    return Held(f"the baseline failed the spec's tolerance at the bench point with TF32 on "
                f"(max error {error:.3g}) and off; timed at torch's defaults")


UNCHECKED = ("the baseline's precision was not checked at the bench point (out of device "
             "memory); timed at torch's defaults")
