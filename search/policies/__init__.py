"""Search policies behind one ask/tell interface; ``make(name, ...)`` builds one."""
from __future__ import annotations

from .base import ROOT, Policy, Proposal, Tree  # noqa: F401
from .evolution import Evolution
from .greedy import Greedy
from .mcts import MCTS
from .sampling import RandomSampling

POLICIES: dict[str, type[Policy]] = {
    "mcts": MCTS, "greedy": Greedy, "random": RandomSampling, "evolution": Evolution,
}


def make(name: str, seed: int = 0, starts: int = 1, **params) -> Policy:
    if name not in POLICIES:
        raise KeyError(f"unknown policy '{name}'; known: {', '.join(POLICIES)}")
    return POLICIES[name](seed=seed, starts=starts, **params)
