"""``kdsl compare``: every policy x seed on one shared measurement cache.

Because the cache is shared, identical candidates get identical measurements
in every run, so differences between policies are differences in what they
chose to evaluate, not timing noise. But one timing of one kernel can still be
lucky, and the best of any run, the target every policy is judged by, is the
kernel most likely to be: so the fastest few kernels are evaluated again, a few
rounds, and every curve counts them at their medians (``confirm_kernels``).
"""
from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from kdsl.errors import UsageError

from . import confirm, lineage, runs
from .candidate import Candidate
from .commands import settings_from
from .display import QuietDisplay
from .jobs import EvalJob
from .policies import parse as parse_policy
from .runstore import RunStore


def _confirmed(args, nodes: dict, out: Path) -> dict:
    """``confirm_kernels`` for ``compare``'s runs, kept in ``confirmed.json`` (a compare
    resumed over the same runs reads it back instead of measuring again)."""
    rounds = getattr(args, "confirm_rounds", CONFIRM_ROUNDS)
    if rounds < 1:
        return {}
    kept = out / "confirmed.json"
    # the runs it was measured for: a compare given more seeds or policies measures again
    runs_of = sorted(f"{p}-{s}:{len(n)}" for (p, s), n in nodes.items())
    if kept.exists():
        record = json.loads(kept.read_text())
        if record.get("runs") == runs_of:
            return record["kernels"]
    settings = settings_from(args, policy_entries(args)[0][1], 0)
    op, _ = runs.load_op(args.spec, args.op)
    executor = runs.make_executor(settings)
    try:
        confirmed = confirm_kernels(op, executor, settings.eval, nodes, rounds=rounds)
    finally:
        executor.shutdown()
    kept.write_text(json.dumps({"runs": runs_of, "kernels": confirmed}, indent=2) + "\n")
    return confirmed


WARM = "+warm"  # a policy entry whose runs start their cost model from --warm-from


def policy_entries(args) -> list[tuple[str, str, bool]]:
    """(entry, policy, warm) for each of ``--policies``: ``mcts+warm`` is mcts with its cost
    model warm-started from ``--warm-from``'s caches, beside the same policy started cold;
    where no entry is marked, every run starts warm if ``--warm-from`` is given."""
    entries = [p.strip() for p in args.policies.split(",") if p.strip()]
    warm_from = runs.check_warm_from(getattr(args, "warm_from", None) or ())
    marked = any(e.endswith(WARM) for e in entries)
    if marked and not warm_from:
        raise UsageError(f"a policy marked {WARM} needs --warm-from CACHE")
    if warm_from:  # (before any run: not after the cold ones have spent their budgets)
        runs.need_cost_model(runs.cost_model_on(getattr(args, "cost_model", "auto")))
    out = []
    for e in entries:
        policy = e[:-len(WARM)] if e.endswith(WARM) else e
        try:
            parse_policy(policy)
        except ValueError as err:
            raise UsageError(str(err)) from None
        out.append((e, policy, e.endswith(WARM) or (bool(warm_from) and not marked)))
    if len({e for e, _, _ in out}) != len(out):
        raise UsageError(f"--policies names a policy twice: {args.policies}")
    return out


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
    target = REACH * top
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


# the fastest distinct kernels of all runs re-measured before the target is set, how often,
# and at most how many in all: the leaders, then every kernel whose timing reaches the target
CONFIRM_TOP = 4
CONFIRM_ROUNDS = 3
CONFIRM_MAX = 24
REACH = 0.95  # a run reaches the best of any run when within 5% of it


def confirm_kernels(op, executor, config, runs_nodes: dict, top: int = CONFIRM_TOP,
                    rounds: int = CONFIRM_ROUNDS, seed: int = 0,
                    most: int = CONFIRM_MAX) -> dict:
    """The fastest distinct kernels over every run (by source hash; the shared cache gave
    each one timing), each evaluated ``rounds`` times more in a fresh order a round, ``top``
    at a time: {source hash: {"search": its single timing, "speedups": [...], "median": ...}}.
    A target set by one lucky timing is what this prevents, and so is a run counted as
    reaching the target on one: every policy's curve is then read with the kernels' medians
    (``curve_with``). Kernels are ranked by their median once re-measured, else by their
    search timing; the ``top`` leaders are re-measured, then every kernel whose estimate
    reaches the target (``REACH`` of the best estimate) as medians move it, until none is
    left or ``most`` kernels have been (the highest first, so the cap leaves those that
    matter least)."""
    if rounds < 1 or top < 1 or not config.time:
        return {}
    best: dict[str, dict] = {}
    for nodes in runs_nodes.values():
        for r in nodes:
            res, h = r.get("result") or {}, r.get("source_hash")
            if res.get("ok") and h and r.get("candidate") and h not in best:
                best[h] = r
    cfg = confirm.remeasure_config(config)
    rng = random.Random(f"kdsl-compare-confirm:{seed}")
    out: dict[str, dict] = {}

    def estimate(r) -> float:
        h = r["source_hash"]
        return out[h]["median"] if h in out else float(r["result"]["speedup"])

    while len(out) < most and best:
        ranked = sorted(best.values(), key=lambda r: (-estimate(r), r["source_hash"]))
        bar = REACH * estimate(ranked[0])
        contenders = ranked[:top] + [r for r in ranked[top:] if estimate(r) >= bar]
        picked = [r for r in contenders if r["source_hash"] not in out][:min(top, most - len(out))]
        if not picked:
            break
        for r in picked:
            out[r["source_hash"]] = {"search": float(r["result"]["speedup"]), "speedups": []}
        for _ in range(rounds):
            order = list(picked)
            rng.shuffle(order)
            futures = [(r["source_hash"], executor.submit(EvalJob(
                op, Candidate.from_record(r["candidate"]), cfg))) for r in order]
            for h, fut in futures:
                out[h]["speedups"].append(fut.result().speedup)
        for r in picked:
            v = out[r["source_hash"]]
            v["median"] = statistics.median(v["speedups"])
    return out


