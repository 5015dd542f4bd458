"""A real Triton search on CUDA through the Ray executor, one evaluation per GPU at a time.

    python bench/ray_gpu_search.py --out DIR [--spec specs/softmax.kspec] [--gpus N]

Three runs of ``kdsl search SPEC --backend triton --device cuda --executor ray``
(through ``kdsl.search.runs``), all with the same seed and ``--workers N``, so the
engine keeps N evaluations in flight and proposes the same sequence each time:

1. ``multi``: Ray runs N evaluations at once, one per GPU, on a fresh cache. Every
   result records the GPU it ran on (artifact ``ray_gpu_ids``).
2. ``replay``: one GPU (the executor runs one task at a time), on ``multi``'s cache:
   must give identical nodes and evaluate nothing (the cache is the driver's).
3. ``single``: one GPU on a fresh cache: the throughput a single GPU gives; GPU
   timings differ run to run, so its search may diverge, but every candidate both
   runs evaluated must get the same verdict (ok, stage).

Writes DIR/ray_gpu_search.json and prints a table. Without CUDA it says so in one
line and exits 2.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fail(message: str) -> int:
    print(f"ray_gpu_search: {message}", file=sys.stderr)
    return 2


def preflight(gpus: int | None) -> tuple[int, str] | str:
    """(GPUs to use, GPU name), or why this machine cannot run the benchmark."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine (torch.cuda.is_available() is False)"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed: pip install 'kdsl[ray]'"
    from kdsl import backends
    if not backends.get("triton").available("cuda"):
        return "the triton backend cannot run on cuda here"
    count = torch.cuda.device_count()
    if gpus is not None and not 1 <= gpus <= count:
        return f"--gpus {gpus}: this machine has {count} GPU(s)"
    return gpus or count, torch.cuda.get_device_name(0)


def settings_for(args, workers: int):
    from kdsl.search.jobs import SEARCH_SLOW_CUTOFF, EvalConfig
    from kdsl.search.settings import SearchSettings
    return SearchSettings(spec=args.spec, op=args.op, backends=("triton",), device="cuda",
                          policy=args.policy, seed=args.seed, budget=args.budget,
                          workers=workers, executor="ray",
                          executor_options={"address": args.address} if args.address else {},
                          eval=EvalConfig(device="cuda", slow_cutoff=SEARCH_SLOW_CUTOFF))


