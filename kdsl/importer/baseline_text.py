"""The baseline: the module's traced graph, before decomposition, as one torch expression.

The graph's ATen calls (``aten.conv2d``, ``aten.linear``, ``aten.mish``: the kernels eager
PyTorch runs for the module) nest into one expression on the spec's input names and dims,
so it runs at any size and on any device the spec is checked or timed on.

A node read more than once is computed once: bound where the expression first evaluates
it (``(_v_conv2d := torch.ops.aten.conv2d...)``) and read by name after. (Written out at
each read, a residual's convolution ran twice in the baseline, which made it slower than
the module and every speedup over it too high.)
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
    shared = {n.name for n in eager.graph.nodes
              if n.op == "call_function" and len(n.users) > 1 and n.name not in names}
    texts = _Texts(names, shared)

    def render(node) -> None:
        """The node's expression into ``texts``, its inputs' first (only what the outputs
        read). Nothing is read out of ``texts`` here but where it is written into the
        expression, in evaluation order."""
        if dict.__contains__(texts, node.name):
            return
        val = node.meta.get("val")
        if node.op != "call_function" or not isinstance(val, (torch.Tensor, tuple, list)):
            return  # a size, in the spec's dims: written by _arg where it is read
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

    out = next(n for n in eager.graph.nodes if n.op == "output")
    results = list(out.args[0])[-len(sig.user_outputs):]
    parts = []
    for r in results:
        render(r)
        parts.append(_arg(r, texts, printer, device_of))
    text = texts.bind(parts[0] if len(parts) == 1 else f"({', '.join(parts)})")
    if len(text) > MAX_BASELINE_CHARS:
        raise ImportFailure(f"the baseline expression grows past {MAX_BASELINE_CHARS} characters "
                            "(a value read many times is written out each time)")
    return text


class _Texts(dict):
    """Node name -> its expression; a shared node's reads are a token, which ``bind`` turns
    into a binding at the first read in the finished expression (Python evaluates it left
    to right, inner calls first) and the name at every later one."""

    def __init__(self, names: dict, shared: set):
        super().__init__(names)
        self.shared = shared

    def __getitem__(self, name: str) -> str:
        return f"\0{name}\0" if name in self.shared else super().__getitem__(name)

    def bind(self, text: str, bound: set | None = None) -> str:
        bound = set() if bound is None else bound
        out, parts = [], text.split("\0")
        for k, part in enumerate(parts):
            if k % 2 == 0:
                out.append(part)
            elif part in bound:
                out.append(f"_v_{part}")
            else:
                bound.add(part)
                inner = self.bind(dict.__getitem__(self, part), bound)
                out.append(f"(_v_{part} := {inner})")
        return "".join(out)


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
