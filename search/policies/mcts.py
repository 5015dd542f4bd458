"""Monte-Carlo tree search over decisions: the default policy.

The tree is the one of ``decisions.py``: a node is a partial genome, coarse decisions
(strategy, structure) near the root, tuning (sizes, warps, stages) deeper. One proposal:

1. **Select.** From the root, while the node has been observed, either widen it (try one
   more value of its decision: progressive widening allows ``ceil(k * visits**alpha)``
   children) or descend to the child with the highest UCB. A child's value is the best
   reward found under it, over the best of the run (a coarse choice is as good as its
   best completion), plus ``c * sqrt(ln N / n)``.
2. **Roll out.** Complete the path: the rest of the decisions come from the best kernel
   found under the nearest observed prefix (the donor), each changed with probability
   ``rollout`` on the first try and ``mutation`` more on each further one (ordered genes
   mostly by one step). With a cost model, ``candidates`` such completions are drawn and
   the one it predicts fastest is proposed.
3. **Measure, back up.** The engine evaluates the genome; its reward (speedup, 0 for a
   failure) goes up the path.

A share ``rewrite`` of the proposals instead asks the run's operators to change the best
kernel found (one to three genes at once, a step of an ordered gene, an LLM rewrite when
the LLM is on): coupled genes (a strategy and the tile size that suits it) move together
there, where the tree changes one decision at a time. On synthetic landscapes (the
tests' separable one, and one where the best tile depends on the strategy) the tree alone
needed a median of 13 and 89 evaluations to 95% of the optimum, greedy mutation 17 and
25, the two together (0.3, c = 0.5) 17 and 23.5. Where the structural decisions hardly
matter and the tuning ones below them do (the c backend's softmax on the CPU: 91 of the
100 kernels of five mcts runs kept the default simdlen 0, and every leader had 16),
rollouts that keep the donor's tail never reach them: on such a landscape (six flags
above two ordered genes) the tree alone missed 95% in 60 evaluations on 20 of 20 seeds;
changing each tail decision with probability 0.15 on the first try reached it in a median
of 11 (uniform sampling 10.5), at a cost of 1.5 on the separable one (13.5 to 15).

Widening an ordered decision tries the value next to its best child's first (block 64
after 128 won: 256 or 64, then further); an unordered one draws an untried value, or the
one whose best completion the model ranks highest. Every genome the run measures joins
the tree (starts and the run's other operators' children too), so the tree knows what
the rest of the search found. Proposals are never a genome proposed before, nor one the
engine says runs a kernel already evaluated. Ties break by the seed: a seed and the
measurements fix the whole search.
"""
from __future__ import annotations

import math

from .base import ROOT, Policy, Proposal
from .decisions import Decisions, DecisionTree

TRIES = 8  # rollouts tried for a new genome (each changes more) before a uniform sample


class _Exhausted(Exception):
    """Every genome of the tree was proposed."""


