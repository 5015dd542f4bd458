"""The numpy backend: vectorized numpy code rendered from the IR, a CPU fallback for any op.

Floats compute in float32 or float64 (the ``precision`` gene), integers in
int64. The kernel reads its inputs as numpy views of the CPU tensors and
writes into numpy views of the outputs (bf16 goes through a float32 buffer).
Genes beyond those of ``array_module.array_genes``: ``precision``, einsum
``optimize`` (numpy's contraction planner, which reaches BLAS) and ``chunk``
(rows of the first output index per block, for cache locality).
"""
from __future__ import annotations

import json

from kdsl import ir

from kdsl.backends.array import analysis as aa
from kdsl.backends.array.dialect import Dialect, Val, atom
from kdsl.backends.array.module import array_genes, compute_source, load_module
from kdsl.backends.base import Built, Gene, Genome, Space, Unsupported

_UFUNC = {
    "exp": "np.exp({0})", "log": "np.log({0})", "sqrt": "np.sqrt({0})",
    "log1p": "np.log1p({0})", "expm1": "np.expm1({0})",
    "rsqrt": "(1.0 / np.sqrt({0}))", "tanh": "np.tanh({0})", "erf": "rt.erf({0})",
    "sigmoid": "rt.sigmoid({0})", "silu": "rt.silu({0})", "relu": "np.maximum({0}, 0)",
    "abs": "np.abs({0})", "min": "np.minimum({0}, {1})", "max": "np.maximum({0}, {1})",
    "floor": "np.floor({0})", "ceil": "np.ceil({0})", "trunc": "np.trunc({0})",
    "round": "np.round({0})",
    "pow": "np.power({0}, {1})", "where": "np.where({0}, {1}, {2})", "hash64": "rt.hash64({0})",
}


class NumpyDialect(Dialect):
    name = "numpy"
    xp = "np"

    def header(self, precision: str) -> list[str]:
        return ["import math", "", "import numpy as np", "",
                "from kdsl.backends.array import numpy_runtime as rt", "",
                f"F = np.{'float64' if precision == 'f64' else 'float32'}",
                "W = np.float64", "I = np.int64", "B = np.bool_"]

    def cast(self, code: str, dtype: str) -> str:
        return f"{atom(code)}.astype({dtype})"

    def transpose(self, code: str, perm: list[int]) -> str:
        return f"{atom(code)}.transpose({', '.join(map(str, perm))})"

    def flip(self, code: str, dims: list[int]) -> str:
        return f"np.flip({code}, {tuple(dims)})"  # a view

    def einsum(self, spec: str, operands: list[str], optimize: bool) -> str:
        return f"np.einsum({spec!r}, {', '.join(operands)}, optimize={optimize})"

    def ufunc(self, fn: str, args: list[Val]) -> str:
        return _UFUNC[fn].format(*(a.code for a in args))


DIALECT = NumpyDialect()
# 'loop': one vectorized reduction per segment (numpy's reduceat walks columns one by one)
SEGMENT_METHODS = ("loop", "reduceat")

_KERNEL = '''

def kernel(inputs, outputs, sizes):
    outs = {name: rt.out_buffer(t) for name, t in outputs.items()}
    with np.errstate(all="ignore"):
        _compute(inputs, outs, sizes)
    for name, t in outputs.items():
        rt.finish(t, outs[name])
'''


class NumpyBackend:
    name = "numpy"
    devices = ("cpu",)
    language = "python"

    def available(self, device: str = "cpu") -> bool:
        return device == "cpu"

    def supports(self, op: ir.Op, device: str) -> str | None:
        if device not in self.devices:
            return f"the numpy backend runs on the CPU, not {device}"
        return aa.unsupported_reason(op)

    def space(self, op: ir.Op, device: str) -> Space:
        f = aa.features(op)
        genes = []
        if f.floats:
            genes.append(Gene("precision", ("f32", "f64"), doc="compute dtype of floats"))
        genes += array_genes(op, SEGMENT_METHODS)
        if f.contraction:
            genes.append(Gene("optimize", (True, False), doc="np.einsum's optimize"))
        if f.chunkable:
            genes.append(Gene("chunk", (0, 16, 64, 256, 1024, 4096), ordered=True,
                              doc="rows of the first output index per block (0: one block)"))
        return Space(tuple(genes))

    def render(self, op: ir.Op, genome: Genome, device: str) -> str:
        reason = self.supports(op, device)
        if reason:
            raise Unsupported(reason)
        genome = self.space(op, device).complete(genome)
        doc = f'"""kdsl numpy kernel for op {op.name} ({op.hash}), genome {json.dumps(genome)}."""'
        lines = [doc] + DIALECT.header(genome.get("precision", "f32")) + ["", ""]
        lines += compute_source(op, genome, DIALECT, "outs")
        return "\n".join(lines) + "\n" + _KERNEL

    def build(self, op: ir.Op, source: str, device: str) -> Built:
        module = load_module(source, "numpy")
        return Built(module.kernel, meta={"backend": self.name})


BACKEND = NumpyBackend()
