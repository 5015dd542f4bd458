"""What every backend is: a declared search space and a renderer from (IR, genome) to code.

A backend never chooses a template by op name: it reads the op's IR. The
calling convention of every built kernel is destination passing on torch
tensors (CPU or CUDA), so the evaluator can poison outputs before a run and
check that every element was written:

    kernel(inputs: dict[str, Tensor], outputs: dict[str, Tensor], sizes: dict[str, int]) -> None

bf16 tensors are real ``torch.bfloat16``; integer and float inputs keep the
dtypes the op declares (``kdsl.dtypes.torch_dtype``).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from kdsl import ir

Genome = dict[str, Any]
KernelFn = Callable[[dict, dict, dict], None]


@dataclass(frozen=True)
class Gene:
    """One schedule choice. ``ordered`` genes (block sizes, warps) allow neighbourhood steps.

    ``level`` places the choice in a search's decision order, coarse first: 0 the strategy,
    1 the kernel's structure, 2 its sizes, 3 fine tuning. None: structure for an unordered
    gene, sizes for an ordered one."""
    name: str
    values: tuple
    ordered: bool = False
    doc: str = ""
    level: int | None = None

    def __post_init__(self):
        if not self.values:
            raise ValueError(f"gene {self.name} has no values")


@dataclass(frozen=True)
class Space:
    """A backend's search space for one op on one device: named genes, a default genome."""
    genes: tuple[Gene, ...]
    defaults: tuple[tuple[str, Any], ...] = ()

    def gene(self, name: str) -> Gene:
        for g in self.genes:
            if g.name == name:
                return g
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.genes)

    def default(self) -> Genome:
        d = dict(self.defaults)
        return {g.name: d.get(g.name, g.values[0]) for g in self.genes}

    def sample(self, rng: random.Random) -> Genome:
        return {g.name: rng.choice(g.values) for g in self.genes}

    def complete(self, genome: Genome) -> Genome:
        """``genome`` restricted to this space, missing or invalid genes set to their default."""
        base = self.default()
        for g in self.genes:
            if g.name in genome and genome[g.name] in g.values:
                base[g.name] = genome[g.name]
        return base

    def size(self) -> int:
        n = 1
        for g in self.genes:
            n *= len(g.values)
        return n


@dataclass
class Built:
    """A kernel ready to call, with what the build produced (logs, compiled metadata)."""
    fn: KernelFn
    log: str = ""
    meta: dict = field(default_factory=dict)
    # compile ahead for these (sizes, dtype) pairs, all at once (a JIT backend's kernels
    # otherwise compile one after another, at their first call); None: nothing to do
    prepare: Callable[[list[tuple[dict, str]]], None] | None = None


class Unsupported(Exception):
    """The backend cannot express this op (or this op on this device)."""


class BuildError(Exception):
    """The rendered source did not build; ``log`` holds the compiler's output."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


class Backend(Protocol):
    name: str
    devices: tuple[str, ...]   # 'cpu', 'cuda'
    language: str              # 'python' or 'c': what the rendered source is

    def supports(self, op: ir.Op, device: str) -> str | None:
        """None when the backend can run ``op`` on ``device``, else the reason it cannot."""

    def space(self, op: ir.Op, device: str) -> Space:
        """The schedule genome's genes for ``op`` on ``device``."""

    def render(self, op: ir.Op, genome: Genome, device: str) -> str:
        """Source text for (op, genome). Raises Unsupported."""

    def build(self, op: ir.Op, source: str, device: str) -> Built:
        """Compile/load ``source`` into a callable kernel. Raises BuildError."""

    # Optional: ``bench_identity(op, genome, device, dtype=None) -> str | None``, equal for
    # genomes that run the same code at the op's bench point (a launcher clamps genes to
    # the sizes); a search then evaluates one of them. None: not known.
