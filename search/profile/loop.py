"""A search's profiles: its new bests as it goes, its best K at the end, an early stop.

With ``--profile K`` the engine hands each new best kernel to ``on_best`` (the first
``during`` of them): it is profiled, the profile is appended to the run's records, and
its diagnosis goes where the search reads it: the operators' context (``ctx.diagnoses``:
the kernel's own and the run's best), the cost model's context features, and the early
stop (``stop_at``: a best at that fraction of speed-of-light or more ends the search).
At the end, ``finish`` profiles the K best kernels (the confirmed order when there is
one) that have no profile yet.

Profiling happens in proposal order, in the engine's process, and a resumed run reads
the recorded profiles instead of profiling again, so a seed and the records still fix
the search. Profiles that fail twice (no profiler, no counters) stop the profiling for
the run; the records say why.
"""
from __future__ import annotations

import time
from typing import Callable

from .. import costmodel
from ..candidate import Candidate
from .advice import BEST
from .diagnose import Diagnosis
from .record import Profile

GIVE_UP = 2  # failed profiles after which a run stops asking

# (candidate, its source, its evaluation's artifacts) -> (profile, diagnosis or None)
ProfileFn = Callable[[Candidate, str, dict], "tuple[Profile, Diagnosis | None]"]


class ProfileHook:
    def __init__(self, store, ctx, profile_fn: ProfileFn, top: int = 1, during: int = 3,
                 stop_at: float | None = None, model=None):
        self.store, self.ctx, self.profile_fn = store, ctx, profile_fn
        self.top, self.during, self.stop_at, self.model = top, during, stop_at, model
        self.recorded = {r["node"]: r for r in store.profiles}
        self.profiled_during = 0
        self.failures = 0
        self.stop: str | None = None  # why the search should stop early, once it should

    # ---- during the search ----
    def on_best(self, node: int, key: str, candidate: Candidate, artifacts: dict) -> None:
        """Node ``node`` is the run's new best: profile it (or read its recorded profile)."""
        if self.profiled_during >= self.during:
            return
        rec = self._profile(node, key, candidate, artifacts, "search")
        if rec is None:
            return
        self.profiled_during += 1
        diag = rec.get("diagnosis")
        if not diag:
            return
        self.ctx.diagnoses[key] = diag
        self.ctx.diagnoses[BEST] = diag
        if self.model is not None:
            self.model.set_context(costmodel.profile_features(diag))
        sol = diag.get("sol")
        if self.stop_at is not None and isinstance(sol, (int, float)) and sol >= self.stop_at:
            self.stop = (f"node {node} runs at {sol * 100:.0f}% of speed-of-light "
                         f"(--stop-at-sol {self.stop_at:g})")

    def _profile(self, node: int, key: str, candidate: Candidate, artifacts: dict,
                 when: str) -> dict | None:
        rec = self.recorded.get(node)
        if rec is None:
            source = artifacts.get("source") or candidate.source
            if self.failures >= GIVE_UP or not source:
                return None
            profile, diag = self.profile_fn(candidate, source, artifacts)
            rec = self.store.append_profile({
                "node": node, "key": key, "when": when, "profile": profile.to_record(),
                "diagnosis": diag.to_record() if diag is not None else None,
                "time": time.time()})
            self.recorded[node] = rec
        if not (rec.get("profile") or {}).get("ok"):
            self.failures += 1
        return rec

    # ---- at the end ----
    def finish(self, nodes: list[dict], confirmed: dict | None, key_of) -> list[dict]:
        """Profile the ``top`` best kernels that have no profile yet; every profile's row."""
        by_id = {r["id"]: r for r in nodes}
        order = [row["node"] for row in (confirmed or {}).get("candidates") or ()]
        ranked = sorted((r for r in nodes if (r.get("result") or {}).get("ok")
                         and r.get("candidate")),
                        key=lambda r: (-float(r["result"].get("speedup") or 0.0), r["id"]))
        order += [r["id"] for r in ranked if r["id"] not in order]
        seen_kernels = set()
        for node in order:
            if len(seen_kernels) >= self.top:
                break
            r = by_id.get(node)
            if r is None or not (r.get("result") or {}).get("ok"):
                continue
            kernel = r.get("source_hash") or node
            if kernel in seen_kernels:
                continue
            seen_kernels.add(kernel)
            cand = Candidate.from_record(r["candidate"])
            arts = dict((r.get("result") or {}).get("artifacts") or {})
            arts["source"] = _source(self.store, r) or cand.source
            self._profile(node, key_of(r, cand), cand, arts, "end")
        return self.rows()

    def rows(self) -> list[dict]:
        """One summary row per profile record, in the order they were made."""
        return [row_of(r) for r in self.store.profiles]


def row_of(record: dict) -> dict:
    p = record.get("profile") or {}
    d = record.get("diagnosis") or {}
    return {"node": record.get("node"), "when": record.get("when"), "tool": p.get("tool"),
            "ok": bool(p.get("ok")), "bound": d.get("bound"), "sol": d.get("sol"),
            "line": d.get("line") or p.get("message") or ""}


def _source(store, record: dict) -> str | None:
    rel = record.get("source_path")
    if not rel:
        return None
    try:
        return (store.root / rel).read_text()
    except (OSError, UnicodeDecodeError):
        return None
