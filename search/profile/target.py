"""The profiled process: one candidate built and called at the bench point, nothing else.

    python -m kdsl.search.profile.target JOB.json

JOB names the spec file, the op, the backend, the kernel's source and the device. The
kernel is built (Triton compiles on its first calls, so it is called ``warmup`` times
first), then on CUDA called once between ``cudaProfilerStart`` and ``cudaProfilerStop``
(what ncu profiles), and on the CPU called in a loop of ``loop_s`` seconds (what perf
counts, less a run without the loop). What it measured itself goes to the job's ``out``
file as JSON: the loop's time per call, the copy bandwidth and the op's traffic where asked.

The candidate already passed the search's guards and checks; this process runs it alone,
like the evaluator's candidate process, and exits. On a GPU it takes the host's device
lock (``eval.device_lock``) for its bench-size calls, ncu's replays included.
"""
from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m kdsl.search.profile.target JOB.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        job = json.load(f)
    device = job["device"]
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    report = run(job)
    if job.get("out"):
        with open(job["out"], "w") as f:
            json.dump(report, f)
    return 0


def run(job: dict) -> dict:
    import torch

    from kdsl import backends
    from kdsl import spec as spec_mod
    from kdsl.search.eval import correctness, floor, timing
    device = job["device"]
    op = spec_mod.find_op(spec_mod.load(job["spec"]), job.get("op"))
    point = timing.bench_point(op, device)
    if point is None:
        raise SystemExit(f"op {op.name} declares no bench point for {device}")
    case = timing.bench_case(op, point, timing.bench_dtype(op, point, job.get("dtype")))
    ins = correctness.fresh_inputs(op, case.dtype, case.inputs, device)
    outs = correctness.alloc_outputs(op, case.sizes, case.dtype, device, 0)
    fn = backends.get(job["backend"]).build(op, job["source"], device).fn
    report: dict = {}
    if job.get("measure_copy"):
        report["copy_bandwidth"] = floor.copy_bandwidth(device)
    if job.get("count_traffic"):
        report["traffic_bytes"] = floor.bench_traffic_bytes(op, case)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    from kdsl.search.eval import device_lock
    with torch.no_grad():
        with device_lock.shared(device):  # the first call compiles: beside others' work
            fn(ins, outs, dict(case.sizes))
            sync()
        # bench-size calls, and ncu's replays of the profiled one, alone on the GPU, as
        # the evaluations' timed runs are
        with device_lock.exclusive(device):
            for _ in range(int(job.get("warmup", 2)) - 1):
                fn(ins, outs, dict(case.sizes))
            sync()
            if job.get("range") and device == "cuda":
                torch.cuda.profiler.start()
                fn(ins, outs, dict(case.sizes))
                sync()
                torch.cuda.profiler.stop()
        loop_s = float(job.get("loop_s", 0.0))
        if loop_s > 0:
            calls, t0 = 0, time.perf_counter()
            while calls < 3 or time.perf_counter() - t0 < loop_s:
                fn(ins, outs, dict(case.sizes))
                calls += 1
            sync()
            report["call_ms"] = (time.perf_counter() - t0) / calls * 1e3
            report["calls"] = calls
    return report


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
