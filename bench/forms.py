"""The forms outside the library (``specs/forms/``): each spec's default kernel against
torch, through the evaluator every candidate goes through.

    python bench/forms.py --out DIR [--device cuda] [--backend triton] [--workers 4]
                          [--specs a.kspec,b.kspec] [--timeout 180]

On a GPU the baseline is torch.compile with eager timed beside it; on the CPU, eager
(torch.compile's C++ builds take minutes on two cores). Writes DIR/forms.json (rewritten
after every spec: a run stopped part-way keeps what it measured) and DIR/forms.md.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

from script_args import device_name, device_ready  # bench/script_args.py

ROOT = Path(__file__).resolve().parent.parent
FORMS = ROOT / "specs" / "forms"


def _usage(message: str) -> int:
    print(f"forms: error: {message}", file=sys.stderr)
    return 2


def row_of(path: Path, result, shape: dict) -> dict:
    a = result.artifacts
    others = a.get("baselines_ms") or {}
    row = {"spec": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
           "ok": result.ok, "stage": result.stage,
           "message": "" if result.ok else result.message[:300],
           "kernel_ms": result.time_ms, "baseline": result.baseline_name,
           "baseline_ms": result.baseline_ms, "eager_ms": others.get("eager"),
           "floor_ms": a.get("floor_ms"), "shape": shape}
    for name in ("baseline", "eager"):
        ms = row[f"{name}_ms"]
        row[f"x_{name}"] = round(ms / result.time_ms, 3) if ms and result.time_ms else None
    return row


def table(rows: list[dict]) -> str:
    lines = ["| op | ok | kernel ms | baseline | baseline ms | x baseline | eager ms | x eager "
             "| floor ms | note |", "|---|---|---|---|---|---|---|---|---|---|"]

    def f(v):
        return "-" if v is None else f"{v:.4g}"

    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "/")[:80]
    for r in rows:
        lines.append(f"| {r['op']} | {'yes' if r['ok'] else 'no'} | {f(r['kernel_ms'])} | "
                     f"{r['baseline'] or '-'} | {f(r['baseline_ms'])} | {f(r['x_baseline'])} | "
                     f"{f(r['eager_ms'])} | {f(r['x_eager'])} | {f(r['floor_ms'])} | "
                     f"{cell(r['message'])} |")
    timed = [r["x_baseline"] for r in rows if r["x_baseline"]]
    if timed:
        mean = math.exp(sum(math.log(x) for x in timed) / len(timed))
        lines.append(f"\n{len([r for r in rows if r['ok']])} of {len(rows)} correct; geometric "
                     f"mean over the baseline {mean:.3f}x over {len(timed)}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--backend", help="default: triton on cuda, c on cpu")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--specs", help="comma-separated .kspec files (default: specs/forms/)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds an evaluation")
    args = ap.parse_args(argv)
    from kdsl import spec
    from kdsl.errors import SpecError
    paths = [Path(p) for p in args.specs.split(",")] if args.specs else \
        sorted(FORMS.glob("*.kspec"))
    try:
        ops = [(p, spec.find_op(spec.load(p), None)) for p in paths]
    except (OSError, KeyError, SpecError) as e:
        return _usage(str(e).splitlines()[0])
    if not device_ready("forms", args.device):
        return 2
    from kdsl.backends import get
    from kdsl.search.candidate import Candidate
    from kdsl.search.executors import PoolExecutor
    from kdsl.search.jobs import EvalConfig, EvalJob
    from kdsl.search.eval.timing import bench_point
    from kdsl.search.runs import versions
    backend = args.backend or ("triton" if args.device == "cuda" else "c")
    config = EvalConfig(device=args.device, timeout_s=args.timeout,
                        reps=20 if args.device == "cuda" else 5,
                        baseline="compile" if args.device == "cuda" else "eager",
                        also_baselines=("eager",) if args.device == "cuda" else ())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "device": device_name(args.device), "backend": backend,
            "versions": versions(),
            "command": " ".join(["python", "bench/forms.py"]
                                + (argv if argv is not None else sys.argv[1:]))}
    rows: list[dict] = []
    with PoolExecutor(workers=args.workers) as pool:
        futures = []
        for path, op in ops:
            cand = Candidate.of(backend, get(backend).space(op, args.device).default(),
                                origin="default")
            futures.append((path, op, pool.submit(EvalJob(op, cand, config))))
        for path, op, fut in futures:
            point = bench_point(op, args.device)
            shape = point.size_dict() if point is not None else None
            rows.append({"op": op.name, **row_of(path, fut.result(), shape)})
            r = rows[-1]
            eager = f", {r['x_eager']}x eager" if r["x_eager"] else ""
            print(f"{op.name}: " + (f"{r['kernel_ms']:.4g} ms, {r['x_baseline']}x "
                                    f"{r['baseline']}{eager}"
                                    if r["ok"] and r["kernel_ms"] else
                                    f"{r['stage']}: {r['message'][:160]}"), flush=True)
            (out / "forms.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                       indent=2))
    (out / "forms.md").write_text(f"{meta['date']} · {meta['device']} · {backend}\n\n"
                                  + table(rows))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
