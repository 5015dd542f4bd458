"""The baseline: an op's declared torch expression, run on CPU or CUDA."""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from . import dtypes, ir


@lru_cache(maxsize=256)
def _compiled(source: str):
    return compile(source, "<baseline>", "eval")


def namespace(op: ir.Op, sizes: dict[str, int], tensors: dict) -> dict:
    import torch
    import torch.nn.functional as F

    from . import torch_ops
    ns = {"torch": torch, "F": F, "math": math, "kt": torch_ops}
    ns.update(sizes)
    ns.update(tensors)
    return ns


def to_torch(op: ir.Op, dtype: str, inputs: dict[str, np.ndarray], device: str = "cpu") -> dict:
    import torch
    out = {}
    for t in op.inputs:
        dt = dtypes.torch_dtype(op.dtype_of(t.name, dtype))
        a = np.asarray(inputs[t.name])
        a = np.ascontiguousarray(a).reshape(a.shape)  # (which makes a 0-d scalar 1-d)
        out[t.name] = torch.from_numpy(a).to(device=device, dtype=dt)
    return out


def baseline_callable(op: ir.Op, sizes: dict[str, int], tensors: dict):
    """A zero-argument callable computing the baseline on ``tensors`` (for timing)."""
    code = _compiled(op.baseline.source)
    ns = namespace(op, sizes, tensors)
    return lambda: eval(code, ns)  # noqa: S307 - the spec's own baseline expression


class BaselineError(Exception):
    pass


def outputs_of(op: ir.Op, result) -> dict:
    """Name the baseline's result by the op's outputs (a tensor, or a tuple in order)."""
    outs = op.outputs
    if not isinstance(result, (tuple, list)):
        result = (result,)
    if len(result) != len(outs):
        raise BaselineError(f"baseline returned {len(result)} value(s) but op '{op.name}' "
                            f"has {len(outs)} output(s)")
    return {t.name: r for t, r in zip(outs, result)}


def run(op: ir.Op, sizes: dict[str, int], dtype: str, inputs: dict[str, np.ndarray],
        device: str = "cpu") -> dict[str, np.ndarray]:
    """The baseline's outputs as numpy arrays (float outputs as float64)."""
    import torch
    tensors = to_torch(op, dtype, inputs, device)
    with torch.no_grad():
        named = outputs_of(op, baseline_callable(op, sizes, tensors)())
    out = {}
    for name, r in named.items():
        r = r.detach().to("cpu")
        out[name] = r.to(torch.float64).numpy() if r.is_floating_point() else r.numpy()
    return out
