"""The correctness stage: fresh cases, poisoned outputs, untouched inputs, the float64 oracle.

Every run gets fresh input tensors and outputs filled with poison: a NaN with a
payload no arithmetic produces (floats), a sentinel (ints) or a byte that is
neither 0 nor 1 (bools). Poison left after the run means the kernel skipped
elements. Each case but the upper-end ones runs twice: once as drawn, then (in
reverse order, with the other poison) on a twin with the same sizes and new values,
so a kernel that caches its answer by shape, pointer or call count gives the old
answer and fails.
The reference is computed after the kernel has run, so there is nothing in
memory for the kernel to find.
"""
from __future__ import annotations

import contextlib
import functools
import traceback
from dataclasses import dataclass, field

import numpy as np

from kdsl import baseline, cases, dtypes, ir
from kdsl.compare import compare, rounds_to_infinity
from kdsl.reference import cast_bounds, reference
from kdsl.sizes import shape_of

from . import device_lock, ipc_pool
from .plan import chosen_dtypes, plan

# Bit patterns of the poison, two variants per dtype (quiet NaNs with payloads).
FLOAT_POISON = {"f64": (0x7FF80000A5A5A5A5, 0x7FF800005A5A5A5A), "f32": (0x7FC0A5A5, 0x7FC05A5A),
                "f16": (0x7E5A, 0x7DA5), "bf16": (0x7FA5, 0x7FDA)}
INT_POISON = {"i64": (-(1 << 63) + 12345, -(1 << 63) + 54321),
              "i32": (-(1 << 31) + 12345, -(1 << 31) + 54321)}
BOOL_POISON = (0xA5, 0x5A)
TWIN_SEED = 1_000_003  # added to a case's seed to draw its twin


@dataclass
class Outcome:
    """A stage's verdict: ``message`` is None when it passed."""
    message: str | None
    artifacts: dict = field(default_factory=dict)


def out_of_memory(e: BaseException) -> bool:
    """Whether an exception means memory ran out (Python, numpy, torch CPU or CUDA)."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    text = str(e)
    # cuBLAS, cuDNN and cuFFT say it in their own words
    return any(w in text for w in ("out of memory", "can't allocate memory", "ALLOC_FAILED",
                                   "NOT_ENOUGH_WORKSPACE"))


# ---- tensors ---------------------------------------------------------------

def _bits_dtype(torch, itemsize: int):
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[itemsize]


def fresh_inputs(op: ir.Op, dtype: str, arrays: dict[str, np.ndarray], device: str,
                 shared: bool = False) -> dict:
    """New torch tensors of the case's inputs, never sharing memory with ``arrays``;
    ``shared``: where the candidate's process can map them (``empty``)."""
    with ipc_pool.allocating(device) if shared else contextlib.nullcontext():
        tensors = baseline.to_torch(op, dtype, arrays, device)
    if device == "cpu":  # to_torch aliases the numpy array when no conversion is needed
        tensors = {k: empty(v.shape, v.dtype, device, shared).copy_(v) if shared else
                   v.clone() for k, v in tensors.items()}
    return tensors


def alloc_outputs(op: ir.Op, sizes: dict[str, int], dtype: str, device: str, variant: int,
                  shared: bool = False) -> dict:
    out = {}
    for t in op.outputs:
        dt = op.dtype_of(t.name, dtype)
        tensor = empty(shape_of(op, t.name, sizes), dtypes.torch_dtype(dt), device, shared)
        poison(tensor, dt, variant % 2)  # (two poisons a dtype: sets alternate them)
        out[t.name] = tensor
    return out


def empty(shape, dtype, device: str, shared: bool = False):
    """``torch.empty``; ``shared``: where a candidate's process can map it, without the
    copy that moving a tensor there later costs (a pass over fresh pages: 20-30 ms for
    each 64 MB on the 2-core VM). On the CPU that is shared memory; on a GPU, the pool
    whose segments hold only what the candidate sees (``ipc_pool``)."""
    import torch
    if not shared or device != "cpu":
        with ipc_pool.allocating(device) if shared else contextlib.nullcontext():
            return torch.empty(shape, dtype=dtype, device=device)
    n = 1
    for d in shape:
        n *= d
    try:
        storage = torch.UntypedStorage._new_shared(max(n, 1) * dtype.itemsize)
    except AttributeError:  # a torch without it: moved there after all
        return torch.empty(shape, dtype=dtype).share_memory_()
    return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))


