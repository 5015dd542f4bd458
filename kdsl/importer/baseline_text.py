"""The baseline: the module's traced graph, before decomposition, as one torch expression.

The graph's ATen calls (``aten.conv2d``, ``aten.linear``, ``aten.mish``: the kernels eager
PyTorch runs for the module) nest into one expression on the spec's input names and dims,
so it runs at any size and on any device the spec is checked or timed on.

A node read twice is written twice (so computed twice): the checker accepts no name a
baseline binds itself (``:=``), so the graph cannot share it.
"""
from __future__ import annotations

import math
import operator

import torch

from . import symbolic
from .errors import ImportFailure

DROPPED_KWARGS = ("layout", "pin_memory", "memory_format")
MAX_BASELINE_CHARS = 20000


def baseline(eager, input_names: dict, printer: symbolic.Printer, mutated=frozenset()) -> str:
    """``input_names``: the module attribute (parameters, buffers) or argument name of each
    input -> its spec name; ``mutated``: the buffers the module updates in place."""
    sig = eager.graph_signature
    names = {}
    for s in sig.input_specs:
        key = s.arg.name if s.kind.name == "USER_INPUT" else s.target
        if key in input_names:
            # the module updates it in place (batch norm's running statistics): the baseline
            # updates a copy, so the spec's inputs stay as they were
            copy = ".clone()" if key in mutated or s.arg.name in mutated else ""
            names[s.arg.name] = input_names[key] + copy
    device_of = next(iter(input_names.values()), None)
    for s in sig.input_specs:  # constants of forward the spec writes as numbers
        value = eager.constants.get(s.target) if s.kind.name == "CONSTANT_TENSOR" else None
        if s.arg.name not in names and value is not None and value.numel() == 1 \
                and value.device.type != "meta":
            dev = f", device={device_of}.device" if device_of else ""
            names[s.arg.name] = f"torch.tensor({value.item()!r}, dtype={value.dtype}{dev})"
    texts: dict[str, str] = dict(names)

    def render(node) -> str:
        """The node's expression, its inputs first (only what the outputs read)."""
        if node.name in texts:
            return texts[node.name]
        val = node.meta.get("val")
        if node.op != "call_function" or not isinstance(val, (torch.Tensor, tuple, list)):
            return _arg(node, texts, printer, device_of)  # a size, in the spec's dims
        for a in node.all_input_nodes:
            render(a)
        if node.target is operator.getitem:
            text = f"{texts[node.args[0].name]}[{node.args[1]}]"
        else:
            args = [_arg(a, texts, printer, device_of) for a in node.args]
            args += [f"{k}={_arg(v, texts, printer, device_of)}" for k, v in node.kwargs.items()
                     if k not in DROPPED_KWARGS]
            text = f"torch.ops.{node.target}({', '.join(args)})"
        texts[node.name] = text
        return text

    out = next(n for n in eager.graph.nodes if n.op == "output")
    results = list(out.args[0])[-len(sig.user_outputs):]
    parts = [render(r) for r in results]
    text = parts[0] if len(parts) == 1 else f"({', '.join(parts)})"
    if len(text) > MAX_BASELINE_CHARS:
        raise ImportFailure(f"the baseline expression grows past {MAX_BASELINE_CHARS} characters "
                            "(a value read many times is written out each time)")
    return text


def _arg(a, texts, printer, device_of) -> str:
    import torch.fx
    if isinstance(a, torch.fx.Node):
        if a.name in texts:
            return texts[a.name]
        val = a.meta.get("val")
        if isinstance(val, (torch.SymInt, int)):
            return printer(symbolic.expr_of(val))
        raise ImportFailure(f"the baseline cannot write the value of node {a.name}")
    if isinstance(a, (list, tuple)):
        return f"[{', '.join(_arg(x, texts, printer, device_of) for x in a)}]"
    if isinstance(a, torch.dtype):
        return str(a)
    if isinstance(a, torch.device):
        return f"{device_of}.device" if device_of else "None"
    if isinstance(a, float):
        if math.isinf(a):
            return "math.inf" if a > 0 else "-math.inf"
        return "math.nan" if math.isnan(a) else repr(a)
    if isinstance(a, torch.SymInt):
        return printer(symbolic.expr_of(a))
    return repr(a)
