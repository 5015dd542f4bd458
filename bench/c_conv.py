"""The c backend's default kernel against eager torch on the KernelBench convolutions.

    PYTHONPATH=. python bench/c_conv.py [--problems 50,54-87] [--reps 5] [--out FILE.json]

Each problem's spec is rendered with the default genome, built, checked against the
baseline at its ``bench cpu:`` point (max relative error printed), then the kernel and
eager torch are timed interleaved, ``--reps`` times each after a warm-up; the medians
and their ratio (eager / kernel: above 1 the kernel is faster) are printed and written.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from kdsl import backends, baseline, spec
from kdsl.backends.c import render as _render  # noqa: F401  (imported before any edit)
from kdsl.search.eval.timing import bench_dtype, bench_point
from kdsl.sizes import evaluate

ROOT = Path(__file__).resolve().parent.parent
CONV = [50] + list(range(54, 88))


def problems(text: str | None) -> list[int]:
    if not text:
        return CONV
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def spec_path(n: int) -> Path:
    return next((ROOT / "specs/kernelbench/level1").glob(f"{n}_*.kspec"))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def one(n: int, reps: int) -> dict:
    op = spec.load(spec_path(n)).ops[0]
    point = bench_point(op, "cpu")
    dtype = bench_dtype(op, point, None)
    sizes = point.size_dict()
    tdt = getattr(torch, {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[dtype])
    gen = torch.Generator().manual_seed(0)
    ins = {t.name: torch.randn([evaluate(e, sizes) for e in t.shape], generator=gen).to(tdt)
           for t in op.inputs}
    outs = {t.name: torch.empty([evaluate(e, sizes) for e in t.shape], dtype=tdt)
            for t in op.outputs}
    b = backends.get("c")
    src = b.render(op, b.space(op, "cpu").default(), "cpu")
    kernel = b.build(op, src, "cpu").fn
    base = baseline.baseline_callable(op, sizes, ins)
    with torch.no_grad():
        want = baseline.outputs_of(op, base())
        kernel(ins, outs, sizes)
        err = max(((outs[k].float() - v.float()).abs().max() /
                   v.float().abs().max().clamp_min(1e-6)).item() for k, v in want.items())
        tk, te = [], []
        for _ in range(reps):
            tk.append(timed(lambda: kernel(ins, outs, sizes)))
            te.append(timed(base))
    k, e = statistics.median(tk), statistics.median(te)
    return {"problem": n, "op": op.name, "kernel_ms": round(k * 1e3, 3),
            "eager_ms": round(e * 1e3, 3), "speedup": round(e / k, 4), "rel_err": err}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    rows = []
    for n in problems(args.problems):
        r = one(n, args.reps)
        rows.append(r)
        print(f"{n:3d} {r['op'][:60]:60s} kernel {r['kernel_ms']:10.3f} ms  eager "
              f"{r['eager_ms']:9.3f} ms  x{r['speedup']:.3f}  err {r['rel_err']:.1e}",
              flush=True)
    gm = math.exp(statistics.mean(math.log(r["speedup"]) for r in rows))
    print(f"geomean x{gm:.3f}; below 0.3x: "
          f"{[r['problem'] for r in rows if r['speedup'] < 0.3]}")
    if args.out:
        Path(args.out).write_text(json.dumps({
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "threads": torch.get_num_threads(), "reps": args.reps, "rows": rows,
            "geomean": round(gm, 4)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
