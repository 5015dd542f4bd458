"""``kdsl search`` and ``kdsl resume``: arguments -> settings -> a run, with progress."""
from __future__ import annotations

import sys
from pathlib import Path

from kdsl.errors import UsageError

from . import runs
from .display import LiveDisplay, LogDisplay
from .jobs import SEARCH_SLOW_CUTOFF, EvalConfig
from .llm.setup import resolve_mode
from .operators import FatalOperatorError
from .runstore import RunError
from .settings import SearchSettings

DEFAULT_BUDGET = 30  # about a minute for the c backend on a 2-core machine


def settings_from(args, policy: str, seed: int) -> SearchSettings:
    backends = tuple(b.strip() for b in args.backend.split(",") if b.strip())
    if not backends:
        raise UsageError("--backend needs at least one backend")
    budget = DEFAULT_BUDGET if args.budget is None else args.budget
    options = {"address": args.ray_address} if getattr(args, "ray_address", None) else {}
    if args.max_llm_calls is not None and args.max_llm_calls < 0:
        raise UsageError("--max-llm-calls must be at least 0")
    return SearchSettings(spec=args.spec, op=args.op, backends=backends, device=args.device,
                          policy=policy, seed=seed, budget=budget, workers=args.workers,
                          executor=args.executor, executor_options=options,
                          llm=resolve_mode(args.llm), model=args.model,
                          max_llm_calls=args.max_llm_calls, llm_repairs=args.llm_repairs,
                          llm_call_timeout_s=args.llm_call_timeout,
                          llm_run_budget_s=args.llm_run_budget,
                          replay_from=args.replay_from, use_priors=not args.no_priors,
                          use_stored=not args.no_stored,
                          eval=EvalConfig(device=args.device, slow_cutoff=SEARCH_SLOW_CUTOFF))


def display_for(args, title: str):
    if args.quiet or not sys.stderr.isatty():
        return LogDisplay()
    return LiveDisplay(title)


def report(store, summary: dict) -> None:
    best = summary.get("best")
    print(f"run: {store.root}")
    if best:
        print(f"best: node {best['node']}, {best['speedup']:.3f}x over "
              f"{summary['baseline']['name']} ({best['time_ms']:.4g} ms vs "
              f"{summary['baseline']['time_ms']:.4g} ms) -> {store.root / best['source_path']}")
    else:
        print("best: no correct kernel yet")
    print(f"evaluations: {summary['evaluations']}, failures: {summary['failures']}, "
          f"{summary['elapsed_s']:.1f} s")


def _finish(run_dir: str, go) -> int:
    """Run ``go()`` (a start or a resume) and report; the run is saved however it ends."""
    try:
        store, summary = go()
    except KeyboardInterrupt:
        print(f"interrupted; the run is saved in {run_dir} (kdsl resume {run_dir})",
              file=sys.stderr)
        return 130
    except FatalOperatorError as e:
        print(f"kdsl: error: {e} (the run so far is saved in {run_dir})", file=sys.stderr)
        return 2
    except RunError as e:  # records that no longer match what this kdsl does
        print(f"kdsl: error: {e}", file=sys.stderr)
        return 2
    report(store, summary)
    return 0


def search(args) -> int:
    settings = settings_from(args, args.policy, args.seed)
    out = args.out or str(Path("runs") / f"{Path(args.spec).stem}-{settings.policy}-"
                                         f"{settings.seed}")
    if args.out is None and (Path(out) / "lineage.msgpack").exists():
        n = 2
        while (Path(f"{out}-{n}") / "lineage.msgpack").exists():
            n += 1
        out = f"{out}-{n}"
    display = display_for(args, f"{settings.policy} {Path(out).name}")
    return _finish(out, lambda: runs.start(settings, out, args.cache, display))


def resume(args) -> int:
    display = display_for(args, f"resume {Path(args.run).name}")
    return _finish(args.run, lambda: runs.resume(args.run, args.budget, display))
