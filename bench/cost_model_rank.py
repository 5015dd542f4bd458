"""How well the search's cost model ranks kernels it has not seen, per op class.

Reads the cost-model rows (features, measured speedup) that searches wrote into their
measurement caches, per op class and backend: every op's rows are split by a seeded shuffle
into a fitted part and a held-back part (30%), the model (``kdsl.search.costmodel``) is
fitted on the fitted parts of all ops of the class, and the Spearman rank correlation
between its predictions and the measured speedups of the held-back correct kernels is
reported per op and for the class (failures are left out of the correlation: their
"speedup" is a label, not a time).

    python bench/cost_model_rank.py --caches DIR/*/cache.sqlite --out FILE.json
"""
from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from kdsl.search import costmodel

HELD_BACK = 0.3


def rows_of(paths: list[str]) -> dict[tuple, dict[str, list]]:
    """(op_class, backend) -> op_hash -> [(row, reward)], duplicates (one kernel measured by
    several runs sharing a cache) kept once."""
    out: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    seen = set()
    for path in paths:
        db = sqlite3.connect(path)
        try:
            got = db.execute("SELECT op_class, backend, op_hash, row, reward FROM "
                             "observations").fetchall()
        except sqlite3.OperationalError:  # a cache from before cost models
            got = []
        db.close()
        for op_class, backend, op_hash, row, reward in got:
            if (op_hash, row) in seen:
                continue
            seen.add((op_hash, row))
            out[(op_class, backend)][op_hash].append((json.loads(row), float(reward)))
    return out


def spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None

    def ranks(x):
        order = sorted(range(len(x)), key=lambda i: x[i])
        r = [0.0] * len(x)
        i = 0
        while i < len(order):  # ties share their mean rank
            j = i
            while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return num / den if den else None


def evaluate(by_op: dict[str, list], seed: int) -> dict:
    fit_rows, held = [], {}
    for op_hash, rows in sorted(by_op.items()):
        rows = list(rows)
        random.Random(f"{seed}:{op_hash}").shuffle(rows)
        k = max(1, int(len(rows) * HELD_BACK))
        held[op_hash], fit = rows[:k], rows[k:]
        fit_rows += fit
    model = costmodel.CostModel(seed=seed)
    for row, reward in fit_rows:
        model.add(row, reward)
    per_op, all_pred, all_true = {}, [], []
    for op_hash, rows in held.items():
        ok = [(r, w) for r, w in rows if w > 0]
        pred = model.predict([r for r, _ in ok]) if ok else None
        truth = [w for _, w in ok]
        rho = spearman(pred, truth) if pred else None
        per_op[op_hash] = {"rows": len(by_op[op_hash]), "held_back_correct": len(ok),
                           "spearman": rho}
        if pred and len(ok) >= 3:  # the class figure: each op's ranks, pooled
            all_pred += pred
            all_true += truth
    rhos = [v["spearman"] for v in per_op.values() if v["spearman"] is not None]
    return {"ops": per_op, "fitted_rows": len(fit_rows),
            "median_op_spearman": statistics.median(rhos) if rhos else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--caches", nargs="+", required=True, help="measurement cache files")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="the JSON file to write")
    args = ap.parse_args(argv)
    if not costmodel.available():
        print("bench/cost_model_rank.py needs lightgbm (pip install 'kdsl-kernels[model]')",
              file=sys.stderr)
        return 2
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "caches": args.caches, "held_back": HELD_BACK, "classes": {}}
    for (op_class, backend), by_op in sorted(rows_of(args.caches).items()):
        r = evaluate(by_op, args.seed)
        result["classes"][f"{op_class}/{backend}"] = r
        print(f"{op_class}/{backend}: {len(by_op)} ops, {r['fitted_rows']} rows fitted, "
              f"median held-back Spearman {r['median_op_spearman']}")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
