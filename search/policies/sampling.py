"""Random: independent uniform samples of the search space, the control policy."""
from __future__ import annotations

from .base import Policy, Proposal


class RandomSampling(Policy):
    name = "random"

    def choose(self) -> Proposal:
        return self.draft()
