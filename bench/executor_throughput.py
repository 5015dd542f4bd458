"""Evaluation throughput of the local pool and of Ray, for 1, 2 and 4 concurrent workers.

    python bench/executor_throughput.py --out DIR

Every evaluation goes through the real evaluator on a bench backend whose build
costs a fixed time and then fails (so each evaluation is render + a fixed-cost
build + the executor's own overhead: pickling, dispatch, the result's way back).
The cost is either slept ('sleep': what an executor adds around waiting work,
e.g. a remote compile) or spent on the CPU ('busy': process CPU time, so
workers beyond the host's cores cannot help). Worker start-up is kept out of
the timed part: each executor first evaluates one 1 s job per worker, side by
side. Each configuration is timed ``--repeat`` times; the table shows the median
(and the best, which is less disturbed by other load on the host).

The local Ray cluster declares as many CPUs as the largest worker count, so it
may run as many tasks at once as the pool runs processes. Writes
DIR/executor_throughput.json and prints a table.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kdsl.backends.base import BuildError, Built, Gene, Space

HERE = Path(__file__).resolve().parent
SPEC = str(HERE.parent / "specs" / "swiglu.kspec")
BACKEND = "bench-fixed-cost"
SPACE = Space((Gene("work", ("sleep", "busy")), Gene("cost_ms", (50, 100, 200, 500, 1000)),
               Gene("i", tuple(range(100_000)))))


class FixedCostBackend:
    """Renders a comment; its build costs ``cost_ms`` and then fails, on purpose."""
    name = BACKEND
    devices = ("cpu",)
    language = "python"

    def supports(self, op, device):
        return None

    def space(self, op, device):
        return SPACE

    def render(self, op, genome, device):
        return f"# fixed-cost candidate {sorted(genome.items())}\n"

    def build(self, op, source, device) -> Built:
        genes = dict(_genes(source))
        seconds = genes["cost_ms"] / 1000
        if genes["work"] == "sleep":
            time.sleep(seconds)
        else:
            start = time.process_time()
            while time.process_time() - start < seconds:
                pass
        raise BuildError("bench: the fixed cost is spent; nothing to run")


def _genes(source: str):
    import ast
    return ast.literal_eval(source.split("candidate ", 1)[1].strip())


def register() -> None:
    """The pool's worker initializer: makes the bench backend known in that process."""
    from kdsl import backends
    backends.REGISTRY[BACKEND] = FixedCostBackend()


def evaluate(job):
    """Ray's evaluation: the real evaluator, with the bench backend registered."""
    register()
    from kdsl.search.eval.evaluator import evaluate as real
    return real(job)


# ---- measuring ----

def jobs(op, work: str, cost_ms: int, n: int, first: int):
    from kdsl.search.candidate import Candidate
    from kdsl.search.jobs import EvalConfig, EvalJob
    config = EvalConfig(device="cpu", time=False, timeout_s=60.0)
    return [EvalJob(op, Candidate.of(BACKEND, {"work": work, "cost_ms": cost_ms, "i": i}),
                    config) for i in range(first, first + n)]


def run_all(executor, batch) -> float:
    """Seconds to evaluate ``batch``; each result must be the bench's build failure."""
    start = time.perf_counter()
    futures = [executor.submit(j) for j in batch]
    results = [f.result() for f in futures]
    elapsed = time.perf_counter() - start
    wrong = [r for r in results if r.stage != "build" or "fixed cost" not in r.message]
    if wrong:
        raise SystemExit(f"bench: an evaluation did not run as planned: {wrong[0].stage}: "
                         f"{wrong[0].message[:300]}")
    return elapsed


