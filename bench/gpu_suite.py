"""The whole operator library searched on one CUDA GPU, in one command.

    python bench/gpu_suite.py --out DIR [--ops a,b] [--budget 60] [--workers 12]   # ops in the order given
    python bench/gpu_suite.py --store-genomes DIR/suite.json   # (any machine) keep the winners
    python bench/gpu_suite.py --out B --deadline-s 380 --rest-of A/suite.json   # split runs,
    python bench/gpu_suite.py --out C --merge A/suite.json B/suite.json         # then one table

For every op in ``specs/``: ``kdsl search --backend triton --device cuda`` with the
offline operators (mcts, one seed), many evaluations in flight in a pool of
worker processes (they compile and check in parallel on the host's CPUs; the
timing stage holds the GPU alone, see ``kdsl.search.eval.device_lock``). The search
checks correctness on one seed's cases in the bench dtype only and rewards speed over torch eager,
for speed (torch.compile in every worker would cost a compile each); then the best kernel and
the default genome are evaluated again, in full (every dtype the op declares, more
timed runs), against torch eager and against torch.compile, in a fresh worker process
per op, while the next op is searched (their timed runs take turns on the GPU:
``bench/suite_confirm.py``). The table's times come from that confirmation, not from
the search. Writes DIR/suite.json after every op (a killed run keeps what it
finished), DIR/suite.md, and DIR/runs.tar.gz (every run directory).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tarfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import suite_table  # noqa: E402  (bench/suite_table.py)
from script_args import Kept, device_ready, library_ops  # noqa: E402  (bench/script_args.py)
from suite_confirm import Confirmations  # noqa: E402  (bench/suite_confirm.py)

GIB = 1 << 30


def footprint_bytes(op, point, dtype: str) -> int:
    """Every input and output at the bench point, whole (gathered tables included)."""
    from kdsl.search.eval.floor import allocated_bytes
    return allocated_bytes(op, point.size_dict(), dtype)


def workers_for(op, point, dtype: str, wanted: int) -> int:
    """As many workers as memory holds. Bench-size work holds the GPU alone (the device
    lock), so the card needs one worker's bench tensors (inputs, outputs, the baseline's
    inputs, the oracle) plus a context and small cases per worker; but every worker keeps
    the bench inputs on the host (numpy, generated once per process)."""
    import torch
    each_host = 3 * footprint_bytes(op, point, dtype) + GIB
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    n = min(wanted, int(0.6 * host // each_host))
    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        n = min(n, int((0.8 * free - 6 * footprint_bytes(op, point, dtype)) // GIB))
    return max(1, n)


def search_op(path, op, args, out: Path, pool, cache: str) -> dict:
    from kdsl.search import runs
    from kdsl.search.display import LogDisplay
    from kdsl.search.jobs import SEARCH_SLOW_CUTOFF, EvalConfig
    from kdsl.search.settings import SearchSettings
    from kdsl.search.eval.timing import bench_dtype, bench_point
    point = bench_point(op, args.device)
    dtype = bench_dtype(op, point, None)
    workers = workers_for(op, point, dtype, args.workers)
    settings = SearchSettings(
        spec=str(path), op=op.name, backends=(args.backend,), device=args.device,
        policy=args.policy,
        seed=args.seed, budget=args.budget, workers=workers, executor="pool", llm="off",
        use_priors=False,
        eval=EvalConfig(device=args.device, dtypes=(dtype,), seeds=(1,), reps=args.search_reps,
                        warmup=3, baseline="eager", slow_cutoff=SEARCH_SLOW_CUTOFF))
    start = time.monotonic()
    store, summary = runs.start(settings, out / "runs" / op.name, cache,
                                LogDisplay(every=max(1, args.budget // 4)), Kept(pool))
    summary["wall_s"] = round(time.monotonic() - start, 2)
    summary["engine_workers"] = workers
    return summary


def host(device: str) -> dict:
    import torch
    if device != "cuda":
        import platform
        return {"gpu": f"cpu ({platform.machine()})", "cpus": os.cpu_count()}
    p = torch.cuda.get_device_properties(0)
    return {"gpu": torch.cuda.get_device_name(0), "sms": p.multi_processor_count,
            "memory_gib": round(p.total_memory / GIB, 1), "cpus": os.cpu_count()}


def run(args) -> int:
    # --ops in the order given, so a call with little time left does the first ones
    ops = library_ops("gpu_suite", args.ops.split(",") if args.ops else None,
                      in_given_order=True)
    if ops is None or not device_ready("gpu_suite", args.device):
        return 2
    if args.rest_of:
        done = suite_table.finished(args.rest_of_docs)
        ops = [(path, op) for path, op in ops if op.name not in done]
        print(f"gpu_suite: {len(done)} ops done in {', '.join(args.rest_of)}; "
              f"{len(ops)} to run", flush=True)
    from kdsl.search.executors import PoolExecutor
    from kdsl.search.runs import versions
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = args.cache or str(out / "cache.sqlite")
    doc = {"meta": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "host": host(args.device), "backend": args.backend, "versions": versions(), "budget": args.budget,
                    "policy": args.policy, "seed": args.seed, "workers": args.workers,
                    "command": " ".join(sys.argv)}, "rows": []}
    search_pool = PoolExecutor(workers=args.workers)
    # a CPU has no device lock: its timed runs would share the cores with the search
    confirmations = Confirmations(args, serial=args.serial_confirm or args.device != "cuda",
                                  lanes=args.confirm_lanes)
    t0 = time.monotonic()
    # `timeout` and batch schedulers stop a run with SIGTERM: leave by the finally below, so
    # the table says which op was cut off and runs.tar.gz keeps its run directory
    signal.signal(signal.SIGTERM, _terminated)
    current = None  # the op being searched
    searched = None  # its row, between its search's end and its hand-over to a lane
    rows = doc["rows"]

    def record(new):  # rows already in the document: a stop while printing loses none
        for row in new:
            print(suite_table.line(row), flush=True)
        if new:
            suite_table.write(out, doc)

    try:
        for path, op in ops:
            record(confirmations.move_done(rows))
            # the confirmations still queued run after the last search: count them too
            if args.deadline_s and \
                    time.monotonic() - t0 + confirmations.backlog_s() > args.deadline_s:
                print(f"gpu_suite: deadline reached; {op.name} not run", flush=True)
                record(confirmations.move_done(rows, wait=True))
                rows.append({"op": op.name, "skipped": "deadline"})
                record(rows[-1:])
                continue
            current = op.name
            searched, best = search_row(path, op, args, out, search_pool, cache)
            current = None
            if "error" in searched:
                record(confirmations.move_done(rows, wait=True))
                rows.append(searched)
                record(rows[-1:])
            else:  # confirmed on a thread while the next op's search runs
                confirmations.submit(op, searched, best)
            searched = None
        record(confirmations.move_done(rows, wait=True))
    finally:
        why = "terminated" if sys.exc_info()[0] is Terminated else "interrupted"
        rows += confirmations.cut(why, rows)
        if searched is not None and searched["op"] not in {r["op"] for r in rows}:
            rows.append({**searched, "skipped": f"{why} before its confirmation"})
        if current is not None:
            rows.append({"op": current, "skipped": f"{why} during its search (runs/{current})"})
            print(f"gpu_suite: {why} during {current}", flush=True)
        search_pool.shutdown()
        doc["meta"]["wall_s"] = round(time.monotonic() - t0, 1)
        suite_table.write(out, doc)
        with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:
            if (out / "runs").exists():
                tar.add(out / "runs", arcname="runs")
    print(suite_table.markdown(doc))
    return 0


class Terminated(SystemExit):
    """SIGTERM, raised in the main thread so that cleanup runs."""


def _terminated(signum, frame):
    raise Terminated(128 + signum)


def op_class(op) -> str:
    """contraction (matrix units), sort (collectives), or memory (bound by traffic)."""
    from kdsl.backends.triton import backend as triton_backend
    dot = triton_backend._dot()
    if dot is not None and dot.matches(op):
        return "contraction"
    return "sort" if triton_backend._plan(op).kind == "collective" else "memory"


def search_row(path, op, args, out, search_pool, cache) -> tuple[dict, dict]:
    """One op's row with its search's figures (or its error), and the search's best."""
    from kdsl.search.eval.timing import bench_dtype, bench_point
    point = bench_point(op, args.device)
    row = {"op": op.name, "shape": point.size_dict(), "dtype": bench_dtype(op, point, None),
           "class": op_class(op)}
    try:
        s = search_op(path, op, args, out, search_pool, cache)
    except Exception as e:  # one op's failure is a row, not the end of the suite
        import traceback
        row["error"] = f"search: {type(e).__name__}: {e}"
        row["traceback"] = traceback.format_exc()[-2000:]
        return row, {}
    best = s.get("best") or {}
    row["search"] = {k: s.get(k) for k in ("evaluations", "failures", "failures_by_stage",
                                           "wall_s", "evaluations_per_s", "engine_workers",
                                           "seconds")}
    row["search"]["best_speedup"] = best.get("speedup")
    row["search"]["baseline"] = s.get("baseline")
    row["best_genome"] = best.get("genome")
    return row, best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for suite.json, suite.md, runs.tar.gz")
    ap.add_argument("--ops", help="comma-separated op names (default: every spec)")
    ap.add_argument("--budget", type=int, default=60, help="evaluations per op")
    ap.add_argument("--workers", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--policy", default="mcts")
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: the c backend's suite on this machine (--backend c)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", help="measurement cache (default DIR/cache.sqlite)")
    ap.add_argument("--search-reps", type=int, default=20)
    ap.add_argument("--confirm-reps", type=int, default=100)
    ap.add_argument("--serial-confirm", action="store_true",
                    help="confirm each op before the next search starts (a quiet host; "
                         "by default an op is confirmed while the next one is searched)")
    ap.add_argument("--confirm-lanes", type=int, default=2,
                    help="ops confirmed at once beside the searches (each in its own worker)")
    ap.add_argument("--deadline-s", type=float,
                    help="start no new op after this many seconds (counting the expected "
                         "time of the confirmations still queued)")
    ap.add_argument("--store-genomes", metavar="SUITE_JSON",
                    help="write each op's confirmed best genome into specs/genomes/ and stop")
    ap.add_argument("--rest-of", nargs="+", metavar="SUITE_JSON",
                    help="run only the ops these earlier parts did not finish (a suite "
                         "split across calls: then --merge the parts)")
    ap.add_argument("--merge", nargs="+", metavar="SUITE_JSON",
                    help="write one suite.json/suite.md into --out from runs split across "
                         "calls, and stop")
    args = ap.parse_args(argv)
    if args.merge:
        if not args.out:
            ap.error("--merge needs --out")
        docs = [json.loads(Path(p).read_text()) for p in args.merge]
        Path(args.out).mkdir(parents=True, exist_ok=True)
        suite_table.write(Path(args.out), suite_table.merge(docs))
        print((Path(args.out) / "suite.md").read_text())
        return 0
    if args.store_genomes:
        return suite_table.store_genomes(Path(args.store_genomes), ROOT / "specs" / "genomes")
    if args.rest_of:
        try:
            args.rest_of_docs = [json.loads(Path(p).read_text()) for p in args.rest_of]
            suite_table.finished(args.rest_of_docs)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            ap.error(f"--rest-of: not a suite.json ({type(e).__name__}: {e})")
        # the parts make one table only if they searched alike
        for path, d in zip(args.rest_of, args.rest_of_docs):
            meta = d.get("meta") or {}
            for key in ("backend", "policy", "seed", "budget"):
                if key in meta and str(meta[key]) != str(getattr(args, key)):
                    ap.error(f"--rest-of: {path} ran with {key} {meta[key]}, this run with "
                             f"{getattr(args, key)}")
            gpu = str((meta.get("host") or {}).get("gpu", ""))
            if gpu and gpu.startswith("cpu") != (args.device == "cpu"):
                ap.error(f"--rest-of: {path} ran on {gpu}, this run on {args.device}")
    if not args.out:
        ap.error("--out is required")
    if args.budget < 1 or args.workers < 1 or args.confirm_lanes < 1:
        ap.error("--budget, --workers and --confirm-lanes must be at least 1")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
