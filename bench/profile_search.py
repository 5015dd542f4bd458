"""Profiles in the loop, measured: the same searches with profiles on and off.

    python bench/profile_search.py --out DIR [--ops softmax,specs/kernelbench/level1/19_relu.kspec]
        [--budget 20] [--workers 8] [--seeds 0] [--profile-during 2] [--deadline-s 480]

For each op (library op names, or spec files; default: four library and four KernelBench
level-1 ops), ``kdsl search`` (mcts, from the backend's default genome, LLM off) runs twice
with the same seed and budget: without profiles, then with ``--profile 1`` (new bests
profiled with Nsight Compute during the search, their diagnosis steering the mutations
and the cost model; the best profiled at the end). The two runs share one measurement
cache, so a kernel both evaluate has one timing. Reported per op:

- evaluations to reach 95% of the run's own final best, and of the better of the two
  runs' bests (the common target: a run that never gets there reads "-");
- each run's best speedup, and its best kernel's diagnosis and fraction of speed-of-light
  (the run without profiles has its best profiled after the search, outside it);
- the seconds profiling took in the run with profiles.

Writes DIR/profile_search.json after every op (a killed run keeps what it finished) and
DIR/profile_search.md; every run directory stays under DIR/runs/. Without a CUDA device
(``--device cuda``, the default) or without ncu it stops at once with one line, exit 2.
``--deadline-s`` starts no op after that many seconds (the rest are listed as skipped);
the same command again with the same --out goes on with the ops not done yet (runs cut
short by a kill are started again).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from script_args import Kept, device_name, device_ready, library_ops  # noqa: E402

PROG = "profile_search"
DEFAULT_OPS = ("softmax", "layernorm", "jagged_softmax", "matmul",
               "specs/kernelbench/level1/19_relu.kspec",
               "specs/kernelbench/level1/36_rms_norm.kspec",
               "specs/kernelbench/level1/47_sum_reduction.kspec",
               "specs/kernelbench/level1/04_matvec.kspec")
TARGET = 0.95


class _ArgError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _ArgError(message)


def parse(argv) -> argparse.Namespace:
    ap = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for the results and run dirs")
    ap.add_argument("--ops", default=",".join(DEFAULT_OPS),
                    help="library op names or .kspec files, joined by commas")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--backend", help="default: triton on cuda, c on cpu")
    ap.add_argument("--budget", type=int, default=20, help="evaluations per search")
    ap.add_argument("--workers", type=int, default=8, help="evaluations in flight")
    ap.add_argument("--seeds", default="0", help="seeds, joined by commas")
    ap.add_argument("--profile-during", type=int, default=2,
                    help="new bests profiled during a search with profiles")
    ap.add_argument("--stop-at-sol", type=float, default=None,
                    help="stop a search with profiles at this fraction of speed-of-light")
    ap.add_argument("--search-reps", type=int, default=10, help="timed runs per evaluation")
    ap.add_argument("--deadline-s", type=float, default=480.0,
                    help="start no op after this many seconds")
    args = ap.parse_args(argv)
    if args.budget < 2 or args.workers < 1 or args.profile_during < 0:
        raise _ArgError("--budget must be at least 2, --workers at least 1, "
                        "--profile-during at least 0")
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise _ArgError(f"--seeds takes whole numbers joined by commas, not {args.seeds!r}")
    if not args.seed_list:
        raise _ArgError("--seeds names no seed")
    if args.stop_at_sol is not None and not 0 < args.stop_at_sol <= 1:
        raise _ArgError("--stop-at-sol is a fraction in (0, 1]")
    args.backend = args.backend or ("triton" if args.device == "cuda" else "c")
    return args


def resolve_ops(items: list[str]):
    """(spec path, op) per item: a .kspec file's only op, or a library op by name; None
    after one line naming what is wrong."""
    from kdsl import spec as spec_mod
    from kdsl.errors import SpecError
    out, names = [], []
    for item in items:
        if item.endswith(".kspec"):
            path = Path(item) if Path(item).is_absolute() else ROOT / item
            if not path.is_file():
                print(f"{PROG}: error: no spec file {item}", file=sys.stderr)
                return None
            try:
                ops = spec_mod.load(str(path)).ops
            except SpecError as e:
                print(f"{PROG}: error: {item} does not parse: {e}".splitlines()[0],
                      file=sys.stderr)
                return None
            out.append((path, ops[0]))
        else:
            names.append(item)
            out.append(item)
    if names:
        found = library_ops(PROG, names)
        if found is None:
            return None
        by_name = {op.name: (path, op) for path, op in found}
        out = [by_name[x] if isinstance(x, str) else x for x in out]
    return out


# ---- reading runs ----

def curve(nodes: list[dict]) -> list[float]:
    """Best speedup so far after each evaluation, in the order they were made."""
    best, out = 0.0, []
    for r in sorted(nodes, key=lambda r: (r.get("iteration", r["id"]), r["id"])):
        best = max(best, float((r.get("result") or {}).get("speedup") or 0.0))
        out.append(best)
    return out


def evals_to(points: list[float], target: float) -> int | None:
    """The 1-based evaluation at which the curve first reaches ``target`` (None: never)."""
    if target <= 0:
        return None
    return next((i + 1 for i, v in enumerate(points) if v >= target * (1 - 1e-9)), None)


def best_profile(store, node: int | None) -> dict | None:
    return next((r for r in reversed(store.profiles) if r.get("node") == node), None)


# ---- running ----

def search(path: Path, op, args, seed: int, profiled: bool, out: Path, pool) -> dict:
    from kdsl.search import runs
    from kdsl.search.display import LogDisplay
    from kdsl.search.jobs import SEARCH_SLOW_CUTOFF, EvalConfig
    from kdsl.search.eval import timing
    from kdsl.search.runstore import RunStore
    from kdsl.search.settings import SearchSettings
    point = timing.bench_point(op, args.device)
    dtype = timing.bench_dtype(op, point, None) if point else None
    label = f"{op.name}-s{seed}-{'on' if profiled else 'off'}"
    settings = SearchSettings(
        spec=str(path), op=op.name, backends=(args.backend,), device=args.device,
        policy="mcts", seed=seed, budget=args.budget, workers=args.workers,
        executor="pool", llm="off", use_priors=False, use_stored=False,
        profile=1 if profiled else 0, profile_during=args.profile_during,
        stop_at_sol=args.stop_at_sol if profiled else None,
        eval=EvalConfig(device=args.device, dtypes=(dtype,) if dtype else None, seeds=(1,),
                        reps=args.search_reps, warmup=3, baseline="eager",
                        slow_cutoff=SEARCH_SLOW_CUTOFF))
    t0 = time.monotonic()
    store, summary = runs.start(settings, out / "runs" / label,
                                str(out / f"cache-{op.name}-s{seed}.sqlite"),
                                LogDisplay(every=max(1, args.budget // 4)), Kept(pool))
    wall = time.monotonic() - t0
    store = RunStore.open(out / "runs" / label)
    best = summary.get("best") or {}
    prof = best_profile(store, best.get("node"))
    if prof is None and best.get("source_path"):
        prof = profile_after(store, op, best, args)
    spent = sum(float((r.get("profile") or {}).get("seconds") or 0.0) for r in store.profiles)
    diag = (prof or {}).get("diagnosis") or {}
    return {"run": str(out / "runs" / label), "curve": curve(store.nodes),
            "evaluations": summary["evaluations"], "best_speedup": best.get("speedup"),
            "best_node": best.get("node"), "wall_s": round(wall, 2),
            "profiles": len(store.profiles), "profile_seconds": round(spent, 2),
            "stopped_early": summary.get("stopped_early"),
            "bound": diag.get("bound"), "sol": diag.get("sol"),
            "diagnosis": diag.get("line") or ((prof or {}).get("profile") or {}).get("message"),
            "best_profiled": (prof or {}).get("when") or "after"}


def profile_after(store, op, best: dict, args) -> dict | None:
    """The best kernel of a run profiled after it (a run without profiles has none)."""
    from kdsl.search.profile.profiler import profile_source
    try:
        source = (store.root / best["source_path"]).read_text()
    except OSError:
        return None
    profile, diag = profile_source(str(store.root / "spec.kspec"), op.name,
                                   best.get("backend") or args.backend, source, args.device)
    return {"when": "after", "profile": profile.to_record(),
            "diagnosis": diag.to_record() if diag else None}


def compare_row(op, path: Path, seed: int, off: dict, on: dict) -> dict:
    best = max(off.get("best_speedup") or 0.0, on.get("best_speedup") or 0.0)
    row = {"op": op.name, "spec": str(path.relative_to(ROOT) if path.is_relative_to(ROOT)
                                      else path), "seed": seed, "off": off, "on": on,
           "common_target": round(TARGET * best, 6)}
    for key, run in (("off", off), ("on", on)):
        own = TARGET * float(run.get("best_speedup") or 0.0)
        run["evals_to_95_own"] = evals_to(run["curve"], own)
        run["evals_to_95_common"] = evals_to(run["curve"], TARGET * best)
    a, b = on["evals_to_95_common"], off["evals_to_95_common"]
    row["verdict"] = ("on reached it, off did not" if a and not b else
                      "off reached it, on did not" if b and not a else
                      "neither reached it" if not a and not b else
                      "on fewer" if a < b else "off fewer" if b < a else "equal")
    return row


def summary_of(rows: list[dict]) -> dict:
    done = [r for r in rows if "on" in r]
    verdicts = [r["verdict"] for r in done]
    on = [r["on"]["evals_to_95_common"] for r in done if r["on"]["evals_to_95_common"]]
    off = [r["off"]["evals_to_95_common"] for r in done if r["off"]["evals_to_95_common"]]
    return {"ops": len(done),
            "on_fewer": sum(v in ("on fewer", "on reached it, off did not") for v in verdicts),
            "off_fewer": sum(v in ("off fewer", "off reached it, on did not") for v in verdicts),
            "equal": verdicts.count("equal"),
            "median_evals_to_95_on": statistics.median(on) if on else None,
            "median_evals_to_95_off": statistics.median(off) if off else None,
            "best_kernels_with_diagnosis": sum(bool(r["on"].get("bound")) for r in done)}


def markdown(doc: dict) -> str:
    lines = [f"# Profiles on vs off ({doc['meta']['device']}, budget {doc['meta']['budget']}, "
             f"{doc['meta']['date']})", "",
             "| op | seed | best off | best on | evals to 95% off | on | verdict | "
             "best (on): diagnosis | SOL | profiling s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        if "on" not in r:
            lines.append(f"| {r['op']} | {r.get('seed', '')} | skipped: {r['skipped']} "
                         "|||||||| ")
            continue
        on, off = r["on"], r["off"]
        sol = f"{on['sol'] * 100:.0f}%" if isinstance(on.get("sol"), (int, float)) else "-"
        lines.append(
            f"| {r['op']} | {r['seed']} | {_x(off['best_speedup'])} | {_x(on['best_speedup'])}"
            f" | {off['evals_to_95_common'] or '-'} | {on['evals_to_95_common'] or '-'} | "
            f"{r['verdict']} | {(on.get('diagnosis') or '-').replace('|', '/')} | {sol} | "
            f"{on['profile_seconds']} |")
    s = doc["summary"]
    lines += ["", f"On {s['ops']} ops: profiles on reached 95% of the common best in fewer "
                  f"evaluations on {s['on_fewer']}, off on {s['off_fewer']}, equal on "
                  f"{s['equal']}; median evaluations {s['median_evals_to_95_on']} (on) vs "
                  f"{s['median_evals_to_95_off']} (off); {s['best_kernels_with_diagnosis']} "
                  "best kernels carry a diagnosis.", ""]
    return "\n".join(lines)


def _x(v) -> str:
    return f"{v:.3f}x" if isinstance(v, (int, float)) else "-"


def earlier_rows(out: Path) -> dict:
    """(op, seed) -> the row an earlier call of this command finished in ``out``."""
    try:
        doc = json.loads((out / "profile_search.json").read_text())
    except (OSError, ValueError):
        return {}
    return {(r["op"], r["seed"]): r for r in doc.get("rows") or ()
            if isinstance(r, dict) and "on" in r and "op" in r and "seed" in r}


def write(out: Path, doc: dict) -> None:
    doc["summary"] = summary_of(doc["rows"])
    tmp = out / "profile_search.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, out / "profile_search.json")
    (out / "profile_search.md").write_text(markdown(doc))


def main(argv=None) -> int:
    try:
        args = parse(argv)
    except _ArgError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    ops = resolve_ops([x.strip() for x in args.ops.split(",") if x.strip()])
    if ops is None:
        return 2
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"{PROG}: error: cannot create --out {out}: {e.strerror}", file=sys.stderr)
        return 2
    if not device_ready(PROG, args.device):
        return 2
    if args.device == "cuda":
        from kdsl.search.profile import ncu
        if ncu.find() is None:
            print(f"{PROG}: error: ncu (Nsight Compute) is not installed or not on PATH",
                  file=sys.stderr)
            return 2
    return run(args, ops, out)


def run(args, ops, out: Path) -> int:
    from kdsl.search.executors import PoolExecutor
    from kdsl.search.runs import versions
    t0 = time.monotonic()
    doc = {"meta": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "device": device_name(args.device), "backend": args.backend,
                    "budget": args.budget, "workers": args.workers, "seeds": args.seed_list,
                    "profile_during": args.profile_during, "stop_at_sol": args.stop_at_sol,
                    "versions": versions(),
                    "command": " ".join(["python", "bench/profile_search.py", *sys.argv[1:]])},
           "rows": []}
    done = earlier_rows(out)
    with PoolExecutor(workers=args.workers) as pool:
        for path, op in ops:
            for seed in args.seed_list:
                if (op.name, seed) in done:
                    doc["rows"].append(done[(op.name, seed)])
                    continue
                if time.monotonic() - t0 > args.deadline_s:
                    doc["rows"].append({"op": op.name, "seed": seed,
                                        "skipped": f"deadline {args.deadline_s:g} s"})
                    continue
                for half in ("off", "on"):  # a run cut short by a kill starts again
                    shutil.rmtree(out / "runs" / f"{op.name}-s{seed}-{half}",
                                  ignore_errors=True)
                print(f"{PROG}: {op.name} seed {seed}: profiles off", file=sys.stderr,
                      flush=True)
                off = search(path, op, args, seed, False, out, pool)
                print(f"{PROG}: {op.name} seed {seed}: profiles on", file=sys.stderr,
                      flush=True)
                on = search(path, op, args, seed, True, out, pool)
                row = compare_row(op, path, seed, off, on)
                doc["rows"].append(row)
                print(f"{PROG}: {op.name}: off {_x(off['best_speedup'])} in "
                      f"{off['evals_to_95_common']}, on {_x(on['best_speedup'])} in "
                      f"{on['evals_to_95_common']} ({row['verdict']}); "
                      f"{on.get('diagnosis')}", file=sys.stderr, flush=True)
                write(out, doc)
    doc["meta"]["wall_s"] = round(time.monotonic() - t0, 1)
    write(out, doc)
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
