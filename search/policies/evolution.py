"""Evolution: a population with tournament selection, crossover and mutation.

The population is the ``population`` best evaluated candidates (elitist,
mu + lambda); the first ``population`` proposals after the starts are drafts.
"""
from __future__ import annotations

from .base import Policy, Proposal


class Evolution(Policy):
    name = "evolution"

    def __init__(self, seed=0, starts=1, population: int = 8, tournament: int = 3,
                 crossover: float = 0.5):
        super().__init__(seed, starts)
        self.size, self.k, self.p_cross = population, tournament, crossover
        self.drafted = 0

    def population(self):
        return self.tree.top(self.size)

    def tournament(self, pop) -> int:
        picks = [pop[self.rng.randrange(len(pop))] for _ in range(min(self.k, len(pop)))]
        return min(picks, key=lambda n: (-n.reward, n.id)).id

    def choose(self) -> Proposal:
        pop = self.population()
        if self.drafted < self.size or not pop:
            self.drafted += 1
            return self.draft()
        a = self.tournament(pop)
        if len(pop) > 1 and self.rng.random() < self.p_cross:
            b = self.tournament([n for n in pop if n.id != a])
            return self._make((a, b), "crossover")
        return self._make((a,), "mutate")
