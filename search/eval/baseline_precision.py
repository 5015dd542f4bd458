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


def _precision_switches(torch) -> list:
    """torch's per-backend ``fp32_precision`` switches, where this torch has them, parents
    before children (a child's 'none' defers to its parent)."""
    b = torch.backends
    objs = [b, b.cudnn, getattr(b.cudnn, "conv", None), getattr(b.cudnn, "rnn", None),
            b.cuda.matmul]
    return [o for o in objs if o is not None and hasattr(o, "fp32_precision")]


def _read(getter):
    """A switch's value, or None where torch refuses to read it (a state set through its
    newer per-backend API that the legacy view calls a mix)."""
    try:
        return getter()
    except RuntimeError:
        return None


def tf32_enabled() -> bool:
    """Could cuDNN or cuBLAS use TF32 here? True where the switches cannot be read."""
    import torch
    b = torch.backends
    legacy = _read(lambda: (b.cudnn.allow_tf32, b.cuda.matmul.allow_tf32))
    return True if legacy is None else any(legacy)


@contextlib.contextmanager
def tf32_off():
    """cuDNN and cuBLAS in full f32 inside the block, torch's switches as they were after.

    Through the legacy flags where torch reads them (what torch's defaults are set by),
    then ``set_float32_matmul_precision`` as it read before (the flags' round trip alone
    leaves 'medium' unreadable); through the per-backend strings where the legacy view is
    refused, restored string by string."""
    import torch
    b = torch.backends
    legacy = _read(lambda: (b.cudnn.allow_tf32, b.cuda.matmul.allow_tf32))
    matmul = _read(torch.get_float32_matmul_precision)
    switches = _precision_switches(torch)
    saved = [o.fp32_precision for o in switches]
    try:
        if legacy is not None:
            b.cudnn.allow_tf32 = b.cuda.matmul.allow_tf32 = False
        else:
            for o in switches[2:]:
                o.fp32_precision = "ieee"
        yield
    finally:
        if legacy is not None:
            b.cudnn.allow_tf32, b.cuda.matmul.allow_tf32 = legacy
            if matmul is not None:
                torch.set_float32_matmul_precision(matmul)
        else:
            for o, value in zip(switches, saved):
                o.fp32_precision = value


def applies(op: ir.Op, dtype: str, device: str) -> bool:
    """Could TF32 have touched this baseline? A float operand on a CUDA device (a 16-bit
    spec's baseline may compute in f32 on the way), with TF32 possibly on."""
    return device == "cuda" and tf32_enabled() and any(
        op.dtype_of(t.name, dtype) in ("f32", "f16", "bf16") for t in op.inputs)


def judge(op: ir.Op, dtype: str, result, ref: dict | None) -> tuple[bool | None, str]:
    """(within the spec's tolerance of the oracle?, what was found); None: no oracle."""
    from .timing import close_on_device
    if ref is None:
        return None, "no float64 oracle"
    got = baseline.outputs_of(op, result)
    ok, error = close_on_device(op, dtype, got, ref)
    if ok is None:  # index outputs (argmax), which only the full comparison reads: unjudged
        return None, ""
    if ok:
        return ok, f"max error {error:.3g}"
    # close_on_device stops at the first bad chunk: the worst element, where it is a float
    floats = [_max_error(got[k], ref[k]) for k in ref if got[k].is_floating_point()]
    if not floats or max(floats) == 0:
        return False, "an output that is not a float differs"
    return False, f"max error {max(floats):.3g}"


def _max_error(g, r) -> float:
    """The largest |g - r| (NaN counted as infinite), a chunk at a time: the float64
    difference of a whole bench output would take as much memory again as the oracle."""
    import torch

    from .timing import COMPARE_CHUNK
    g, r = g.reshape(-1), r.reshape(-1)
    chunk = COMPARE_CHUNK["cuda" if g.is_cuda else "cpu"]
    worst = 0.0
    for at in range(0, g.numel(), chunk):
        d = (g[at:at + chunk].double() - r[at:at + chunk].to(g.device).double()).abs()
        worst = max(worst, float(torch.nan_to_num(d, nan=float("inf")).max()))
    return worst


def verdict(default: tuple[bool | None, str], strict: tuple[bool | None, str] | None
            ) -> Held:
    """Which precision the baseline is timed in, from its checks at torch's defaults and,
    where those failed, with TF32 off."""
    ok, found = default
    if ok is None:
        return Held(unchecked(found) if found else "")
    if ok:
        return Held()
    if strict is not None and strict[0]:
        return Held(f"torch's default TF32 failed the spec's tolerance at the bench point "
                    f"({found}); timed with TF32 off ({strict[1]})", tf32_off=True)
    return Held(f"the baseline failed the spec's tolerance at the bench point with TF32 on "
                f"({found}) and off; timed at torch's defaults")


def unchecked(why: str) -> str:
    """The note where the check could not finish: torch's defaults stand."""
    return f"the baseline's precision was not checked at the bench point ({why}); timed at " \
           f"torch's defaults"
