"""KernelBench's own evaluation of kdsl's exported kernels.

    python bench/kernelbench_exported.py --kernelbench CHECKOUT --runs RUN [RUN ...] --out DIR
        [--device 0] [--precision fp32] [--correct-trials 5] [--perf-trials 100]
        [--timing cuda_event] [--compile-baseline]

Each RUN is a ``kdsl search`` run of a spec in ``specs/kernelbench/level<L>/NN_name.kspec``
(on ``--device cuda``). Its best kernel is exported as a torch op (``kdsl export``'s module)
and handed to ``kernelbench.eval.eval_kernel_against_ref``, imported from the checkout's
``src/`` at run time (KernelBench's code is never copied here), beside the problem's own
``Model``. The ``ModelNew`` it judges subclasses that ``Model``, so its parameters are
made by the same code under the same seed, and replaces ``forward``: the forward's tensors,
then the model's parameters, are the spec's inputs in order (the convention of
``bench/kernelbench.py``). KernelBench's evaluation needs a CUDA GPU: without one this
script says so and exits 2.

Writes DIR/kernelbench_exported.json (rewritten after every run) and .md.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

PROG = "kernelbench_exported"

ADAPTER = '''

# ---- KernelBench's entry: the problem's Model keeps its parameters, kdsl's op computes ----
# (the problem's source follows, from the KernelBench checkout, as KernelBench gives it)
{problem}


class ModelNew(Model):
    """The problem's Model (same parameters, same seed), its forward replaced by the
    exported kdsl op: the forward's tensors, then the parameters, are the op's inputs."""

    def forward(self, *args):
        tensors = [a for a in args if isinstance(a, _torch.Tensor)] + list(self.parameters())
        if len(tensors) < len(INPUTS):
            raise ValueError(f"{{OP}}: the op takes {{len(INPUTS)}} tensors, KernelBench's "
                             f"Model gives {{len(tensors)}}")
        return run(*tensors[:len(INPUTS)], **BENCH_SIZES)
'''


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", required=True, help="a KernelBench checkout (has src/)")
    ap.add_argument("--runs", required=True, nargs="+", help="kdsl run directories")
    ap.add_argument("--out", required=True, help="directory for the results")
    ap.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "fp16", "bf16"),
                    help="KernelBench's precision for models and inputs (default fp32)")
    ap.add_argument("--correct-trials", type=int, default=5,
                    help="KernelBench correctness trials, fresh inputs each (default 5)")
    ap.add_argument("--perf-trials", type=int, default=100,
                    help="KernelBench timing trials (default 100)")
    ap.add_argument("--timing", default="cuda_event",
                    help="KernelBench's timing method (default cuda_event)")
    ap.add_argument("--compile-baseline", action="store_true",
                    help="also time the problem's Model under torch.compile")
    return ap.parse_args(argv)


def problem_of(spec_path: str) -> tuple[int, int] | None:
    """(level, number) of a spec under specs/kernelbench/level<L>/NN_name.kspec."""
    m = re.search(r"level(\d+)[/\\](\d+)_[^/\\]*\.kspec$", spec_path)
    return (int(m.group(1)), int(m.group(2))) if m else None


def custom_source(run_dir: str, kb_dir: Path) -> tuple[str, str, dict]:
    """(KernelBench's reference source, the ModelNew source, facts) for one run;
    ValueError (a reason for the report) when the run cannot be judged by KernelBench."""
    from kdsl.errors import UsageError
    from kdsl.search.export import kernel_of_run, module_text, op_name
    from kdsl.search.runs import open_run
    try:
        kernel = kernel_of_run(run_dir)
        _, settings = open_run(run_dir)
    except UsageError as e:
        raise ValueError(str(e)) from None
    facts = {"op": kernel.op.name, "backend": kernel.backend, "torch_op": op_name(kernel),
             "kdsl_note": kernel.note}
    if kernel.device != "cuda":
        raise ValueError(f"its kernel runs on {kernel.device}; KernelBench evaluates on CUDA")
    where = problem_of(settings.spec)
    if where is None:
        raise ValueError(f"its spec {settings.spec} is not specs/kernelbench/level<L>/NN_*.kspec")
    level, number = where
    facts.update(level=level, problem=number)
    files = sorted((kb_dir / "KernelBench" / f"level{level}").glob(f"{number}_*.py"))
    if not files:
        raise ValueError(f"no KernelBench/level{level}/{number}_*.py in {kb_dir}")
    reference = files[0].read_text()
    facts["kernelbench_file"] = str(files[0])
    return reference, module_text(kernel) + ADAPTER.format(problem=reference), facts


def evaluate(args, run_dir: str, kb_dir: Path) -> dict:
    import torch
    from kernelbench.eval import eval_kernel_against_ref
    row: dict = {"run": run_dir}
    try:
        reference, custom, facts = custom_source(run_dir, kb_dir)
    except ValueError as e:
        return {**row, "skipped": str(e)}
    row.update(facts)
    precision = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    start = time.time()
    try:
        res = eval_kernel_against_ref(
            reference, custom, seed_num=42, num_correct_trials=args.correct_trials,
            num_perf_trials=args.perf_trials, measure_performance=True,
            timing_method=args.timing, device=args.device, backend="triton",
            precision=precision[args.precision])
    except Exception as e:  # a report, not a crash: the other runs still go
        return {**row, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    if res is None:  # KernelBench's answer to a lock or a missing file: try again later
        return {**row, "error": "KernelBench returned no result (a build lock or file race)"}
    row.update(compiled=res.compiled, correct=res.correctness, runtime_us=res.runtime,
               ref_runtime_us=res.ref_runtime, eval_s=round(time.time() - start, 1),
               metadata={k: str(v)[:300] for k, v in res.metadata.items()})
    if res.correctness and res.runtime > 0 and res.ref_runtime > 0:
        row["speedup_vs_eager"] = round(res.ref_runtime / res.runtime, 3)
    if args.compile_baseline and res.correctness:
        row.update(compile_baseline(args, reference, facts, res.runtime))
    return row


def compile_baseline(args, reference: str, facts: dict, runtime_us: float) -> dict:
    import torch
    from kernelbench.timing import measure_ref_program_time
    try:
        stats = measure_ref_program_time(facts["op"], reference, num_trials=args.perf_trials,
                                         timing_method=args.timing, use_torch_compile=True,
                                         device=torch.device(f"cuda:{args.device}"),
                                         precision=args.precision)
    except Exception as e:
        return {"compile_error": f"{type(e).__name__}: {str(e)[:200]}"}
    out = {"compile_runtime_us": stats.get("mean")}
    if stats.get("mean") and runtime_us > 0:
        out["speedup_vs_compile"] = round(stats["mean"] / runtime_us, 3)
    return out


def write(out: Path, rows: list[dict], meta: dict) -> None:
    (out / "kernelbench_exported.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                              indent=1))
    lines = [f"# KernelBench's evaluation of exported kdsl kernels ({meta['gpu']}, "
             f"{meta['date']})", "", "| run | problem | correct | us | eager us | vs eager |"
             " note |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        note = r.get("skipped") or r.get("error") or ""
        lines.append(f"| {r['run']} | {r.get('level', '')}/{r.get('problem', '')} "
                     f"| {r.get('correct', '')} | {r.get('runtime_us', '')} "
                     f"| {r.get('ref_runtime_us', '')} | {r.get('speedup_vs_eager', '')} "
                     f"| {note} |")
    (out / "kernelbench_exported.md").write_text("\n".join(lines) + "\n")


def ready(args) -> Path | None:
    """The checkout's path once everything a run needs is there; None after saying what
    is missing (one line)."""
    kb = Path(args.kernelbench)
    if not (kb / "src" / "kernelbench" / "eval.py").is_file():
        print(f"{PROG}: error: --kernelbench {kb}: no src/kernelbench/eval.py "
              "(not a KernelBench checkout)", file=sys.stderr)
        return None
    for run in args.runs:
        if not (Path(run) / "lineage.msgpack").is_file():
            print(f"{PROG}: error: --runs {run}: not a kdsl run directory", file=sys.stderr)
            return None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"{PROG}: error: --out {out} is not a directory", file=sys.stderr)
        return None
    import torch
    if not torch.cuda.is_available():
        print(f"{PROG}: error: KernelBench's evaluation runs on a CUDA GPU and none is visible "
              "(torch.cuda.is_available() is False); run this on the GPU machine",
              file=sys.stderr)
        return None
    sys.path.insert(0, str(kb / "src"))
    try:
        import kernelbench.eval  # noqa: F401
    except ImportError as e:
        print(f"{PROG}: error: cannot import KernelBench's eval from {kb / 'src'}: {e} "
              "(install its requirements: pydantic, requests)", file=sys.stderr)
        return None
    return kb


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    kb = ready(args)
    if kb is None:
        return 2
    import torch
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(args.device), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "kernelbench": str(kb), "precision": args.precision,
            "command": " ".join(sys.argv)}
    rows: list[dict] = []
    for run in args.runs:
        rows.append(evaluate(args, run, kb))
        write(out, rows, meta)
        r = rows[-1]
        print(f"{run}: " + (r.get("skipped") or r.get("error") or
                            f"correct={r.get('correct')} {r.get('runtime_us')} us "
                            f"({r.get('speedup_vs_eager')}x eager)"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
