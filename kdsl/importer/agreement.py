"""Does the imported spec compute what the module computes?

The module (real parameters, as ``Model(*get_init_inputs())`` makes them) and the spec's
float64 reference run on the same inputs at a small size: the top of the spec's test
ranges; outputs are compared within the spec's tolerance.
"""
from __future__ import annotations

import numpy as np

from . import symbolic
from .errors import ImportFailure


class Disagreement(ImportFailure):
    """The spec's reference and the module's output differ (the spec text rides along)."""

    def __init__(self, message: str, spec_text: str):
        super().__init__(message)
        self.spec_text = spec_text


def check(problem, op, emitted, example, sizes: dict, user_nodes: list, sym_values: dict,
          constants: dict, seed: int = 0) -> str | None:
    """None when they agree, else one line saying where they differ. ``user_nodes``:
    (placeholder name, sympy shape) of the module's tensor arguments, in order; ``constants``:
    the tensors the trace lifted out of ``forward`` (``torch.tensor(0.5)``)."""
    import torch

    from ..cases import Shape, draw
    from ..compare import compare
    from ..reference import reference

    case = draw(op, Shape(dict(sizes), "f32", "import", 0), seed)
    inputs = dict(case.inputs)
    torch.manual_seed(seed)
    model = problem.model()
    state = {**dict(model.named_parameters()), **dict(model.named_buffers()), **constants}
    for t in emitted.inputs:
        if t.kind == "USER_INPUT":
            continue
        if t.target not in state:
            raise ImportFailure(f"{t.target}: a constant of the traced graph the module does not hold")
        inputs[t.name] = state[t.target].detach().cpu().numpy().astype(
            np.float64 if t.dtype == "f" else None)
    by_node = {t.node: t for t in emitted.inputs}
    args, k = [], 0
    for item in example:
        if isinstance(item, torch.Tensor):
            node, shape = user_nodes[k]
            k += 1
            t = by_node.get(node)
            if t is None:  # an input the outputs do not read: any values of its shape do
                dims = [symbolic.evaluate(e, sym_values) for e in shape]
                args.append(torch.zeros(dims, dtype=item.dtype))
                continue
            args.append(torch.from_numpy(np.ascontiguousarray(inputs[t.name])).to(item.dtype))
        else:
            args.append(item)
    try:
        with torch.no_grad():
            got = model(*args)
    except Exception as e:
        where = ", ".join(f"{k}={v}" for k, v in sizes.items())
        text = str(e).strip().splitlines()
        raise ImportFailure(f"the module raised {type(e).__name__} at the test sizes {where}: "
                            f"{text[0] if text else ''}") from None
    got = got if isinstance(got, (tuple, list)) else (got,)
    named = {}
    for (name, _, _), g in zip(emitted.outputs, got):
        g = g.detach()
        named[name] = g.to(torch.float64).numpy() if g.is_floating_point() else g.numpy()
    ref = reference(op, sizes, inputs)
    bad = compare(op, "f32", named, ref, inputs)
    if bad is None:
        return None
    where = ", ".join(f"{k}={v}" for k, v in sizes.items())
    return f"module and spec disagree at {where}: {bad}"
