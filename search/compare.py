"""``kdsl compare``: every policy x seed on one shared measurement cache.

Because the cache is shared, identical candidates get identical measurements
in every run, so differences between policies are differences in what they
chose to evaluate, not timing noise.
"""
from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from kdsl.errors import UsageError

from . import lineage, runs
from .commands import settings_from
from .display import QuietDisplay
from .policies import parse as parse_policy
from .runstore import RunStore


def parse_seeds(text: str) -> list[int]:
    try:
        if "-" in text and "," not in text:
            lo, hi = text.split("-")
            seeds = list(range(int(lo), int(hi) + 1))
        else:
            seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds takes a range like 0-4 or a list like 0,1,2; got '{text}'") \
            from None
    if not seeds:
        raise UsageError(f"--seeds names no seed: '{text}'")
    return seeds


def evals_to_reach(curve: list[float], target: float) -> int | None:
    for i, v in enumerate(curve):
        if v >= target and target > 0:
            return i + 1
    return None


def bootstrap_ci(values: list[float], seed: int = 0, resamples: int = 2000,
                 level: float = 0.95) -> tuple[float, float]:
    """A percentile bootstrap interval of the mean (fixed seed: the same data, the same
    interval)."""
    if len(values) < 2:
        v = values[0] if values else float("nan")
        return (v, v)
    rng = random.Random(f"kdsl-ci:{seed}")
    means = sorted(statistics.fmean(rng.choices(values, k=len(values)))
                   for _ in range(resamples))
    lo = means[int((1 - level) / 2 * resamples)]
    hi = means[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return (lo, hi)


def summarize(curves: dict[str, dict[int, list[float]]]) -> dict:
    """Per policy: best per seed, mean, std, evaluations to 95% of the best of any run, with
    95% bootstrap intervals over the seeds. A run that never reached the target counts its
    budget plus one (so the mean is a lower bound where any run missed: ``reached``)."""
    top = max((c[-1] for runs_ in curves.values() for c in runs_.values() if c), default=0.0)
    target = 0.95 * top
    out = {"target_speedup": target, "best_any": top, "policies": {}}
    for policy, by_seed in curves.items():
        bests = [c[-1] if c else 0.0 for c in by_seed.values()]
        reach = [evals_to_reach(c, target) for c in by_seed.values()]
        hit = [r for r in reach if r is not None]
        censored = [r if r is not None else len(c) + 1 for r, c in zip(reach, by_seed.values())]
        out["policies"][policy] = {
            "seeds": list(by_seed), "best": bests, "mean": statistics.fmean(bests),
            "std": statistics.pstdev(bests) if len(bests) > 1 else 0.0,
            "best_ci95": bootstrap_ci(bests),
            "evals_to_95": reach,
            "mean_evals_to_95": statistics.fmean(hit) if hit else None,
            "evals_to_95_censored": censored,
            "mean_evals_to_95_censored": statistics.fmean(censored),
            "evals_to_95_ci95": bootstrap_ci([float(x) for x in censored]),
            "reached_95": f"{len(hit)}/{len(reach)}",
        }
    return out


def compare(args) -> int:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in policies:
        try:
            parse_policy(p)
        except ValueError as e:
            raise UsageError(str(e)) from None
    seeds = parse_seeds(args.seeds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = str(out / "cache.sqlite")
    curves: dict[str, dict[int, list[float]]] = {}
    con = Console(stderr=True)
    for policy in policies:
        curves[policy] = {}
        for seed in seeds:
            run_dir = out / f"{policy.replace(':', '_')}-{seed}"
            if (run_dir / "lineage.msgpack").exists():
                store = RunStore.open(run_dir)  # already done: reuse it (compare is resumable)
            else:
                settings = settings_from(args, policy, seed)
                # every run on equal terms, whatever was learned or stored before
                settings.use_priors = settings.use_stored = False
                store, _ = runs.start(settings, run_dir, cache, QuietDisplay())
            curve = lineage.best_so_far(store.nodes)
            curves[policy][seed] = curve
            con.print(f"{policy} seed {seed}: best {curve[-1] if curve else 0:.3f}x "
                      f"in {len(curve)} evaluations")
    result = summarize(curves)
    result.update({"spec": args.spec, "op": args.op, "backend": args.backend,
                   "device": args.device, "budget": args.budget, "seeds": seeds,
                   "curves": {p: {str(s): c for s, c in v.items()} for p, v in curves.items()}})
    (out / "compare.json").write_text(json.dumps(result, indent=2) + "\n")
    from kdsl import extras
    drawn = extras.installed("matplotlib")  # the figure is extra; the runs and json are not
    if drawn:
        from .plots import compare_figure
        compare_figure({p: list(v.values()) for p, v in curves.items()},
                       str(out / "compare.png"), f"{Path(args.spec).stem}: best speedup over "
                                                 f"evaluations ({len(seeds)} seeds)")
    t = Table(title=f"compare {Path(args.spec).stem} (target {result['target_speedup']:.3f}x "
                    "= 95% of the best of any run)")
    for col in ("policy", "best per seed", "mean (95% CI)", "evals to 95% (95% CI)",
                "reached"):
        t.add_column(col)
    for p, r in result["policies"].items():
        (blo, bhi), (elo, ehi) = r["best_ci95"], r["evals_to_95_ci95"]
        t.add_row(p, " ".join(f"{b:.3f}" for b in r["best"]),
                  f"{r['mean']:.3f} ({blo:.3f}-{bhi:.3f})",
                  f"{r['mean_evals_to_95_censored']:.1f} ({elo:.1f}-{ehi:.1f})",
                  r["reached_95"])
    Console().print(t)
    if drawn:
        print(f"wrote {out / 'compare.json'} and {out / 'compare.png'}")
    else:
        print(f"wrote {out / 'compare.json'} (no compare.png: pip install "
              f"'kdsl-kernels[plot]')")
    return 0
