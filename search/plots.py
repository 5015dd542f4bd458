"""Figures of runs: best-so-far curves and the lineage tree (matplotlib, no display).

matplotlib is the ``plot`` extra: imported when a figure is drawn, and ``require()`` lets a
command refuse ``--plot`` before its work when it is missing.
"""
from __future__ import annotations

import numpy as np

from kdsl import extras

from . import lineage
from .policies.base import ROOT


def require() -> None:
    extras.require("--plot", "matplotlib")


def _pyplot():
    require()
    import matplotlib
    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt
    return plt


def _tree_layout(g) -> dict:
    """Depth on y, leaves spread on x in DFS order; parents centred over children."""
    pos, next_x = {}, [0.0]

    def place(n, depth):
        kids = sorted(c for c in g.successors(n) if list(g.predecessors(c))[0] == n)
        if not kids:
            pos[n] = (next_x[0], -depth)
            next_x[0] += 1
        else:
            for c in kids:
                place(c, depth + 1)
            pos[n] = (float(np.mean([pos[c][0] for c in kids])), -depth)

    import sys
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    place(ROOT, 0)
    return pos


def run_figure(nodes: list[dict], path: str, title: str = "") -> None:
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    curve = lineage.best_so_far(nodes)
    ax1.plot(range(1, len(curve) + 1), curve, drawstyle="steps-post")
    ax1.set_xlabel("evaluations")
    ax1.set_ylabel("best speedup (x)")
    ax1.set_title("best so far")
    ax1.grid(alpha=0.3)
    g = lineage.graph(nodes)
    pos = _tree_layout(g)
    for a, b in g.edges:
        if a in pos and b in pos:
            style = "--" if list(g.predecessors(b))[0] != a else "-"
            ax2.plot(*zip(pos[a], pos[b]), style, color="0.7", lw=0.6, zorder=1)
    ids = [n for n in g.nodes if n != ROOT and n in pos]
    speed = [g.nodes[n]["speedup"] for n in ids]
    ax2.scatter([pos[n][0] for n in ids], [pos[n][1] for n in ids], c=speed, cmap="viridis",
                s=18, zorder=2, edgecolors=["red" if not g.nodes[n]["ok"] else "none"
                                             for n in ids])
    ax2.scatter(*pos[ROOT], marker="s", color="black", s=20)
    ax2.set_title("lineage (colour: speedup; red edge: failed; dashed: crossover)")
    ax2.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compare_figure(curves: dict[str, list[list[float]]], path: str, title: str = "") -> None:
    """Mean best-so-far per policy with its min-max spread over seeds."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for policy, runs in curves.items():
        n = max(len(r) for r in runs)
        arr = np.array([r + [r[-1] if r else 0.0] * (n - len(r)) for r in runs], dtype=float)
        x = np.arange(1, n + 1)
        ax.plot(x, arr.mean(axis=0), label=policy)
        ax.fill_between(x, arr.min(axis=0), arr.max(axis=0), alpha=0.15)
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best speedup (x)")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