def poison(tensor, dt: str, variant: int) -> None:
    import torch
    kind = dtypes.kind(dt)
    if kind == "float":
        tensor.view(_bits_dtype(torch, tensor.element_size())).fill_(FLOAT_POISON[dt][variant])
    elif kind == "bool":
        tensor.view(torch.uint8).fill_(BOOL_POISON[variant])
    else:
        tensor.fill_(INT_POISON[dt][variant])


def _poisoned(tensor, dt: str, variant: int):
    """Where ``tensor`` still holds the poison, as a bool tensor on its device."""
    import torch
    kind = dtypes.kind(dt)
    if kind == "float":
        bits = tensor.view(_bits_dtype(torch, tensor.element_size()))
        return bits == FLOAT_POISON[dt][variant]
    if kind == "bool":
        return tensor.view(torch.uint8) == BOOL_POISON[variant]
    return tensor == INT_POISON[dt][variant]


def to_numpy(tensors: dict) -> dict[str, np.ndarray]:
    import torch
    out = {}
    for name, t in tensors.items():
        t = t.detach().cpu()
        out[name] = t.to(torch.float64).numpy() if t.is_floating_point() else t.numpy()
    return out


def _at(mask: np.ndarray) -> str:
    hits = np.argwhere(mask)
    first = "[" + ", ".join(str(int(p)) for p in hits[0]) + "]"
    if len(hits) == 1:
        return f"at {first}"
    last = "[" + ", ".join(str(int(p)) for p in hits[-1]) + "]"
    return f"first at {first}, last at {last}"


# ---- checks of one run -----------------------------------------------------

def judge(op: ir.Op, dtype: str, arrays: dict[str, np.ndarray], ins: dict, outs: dict,
          ref: dict[str, np.ndarray] | None, variant: int, device: str,
          pristine: dict | None = None, bounds: dict | None = None) -> tuple[str | None, float]:
    """Check one finished run: all written, inputs intact, finite, close to ``ref``.

    Returns (failure message or None, max abs error on float outputs). With ``ref``
    None only the first three checks run. ``pristine``: copies of ``ins`` taken before
    any run, on the device (else ``arrays`` are uploaded again to compare with).
    """
    for t in op.outputs:
        dt = op.dtype_of(t.name, dtype)
        poisoned = _poisoned(outs[t.name], dt, variant)
        # asked on the device first: the mask of a GB output is not copied to say "none"
        if not bool(poisoned.any()):
            continue
        left = poisoned.cpu().numpy()
        if ref is not None and dtypes.kind(dt) == "int":
            left &= np.asarray(ref[t.name]) != INT_POISON[dt][variant]
        if left.any():
            return (f"{t.name}: {int(left.sum())} of {left.size} elements never written "
                    f"(poison left), {_at(left)}", 0.0)
    if pristine is None:
        pristine = fresh_inputs(op, dtype, arrays, device)
    for name, t in ins.items():
        changed = _differs(t, pristine[name])
        if changed is not None:
            return (f"input '{name}' was modified by the kernel: {int(changed.sum())} of "
                    f"{changed.size} elements changed, {_at(changed)}", 0.0)
    if ref is None:  # (checked before the outputs come to the host: at a bench point of
        return None, 0.0  # a GB, that copy was most of the check's seconds)
    got = to_numpy(outs)
    for t in op.outputs:
        g, r = got[t.name], np.asarray(ref[t.name])
        if g.dtype.kind == "f" and g.shape == r.shape:
            bad = ~np.isfinite(g) & np.isfinite(r)
            if bad.any():  # (but the infinity the reference rounds to in g's dtype)
                bad &= ~rounds_to_infinity(op, dtype, t.name, g.astype(np.float64), r)
            if bad.any():
                what = "NaN" if np.isnan(g[bad]).any() else "inf"
                return (f"{t.name}: {what} in {int(bad.sum())} of {bad.size} elements where "
                        f"the reference is finite, {_at(bad)}", 0.0)
    mismatch = compare(op, dtype, got, ref, arrays, bounds)
    error = max_error(op, got, ref)
    return (str(mismatch) if mismatch is not None else None), error


