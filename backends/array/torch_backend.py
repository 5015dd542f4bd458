"""The torch backend: the spec's baseline expression, or torch code rendered from the IR.

Genes: ``mode`` 'baseline' renders a module that evaluates ``op.baseline`` (in
the namespace ``kdsl.baseline.namespace`` gives it) and copies the result into
the outputs; 'compose' lowers the IR through ``array_lowering`` with the torch
dialect (float32 compute, int64 integers), on CPU or CUDA. ``compile`` wraps
the computation in ``torch.compile``. The array genes (``array_module``)
only change 'compose' modules.
"""
from __future__ import annotations

import json

from kdsl import ir

from kdsl.backends.array import analysis as aa
from kdsl.backends.array.dialect import Dialect, Val, atom
from kdsl.backends.array.module import array_genes, compute_source, load_module
from kdsl.backends.base import Built, Gene, Genome, Space, Unsupported

_UFUNC = {
    "exp": "torch.exp({0})", "log": "torch.log({0})", "sqrt": "torch.sqrt({0})",
    "log1p": "torch.log1p({0})", "expm1": "torch.expm1({0})",
    "rsqrt": "torch.rsqrt({0})", "tanh": "torch.tanh({0})", "erf": "torch.erf({0})",
    "sigmoid": "torch.sigmoid({0})", "silu": "torch.nn.functional.silu({0})",
    "relu": "torch.relu({0})", "abs": "torch.abs({0})", "pow": "torch.pow({0}, {1})",
    "floor": "torch.floor({0})", "ceil": "torch.ceil({0})", "trunc": "torch.trunc({0})",
    "round": "torch.round({0})",
    "where": "torch.where({0}, {1}, {2})", "hash64": "rt.hash64({0})",
}


class TorchDialect(Dialect):
    name = "torch"
    xp = "torch"
    dev = ", dev"

    def header(self, precision: str) -> list[str]:
        return ["import math", "", "import torch", "",
                "from kdsl.backends.array import torch_runtime as rt", "",
                f"F = torch.{'float64' if precision == 'f64' else 'float32'}",
                "W = torch.float64", "I = torch.int64", "B = torch.bool"]

    def prologue(self) -> list[str]:
        return ["dev = next(iter(outs.values())).device"]

    def cast(self, code: str, dtype: str) -> str:
        return f"{atom(code)}.to({dtype})"

    def transpose(self, code: str, perm: list[int]) -> str:
        return f"{atom(code)}.permute({', '.join(map(str, perm))})"

    def flip(self, code: str, dims: list[int]) -> str:
        return f"torch.flip({code}, {tuple(dims)})"

    def einsum(self, spec: str, operands: list[str], optimize: bool) -> str:
        return f"torch.einsum({spec!r}, {', '.join(operands)})"

    def ufunc(self, fn: str, args: list[Val]) -> str:
        if fn in ("min", "max"):
            a, b = args
            if a.scalar or b.scalar:  # torch.minimum/maximum take tensors only
                t, s = (b, a) if a.scalar else (a, b)
                return f"torch.clamp({t.code}, {'max' if fn == 'min' else 'min'}={s.code})"
            return f"torch.{'minimum' if fn == 'min' else 'maximum'}({a.code}, {b.code})"
        return _UFUNC[fn].format(*(a.code for a in args))


DIALECT = TorchDialect()

_COMPOSE_KERNEL = '''

_run = {run}


def kernel(inputs, outputs, sizes):
    with torch.no_grad():
        _run(inputs, outputs, sizes)
'''

_BASELINE = '''{doc}
import math

import torch
import torch.nn.functional as F

from kdsl import torch_ops as kt

_OUTPUTS = {outputs!r}


def _baseline({params}**_):
    return {source}


_run = {run}


def kernel(inputs, outputs, sizes):
    with torch.no_grad():
        result = _run(**inputs, **sizes)
    if not isinstance(result, (tuple, list)):
        result = (result,)
    if len(result) != len(_OUTPUTS):
        raise ValueError(f"the baseline returned {{len(result)}} values for {{len(_OUTPUTS)}} outputs")
    for name, value in zip(_OUTPUTS, result):
        outputs[name].copy_(value)
'''


class TorchBackend:
    name = "torch"
    devices = ("cpu", "cuda")
    language = "python"

    def available(self, device: str = "cpu") -> bool:
        import torch
        return device == "cpu" or (device == "cuda" and torch.cuda.is_available())

    def modes(self, op: ir.Op) -> tuple[str, ...]:
        modes = ("baseline",) if op.baseline is not None else ()
        return modes + (("compose",) if aa.unsupported_reason(op) is None else ())

    def supports(self, op: ir.Op, device: str) -> str | None:
        if device not in self.devices:
            return f"the torch backend runs on {' and '.join(self.devices)}, not {device}"
        if not self.modes(op):
            return f"op {op.name} has no baseline, and {aa.unsupported_reason(op)}"
        return None

    def space(self, op: ir.Op, device: str) -> Space:
        modes = self.modes(op)
        genes = [Gene("mode", modes or ("baseline",),
                      doc="the spec's baseline expression, or torch code composed from the IR"),
                 Gene("compile", (False, True), doc="wrap the computation in torch.compile")]
        if "compose" in modes:
            genes += array_genes(op, ("scatter",))
        return Space(tuple(genes))

    def render(self, op: ir.Op, genome: Genome, device: str) -> str:
        reason = self.supports(op, device)
        if reason:
            raise Unsupported(reason)
        genome = self.space(op, device).complete(genome)
        doc = f'"""kdsl torch kernel for op {op.name} ({op.hash}), genome {json.dumps(genome)}."""'
        if genome["mode"] == "baseline":
            return self._render_baseline(op, genome, doc)
        if "compose" not in self.modes(op):
            raise Unsupported(f"cannot compose op {op.name}: {aa.unsupported_reason(op)}")
        lines = [doc] + DIALECT.header("f32") + ["", ""]
        lines += compute_source(op, genome, DIALECT, "outs")
        run = "torch.compile(_compute)" if genome["compile"] else "_compute"
        return "\n".join(lines) + "\n" + _COMPOSE_KERNEL.format(run=run)

    def _render_baseline(self, op: ir.Op, genome: Genome, doc: str) -> str:
        if op.baseline is None:
            raise Unsupported(f"op {op.name} declares no baseline")
        params = "".join(f"{name}, " for name in [t.name for t in op.inputs] + list(op.dims))
        run = "torch.compile(_baseline)" if genome["compile"] else "_baseline"
        return _BASELINE.format(doc=doc, outputs=tuple(t.name for t in op.outputs),
                                params=params, source=op.baseline.source, run=run)

    def build(self, op: ir.Op, source: str, device: str) -> Built:
        module = load_module(source, "torch")
        return Built(module.kernel, meta={"backend": self.name})


BACKEND = TorchBackend()
