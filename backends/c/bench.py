"""Timing c kernels against the torch baseline at an op's ``bench cpu:`` sizes.

    python -m kdsl.backends.c.bench softmax rmsnorm layernorm embedding_bag_sum
    python -m kdsl.backends.c.bench softmax --try 'acc=double' --try 'vec=128'

Kernel and baseline runs are interleaved and their medians compared, so load
from other processes on a shared machine hits both alike. Each ``--try`` is a
genome given as changes to the default (``gene=value,gene=value``). Before
timing, the kernel's outputs are checked against the baseline's.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from kdsl import baseline, cases, dtypes, spec
from kdsl.sizes import shape_of

from kdsl.backends.c.backend import BACKEND


def bench_point(op):
    points = [p for p in op.bench if p.device == "cpu"] or list(op.bench)
    return points[0]


def parse_genome(text: str, space) -> dict:
    """None when a named gene or value is not in this op's space."""
    genome = space.default()
    for item in filter(None, text.split(",")):
        name, value = item.split("=", 1)
        if name not in space.names:
            return None
        values = [v for v in space.gene(name).values if str(v) == value]
        if not values:
            return None
        genome[name] = values[0]
    return genome


def setup(op):
    point = bench_point(op)
    case = cases.bench_case(op, point)
    inputs = baseline.to_torch(op, case.dtype, case.inputs)
    outputs = {t.name: torch.empty(shape_of(op, t.name, case.sizes),
                                   dtype=dtypes.torch_dtype(op.dtype_of(t.name, case.dtype)))
               for t in op.outputs}
    return case, inputs, outputs


def agree(op, got: dict, want: dict) -> bool:
    for name, w in want.items():
        g = got[name]
        if g.is_floating_point():
            if not torch.allclose(g.double(), w.double(), rtol=2e-2, atol=2e-2, equal_nan=True):
                return False
        elif not torch.equal(g.to(w.dtype), w):
            return False
    return True


def measure(fn_a, fn_b, reps: int, warmup: int = 2) -> tuple[float, float, float, float]:
    """Medians then minimums (ms) of interleaved runs of ``fn_a`` and ``fn_b``."""
    for _ in range(warmup):
        fn_a(), fn_b()
    ta, tb = [], []
    for _ in range(reps):
        t = time.perf_counter()
        fn_a()
        ta.append(time.perf_counter() - t)
        t = time.perf_counter()
        fn_b()
        tb.append(time.perf_counter() - t)
    return (statistics.median(ta) * 1e3, statistics.median(tb) * 1e3,
            min(ta) * 1e3, min(tb) * 1e3)


def run(name: str, tries: list[str], reps: int) -> float:
    op = spec.load(spec.library_dir() / f"{name}.kspec").ops[0]
    space = BACKEND.space(op, "cpu")
    case, inputs, outputs = setup(op)
    call_base = baseline.baseline_callable(op, case.sizes, inputs)
    with torch.no_grad():
        want = baseline.outputs_of(op, call_base())
    best = 0.0
    for text in [""] + tries:
        genome = parse_genome(text, space)
        if genome is None:
            continue
        built = BACKEND.build(op, BACKEND.render(op, genome, "cpu"), "cpu")

        def call_kernel():
            built.fn(inputs, outputs, case.sizes)
        call_kernel()
        ok = agree(op, outputs, want)
        with torch.no_grad():
            base_ms, kern_ms, base_min, kern_min = measure(call_base, call_kernel, reps)
        speedup = base_ms / kern_ms
        best = max(best, speedup if ok else 0.0)
        label = text or "default"
        print(f"{name:24s} {label:40s} torch {base_ms:9.2f} ms   c {kern_ms:9.2f} ms   "
              f"x{speedup:6.2f}   (min: {base_min:8.2f} / {kern_min:8.2f} ms, "
              f"x{base_min / kern_min:5.2f}){'' if ok else '   OUTPUTS DISAGREE'}", flush=True)
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ops", nargs="+")
    ap.add_argument("--try", dest="tries", action="append", default=[],
                    help="a genome as changes to the default: gene=value,gene=value")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args(argv)
    best = [run(n, args.tries, args.reps) for n in args.ops]
    if all(b > 0 for b in best):
        geo = math.exp(sum(math.log(b) for b in best) / len(best))
        print(f"geometric mean of the best speedups: x{geo:.2f}")


if __name__ == "__main__":
    main()
