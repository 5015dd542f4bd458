"""Test support for the evaluator's suites: a tiny Python backend and a small softmax op.

``fakepy`` candidates are Python source defining ``kernel(inputs, outputs, sizes)``:
``render`` picks a kernel by the genome's ``variant`` gene and ``build`` executes
the source as a module. ``register()`` adds it to the backend registry; pool
workers run it at start (``PoolExecutor(initializer="fake_backend:register")``),
which works because pytest puts ``tests/`` on ``sys.path`` and spawned workers
inherit it.
"""
from __future__ import annotations

from pathlib import Path

from kdsl import spec
from kdsl.backends import REGISTRY, BuildError, Built, Gene, Space
from kdsl.search.jobs import EvalConfig

SPECS = Path(__file__).resolve().parent.parent / "specs"

SOFTMAX = '''
import numpy as np
import torch


def kernel(inputs, outputs, sizes):
    x = inputs["x"].double().numpy()
    e = np.exp(x - x.max(axis=1, keepdims=True))
    outputs["y"].copy_(torch.from_numpy(e / e.sum(axis=1, keepdims=True)))
'''

IDENTITY = '''
def kernel(inputs, outputs, sizes):
    outputs["y"].copy_(inputs["x"])
'''

VARIANTS = {"softmax": SOFTMAX, "identity": IDENTITY}

# Small and quick: one dtype, one seed, small shapes, no timing.
QUICK = EvalConfig(dtypes=("f32",), seeds=(1,), cases_per_dtype=2, max_case_elements=4096,
                   time=False, timeout_s=120.0, memory_mb=4096)


def softmax_op(bench: str = "M=64, N=128"):
    """specs/softmax.kspec with a small CPU bench point, so timing tests stay fast."""
    text = (SPECS / "softmax.kspec").read_text().replace("bench cpu: M=4096, N=4096",
                                                         f"bench cpu: {bench}")
    return spec.parse_text(text, "softmax_small.kspec").ops[0]


def load(name: str):
    return spec.load(SPECS / f"{name}.kspec").ops[0]


class FakePython:
    name = "fakepy"
    devices = ("cpu",)
    language = "python"

    def supports(self, op, device):
        return None

    def space(self, op, device):
        return Space((Gene("variant", tuple(VARIANTS)), Gene("unused", (1, 2, 4), ordered=True)))

    def render(self, op, genome, device):
        return VARIANTS[genome["variant"]]

    def build(self, op, source, device):
        namespace = {"__name__": "candidate"}
        try:
            exec(compile(source, "<candidate>", "exec"), namespace)  # noqa: S102 - test backend
        except SyntaxError as e:
            raise BuildError(f"syntax error: {e.msg}", log=f"<candidate>:{e.lineno}: {e.msg}")
        if "kernel" not in namespace:
            raise BuildError("the source defines no kernel()")
        return Built(namespace["kernel"], log="exec ok", meta={"lines": source.count("\n")})


class FakeRaw(FakePython):
    """``fakepy`` without the static guards (``unguarded``: no real backend sets it), for
    tests of what the candidate process survives: a kernel that segfaults or hangs is
    first of all one the guards reject, and the process walls must hold without them."""
    name = "fakeraw"
    unguarded = True


def register() -> None:
    REGISTRY["fakepy"] = FakePython()
    REGISTRY["fakeraw"] = FakeRaw()
