"""``kdsl search`` and ``kdsl resume``: arguments -> settings -> a run, with progress."""
from __future__ import annotations

import sys
from pathlib import Path

from kdsl.cli import SEARCH_BUDGET
from kdsl.errors import UsageError

from . import runs
from .display import LiveDisplay, LogDisplay
from .engine import Display, Stats
from .jobs import SEARCH_SLOW_CUTOFF, EvalConfig
from .llm.setup import resolve_mode
from .operators import FatalOperatorError
from .runstore import RunError
from .policies import parse as parse_policy
from .settings import SearchSettings

DEFAULT_BUDGET = SEARCH_BUDGET  # about a minute for the c backend on a 2-core machine


def settings_from(args, policy: str, seed: int) -> SearchSettings:
    backends = tuple(b.strip() for b in args.backend.split(",") if b.strip())
    if not backends:
        raise UsageError("--backend needs at least one backend")
    budget = DEFAULT_BUDGET if args.budget is None else args.budget
    options = {"address": args.ray_address} if getattr(args, "ray_address", None) else {}
    if args.max_llm_calls is not None and args.max_llm_calls < 0:
        raise UsageError("--max-llm-calls must be at least 0")
    try:
        policy, params = parse_policy(policy)
    except ValueError as e:
        raise UsageError(str(e)) from None
    llm = resolve_mode(args.llm)
    return SearchSettings(spec=args.spec, op=args.op, backends=backends, device=args.device,
                          policy=policy, policy_params=params, seed=seed, budget=budget,
                          workers=args.workers, cost_model=getattr(args, "cost_model", "auto"),
                          confirm_rounds=_rounds(getattr(args, "confirm_rounds", 0)),
                          profile=getattr(args, "profile", 0),
                          profile_during=getattr(args, "profile_during", 3),
                          stop_at_sol=getattr(args, "stop_at_sol", None),
                          executor=args.executor, executor_options=options,
                          llm=llm, model=args.model,
                          max_llm_calls=args.max_llm_calls, llm_repairs=args.llm_repairs,
                          llm_call_timeout_s=args.llm_call_timeout,
                          llm_run_budget_s=args.llm_run_budget,
                          replay_from=args.replay_from, use_priors=not args.no_priors,
                          use_stored=not args.no_stored,
                          warm_from=runs.check_warm_from(getattr(args, "warm_from", None) or ()),
                          eval=EvalConfig(device=args.device, slow_cutoff=SEARCH_SLOW_CUTOFF,
                                          baseline=getattr(args, "baseline", None) or "auto"))


def _rounds(n: int) -> int:
    if n < 0:
        raise UsageError(f"--confirm-rounds must be 0 or more, got {n}")
    return n


def display_for(args, title: str):
    if args.quiet or not sys.stderr.isatty():
        return LogDisplay()
    return LiveDisplay(title)


def report(store, summary: dict, recorded: int | None = None) -> None:
    """The run's outcome on stdout; ``recorded``: how many of its evaluations a resume
    found already done (replayed, not run again)."""
    best = summary.get("best")
    confirmed = summary.get("confirmed")
    print(f"run: {store.root}")
    if best and confirmed:
        c = confirmed["best"]
        lo, hi = c["spread"]
        times = (f" ({c['time_ms']:.4g} ms vs {c['baseline_ms']:.4g} ms)"
                 if c.get("time_ms") and c.get("baseline_ms") else "")
        print(f"best: node {c['node']}, {c['median_speedup']:.3f}x over "
              f"{summary['baseline']['name']}{times}, median of {confirmed['rounds']} "
              f"re-measurements (spread {lo:.3f}-{hi:.3f}x) -> "
              f"{store.root / best['source_path']}")
        start = next((r for r in confirmed["candidates"] if r["start"]), None)
        if start is not None and start["node"] != c["node"]:
            print(f"start: node {start['node']}, {start['median_speedup']:.3f}x "
                  f"(spread {start['spread'][0]:.3f}-{start['spread'][1]:.3f}x)")
        if confirmed["regression"]:
            print(f"warning: the confirmed best is {confirmed['verdict']}; kdsl export "
                  "refuses it without --force")
    elif best:
        print(f"best: node {best['node']}, {best['speedup']:.3f}x over "
              f"{summary['baseline']['name']} ({best['time_ms']:.4g} ms vs "
              f"{summary['baseline']['time_ms']:.4g} ms) -> {store.root / best['source_path']}")
    else:
        print("best: no correct kernel yet")
    for row in summary.get("profiles") or ():
        print(f"profile: node {row['node']} ({row['when']}): {row['line']}")
    if summary.get("stopped_early"):
        print(f"stopped early: {summary['stopped_early']}")
    n = summary["evaluations"]
    done = f"{n}" if recorded is None else f"{n} ({recorded} recorded before, {n - recorded} new)"
    print(f"evaluations: {done}, failures: {summary['failures']}, "
          f"{summary['elapsed_s']:.1f} s")


class ResumeDisplay(Display):
    """A resumed run first replays its recorded nodes: they are not shown as news. One
    line says how many there were; only the evaluations made now are shown as such."""

    def __init__(self, inner: Display, recorded: set, run: str = "RUN", stream=None):
        self.inner, self.recorded, self.run = inner, recorded, run
        self.stream = stream or sys.stderr
        self.replayed = 0
        self.announced = False

    def start(self, stats: Stats) -> None:
        more = max(stats.budget - len(self.recorded), 0)
        print(f"resuming: {len(self.recorded)} evaluations recorded (replayed from the run, "
              f"not run again), {more} more to run", file=self.stream, flush=True)
        if not more:
            print(f"the run has all {stats.budget} evaluations of its budget; "
                  f"'kdsl resume {self.run} --budget N' runs N more", file=self.stream,
                  flush=True)
        self.inner.start(stats)

    def update(self, stats: Stats, record: dict) -> None:
        if record.get("id") in self.recorded:
            self.replayed += 1
            return
        if not self.announced:
            self.announced = True
            best = f"; best so far {stats.best_speedup:.3f}x" if self.replayed else ""
            print(f"replayed {self.replayed} recorded evaluations{best}; new evaluations "
                  "follow", file=self.stream, flush=True)
        self.inner.update(stats, record)

    def stop(self, stats: Stats) -> None:
        self.inner.stop(stats)


def _finish(run_dir: str, go, recorded: int | None = None) -> int:
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
    report(store, summary, recorded)
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
    """``kdsl resume RUN [--budget N]``: N more evaluations, or on to the run's own budget."""
    store, _ = runs.open_run(args.run)
    recorded = {r["id"] for r in store.nodes}
    store.close()
    display = ResumeDisplay(display_for(args, f"resume {Path(args.run).name}"), recorded,
                            args.run)
    return _finish(args.run, lambda: runs.resume(args.run, display=display, more=args.budget),
                   len(recorded))
