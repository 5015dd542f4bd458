"""UCT over the candidate tree: Monte-Carlo tree search whose nodes are evaluated kernels.

Each expansion mutates (or crosses over) a kernel into a child; the tree is the lineage.
The default policy, ``mcts``, searches the tree of decisions instead (``mcts.py``); this one
stays for runs recorded with it and for comparison.

Selection descends from the root by UCB1 on rewards normalized by the best
seen so far, so the exploration constant does not depend on the speedup scale
(a subtree's value is its mean reward, or with ``backup='max'`` its best one); a node may have at most ceil(k * visits**alpha) children (progressive
widening), so a node is not expanded forever and the root keeps drafting
fresh samples as the tree grows. Pending proposals count as visits with
reward 0 (virtual loss), which spreads parallel proposals apart. Ties break
to the lowest node id, so a seed fixes the whole search.
"""
from __future__ import annotations

import math

from .base import ROOT, Policy, Proposal


class UCT(Policy):
    name = "uct"

    def __init__(self, seed=0, starts=1, c: float = 0.7, draft: int = 4, k: float = 1.0,
                 alpha: float = 0.5, crossover: float = 0.15, backup: str = "mean"):
        super().__init__(seed, starts)
        if backup not in ("mean", "max"):
            raise ValueError(f"backup must be 'mean' or 'max', not {backup!r}")
        self.c, self.draft_n, self.k, self.alpha, self.p_cross = c, draft, k, alpha, crossover
        self.backup = backup
        self.drafted = 0

    def allowed_children(self, visits: int) -> int:
        return max(1, math.ceil(self.k * max(visits, 1) ** self.alpha))

    def ucb(self, parent_visits: int, child) -> float:
        if child.visits == 0:
            return math.inf
        best = self.tree.best_reward or 1.0
        # mean: how good the subtree is on average; max: the best kernel it holds (a search
        # for one fast kernel cares about the latter)
        value = child.best if self.backup == "max" else child.total / child.visits
        q = value / best
        return q + self.c * math.sqrt(math.log(max(parent_visits, 1)) / child.visits)

    def choose(self) -> Proposal:
        if self.drafted < self.draft_n:
            self.drafted += 1
            return self.draft()
        node = self.tree.nodes[ROOT]
        while True:
            # only evaluated children can be descended into or mutated meaningfully
            ready = [self.tree.nodes[c] for c in node.children
                     if self.tree.nodes[c].reward is not None]
            if len(node.children) < self.allowed_children(node.visits) or not ready:
                return self.expand(node.id)
            node = max(ready, key=lambda ch: (self.ucb(node.visits, ch), -ch.id))

    def expand(self, node_id: int) -> Proposal:
        if node_id == ROOT:
            return self.draft()
        if self.rng.random() < self.p_cross:
            other = self.best_evaluated(exclude=node_id)
            if other is not None:
                return self._make((node_id, other), "crossover")
        return self._make((node_id,), "mutate")
