"""A genome as a sequence of decisions, coarse first, and the tree of their prefixes.

A backend declares its schedule choices as genes. Some decide the kernel's structure
(the reduction strategy, the loop order, whether to fuse), others tune it (tile sizes,
warps, stages). Taken in that order, every genome is a path from the root of one tree: a
node is a partial genome (the decisions made so far), its children the values of the next
decision. Searching that tree judges a coarse choice by the best completion found under it,
not by the one sample that happened to carry it.

With several backends the first decision is the backend. Genes with one value are no
decision and are left out of the path.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kdsl.backends.base import Gene, Space

BACKEND = "backend"


@dataclass(frozen=True)
class Decision:
    name: str
    values: tuple
    ordered: bool


def coarse_first(genes: tuple[Gene, ...]) -> list[Gene]:
    """Genes in decision order: by their declared level, else structural choices (unordered
    genes) before tuning ones (ordered genes: sizes, counts); ties keep the declared order."""
    def level(i_g):
        i, g = i_g
        return (g.level if g.level is not None else (2 if g.ordered else 1), i)
    return [g for _, g in sorted(enumerate(genes), key=level)]


class Decisions:
    """The decisions of a run's spaces, and the mapping between genomes and paths."""

    def __init__(self, spaces: dict[str, Space]):
        if not spaces:
            raise ValueError("no backend space to decide over")
        self.spaces = spaces
        self.backends = tuple(sorted(spaces))
        self.by_backend = {b: [Decision(g.name, tuple(g.values), g.ordered)
                               for g in coarse_first(spaces[b].genes) if len(g.values) > 1]
                           for b in self.backends}
        self._head = Decision(BACKEND, self.backends, False) if len(self.backends) > 1 else None

    def backend_of(self, prefix: tuple) -> str | None:
        if self._head is None:
            return self.backends[0]
        return prefix[0] if prefix else None

    def _tail(self, prefix: tuple) -> tuple:
        return prefix if self._head is None else prefix[1:]

    def at(self, prefix: tuple) -> Decision | None:
        """The decision taken after ``prefix``; None when the path is complete."""
        backend = self.backend_of(prefix)
        if backend is None:
            return self._head
        ds, done = self.by_backend[backend], len(self._tail(prefix))
        return ds[done] if done < len(ds) else None

    def length(self, backend: str) -> int:
        return len(self.by_backend[backend]) + (self._head is not None)

    def path(self, backend: str, genes: dict) -> tuple:
        """The path of a genome (genes outside the space take their defaults)."""
        full = self.spaces[backend].complete(genes)
        head = () if self._head is None else (backend,)
        return head + tuple(full[d.name] for d in self.by_backend[backend])

    def genome(self, path: tuple) -> tuple[str, dict]:
        """(backend, genes) of a complete path."""
        backend = self.backend_of(path)
        genes = self.spaces[backend].default()
        for d, v in zip(self.by_backend[backend], self._tail(path)):
            genes[d.name] = v
        return backend, genes

    def named(self, path: tuple) -> list[tuple[str, object]]:
        """(decision name, value) along a path, for records and display."""
        out, prefix = [], ()
        for v in path:
            d = self.at(prefix)
            out.append((d.name, v))
            prefix += (v,)
        return out


@dataclass
class NodeStats:
    visits: int = 0        # paths proposed through this prefix, pending ones included
    done: int = 0          # of those, observed
    total: float = 0.0     # sum of their rewards
    best: float = 0.0      # the highest of them
    best_path: tuple | None = None  # the complete path that scored ``best``
    tried: list = field(default_factory=list)  # child values visited, in first-visit order


class DecisionTree:
    """Statistics per prefix. A prefix is stored once some path through it was proposed;
    the cost of a proposal or an observation is the path's length, whatever the size."""

    def __init__(self):
        self.nodes: dict[tuple, NodeStats] = {(): NodeStats()}

    def get(self, prefix: tuple) -> NodeStats | None:
        return self.nodes.get(prefix)

    def visit(self, path: tuple) -> None:
        for i in range(len(path) + 1):
            s = self.nodes.get(path[:i])
            if s is None:
                s = self.nodes[path[:i]] = NodeStats()
                self.nodes[path[:i - 1]].tried.append(path[i - 1])
            s.visits += 1

    def observe(self, path: tuple, reward: float) -> None:
        """Back a visited path's reward up to the root."""
        for i in range(len(path) + 1):
            s = self.nodes[path[:i]]
            s.done += 1
            s.total += reward
            if s.best_path is None or reward > s.best:
                s.best, s.best_path = reward, path

    def children(self, prefix: tuple) -> list[tuple[object, NodeStats]]:
        s = self.nodes.get(prefix)
        return [] if s is None else [(v, self.nodes[prefix + (v,)]) for v in s.tried]

    def donor(self, prefix: tuple) -> tuple | None:
        """The best observed path through ``prefix``, else through its nearest observed
        ancestor: what a rollout from ``prefix`` completes the path with."""
        for i in range(len(prefix), -1, -1):
            s = self.nodes.get(prefix[:i])
            if s is not None and s.best_path is not None:
                return s.best_path
        return None
