"""torch.export to core ATen, every input dim dynamic, with nothing allocated.

The model and its example inputs are built on the meta device (KernelBench's shapes reach
gigabytes); sizes stay symbolic so that one spec covers small test sizes and the bench
point alike. Dims that torch.export specializes (a parameter's size, a dim of 1) become
numbers in the spec.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

from .errors import ImportFailure
from .loading import Problem


@dataclass
class Traced:
    program: object           # torch.export.ExportedProgram, core ATen (the spec's source)
    eager: object             # the same before decomposition: the ops the module runs (the baseline's)
    example: list             # get_inputs() on the meta device (the bench shapes)


def trace(problem: Problem) -> Traced:
    import torch
    from torch.export import Dim, export
    model = problem.model("meta")
    example = problem.inputs("meta")
    if not isinstance(model, torch.nn.Module):
        raise ImportFailure(f"{problem.name}: Model is not a torch.nn.Module")
    dynamic = tuple({d: Dim.AUTO for d in range(x.dim())} if isinstance(x, torch.Tensor) else None
                    for x in example)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eager = export(model, tuple(example), dynamic_shapes=dynamic)
            if any(c.device.type == "meta" for c in eager.constants.values()
                   if isinstance(c, torch.Tensor)):
                # forward made a constant on its input's device: meta holds no value, so
                # trace again on fake CPU inputs, where such a constant is a real tensor
                try:
                    eager = export(model, tuple(_fake_cpu(example)), dynamic_shapes=dynamic)
                except Exception:  # keep the meta trace: the constant is then reported
                    pass
            program = eager.run_decompositions()
    except Exception as e:
        text = str(e).strip().splitlines()
        raise ImportFailure(f"{problem.name}: torch.export failed: {type(e).__name__}: "
                            f"{text[0] if text else ''}") from None
    return Traced(program, eager, example)


def _fake_cpu(example: list) -> list:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True):
        return [torch.empty(x.shape, dtype=x.dtype) if isinstance(x, torch.Tensor) else x
                for x in example]
