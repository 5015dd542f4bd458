"""Every spec at its bench size: torch eager, torch.compile, a backend's default genome, the floor.

    python bench/backend_table.py --device cuda --out DIR     # Triton on a GPU
    python bench/backend_table.py --device cpu --out DIR      # the c backend on this machine

Each number comes from the evaluator itself (the path every search candidate
takes): the default-genome kernel is checked for correctness, then it and the
baseline are timed in the same worker process, once against eager torch and
once against torch.compile. The floor is the bytes the op must move over the
copy bandwidth measured in that process. Writes DIR/backend_table.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from kdsl import backends, spec
from kdsl.search.candidate import Candidate
from kdsl.search.executors import PoolExecutor
from kdsl.search.jobs import EvalConfig, EvalJob
from kdsl.search.runs import versions
from script_args import device_name, device_ready, library_ops  # bench/script_args.py


def row_of(op, point_sizes, eager, compiled) -> dict:
    a = eager.artifacts or {}
    return {
        "op": op.name, "shape": point_sizes, "dtype": (a.get("bench") or {}).get("dtype"),
        "ok": eager.ok, "stage": eager.stage,
        "message": "" if eager.ok else eager.message.splitlines()[0][:200],
        "eager_ms": eager.baseline_ms,
        # a torch.compile that fell back to eager (it failed, or captured no graph) has no
        # compile figure: its time is eager's
        "compile_ms": compiled.baseline_ms if compiled.baseline_name == "torch.compile" else None,
        "compile_baseline": compiled.baseline_name,
        "kernel_ms": eager.time_ms, "floor_ms": a.get("floor_ms"),
    }


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def write_tables(out: Path, meta: dict, rows: list) -> str:
    """DIR/backend_table.{json,md} with the rows so far, rewritten after every op so that a
    run stopped part-way keeps what it measured; returns the markdown."""
    backend = meta["backend"]
    (out / "backend_table.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [f"{meta['date']} · {meta['device']} · backend {backend} (default genome) · "
             f"torch {meta['versions']['torch']} · triton {meta['versions']['triton']}", "",
             "| op | shape | dtype | eager ms | compile ms | kernel ms | floor ms | "
             "eager/kernel | compile/kernel | kernel/floor |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
    for r in rows:
        shape = ",".join(f"{k}={v}" for k, v in r["shape"].items())
        kern = f(r["kernel_ms"]) if r["ok"] else f"failed ({r['stage']})"
        lines.append(f"| {r['op']} | {shape} | {r['dtype']} | {f(r['eager_ms'])} | "
                     f"{f(r['compile_ms'])} | {kern} | {f(r['floor_ms'])} | "
                     f"{f(ratio(r['eager_ms'], r['kernel_ms']))} | "
                     f"{f(ratio(r['compile_ms'], r['kernel_ms']))} | "
                     f"{f(ratio(r['kernel_ms'], r['floor_ms']))} |")
    fell_back = [r["op"] for r in rows if r.get("compile_baseline") not in (None, "torch.compile")]
    if fell_back:
        lines += ["", f"torch.compile fell back to eager (no compile figure): {', '.join(fell_back)}"]
    (out / "backend_table.md").write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


def merge(paths: list[str], out: Path) -> int:
    """One table from parts measured in separate runs: rows in library order, each part's
    dates kept; parts from different devices or backends are refused."""
    parts = [json.loads(Path(p).read_text()) for p in paths]
    kinds = {(p["meta"]["device"], p["meta"]["backend"], json.dumps(p["meta"]["versions"],
                                                                    sort_keys=True))
             for p in parts}
    names = [r["op"] for p in parts for r in p["rows"]]
    twice = sorted({n for n in names if names.count(n) > 1})
    if len(kinds) != 1 or twice:
        why = f"{', '.join(twice)} measured in more than one part" if twice else \
            "the parts come from different devices, backends or versions"
        print(f"backend_table: error: {why}", file=sys.stderr)
        return 2
    rows = {r["op"]: r for p in parts for r in p["rows"]}
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(parts[0]["meta"], date=" and ".join(p["meta"]["date"] for p in parts))
    print(write_tables(out, meta, [rows[op.name] for _, op in spec.library_ops()
                                   if op.name in rows]))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--backend", help="default: triton on cuda, c on cpu")
    ap.add_argument("--ops", help="comma-separated op names (default: every spec)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--merge", nargs="+", metavar="TABLE_JSON",
                    help="join backend_table.json files of runs over parts of the library "
                         "(one device) into DIR, measuring nothing")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--baselines", default="eager,compile",
                    help="which torch baselines to time (eager, compile)")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, Path(args.out))
    backend = args.backend or ("triton" if args.device == "cuda" else "c")
    ops = library_ops("backend_table", args.ops.split(",") if args.ops else None)
    if ops is None or not device_ready("backend_table", args.device):
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    host = {"device": device_name(args.device), "backend": backend, "versions": versions()}
    rows, table = [], ""
    for _, op in ops:
        # a worker process per op, so that no state of one op's torch.compile (a limit, a
        # cache) can reach the next op's figures (see timing.baseline_function)
        pool = PoolExecutor(workers=1)
        try:
            b = backends.get(backend)
            cand = Candidate.of(backend, b.space(op, args.device).default(), origin="default")
            t0 = time.monotonic()
            res = {}
            for mode in args.baselines.split(","):
                cfg = EvalConfig(device=args.device, baseline=mode, timeout_s=args.timeout,
                                 reps=20 if args.device == "cuda" else 10)
                res[mode] = pool.submit(EvalJob(op, cand, cfg)).result()
            point = next((p for p in op.bench if p.device == args.device),
                         next(p for p in op.bench if p.device is None))
            first = res[next(iter(res))]
            row = row_of(op, point.size_dict(), res.get("eager", first),
                         res.get("compile", first))
            if "compile" not in res:
                row["compile_ms"] = None
            row["wall_s"] = round(time.monotonic() - t0, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
            now = datetime.now(timezone.utc).isoformat(timespec="seconds")
            table = write_tables(out, dict(host, date=f"{started} to {now}"), rows)
        finally:
            pool.shutdown()
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