def curve_with(nodes: list[dict], confirmed: dict) -> list[float]:
    """A run's best-so-far curve where each re-measured kernel counts at its median, and
    one that was not re-measured (the cap left it) at its search timing but below the
    target (``REACH`` of the best median): only a re-measured kernel reaches the target.
    Without that, a timing taken while the machine was quieter than during the
    re-measurements stood above every median and set the target itself."""
    medians = [v["median"] for v in confirmed.values()]
    below = math.nextafter(REACH * max(medians), 0.0) if medians else math.inf
    out, best = [], 0.0
    for r in sorted(nodes, key=lambda r: r.get("iteration", 0)):
        value = float((r.get("result") or {}).get("speedup") or 0.0)
        if r.get("source_hash") in confirmed and value > 0:
            value = confirmed[r["source_hash"]]["median"]
        elif confirmed:
            value = min(value, below)
        best = max(best, value)
        out.append(best)
    return out


def compare(args) -> int:
    entries = policy_entries(args)
    seeds = parse_seeds(args.seeds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = str(out / "cache.sqlite")
    curves: dict[str, dict[int, list[float]]] = {}
    nodes: dict[tuple, list[dict]] = {}
    con = Console(stderr=True)
    for policy, name, warm in entries:
        curves[policy] = {}
        for seed in seeds:
            run_dir = out / f"{policy.replace(':', '_')}-{seed}"
            if (run_dir / "lineage.msgpack").exists():
                # compare is resumable: a finished run is reused as it is, and one cut
                # mid-way (a time limit, a kill) goes on to its budget, instead of counting
                # as a run that spent its budget without reaching the target
                store = RunStore.open(run_dir)
                was = bool((store.header.get("settings") or {}).get("warm_from"))
                if was != warm:  # (its curve would be counted under the other start)
                    raise UsageError(
                        f"{run_dir} was run {'warm' if was else 'cold'}, but {policy} now "
                        f"starts {'warm' if warm else 'cold'} (--policies, --warm-from): "
                        f"give another --out")
                if not store.summary().get("finished"):
                    con.print(f"{policy} seed {seed}: resuming after "
                              f"{len(store.nodes)} evaluations")
                    store, _ = runs.resume(run_dir, display=QuietDisplay())
            else:
                settings = settings_from(args, name, seed)
                # every run on equal terms, whatever was learned or stored before; a warm
                # one knows the same rows of other ops as every other warm one
                settings.use_priors = settings.use_stored = False
                if not warm:
                    settings.warm_from = ()
                settings.confirm_rounds = 0  # the kernels are re-measured across runs, below
                store, _ = runs.start(settings, run_dir, cache, QuietDisplay())
            curve = lineage.best_so_far(store.nodes)
            curves[policy][seed] = curve
            nodes[policy, seed] = store.nodes
            con.print(f"{policy} seed {seed}: best {curve[-1] if curve else 0:.3f}x "
                      f"in {len(curve)} evaluations")
    confirmed = _confirmed(args, nodes, out)
    if confirmed:
        curves = {p: {s: curve_with(nodes[p, s], confirmed) for s in by} for p, by in
                  curves.items()}
        for h, v in sorted(confirmed.items(), key=lambda kv: -kv[1]["median"]):
            con.print(f"re-measured {h}: {v['search']:.3f}x in the search, median "
                      f"{v['median']:.3f}x of {len(v['speedups'])}")
    result = summarize(curves)
    result["confirmed"] = confirmed
    result.update({"warm_from": list(getattr(args, "warm_from", None) or []),
                   "warm": [p for p, _, w in entries if w]})
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
