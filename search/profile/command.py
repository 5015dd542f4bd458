"""``kdsl profile SPEC [--backend B] [--genome JSON | --source FILE]``: one candidate profiled.

Exit codes: 0 profiled; 1 the machine could not profile it (no profiler, no counters,
the kernel failed under the profiler: one line says which); 2 bad usage (a bad genome,
backend or op, ``--device cuda`` without a GPU).
"""
from __future__ import annotations

import json
import sys

from kdsl import backends
from kdsl.errors import UsageError

from ..eval_command import candidate_of, op_of
from . import metrics as m
from .profiler import cuda_ready, profile_source


def run(args) -> int:
    op = op_of(args)
    candidate = candidate_of(args)
    backend = backends.get(candidate.backend)
    device = args.device or ("cuda" if candidate.backend.startswith("triton") else "cpu")
    if device not in backend.devices:
        raise UsageError(f"backend '{backend.name}' does not run on {device}")
    reason = backend.supports(op, device)
    if reason:
        raise UsageError(f"backend '{backend.name}' cannot run op '{op.name}': {reason}")
    if device == "cuda" and (why := cuda_ready()):
        raise UsageError(f"--device cuda: {why}")
    source = candidate.source if candidate.source is not None else \
        backend.render(op, _genome(backend.space(op, device), candidate.genes), device)
    profile, diagnosis = profile_source(args.spec, op.name, backend.name, source, device)
    if args.json:
        print(json.dumps({"profile": profile.to_record(),
                          "diagnosis": diagnosis.to_record() if diagnosis else None},
                         indent=2, default=str))
        return 0 if profile.ok else 1
    if not profile.ok:
        print(f"kdsl: profile: {profile.message}", file=sys.stderr)
        return 1
    print(f"{op.name} · {backend.name} on {device} ({profile.tool}, "
          f"{profile.seconds:.1f} s)")
    for k in profile.kernels:
        print(f"  {k.name}: " + ", ".join(_figures(k)))
    if profile.missing:
        print(f"  (this {profile.tool} gave no value for: {', '.join(profile.missing)})")
    print(diagnosis.line if diagnosis else "no diagnosis: the profile holds no metrics")
    return 0


def _genome(space, genes: dict) -> dict:
    for name, value in genes.items():
        if name not in space.names:
            raise UsageError(f"unknown gene '{name}'; the space has {', '.join(space.names)}")
        if value not in space.gene(name).values:
            raise UsageError(f"gene {name}={value!r} is not one of {space.gene(name).values}")
    return {**space.default(), **genes}


def _figures(k) -> list[str]:
    shown = ((m.DURATION, "time", lambda v: f"{v / 1e3:.4g} us"),
             (m.DRAM_THROUGHPUT, "DRAM", lambda v: f"{v:.0f}%"),
             (m.SM_THROUGHPUT, "SM", lambda v: f"{v:.0f}%"),
             (m.ACHIEVED_OCCUPANCY, "occupancy", lambda v: f"{v:.0f}%"),
             (m.REGISTERS, "registers", lambda v: f"{v:.0f}"),
             (m.INSTRUCTIONS, "instructions", lambda v: f"{v:.3g}"),
             (m.CYCLES, "cycles", lambda v: f"{v:.3g}"))
    return [f"{label} {fmt(k.get(name))}" for name, label, fmt in shown
            if k.get(name) is not None]
