"""The ask/tell interface every search policy implements, and the tree they share.

A policy never evaluates anything and never does I/O. ``propose(n)`` returns
``n`` proposals, each naming a fresh node id, its parents and what kind of
operator should make it ('start' = the i-th starting candidate, 'draft' = an
independent sample, 'mutate', 'crossover'; 'decide' carries a genome the policy
chose itself); ``observe`` feeds back rewards
(speedups; 0 for any failure). Node 0 is the root: it stands for "nothing
yet" and is the parent of every start and draft node.
"""
from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

ROOT = 0
TOP = 256  # how many of the best nodes the tree keeps ranked (enough for any population)


@dataclass(frozen=True)
class Proposal:
    node: int
    parents: tuple[int, ...]
    kind: str          # 'start' | 'draft' | 'mutate' | 'crossover' | 'decide'
    start_index: int = -1
    backend: str = ""           # 'decide': the genome the policy chose outright
    genome: tuple = ()          # sorted (gene, value) pairs


@dataclass
class TreeNode:
    id: int
    parents: tuple[int, ...]
    children: list[int] = field(default_factory=list)
    reward: float | None = None   # None while pending
    visits: int = 0               # pending proposals below count (virtual loss)
    total: float = 0.0            # sum of rewards observed below (itself included)
    best: float = 0.0             # the highest reward observed below (itself included)


class Tree:
    """Nodes by id; a node's first parent is its tree parent (crossover adds a second)."""

    def __init__(self):
        self.nodes: dict[int, TreeNode] = {ROOT: TreeNode(ROOT, ())}
        self.next_id = 1
        self.best_reward = 0.0
        self.best_node: int | None = None
        self.ranked: list[tuple[float, int]] = []  # (-reward, id) of the best TOP nodes

    def add(self, parents: tuple[int, ...]) -> TreeNode:
        node = TreeNode(self.next_id, parents)
        self.next_id += 1
        self.nodes[node.id] = node
        self.nodes[parents[0]].children.append(node.id)
        for a in self.path(node.id):
            self.nodes[a].visits += 1
        return node

    def path(self, node_id: int) -> list[int]:
        """The node and its tree ancestors up to the root."""
        out = [node_id]
        while self.nodes[out[-1]].parents:
            out.append(self.nodes[out[-1]].parents[0])
        return out

    def observe(self, node_id: int, reward: float) -> None:
        node = self.nodes[node_id]
        if node.reward is not None:
            raise ValueError(f"node {node_id} observed twice")
        node.reward = float(reward)
        for a in self.path(node_id):
            self.nodes[a].total += node.reward
            self.nodes[a].best = max(self.nodes[a].best, node.reward)
        if node.reward > self.best_reward:
            self.best_reward, self.best_node = node.reward, node_id
        bisect.insort(self.ranked, (-node.reward, node_id))
        del self.ranked[TOP:]

    def top(self, n: int) -> list[TreeNode]:
        """The ``n`` highest-reward evaluated nodes, best first (ties: lowest id)."""
        return [self.nodes[i] for _, i in self.ranked[:n]]

    def evaluated(self) -> list[TreeNode]:
        return [n for n in self.nodes.values() if n.id != ROOT and n.reward is not None]


class Policy:
    """Common bookkeeping: start candidates first, then the policy's own choices."""

    name = "policy"
    needs_spaces = False  # True: made with the run's spaces (and cost model), see ``make``

    def __init__(self, seed: int = 0, starts: int = 1, **params):
        self.rng = random.Random(f"kdsl-policy:{self.name}:{seed}")
        self.tree = Tree()
        self.starts = starts
        self.started = 0
        self.params = params

    def propose(self, n: int) -> list[Proposal]:
        out = []
        for _ in range(n):
            if self.started < self.starts:
                node = self.tree.add((ROOT,))
                out.append(Proposal(node.id, (ROOT,), "start", self.started))
                self.started += 1
            else:
                out.append(self.choose())
        return out

    def observe(self, results: list[tuple[int, float]]) -> None:
        for node_id, reward in results:
            self.tree.observe(node_id, reward)

    def placed(self, node: int, backend: str, genes: dict | None) -> None:
        """The engine made node ``node``: a genome of ``backend`` (None: free source)."""

    def follow_up(self, parent: int, kind: str) -> Proposal:
        """A node the engine asks for outside the policy's choice (an LLM repair of a failed
        child); it joins the tree under ``parent`` and its reward backs up as usual."""
        return self._make((parent,), kind)

    # ---- for subclasses ----
    def choose(self) -> Proposal:
        raise NotImplementedError

    def _make(self, parents: tuple[int, ...], kind: str) -> Proposal:
        node = self.tree.add(parents)
        return Proposal(node.id, parents, kind)

    def draft(self) -> Proposal:
        return self._make((ROOT,), "draft")

    def best_evaluated(self, exclude: int | None = None) -> int | None:
        """The highest-reward evaluated node (ties: lowest id)."""
        for n in self.tree.top(2):
            if n.id != exclude:
                return n.id
        return None