def measure(name: str, make, op, workers: int, works: list[str], cost_ms: int, evals: int,
            repeat: int, counter: list[int]) -> list[dict]:
    """One executor with ``workers`` workers: warm it up, then time each kind of work."""
    t0 = time.perf_counter()
    executor = make(workers)
    rows = []
    try:
        # long enough that every worker is started (an idle one would take them all)
        run_all(executor, jobs(op, "sleep", 1000, workers, counter[0]))
        counter[0] += workers
        warmup_s = time.perf_counter() - t0
        for work in works:
            rates = []
            for _ in range(repeat):
                batch = jobs(op, work, cost_ms, evals, counter[0])
                counter[0] += evals
                rates.append(evals / run_all(executor, batch))
            cores = min(workers, os.cpu_count() or 1) if work == "busy" else workers
            ideal = cores / (cost_ms / 1000)
            rate = statistics.median(rates)
            rows.append({"executor": name, "workers": workers, "work": work,
                         "cost_ms": cost_ms, "evals": evals, "repeat": repeat,
                         "evals_per_s": round(rate, 3), "best_evals_per_s": round(max(rates), 3),
                         "all_evals_per_s": [round(r, 3) for r in rates],
                         "ideal_evals_per_s": round(ideal, 3),
                         "efficiency": round(rate / ideal, 3), "warmup_s": round(warmup_s, 3)})
            print(f"{name:5s} {work:5s} workers={workers}: {rate:.2f} eval/s "
                  f"(runs: {', '.join(f'{r:.2f}' for r in rates)})", file=sys.stderr)
    finally:
        executor.shutdown()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for executor_throughput.json")
    p.add_argument("--evals", type=int, default=24, help="timed evaluations per configuration")
    p.add_argument("--cost-ms", type=int, default=200, choices=SPACE.gene("cost_ms").values)
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--work", default="sleep,busy")
    p.add_argument("--executors", default="pool,ray")
    p.add_argument("--repeat", type=int, default=3, help="timed batches per configuration; "
                                                         "the table shows their median")
    args = p.parse_args(argv)
    worker_counts = [int(w) for w in args.workers.split(",")]
    works = args.work.split(",")
    names = args.executors.split(",")

    sys.path.insert(0, str(HERE))  # so workers and Ray pickle this module by name
    import executor_throughput as bench  # noqa: F401 - the importable twin of __main__
    from kdsl import spec
    op = spec.find_op(spec.load(SPEC), None)
    bench.register()

    info = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "host": {"cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
                     "platform": platform.platform(), "loadavg_start": os.getloadavg()},
            "versions": _versions(), "spec": "specs/swiglu.kspec",
            "method": "real evaluator, bench backend: fixed-cost build that fails; "
                      "all jobs of a batch submitted at once; per configuration, the median "
                      "of --repeat batches; warm-up (one 1 s job per worker, side by side) "
                      "untimed"}
    makers, cleanup = {}, []
    if "pool" in names:
        from kdsl.search.executors import PoolExecutor
        makers["pool"] = lambda w: PoolExecutor(
            workers=w, initializer="executor_throughput:register")
    if "ray" in names:
        import ray
        from kdsl.search.ray_executor import RayExecutor
        tmp = tempfile.mkdtemp(prefix="kb", dir="/tmp")
        cleanup.append(lambda: shutil.rmtree(tmp, ignore_errors=True))
        t = time.perf_counter()
        ray.init(num_cpus=max(worker_counts), include_dashboard=False, _temp_dir=tmp,
                 log_to_driver=False, logging_level="warning")
        info["ray_cluster_start_s"] = round(time.perf_counter() - t, 3)
        info["ray_cluster"] = {k: v for k, v in ray.cluster_resources().items()
                               if k in ("CPU", "GPU")}
        env = {"env_vars": {"PYTHONPATH": str(HERE)}}
        makers["ray"] = lambda w: RayExecutor(workers=w, evaluate_fn=bench.evaluate,
                                              runtime_env=env)
        cleanup.insert(0, ray.shutdown)
    rows, counter = [], [0]
    try:
        for w in worker_counts:  # executors interleaved, so both see the same load
            for name in names:
                rows += measure(name, makers[name], op, w, works, args.cost_ms, args.evals,
                                args.repeat, counter)
    finally:
        for fn in cleanup:
            fn()
    rows.sort(key=lambda r: (r["executor"], r["work"] != "sleep", r["workers"]))
    info["host"]["loadavg_end"] = os.getloadavg()
    info["results"] = rows
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "executor_throughput.json").write_text(json.dumps(info, indent=2) + "\n")
    _table(info)
    return 0


def _versions() -> dict:
    import importlib.metadata as md
    out = {"python": platform.python_version()}
    for dist in ("kdsl", "ray", "torch", "triton"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def _table(info: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    v, h = info["versions"], info["host"]
    title = (f"evaluation throughput, {info['date']}, {h['cpu_count']} CPUs "
             f"(load {h['loadavg_start'][0]:.1f}), python {v['python']}, ray {v['ray']}")
    t = Table(title=title)
    for col in ("executor", "work", "workers", "eval/s (median)", "best", "ideal",
                "efficiency", "warm-up s"):
        t.add_column(col, justify="left" if col in ("executor", "work") else "right",
                     no_wrap=True)
    for r in info["results"]:
        t.add_row(r["executor"], f"{r['work']} {r['cost_ms']} ms", str(r["workers"]),
                  f"{r['evals_per_s']:.2f}", f"{r['best_evals_per_s']:.2f}",
                  f"{r['ideal_evals_per_s']:.2f}", f"{r['efficiency']:.0%}",
                  f"{r['warmup_s']:.1f}")
    Console(width=max(100, shutil.get_terminal_size().columns)).print(t)


if __name__ == "__main__":
    sys.exit(main())