def _differs(t, pristine) -> np.ndarray | None:
    import torch
    if t.shape != pristine.shape or t.dtype != pristine.dtype:
        return np.ones(1, dtype=bool)
    if t.is_floating_point():
        bits = _bits_dtype(torch, t.element_size())
        a, b = t.view(bits), pristine.view(bits)
    else:
        a, b = t, pristine
    if torch.equal(a, b):
        return None
    return (a != b).cpu().numpy()


def max_error(op: ir.Op, got: dict, ref: dict) -> float:
    worst = 0.0
    for t in op.outputs:
        g, r = np.asarray(got[t.name]), np.asarray(ref[t.name])
        if g.dtype.kind != "f" or r.dtype.kind != "f" or g.shape != r.shape or not g.size:
            continue
        ok = np.isfinite(g) & np.isfinite(r)
        if ok.any():
            worst = max(worst, float(np.max(np.abs(g[ok] - r[ok]))))
    return worst


def sync(device: str) -> None:
    if device == "cuda":
        import torch
        torch.cuda.synchronize()


# ---- the stage -------------------------------------------------------------

def check(op: ir.Op, kernel, config, interpreted: bool = False) -> Outcome:
    """Run ``kernel`` on every planned case and its twin; the first failure wins."""
    planned = plan(op, config, interpreted)
    arts = {"dtypes": list(chosen_dtypes(op, config.dtypes)), "cases_checked": 0,
            "max_error": 0.0}
    if not planned:
        return Outcome(f"no test case has at most max_case_elements={config.max_case_elements} "
                       f"elements", arts)
    # every case twice, but the upper ends once: the small cases' twins catch an answer kept
    # by shape, and the bench point's timed calls one kept by contents; a twin of a case of
    # a million elements would only double the stage's longest runs
    twins = [p for p in reversed(planned) if p.shape.label not in cases.UPPER_LABELS]
    runs = [(p, 0) for p in planned] + [(p, 1) for p in twins]
    for p, variant in runs:
        case = cases.draw(op, p.shape, p.seed + TWIN_SEED * variant)
        message, error = run_case(op, kernel, case, config.device, variant, arts)
        if message is not None:
            which = "first run" if variant == 0 else "second run, new values"
            arts["failed_case"] = {"sizes": dict(case.sizes), "dtype": case.dtype,
                                   "seed": p.seed, "run": variant + 1}
            return Outcome(f"{message} (case {' '.join(case.shape.describe().split())}, "
                           f"seed {p.seed}, {which})", arts)
        arts["cases_checked"] += 1
        arts["max_error"] = max(arts["max_error"], error)
    return Outcome(None, arts)


def run_case(op: ir.Op, kernel, case: cases.Case, device: str, variant: int,
             waited: dict | None = None) -> tuple[str | None, float]:
    """One run of ``kernel`` on ``case``, judged. Its work on a GPU shares the device
    (``device_lock.shared``): never beside another process's timed runs."""
    on_device = functools.partial(device_lock.shared, device, waited)
    with on_device():
        ins = fresh_inputs(op, case.dtype, case.inputs, device)
        outs = alloc_outputs(op, case.sizes, case.dtype, device, variant)
        try:
            kernel(ins, outs, dict(case.sizes))
            sync(device)
        except Exception as e:
            if out_of_memory(e):
                raise
            _settle(device)  # what it launched before raising ends before the lock is let go
            if type(e).__name__ == "CandidateFault":  # already says what the candidate did
                return str(e), 0.0
            tb = traceback.format_exception(type(e), e, e.__traceback__)
            return f"kernel raised {type(e).__name__}: {e}\n{''.join(tb[-3:]).rstrip()}", 0.0
    ref = reference(op, case.sizes, case.inputs)
    bounds = cast_bounds(op, case.sizes, case.inputs, case.dtype)
    with on_device():
        return judge(op, case.dtype, case.inputs, ins, outs, ref, variant, device,
                     bounds=bounds)


def _settle(device: str) -> None:
    try:
        sync(device)
    except Exception:  # noqa: BLE001 - the kernel's own error is the one reported
        pass
