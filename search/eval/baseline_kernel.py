"""The spec's baseline as a kernel of a candidate process, so that it is timed as candidates
are: through the judge's round trips, on the judge's clock (``timing.judged_baseline``).

A candidate's figure counts what a step of timed calls costs beyond its fastest probe (the
wake-ups and stops of its process); a baseline timed in the judge's own process paid none
of that. On an H100 (2026-12-06) the 14 activation problems' kernels timed 4.23-4.26 ms by
their own CUDA events, as torch.compile's did, yet were judged at 4.38-4.71 ms: 0.94x by the
judge for kernels as fast as the baseline. Timed in a process of its own, the baseline pays
what the candidates pay.

Only the judge's code runs in such a process: it is a fresh candidate process that has
loaded no candidate. The baseline's outputs are dropped (it is the reference, not judged).
"""
from __future__ import annotations

from kdsl import baseline, ir


class BaselineKernel:
    """``fn(ins, outs, sizes)`` runs the baseline on ``ins``; built at its first call (the
    judge makes that call untimed), under torch.compile where ``name`` says so."""

    prepare = None
    log = ""
    meta: dict = {}

    def __init__(self, op: ir.Op, name: str):
        self.op, self.name = op, name
        self.run = None

    def fn(self, ins: dict, outs: dict, sizes: dict) -> None:
        import torch
        with torch.no_grad():  # (as the timed calls run: a compiled graph is not redone)
            if self.run is None:
                self.run = self._build(sizes)
            self.run(*(ins[t.name] for t in self.op.inputs))

    def _build(self, sizes: dict):
        from .timing import baseline_function
        fn = baseline_function(self.op, baseline.namespace(self.op, sizes, {}))
        if self.name != "torch.compile":
            return fn
        import torch
        import torch._inductor.config as inductor
        inductor.compile_threads = 1  # compiled here, in this process: no worker pool
        return torch.compile(fn)
