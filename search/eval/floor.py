"""The memory-traffic floor: the least time the bytes an op must move can take.

The bytes are every output and every input, but of a gathered table (read only as
``table[idx[...], ...]``) just the distinct rows the indices touch; the rate is the
machine's copy bandwidth: on CUDA one large device-to-device copy, on CPU a copy of
the same byte count. A candidate faster than ``SUSPECT_FRACTION`` of the floor is
not believed.
"""
from __future__ import annotations

import contextlib

from kdsl import cases, dtypes, ir
from kdsl.sizes import shape_of

from .cuda_timer import CudaTimer
from .timers import CpuTimer

CUDA_COPY_BYTES = 1 << 30
SUSPECT_FRACTION = 0.9

_BENCH_TRAFFIC: dict[tuple, int] = {}


def bench_traffic_bytes(op: ir.Op, case: cases.Case) -> int:
    """``traffic_bytes`` of the process's bench case, counted once (distinct gathered rows
    of a million indices took most of a second an evaluation, in the device lock)."""
    key = (op.hash, tuple(case.sizes.items()), case.dtype)
    if key not in _BENCH_TRAFFIC:
        _BENCH_TRAFFIC[key] = traffic_bytes(op, case.sizes, case.dtype, case.inputs)
    return _BENCH_TRAFFIC[key]


def traffic_bytes(op: ir.Op, sizes: dict[str, int], dtype: str,
                  inputs: dict | None = None) -> int:
    """The bytes the op must move: every output, every input, but of a gathered table
    (read only as ``table[idx[...], ...]``) just the distinct rows the indices touch."""
    gathered = gathered_by(op)
    total = 0
    for t in (*op.inputs, *op.outputs):
        shape = shape_of(op, t.name, sizes)
        n = 1
        for d in shape:
            n *= d
        index = gathered.get(t.name)
        if index is not None and inputs is not None and index in inputs and shape:
            import numpy as np
            rows = len(np.unique(np.asarray(inputs[index])))
            n = n // max(shape[0], 1) * min(rows, shape[0])
        total += n * dtypes.ITEMSIZE[op.dtype_of(t.name, dtype)]
    return total


def gathered_by(op: ir.Op) -> dict[str, str]:
    """Input tensors whose every read indexes dim 0 through another input: table -> idx."""
    reads: dict[str, set] = {}
    for st in op.statements:
        for e in ir.walk(st.value):
            if isinstance(e, ir.Access):
                first = e.subscripts[0] if e.subscripts else None
                via = first.tensor if isinstance(first, ir.Access) else None
                reads.setdefault(e.tensor, set()).add(via)
    inputs = {t.name for t in op.inputs}
    return {name: next(iter(v)) for name, v in reads.items()
            if name in inputs and len(v) == 1 and next(iter(v)) in inputs}


_BANDWIDTH: dict[tuple, float] = {}


def copy_bandwidth(device: str, nbytes: int, fresh: bool = False,
                   hold=contextlib.nullcontext) -> float:
    """Bytes per second a plain copy moves (read + write): on CPU measured once per process
    and size, on a GPU at every call, keeping the fastest seen in this process.

    Interference only ever slows a copy, so the fastest is the best estimate. A figure
    measured once had stayed low for a whole process: in two H200 suites (2026-12-04) one
    confirming worker read 3.79-3.80 TB/s where every other read 4.19-4.24, and its op's
    floor was 10-12% too high. One more measurement costs about 2 ms of a timing stage.
    On CPU the faster of numpy's single-threaded memcpy and torch's threaded copy: a
    threaded copy stalls on a busy machine, a single thread undersells a big one.
    """
    if device == "cuda":
        key, moved = ("cuda",), CUDA_COPY_BYTES
    else:
        moved = min(max(1 << max(nbytes - 1, 1).bit_length(), 1 << 20), 1 << 29)
        key = ("cpu", moved)
    if fresh or device == "cuda" or key not in _BANDWIDTH:
        with hold():  # the device lock, when measuring
            _BANDWIDTH[key] = max(_BANDWIDTH.get(key, 0.0), _measure_copy(device, moved))
    return _BANDWIDTH[key]


def _measure_copy(device: str, moved: int) -> float:
    """Bytes per second of one copy of ``moved`` bytes (read + write), best of a few."""
    import numpy as np
    import torch
    src = torch.ones(moved // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    if device == "cuda":
        best_ms = min(CudaTimer(flush_bytes=0)(lambda: dst.copy_(src), warmup=2, reps=5))
    else:
        reps = max(5, min(50, (1 << 27) // moved))
        a, b = src.numpy(), dst.numpy()
        best_ms = min(min(CpuTimer()(lambda: dst.copy_(src), warmup=2, reps=reps)),
                      min(CpuTimer()(lambda: np.copyto(b, a), warmup=2, reps=reps)))
    return moved / (best_ms / 1e3)


def forget() -> None:
    """Drop the counted bench traffic (the process moved on to another bench case)."""
    _BENCH_TRAFFIC.clear()
