"""Evaluations per second through the real pool: what judging each candidate in a process
of its own costs.

    python bench/isolation_cost.py --device cpu|cuda --out DIR [--label after] [--ops a,b]

Every library op's default kernel (c on the CPU, triton on a GPU) goes through
``PoolExecutor`` and the whole evaluator (render, guards, build, correctness, timing),
``--repeat`` times, all submitted at once; the figure is evaluations finished per second
of wall time, workers started beforehand (one warm-up job a worker, not counted). Each
pass gets fresh compile caches (``TRITON_CACHE_DIR``, ``KDSL_CACHE_DIR``), so a later pass
does not ride on an earlier one's compiles.

The script uses only interfaces that predate the judge/candidate split, so the figure
before it is taken by running this same file with ``PYTHONPATH`` pointing at an older
checkout laid out as a ``kdsl`` package (``--label before``). Writes
DIR/isolation_cost-LABEL.json and prints one line.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from script_args import device_ready, library_ops  # noqa: E402


def git_commit(path: Path) -> str:
    """The commit the imported kdsl comes from: a COMMIT file beside an unpacked older
    checkout, else git's."""
    stamp = path.parent / "COMMIT"
    if stamp.exists():
        return stamp.read_text().strip()
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for isolation_cost-LABEL.json")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="passes over the ops")
    ap.add_argument("--ops", help="library ops, comma-separated (default: all)")
    ap.add_argument("--label", default="after", help="names the output file")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds an evaluation")
    args = ap.parse_args(argv)
    if not device_ready("isolation_cost", args.device):
        return 2
    ops = library_ops("isolation_cost", args.ops.split(",") if args.ops else None)
    if ops is None:
        return 2
    caches = tempfile.mkdtemp(prefix="kdsl-isolation-cost-")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(caches, "triton")
    os.environ["KDSL_CACHE_DIR"] = os.path.join(caches, "kdsl")

    import kdsl
    from kdsl.search.candidate import Candidate
    from kdsl.search.executors import PoolExecutor
    from kdsl.search.jobs import EvalConfig, EvalJob
    backend = "c" if args.device == "cpu" else "triton"
    config = EvalConfig(device=args.device, timeout_s=args.timeout)
    jobs = [(op.name, EvalJob(op, Candidate.of(backend), config))
            for _ in range(args.repeat) for _, op in ops]
    warm = EvalConfig(device=args.device, time=False, timeout_s=args.timeout)
    with PoolExecutor(workers=args.workers) as pool:
        first = ops[0][1]
        for f in [pool.submit(EvalJob(first, Candidate.of(backend), warm))
                  for _ in range(args.workers)]:
            f.result()
        start = time.perf_counter()
        futures = [(name, pool.submit(job)) for name, job in jobs]
        results = [(name, f.result()) for name, f in futures]
        wall = time.perf_counter() - start
    rows = [{"op": name, "ok": r.ok, "stage": r.stage, "message": r.message[:200],
             "time_ms": r.time_ms, "stage_s": r.artifacts.get("stage_s", {}),
             "timing_phases_s": r.artifacts.get("timing_phases_s", {}),
             "sandbox_wait_s": r.artifacts.get("sandbox_wait_s")} for name, r in results]
    kdsl_root = Path(kdsl.__file__).resolve().parent
    out = {"label": args.label, "device": args.device, "workers": args.workers,
           "evaluations": len(rows), "ok": sum(r["ok"] for r in rows),
           "wall_s": round(wall, 2), "evals_per_s": round(len(rows) / wall, 4),
           "median_eval_s": round(statistics.median(sum(r["stage_s"].values())
                                                     for r in rows), 3),
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "host": platform.node(), "cpus": os.cpu_count(), "kdsl_at": str(kdsl_root),
           "commit": git_commit(kdsl_root), "rows": rows}
    if args.device == "cuda":
        import torch
        out["gpu"] = torch.cuda.get_device_name()
    path = Path(args.out)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"isolation_cost-{args.label}.json").write_text(json.dumps(out, indent=1))
    print(f"{args.label}: {out['evaluations']} evaluations ({out['ok']} ok) in {wall:.1f} s "
          f"with {args.workers} workers: {out['evals_per_s']:.3f}/s; median evaluation "
          f"{out['median_eval_s']:.2f} s ({kdsl_root})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
