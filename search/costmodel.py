"""The learned cost model: a candidate's features -> its predicted speedup, to rank proposals.

Gradient-boosted trees (LightGBM, the ``model`` extra) fitted on the run's own measurements,
warm-started from earlier runs' measurements of ops of the same class on the same backend
and machine (``MeasurementCache.observations``). The search asks it to rank many possible
completions of a partial genome and measures the best few; it never replaces a measurement.

Features: every decision of the genome (sizes as log2, choices as category codes), the
backend, and the op's scale at its bench point (bytes, output elements, the largest extent),
so that rows of other ops of one class teach what sizes suit what scale. Failures are kept,
scored below the worst success, so the model learns where kernels break.

With profiles on (``--profile``), the diagnosis of the kernel the search is improving on
(the run's best, once profiled: its fraction of speed-of-light, each side's, occupancy,
eligible warps, its bound) joins every row as ``profile.*`` features (``set_context``);
before any profile, and in runs without profiles, they are NaN, which the trees treat as
missing. A diagnosis changes only at points fixed by the records, so exactness holds.

Exactness: the model is refit deterministically (one thread, fixed seed) from the records,
on a schedule that depends only on how many rows it has, and the warm-start rows are saved
in the run directory when the run begins; a resume or replay therefore ranks exactly as the
first run did. Refits come when the rows grow by a fraction of themselves, on at most the
``WINDOW`` latest rows, so the cost per node stays flat as a run grows.
"""
from __future__ import annotations

import math

from kdsl import ir

WINDOW = 2048        # the latest rows a fit reads (warm-start rows beside them)
MIN_ROWS = 6         # fewer rows than this (successes and failures): no prediction
GROWTH = 0.15        # refit once the rows grew by this fraction since the last fit


def available() -> bool:
    from kdsl import extras
    return extras.installed("lightgbm")


def op_features(op: ir.Op, device: str) -> dict[str, float]:
    """The op's scale at its bench point for ``device`` (none: no scale features)."""
    from kdsl.sizes import shape_of
    from .eval.floor import allocated_bytes
    from .eval.timing import bench_dtype, bench_point
    point = bench_point(op, device)
    if point is None:
        return {}
    sizes = point.size_dict()
    dtype = bench_dtype(op, point, None)
    out_elems = sum(math.prod(shape_of(op, t.name, sizes)) for t in op.outputs)
    return {"op.log2_bytes": math.log2(max(1, allocated_bytes(op, sizes, dtype))),
            "op.log2_out": math.log2(max(1, out_elems)),
            "op.log2_max_dim": math.log2(max([1, *sizes.values()]))}


def encode(backend: str, genes: dict, decisions: list, scale: dict) -> dict[str, float]:
    """One candidate's feature row (a dict: rows of other ops may have other genes)."""
    row = dict(scale)
    row["backend"] = float(_code(backend))
    for d in decisions:
        v = genes.get(d.name)
        key = f"{backend}.{d.name}"
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            row[key] = float(d.values.index(v)) if v in d.values else float("nan")
        else:
            row[key] = math.log2(v) if v > 0 else float(v) - 1.0
    return row


PROFILE_FEATURES = ("sol", "memory_sol", "compute_sol", "occupancy", "eligible_warps")
BOUNDS = ("memory", "compute", "latency")


def profile_features(diagnosis: dict | None) -> dict[str, float]:
    """A diagnosis record as ``profile.*`` features; NaN for whatever it lacks (or no
    diagnosis at all)."""
    d = diagnosis or {}
    row = {f"profile.{k}": float(d[k]) if isinstance(d.get(k), (int, float))
           and not isinstance(d.get(k), bool) else float("nan") for k in PROFILE_FEATURES}
    bound = d.get("bound")
    row["profile.bound"] = float(BOUNDS.index(bound)) if bound in BOUNDS else float("nan")
    return row


def _code(text: str) -> int:
    """A stable small integer for a name (Python's hash of a str changes per process)."""
    return sum((i + 1) * ord(ch) for i, ch in enumerate(text)) % 9973


def target(reward: float) -> float | None:
    """The regression target of a measured reward (None: a failure)."""
    return math.log(reward) if reward > 0 else None


class CostModel:
    """Rows in, predictions out. ``prior`` rows come from other runs; ``add`` takes the run's."""

    def __init__(self, prior: list[tuple[dict, float | None]] = (), seed: int = 0):
        self.prior = list(prior)
        self.rows: list[tuple[dict, float | None]] = []
        self.seed = seed
        self.model = None
        self.columns: list[str] = []
        self.fitted_at = 0  # len(self.rows) at the last fit
        self.fits = 0
        self.context: dict[str, float] = {}  # features every row gets (the best's profile)

    def set_context(self, features: dict[str, float]) -> None:
        """Features added to rows from now on, and to the rows predicted."""
        self.context = dict(features)

    def to_record(self) -> dict:
        return {"prior_rows": len(self.prior), "rows": len(self.rows), "fits": self.fits,
                "columns": len(self.columns)}

    def add(self, row: dict, reward: float) -> None:
        self.rows.append(({**row, **self.context}, target(reward)))

    def due(self) -> bool:
        n = len(self.rows) + len(self.prior)
        if n < MIN_ROWS or not any(t is not None for _, t in (*self.prior, *self.rows)):
            return False
        if self.model is None:
            return True
        return len(self.rows) - self.fitted_at >= max(1, int(GROWTH * len(self.rows)))

    def fit(self) -> None:
        import lightgbm as lgb
        import numpy as np
        data = self.prior + self.rows[-WINDOW:]
        ok = [t for _, t in data if t is not None]
        worst = min(ok) - 1.0  # a failure scores below the worst success
        self.columns = sorted({k for r, _ in data for k in r})
        x = np.array([[r.get(c, np.nan) for c in self.columns] for r, _ in data],
                     dtype=np.float64)
        y = np.array([worst if t is None else t for _, t in data], dtype=np.float64)
        params = dict(objective="regression", learning_rate=0.15, num_leaves=15,
                      min_data_in_leaf=2, min_data_in_bin=1, seed=self.seed,
                      deterministic=True, force_row_wise=True, num_threads=1, verbose=-1)
        self.model = lgb.train(params, lgb.Dataset(x, y, params={"verbose": -1}),
                               num_boost_round=60)
        self.fitted_at = len(self.rows)
        self.fits += 1

    def predict(self, rows: list[dict]) -> list[float] | None:
        """Predicted log-speedups, or None while the model has too little to go on."""
        if self.due():
            self.fit()
        if self.model is None or not rows:
            return None
        import numpy as np
        x = np.array([[{**r, **self.context}.get(c, np.nan) for c in self.columns]
                      for r in rows], dtype=np.float64)
        # one thread: OpenMP's start-up costs more than a few dozen rows (5 ms a call on
        # a busy 2-core machine against 0.2)
        return [float(v) for v in self.model.predict(x, num_threads=1)]
