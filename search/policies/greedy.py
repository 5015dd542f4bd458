"""Greedy: after a few drafts, always mutate the best candidate found so far."""
from __future__ import annotations

from .base import Policy, Proposal


class Greedy(Policy):
    name = "greedy"

    def __init__(self, seed=0, starts=1, draft: int = 4):
        super().__init__(seed, starts)
        self.draft_n, self.drafted = draft, 0

    def choose(self) -> Proposal:
        best = self.best_evaluated()
        if self.drafted < self.draft_n or best is None:
            self.drafted += 1
            return self.draft()
        return self._make((best,), "mutate")
