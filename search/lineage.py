"""The lineage graph of a run: candidates as nodes, operator applications as edges.

Built from the run's node records (the store is the source of truth; the
graph is a view), so a resumed or finished run gives the same graph.
"""
from __future__ import annotations

import hashlib

import networkx as nx

from .policies.base import ROOT


def source_hash(source: str | None) -> str:
    return hashlib.sha256((source or "").encode()).hexdigest()[:12] if source else ""


def graph(nodes: list[dict]) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_node(ROOT, kind="root", speedup=0.0, ok=False)
    for r in nodes:
        res = r.get("result") or {}
        cand = r.get("candidate") or {}
        g.add_node(r["id"], kind=r.get("kind"), operator=r.get("operator"),
                   backend=cand.get("backend"), genome=cand.get("genome") or {},
                   source_hash=r.get("source_hash", ""), ok=bool(res.get("ok")),
                   stage=res.get("stage"), message=res.get("message", ""),
                   speedup=float(res.get("speedup") or 0.0), time_ms=res.get("time_ms"),
                   iteration=r.get("iteration"), source_path=r.get("source_path"))
        for p in r.get("parents", ()):
            g.add_edge(p, r["id"], operator=r.get("operator"))
    return g


def best(nodes: list[dict]) -> dict | None:
    """The node record with the highest speedup (ties: the earliest)."""
    top = None
    for r in nodes:
        s = float((r.get("result") or {}).get("speedup") or 0.0)
        if s > 0 and (top is None or s > float(top["result"]["speedup"])):
            top = r
    return top


def path_to(nodes: list[dict], node_id: int) -> list[dict]:
    """The node's records from its first draft down to it, following first parents."""
    by_id = {r["id"]: r for r in nodes}
    out = []
    cur = by_id.get(node_id)
    while cur is not None:
        out.append(cur)
        parents = cur.get("parents") or []
        cur = by_id.get(parents[0]) if parents and parents[0] != ROOT else None
    return out[::-1]


def best_so_far(nodes: list[dict]) -> list[float]:
    """Best speedup after each evaluation, in the order evaluations finished."""
    out, best_value = [], 0.0
    for r in sorted(nodes, key=lambda r: r.get("iteration", 0)):
        best_value = max(best_value, float((r.get("result") or {}).get("speedup") or 0.0))
        out.append(best_value)
    return out