class MCTS(Policy):
    name = "mcts"
    needs_spaces = True

    def __init__(self, seed=0, starts=1, spaces=None, model=None, scale=None, c: float = 0.5,
                 k: float = 2.0, alpha: float = 0.5, mutation: float = 0.15,
                 candidates: int = 48, rewrite: float = 0.3, rollout: float = 0.15):
        super().__init__(seed, starts)
        if spaces is None:
            raise ValueError("mcts decides over the backends' spaces; none were given")
        self.decisions = Decisions(spaces)
        self.dtree = DecisionTree()
        self.c, self.k, self.alpha, self.mutation = c, k, alpha, mutation
        self.n_candidates, self.p_rewrite = candidates, rewrite
        # the first completion's change rate: 0 keeps the donor's tail as it is, so that a
        # new value of one decision is judged alone; above 0 the tail (where the tuning
        # decisions sit, below every structural one) is explored by every rollout too
        self.p_rollout = rollout
        self.model, self.scale = model, scale or {}
        self.paths: dict[int, tuple] = {}   # node -> its genome's path
        self.node_of: dict[tuple, int] = {}  # path -> the first node that proposed it
        self.proposed: set[tuple] = set()
        self.exhausted: set[tuple] = set()  # prefixes with nothing new below
        self.novel = lambda backend, genes: True  # the engine's test: a new kernel?

    # ---- the engine tells what each node is and how it did ----
    def placed(self, node: int, backend: str, genes: dict | None) -> None:
        """Node ``node`` is the genome (``backend``, ``genes``); None: free source."""
        if genes is None or backend not in self.decisions.spaces or node in self.paths:
            return
        path = self.decisions.path(backend, genes)
        self.paths[node] = path
        self.node_of.setdefault(path, node)
        self.proposed.add(path)
        self.dtree.visit(path)

    def observe(self, results: list[tuple[int, float]]) -> None:
        super().observe(results)
        for node, reward in results:
            path = self.paths.get(node)
            if path is None:
                continue
            self.dtree.observe(path, reward)
            if self.model is not None:
                backend, genes = self.decisions.genome(path)
                self.model.add(self._row(backend, genes), reward)

    # ---- choosing ----
    def choose(self) -> Proposal:
        best = self.best_evaluated()
        if best is not None and self.p_rewrite > 0 and self.rng.random() < self.p_rewrite:
            return self._make((best,), "mutate")  # the run's operators: LLM rewrites too
        for attempt in range(TRIES):
            try:
                prefix = self.select()
            except _Exhausted:
                break
            path = self.rollout(prefix, attempt)
            if path is not None:
                return self._propose(path)
        for _ in range(TRIES):  # the neighbourhood is exhausted: anywhere in the space
            backend = self.rng.choice(self.decisions.backends)
            genes = self.decisions.spaces[backend].sample(self.rng)
            path = self.decisions.path(backend, genes)
            if path not in self.proposed and self.novel(backend, genes):
                return self._propose(path)
        return self.draft()  # nothing new found: the engine's operators try

    def _propose(self, path: tuple) -> Proposal:
        backend, genes = self.decisions.genome(path)
        donor = self.dtree.donor(path[:-1]) if path else None
        parent = self.node_of.get(donor, ROOT) if donor is not None else ROOT
        node = self.tree.add((parent,))
        self.paths[node.id] = path
        self.node_of.setdefault(path, node.id)
        self.proposed.add(path)
        self.dtree.visit(path)
        return Proposal(node.id, (parent,), "decide", backend=backend,
                        genome=tuple(sorted(genes.items())))

    def select(self) -> tuple:
        """Where to roll out from: a prefix whose completion is new. A node whose children
        are complete genomes (the last decision) always widens; a node with nothing left
        to try is marked exhausted and never descended into again."""
        prefix = ()
        while True:
            d = self.decisions.at(prefix)
            s = self.dtree.get(prefix)
            if d is None:  # a complete genome, proposed already: look elsewhere
                self._exhaust(prefix)
                prefix = ()
                continue
            if s is None or s.done == 0:
                return prefix
            children = self.dtree.children(prefix)
            untried = len(children) < len(d.values)
            last = self.decisions.at(prefix + (d.values[0],)) is None
            allowed = math.ceil(self.k * max(s.visits, 1) ** self.alpha)
            if untried and (last or len(children) < allowed):
                return prefix + (self.widen(prefix, d, children),)
            ready = [(v, st) for v, st in children if st.done > 0
                     and prefix + (v,) not in self.exhausted]
            if not ready:
                if untried:
                    return prefix + (self.widen(prefix, d, children),)
                if all(prefix + (v,) in self.exhausted for v, _ in children):
                    self._exhaust(prefix)
                return prefix  # children pending: roll out from here
            top = max(self.ucb(s.visits, st) for _, st in ready)
            v = self.rng.choice([v for v, st in ready if self.ucb(s.visits, st) == top])
            prefix += (v,)

    def _exhaust(self, prefix: tuple) -> None:
        if prefix == ():
            raise _Exhausted
        self.exhausted.add(prefix)

    def ucb(self, parent_visits: int, child) -> float:
        best = self.dtree.nodes[()].best or 1.0
        return child.best / best + self.c * math.sqrt(
            math.log(max(parent_visits, 1)) / max(child.visits, 1))

    def widen(self, prefix: tuple, d, children) -> object:
        tried = {v for v, _ in children}
        untried = [v for v in d.values if v not in tried]
        observed = [(v, st) for v, st in children if st.done > 0]
        if d.ordered and observed:
            anchor = d.values.index(max(observed, key=lambda vs: vs[1].best)[0])
            near = min(abs(d.values.index(v) - anchor) for v in untried)
            return self.rng.choice([v for v in untried
                                    if abs(d.values.index(v) - anchor) == near])
        if self.model is not None and len(untried) > 1:
            per = 4  # completions a value is judged by (one prediction call for all)
            paths = [self._complete(prefix + (v,), 0) for v in untried for _ in range(per)]
            pred = self._predict(paths)
            if pred is not None:
                scored = [(max(pred[i * per:(i + 1) * per]), v) for i, v in enumerate(untried)]
                top = max(s for s, _ in scored)
                return self.rng.choice([v for s, v in scored if s == top])
        return self.rng.choice(untried)

    # ---- completing a path ----
    def rollout(self, prefix: tuple, attempt: int) -> tuple | None:
        """A complete new path through ``prefix``, or None if none was found."""
        n = self.n_candidates if self.model is not None else 1
        paths = []
        for i in range(max(1, n)):
            p = self._complete(prefix, attempt + (1 if i else 0))
            if p not in self.proposed and p not in paths:
                paths.append(p)
        if len(paths) > 1:
            pred = self._predict(paths)
            if pred is not None:
                order = sorted(range(len(paths)), key=lambda i: -pred[i])
                paths = [paths[i] for i in order]
        for p in paths[:4]:
            if self.novel(*self.decisions.genome(p)):
                return p
        return None

    def _complete(self, prefix: tuple, attempt: int) -> tuple:
        donor = self.dtree.donor(prefix)
        rate = min(1.0, self.p_rollout + self.mutation * attempt)
        path = prefix
        while (d := self.decisions.at(path)) is not None:
            i = len(path)
            same = donor is not None and len(donor) > i and donor[i] in d.values and (
                i == 0 or self.decisions.backend_of(donor) == self.decisions.backend_of(path))
            v = donor[i] if same else self._default(path, d)
            if self.rng.random() < rate:
                v = self._change(d, v)
            path += (v,)
        return path

    def _default(self, path: tuple, d) -> object:
        backend = self.decisions.backend_of(path)
        if backend is None:
            return self.rng.choice(d.values)
        return self.decisions.spaces[backend].default()[d.name]

    def _change(self, d, v) -> object:
        others = [x for x in d.values if x != v]
        if not others:
            return v
        if d.ordered and v in d.values and self.rng.random() < 0.7:
            i = d.values.index(v)
            steps = [d.values[j] for j in (i - 1, i + 1) if 0 <= j < len(d.values)]
            return self.rng.choice(steps)
        return self.rng.choice(others)

    def _row(self, backend: str, genes: dict) -> dict:
        from kdsl.search.costmodel import encode
        return encode(backend, genes, self.decisions.by_backend[backend], self.scale)

    def _predict(self, paths: list[tuple]) -> list[float] | None:
        if self.model is None:
            return None
        return self.model.predict([self._row(*self.decisions.genome(p)) for p in paths])
