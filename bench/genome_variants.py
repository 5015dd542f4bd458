"""Time chosen variants of one op's kernel side by side: genomes and hand-written sources.

    python bench/genome_variants.py --op max_pool1d --backend triton --device cuda \\
        --genome '{}' --genome '{"reduce": "looped"}' --source my_kernel.py --out DIR

What a performance engineer does before widening a search space: put a few chosen
variants through the full evaluation (every dtype's correctness cases, then the bench
point's timing against the baseline, in one worker) and compare them with the memory
floor and the compiler's register report. ``--genome`` takes a JSON object of genes
(missing genes take the defaults; ``{}`` is the default genome), ``--source`` a kernel
module file. Writes DIR/variants-OP.json and prints a table; unknown ops, bad JSON or an
unreadable source exit 2.

``--profile-runs N`` skips the evaluation: in this one process it runs each variant's
kernel N times at the bench point, then the torch.compile baseline N times, for a profiler
to watch (``ncu -k regex:_kd_ --launch-skip 1 --launch-count 1 python bench/...``).
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from kdsl.search.candidate import Candidate
from kdsl.search.executors import PoolExecutor
from kdsl.search.jobs import EvalConfig, EvalJob
from kdsl.search.runs import versions
from script_args import device_ready, library_op  # bench/script_args.py


def _usage(msg: str) -> int:
    print(f"genome_variants: error: {msg}", file=sys.stderr)
    return 2


def candidates(args) -> list[tuple[str, Candidate]]:
    """(label, candidate) per --genome and --source, in the order given; ValueError if bad."""
    out = []
    for text in args.genome or []:
        try:
            genes = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"--genome {text!r} is not JSON: {e}") from None
        if not isinstance(genes, dict):
            raise ValueError(f"--genome {text!r} is not a JSON object of genes")
        out.append((json.dumps(genes, sort_keys=True), Candidate.of(args.backend, genes)))
    for path in args.source or []:
        try:
            source = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read --source {path}: {e}") from None
        out.append((f"source {path}", Candidate.of(args.backend, {}, source)))
    if not out:
        raise ValueError("give at least one --genome or --source")
    return out


def row_of(label: str, result) -> dict:
    a = result.artifacts
    floor = a.get("floor_ms")
    kernels = [m for m in (a.get("meta") or {}).values() if isinstance(m, dict)]
    return {"variant": label, "ok": result.ok, "stage": result.stage,
            "message": result.message[:300] if not result.ok else "",
            "time_ms": result.time_ms, "baseline_ms": result.baseline_ms,
            "baseline": result.baseline_name, "floor_ms": floor,
            "of_floor": round(result.time_ms / floor, 3) if result.time_ms and floor else None,
            "speedup": round(result.speedup, 3),
            "registers": max((m.get("n_regs", -1) for m in kernels), default=None),
            "spills": max((m.get("n_spills", -1) for m in kernels), default=None)}


def profile_runs(op, todo, device: str, runs: int) -> None:
    """Each variant's kernel, then the compiled baseline, ``runs`` times at the bench point."""
    import torch
    from kdsl import backends
    from kdsl.search.eval import correctness, timing
    point = timing.bench_point(op, device)
    case = timing.bench_case(op, point, timing.bench_dtype(op, point, None))
    ins = correctness.fresh_inputs(op, case.dtype, case.inputs, device)
    outs = correctness.alloc_outputs(op, case.sizes, case.dtype, device, 0)
    for label, cand in todo:
        backend = backends.get(cand.backend)
        source = cand.source or backend.render(op, backend.space(op, device).complete(
            cand.genes), device)
        fn = backend.build(op, source, device).fn
        for _ in range(runs):
            fn(ins, outs, dict(case.sizes))
        torch.cuda.synchronize() if device == "cuda" else None
        print(f"{op.name} {label}: ran {runs} times", flush=True)
    with torch.no_grad():
        run, name, _ = timing.baseline_runner(op, case.sizes, ins, "compile")
        for _ in range(runs):
            run()
    torch.cuda.synchronize() if device == "cuda" else None
    print(f"{op.name} baseline ({name}): ran {runs} times", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", required=True,
                    help="a library op's name, or a .kspec file (its first op)")
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--genome", action="append", help="a JSON object of genes (repeatable)")
    ap.add_argument("--source", action="append", help="a kernel module file (repeatable)")
    ap.add_argument("--reps", type=int, default=50, help="timed runs per variant")
    ap.add_argument("--profile-runs", type=int, default=0,
                    help="only run each variant and the baseline this many times (no checks)")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.op.endswith(".kspec"):
        from kdsl import spec
        from kdsl.errors import SpecError
        try:
            op = spec.find_op(spec.load(args.op), None)
        except (OSError, SpecError) as e:
            return _usage(str(e).splitlines()[0])
    else:
        op = library_op("genome_variants", args.op)
    if op is None:
        return 2
    try:
        todo = candidates(args)
    except ValueError as e:
        return _usage(e.args[0])
    if not device_ready("genome_variants", args.device):
        return 2
    if args.profile_runs:
        profile_runs(op, todo, args.device, args.profile_runs)
        return 0
    if not args.out:
        return _usage("--out DIR is required (except with --profile-runs)")
    config = EvalConfig(device=args.device, reps=args.reps)
    rows = []
    with PoolExecutor(workers=1) as pool:
        for label, cand in todo:
            rows.append(row_of(label, pool.submit(EvalJob(op, cand, config)).result()))
            r = rows[-1]
            shown = (f"failed at {r['stage']}: {r['message'][:160]}" if not r["ok"]
                     else "correct, not timed" if r["time_ms"] is None
                     else f"{r['time_ms']:.4g} ms, {r['of_floor']}x floor, {r['speedup']}x "
                          f"{r['baseline']}, regs {r['registers']}, spills {r['spills']}")
            print(f"{op.name} {label}: {shown}", flush=True)
    device = "cpu"
    if args.device == "cuda":
        import torch
        device = torch.cuda.get_device_name(0)
    doc = {"meta": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "op": op.name, "backend": args.backend, "device": device,
                    "reps": args.reps, "versions": versions(),
                    "command": " ".join(["python", "bench/genome_variants.py"]
                                        + (argv if argv is not None else sys.argv[1:]))},
           "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"variants-{op.name}.json").write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
