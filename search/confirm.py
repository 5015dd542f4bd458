"""Bests that survive re-measurement: the end of a timed search.

During a search every candidate is timed once, and one lucky timing can crown a kernel
that is not the fastest (on an H200 a matmul search once kept a best 8% slower than its
own starting genome). So before a run declares its best, its top candidates and its
starting genome are evaluated again, several rounds, in a fresh order each round: each
evaluation times the candidate and the baseline side by side in its own processes, so a
round's speedups are ratios taken in the same minutes of the machine's life. The best is
the candidate with the best median speedup over the rounds, reported with its spread
(lowest and highest). A best slower than the start or than the baseline is said so:
``summary.json`` marks it, the screen says it and ``kdsl export`` refuses it without
``--force``.

Re-measurements skip the small random cases (the candidate passed them in the search):
each still checks its timed runs' outputs against the float64 reference at the bench
point, every input set, as every timing does. A search restricted to some of the op's
dtypes (the suite's searches take the bench dtype alone) never checked its genes for the
others: a gene that matters only there drifted unchecked, and a best with f32 products in
TF32 was crowned by a bf16 search and failed every f32 case of its confirmation (H100,
2026-12-07). So each contender is first checked on every dtype the op declares, and one
that fails there is no contender.
"""
from __future__ import annotations

import dataclasses
import random
import statistics

from .candidate import Candidate
from .jobs import EvalConfig, EvalJob

TOP = 2      # the search's best candidates re-measured, besides the start
ROUNDS = 3   # evaluations of each


def contenders(nodes: list[dict], top: int = TOP) -> list[dict]:
    """The ``top`` fastest distinct correct kernels of the run, then its first start (the
    genome the search began from) if it is not among them; each a node record."""
    ok = [r for r in nodes if (r.get("result") or {}).get("ok") and r.get("candidate")]
    ranked = sorted(ok, key=lambda r: (-float(r["result"].get("speedup") or 0.0), r["id"]))
    out, kernels = [], set()
    for r in ranked:
        kernel = r.get("source_hash") or r["id"]
        if kernel not in kernels:
            kernels.add(kernel)
            out.append(r)
        if len(out) == top:
            break
    start = next((r for r in nodes if r.get("kind") == "start"), None)
    if start is not None and (start.get("result") or {}).get("ok") \
            and all(r["id"] != start["id"] for r in out) \
            and start.get("source_hash") not in kernels:
        out.append(start)
    return out


def remeasure_config(config: EvalConfig) -> EvalConfig:
    """The search's evaluation without its small random cases and with every rep timed."""
    return dataclasses.replace(config, seeds=(), slow_cutoff=None)


def confirm(op, executor, config: EvalConfig, nodes: list[dict], seed: int,
            top: int = TOP, rounds: int = ROUNDS) -> dict | None:
    """Re-measure the run's contenders; the record ``summary.json`` keeps as 'confirmed'
    (None when the run has no correct kernel or is not timed)."""
    if not config.time or rounds < 1:
        return None
    picked = contenders(nodes, top)
    if not picked:
        return None
    wrong = wrong_elsewhere(op, executor, config, picked)
    cfg = remeasure_config(config)
    rng = random.Random(f"kdsl-confirm:{seed}:{len(nodes)}")
    results: dict[int, list] = {r["id"]: [] for r in picked}
    for _ in range(rounds):
        order = [r for r in picked if r["id"] not in wrong]
        rng.shuffle(order)
        futures = [(r["id"], executor.submit(EvalJob(op, Candidate.from_record(r["candidate"]),
                                                     cfg))) for r in order]
        for node, fut in futures:
            results[node].append(fut.result())
    for node, failed in wrong.items():
        results[node] = [failed]
    start = next((r["id"] for r in nodes if r.get("kind") == "start"), None)
    rows = [_row(r, results[r["id"]], start) for r in picked]
    rows.sort(key=lambda row: (-row["median_speedup"], row["node"]))
    best = rows[0]
    start_row = next((row for row in rows if row["start"]), None)
    record = {"rounds": rounds, "candidates": rows, "best_node": best["node"],
              "best": best, "start_node": start_row["node"] if start_row else None}
    if best["median_speedup"] <= 0:
        record["verdict"] = "no contender passed its re-measurement"
        record["regression"] = True
        return record
    slower = []
    if start_row is not None and start_row["node"] != best["node"] and \
            start_row["median_speedup"] > best["median_speedup"]:
        slower.append("its starting genome")
    if best["median_speedup"] < 1.0:
        slower.append("the baseline")
    record["regression"] = bool(slower)
    record["verdict"] = ("slower than " + " and ".join(slower)) if slower else "ok"
    if start_row is not None and start_row["median_speedup"] > 0:
        record["best_over_start"] = best["median_speedup"] / start_row["median_speedup"]
    return record


def wrong_elsewhere(op, executor, config: EvalConfig, picked: list[dict]) -> dict:
    """{node: its failed result} of the contenders that fail a correctness check on the
    op's dtypes the search left out (none when it searched them all)."""
    from .eval.plan import chosen_dtypes
    if set(chosen_dtypes(op, config.dtypes)) == set(op.dtype_choices):
        return {}
    cfg = dataclasses.replace(config, dtypes=None, time=False)
    futures = [(r["id"], executor.submit(EvalJob(op, Candidate.from_record(r["candidate"]),
                                                 cfg))) for r in picked]
    out = {}
    for node, fut in futures:
        result = fut.result()
        if not result.ok:
            out[node] = result
    return out


def _row(record: dict, results: list, start: int | None) -> dict:
    speedups = [r.speedup for r in results]
    times = [r.time_ms for r in results if r.ok and r.time_ms]
    bases = [r.baseline_ms for r in results if r.ok and r.baseline_ms]
    failed = [f"{r.stage}: {r.message.splitlines()[0] if r.message else ''}"
              for r in results if not r.ok]
    return {"node": record["id"], "start": record["id"] == start,
            "search_speedup": float(record["result"].get("speedup") or 0.0),
            "median_speedup": statistics.median(speedups),
            "spread": [min(speedups), max(speedups)],
            "speedups": speedups,
            "time_ms": statistics.median(times) if times else None,
            "baseline_ms": statistics.median(bases) if bases else None,
            "source_path": record.get("source_path"),
            "backend": (record.get("candidate") or {}).get("backend"),
            "genome": (record.get("candidate") or {}).get("genome"),
            "failures": failed}
