"""Engine overhead per node, outside evaluation, as the tree grows (issue: it must stay flat).

A fake backend and an instant fake evaluator stand in for real kernels, so all
the time measured is the engine's own: policy choice, operator, cache lookup
and insert, record append (with fsync), summary rewrite.

    python bench/engine_overhead.py --nodes 10000 --out DIR
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from concurrent.futures import Future
from datetime import date
from pathlib import Path

from kdsl import backends
from kdsl.backends.base import Built, Gene, Space
from kdsl.search import runs
from kdsl.search.engine import Display
from kdsl.search.result import Result
from kdsl.search.settings import SearchSettings

SPACE = Space(tuple(Gene(f"g{i}", tuple(range(16)), ordered=True) for i in range(6)))


class Backend:
    name, devices, language = "bench-fake", ("cpu",), "python"

    def supports(self, op, device):
        return None

    def space(self, op, device):
        return SPACE

    def render(self, op, genome, device):
        return ""

    def build(self, op, source, device):
        return Built(fn=lambda *a: None)


class Executor:
    workers = 1

    def submit(self, job) -> Future:
        g = job.candidate.genes
        r = 1.0 + sum((v * (i + 3)) % 7 for i, v in enumerate(g.values())) / 40
        f: Future = Future()
        f.set_result(Result(True, "timing", time_ms=1 / r, baseline_ms=1.0,
                            baseline_name="fake", artifacts={"source": "# k\n"}))
        return f

    def shutdown(self):
        pass


class Clock(Display):
    """Wall time at every node, to read the per-node cost in windows."""

    def __init__(self):
        self.stamps = []

    def update(self, stats, record):
        self.stamps.append(time.perf_counter())


def window_ms(stamps: list[float], lo: int, hi: int) -> float:
    return (stamps[hi - 1] - stamps[lo - 1]) / (hi - lo) * 1000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--policy", default="mcts")
    ap.add_argument("--cost-model", choices=("auto", "on", "off"), default="auto",
                    help="mcts's cost model (auto: on where lightgbm is installed)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    backends.REGISTRY["bench-fake"] = Backend()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for policy in args.policy.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            clock = Clock()
            s = SearchSettings(spec="specs/softmax.kspec", op=None, backends=("bench-fake",),
                               policy=policy, seed=0, budget=args.nodes, executor="inline",
                               use_priors=False, knowledge_path=str(Path(tmp) / "k.json"),
                               cost_model=args.cost_model)
            t0 = time.perf_counter()
            runs.start(s, Path(tmp) / "run", None, clock, Executor())
            total = time.perf_counter() - t0
            st = clock.stamps
            marks = [m for m in (1000, 2000, 5000, 10000) if m <= len(st)]
            row = {"policy": policy, "cost_model": args.cost_model, "nodes": len(st),
                   "total_s": round(total, 2)}
            for m in marks:
                row[f"ms_per_node_at_{m}"] = round(window_ms(st, max(2, m - 500), m), 3)
            rows.append(row)
            print(json.dumps(row))
    result = {"date": date.today().isoformat(), "host": platform.node(),
              "cpu": platform.processor() or platform.machine(), "python": sys.version.split()[0],
              "rows": rows}
    (out / "engine_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
