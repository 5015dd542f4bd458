"""What compiling ahead saves: one evaluation's time with and without its prepare step.

    python bench/compile_ahead.py --ops topk_rows,sort_rows --out DIR

A Triton evaluation on a GPU compiles one kernel per test shape's row length, dtype and
specialization (a sorting network takes seconds each). With ``Built.prepare`` the build
compiles them all at once on the host's CPUs before the cases run; without it each case
compiles its kernel at its first call (both runs compile the bench point's kernels in the
build). Each op's default genome is evaluated twice (in
this order: without, then with), each in a fresh process with an empty Triton cache so
neither finds the other's kernels; writes DIR/compile_ahead.json and prints a line per
run: wall time, each stage's seconds, and what the prepare step reported.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from script_args import device_ready, library_ops  # bench/script_args.py

# one evaluation, in a process of its own (argv: op name, "on" | "off", reps)
ONE = r'''
import json, sys, time
from kdsl import spec
from kdsl.search.eval import evaluator
from kdsl.search.candidate import Candidate
from kdsl.search.jobs import EvalConfig, EvalJob
(_, op), = spec.library_ops([sys.argv[1]])
if sys.argv[2] == "off":
    check = evaluator.PIPELINE["correctness"]

    def without_prepare(run):
        run.built.prepare = None
        return check(run)
    evaluator.PIPELINE["correctness"] = without_prepare
started = time.perf_counter()
r = evaluator.evaluate(EvalJob(op, Candidate.of("triton", {}),
                               EvalConfig(device="cuda", reps=int(sys.argv[3]))))
a = r.artifacts
print("RESULT " + json.dumps({
    "op": op.name, "prepare": sys.argv[2], "ok": r.ok, "stage": r.stage,
    "message": r.message[:300], "wall_s": round(time.perf_counter() - started, 2),
    "stage_s": a.get("stage_s"), "prepare_s": a.get("prepare_s"),
    "prepare_note": a.get("prepare"), "cases": a.get("cases_checked"),
    "time_ms": r.time_ms}))
'''


def run_one(name: str, mode: str, reps: int, timeout_s: float = 1800) -> dict:
    with tempfile.TemporaryDirectory(prefix="kdsl-ahead-") as cache:
        env = dict(os.environ, TRITON_CACHE_DIR=cache)
        env.pop("TRITON_INTERPRET", None)
        try:
            proc = subprocess.run([sys.executable, "-c", ONE, name, mode, str(reps)], env=env,
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"op": name, "prepare": mode, "ok": False, "stage": "process",
                    "message": f"no result within {timeout_s:g} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"op": name, "prepare": mode, "ok": False, "stage": "process",
            "message": f"exit {proc.returncode}: {proc.stderr[-300:]}"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="topk_rows,sort_rows")
    ap.add_argument("--reps", type=int, default=10, help="timed runs of each evaluation")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    ops = library_ops("compile_ahead", [n for n in args.ops.split(",") if n], True)
    if ops is None or not device_ready("compile_ahead", "cuda"):
        return 2
    rows = []
    for _, op in ops:
        for mode in ("off", "on"):
            rows.append(run_one(op.name, mode, args.reps))
            print(json.dumps(rows[-1]), flush=True)
    import torch
    from kdsl.search.runs import versions
    doc = {"meta": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "device": torch.cuda.get_device_name(0), "cpus": os.cpu_count(),
                    "versions": versions(),
                    "command": " ".join(["python", "bench/compile_ahead.py"]
                                        + (argv if argv is not None else sys.argv[1:]))},
           "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile_ahead.json").write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
