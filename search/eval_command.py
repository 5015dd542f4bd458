"""``kdsl eval``: one candidate through an isolated worker, each stage's verdict printed.

Exit codes: 0 the candidate is correct (and, when timed, believable); 1 it
failed a stage; 2 bad usage or a bad spec (raised as UsageError / SpecError
for the CLI to report).
"""
from __future__ import annotations

import json
from pathlib import Path

from kdsl import spec as spec_mod
from kdsl.errors import UsageError

from .candidate import Candidate
from .executors import PoolExecutor
from .jobs import EvalConfig, EvalJob
from .result import STAGES, Result


def candidate_of(args) -> Candidate:
    from kdsl import backends
    try:
        backends.get(args.backend)
    except KeyError as e:
        raise UsageError(e.args[0]) from None
    except Exception as e:  # the backend's module failed to import
        raise UsageError(f"backend '{args.backend}' cannot be loaded: "
                         f"{type(e).__name__}: {e}") from None
    genome = {}
    if args.genome:
        try:
            genome = json.loads(args.genome)
        except json.JSONDecodeError as e:
            raise UsageError(f"--genome is not valid JSON: {e}") from None
        if not isinstance(genome, dict):
            raise UsageError("--genome must be a JSON object of genes, e.g. '{\"BLOCK\": 128}'")
    source = None
    if args.source:
        try:
            source = Path(args.source).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read --source {args.source}: "
                             f"{getattr(e, 'strerror', None) or e}") from None
    return Candidate.of(args.backend, genome, source, origin="kdsl eval")


def op_of(args):
    """The op ``args.spec`` and ``args.op`` name; a UsageError when the file has no such op."""
    spec = spec_mod.load(args.spec)
    try:
        return spec_mod.find_op(spec, args.op)
    except KeyError as e:
        raise UsageError(e.args[0]) from None


def run(args, initializer: str | None = None) -> int:
    op = op_of(args)
    candidate = candidate_of(args)
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device on this machine")
    config = EvalConfig(device=args.device, time=not args.no_time, baseline=args.baseline)
    with PoolExecutor(workers=1, initializer=initializer) as pool:
        result = pool.submit(EvalJob(op, candidate, config)).result()
    report(op.name, candidate, result, config)
    return 0 if result.ok else 1


def _stage_rows(result: Result, config: EvalConfig) -> list[tuple[str, str, str]]:
    a = result.artifacts
    details = {
        "render": f"{len(a['source'])} chars of source" if "source" in a else "",
        "build": ", ".join(f"{k}={v}" for k, v in (a.get("meta") or {}).items()),
        "guards": ", ".join(a.get("guards", [])),
        "correctness": (f"{a['cases_checked']} runs, max error {a['max_error']:.3g}"
                        if "cases_checked" in a else ""),
        "timing": (f"{result.time_ms:.4g} ms vs {result.baseline_ms:.4g} ms"
                   if result.time_ms and result.baseline_ms else ""),
    }
    rows = []
    reached = result.stage in STAGES
    failed_at = STAGES.index(result.stage) if reached and not result.ok else None
    for i, stage in enumerate(STAGES):
        if stage == "timing" and (not config.time or result.artifacts.get("timing_skipped")):
            status = "skipped"
        elif not reached:
            status = "?"
        elif failed_at is None:
            status = "ok"
        else:
            status = "ok" if i < failed_at else "FAILED" if i == failed_at else "not run"
        detail = details[stage] if status == "ok" else \
            _first_line(result.message) if status == "FAILED" else \
            result.artifacts.get("timing_skipped", "") if stage == "timing" else ""
        rows.append((stage, status, detail))
    if not reached:
        rows.append((result.stage, "FAILED", _first_line(result.message)))
    return rows


def _first_line(text: str, width: int = 90) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= width else line[:width - 1] + "…"


def report(op_name: str, candidate: Candidate, result: Result, config: EvalConfig) -> None:
    from rich.console import Console
    from rich.table import Table
    console = Console(highlight=False)
    what = "free source" if candidate.source is not None else \
        json.dumps(result.artifacts.get("genome") or candidate.genes) or "default genome"
    table = Table(title=f"{op_name} · {candidate.backend} ({what}) on {config.device}")
    for col in ("stage", "result", "detail"):
        table.add_column(col)
    styles = {"ok": "green", "FAILED": "bold red", "skipped": "dim", "not run": "dim"}
    for stage, status, detail in _stage_rows(result, config):
        table.add_row(stage, f"[{styles.get(status, '')}]{status}[/]" if status in styles
                      else status, detail)
    console.print(table)
    a = result.artifacts
    if a.get("cases_checked"):
        console.print(f"max error     {a['max_error']:.3g}  over {a.get('cases_checked', 0)} runs")
    if result.time_ms is not None:
        floor = a.get("floor_ms", 0.0)
        console.print(f"time          {result.time_ms:.4g} ms  (memory floor {floor:.3g} ms)")
    if result.baseline_ms is not None:
        note = f", {a['baseline_fallback']}" if a.get("baseline_fallback") else ""
        console.print(f"baseline      {result.baseline_ms:.4g} ms  ({result.baseline_name}{note})")
        if a.get("baseline_precision"):
            console.print(f"              {a['baseline_precision']}", markup=False)
    if result.ok and result.time_ms:
        console.print(f"speedup       {result.speedup:.3g}x")
    if not result.ok:
        console.print(f"[bold red]failed at {result.stage}[/]: ", end="")
        console.print(result.message, markup=False)
        if a.get("worker_log"):
            console.print("worker output (tail):", style="dim")
            console.print(a["worker_log"][-2000:], markup=False, style="dim")