def one_run(name: str, args, out: Path, cache: Path, gpus_for_executor: int, workers: int):
    from kdsl.search import runs
    from kdsl.search.display import LogDisplay
    from kdsl.search.ray_executor import RayExecutor
    executor = RayExecutor(workers=gpus_for_executor)  # attached: the script owns Ray
    start = time.perf_counter()
    store, summary = runs.start(settings_for(args, workers), out / name, str(cache),
                                LogDisplay(every=max(1, args.budget // 8)), executor)
    elapsed = time.perf_counter() - start
    placed = collections.Counter()
    for r in store.nodes:
        ids = (r["result"].get("artifacts") or {}).get("ray_gpu_ids")
        if ids is not None:
            placed[",".join(str(i) for i in ids)] += 1
    return store, {
        "run_dir": str(out / name), "executor_gpus": gpus_for_executor,
        "engine_workers": workers, "nodes": len(store.nodes),
        "evaluated": executor.submitted, "elapsed_s": round(elapsed, 3),
        "evaluations_per_s": round(executor.submitted / elapsed, 4) if elapsed else None,
        "failures": summary["failures"], "failures_by_stage": summary["failures_by_stage"],
        "best_speedup": (summary.get("best") or {}).get("speedup"),
        "evaluations_by_gpu": dict(sorted(placed.items())),
        "resources": executor.resources}


def strip(nodes):
    return [{k: v for k, v in r.items() if k != "time"} for r in nodes]


def verdicts(nodes) -> dict:
    return {r["key"]: (r["result"]["ok"], r["result"]["stage"]) for r in nodes
            if r.get("key") and r["result"]["stage"] != "operator"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--spec", default=str(ROOT / "specs" / "softmax.kspec"))
    p.add_argument("--op")
    p.add_argument("--gpus", type=int, help="GPUs to use (default: all)")
    p.add_argument("--budget", type=int, default=24)
    p.add_argument("--policy", default="mcts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--address", help="a running Ray cluster (default: a local one)")
    args = p.parse_args(argv)
    ready = preflight(args.gpus)
    if isinstance(ready, str):
        return fail(ready)
    gpus, gpu_name = ready
    out = Path(args.out)
    if (out / "multi").exists():
        return fail(f"{out} holds an earlier run; pick an empty --out")
    out.mkdir(parents=True, exist_ok=True)

    import ray
    from kdsl.errors import SpecError, UsageError
    tmp = tempfile.mkdtemp(prefix="kg", dir="/tmp")  # Ray's socket paths must stay short
    t = time.perf_counter()
    if args.address:
        ray.init(address=args.address, log_to_driver=False, logging_level="warning")
        gpus = min(gpus, int(ray.cluster_resources().get("GPU", 0))) or gpus
    else:
        ray.init(num_gpus=gpus, include_dashboard=False, _temp_dir=tmp, log_to_driver=False,
                 logging_level="warning")
    info = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "host": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                     "gpu": gpu_name, "gpus": gpus},
            "versions": _versions(), "spec": args.spec, "op": args.op, "policy": args.policy,
            "seed": args.seed, "budget": args.budget,
            "ray_start_s": round(time.perf_counter() - t, 3),
            "ray_cluster": {k: v for k, v in ray.cluster_resources().items()
                            if k in ("CPU", "GPU")}}
    try:
        multi_store, info["multi"] = one_run("multi", args, out, out / "cache-multi.sqlite",
                                             gpus, gpus)
        replay_store, info["replay"] = one_run("replay", args, out, out / "cache-multi.sqlite",
                                               1, gpus)
        single_store, info["single"] = one_run("single", args, out,
                                               out / "cache-single.sqlite", 1, gpus)
    except (UsageError, SpecError) as e:
        return fail(str(e).splitlines()[0])
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)

    a, b = verdicts(multi_store.nodes), verdicts(single_store.nodes)
    common = sorted(set(a) & set(b))
    disagree = [k for k in common if a[k] != b[k]]
    m, s = info["multi"], info["single"]
    info["checks"] = {
        "replay_identical_to_multi": strip(replay_store.nodes) == strip(multi_store.nodes),
        "replay_evaluated": info["replay"]["evaluated"],
        "every_evaluation_on_one_gpu": all(
            "," not in k for k in m["evaluations_by_gpu"]),
        "gpus_used": len(m["evaluations_by_gpu"]),
        "common_candidates": len(common), "verdict_disagreements": disagree,
        "throughput_scaling": round(m["evaluations_per_s"] / s["evaluations_per_s"], 3)
        if m["evaluations_per_s"] and s["evaluations_per_s"] else None}
    (out / "ray_gpu_search.json").write_text(json.dumps(info, indent=2) + "\n")
    _table(info)
    c = info["checks"]
    ok = c["replay_identical_to_multi"] and c["replay_evaluated"] == 0 and not disagree \
        and c["every_evaluation_on_one_gpu"]
    if not ok:
        return fail(f"a check failed: {json.dumps(c)}")
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
    t = Table(title=f"Triton search on {h['gpus']}x {h['gpu']} through Ray, {info['date']}, "
                    f"python {v['python']}, ray {v['ray']}, torch {v['torch']}, "
                    f"triton {v['triton']}")
    for col in ("run", "GPUs", "nodes", "evaluated", "elapsed s", "eval/s", "best speedup",
                "evaluations by GPU"):
        t.add_column(col)
    for name in ("multi", "replay", "single"):
        r = info[name]
        t.add_row(name, str(r["executor_gpus"]), str(r["nodes"]), str(r["evaluated"]),
                  f"{r['elapsed_s']:.1f}", f"{r['evaluations_per_s'] or 0:.3f}",
                  f"{r['best_speedup'] or 0:.3f}",
                  " ".join(f"{k}:{n}" for k, n in r["evaluations_by_gpu"].items()))
    Console().print(t)
    Console().print(f"checks: {json.dumps(info['checks'])}")


if __name__ == "__main__":
    sys.exit(main())
