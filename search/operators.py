"""Operators: how a new candidate is made from zero, one or two parents.

Every operator has one signature, ``apply(parents, ctx, rng) -> Candidate | OperatorFailure``,
and one kind: 'draft' (no parent), 'mutate' (one parent) or 'crossover' (two).
The search space they walk is the backend's declared ``Space``: operators
never know about particular ops or backends. The LLM rewrite plugs in as one
more operator of kind 'mutate' (or 'crossover').
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Protocol

from kdsl.backends.base import Space

from .candidate import Candidate
from .profile import advice


class FatalOperatorError(Exception):
    """An operator error that must stop the run (a replay that cannot go on), not a child."""


@dataclass(frozen=True)
class OperatorFailure:
    """An operator application that produced no candidate, recorded as a failed child."""
    operator: str
    reason: str


@dataclass
class Context:
    """What operators may read: the backends' spaces, starting genomes, and what was measured.

    ``results`` and ``history`` are keyed by candidate (``key(c)``) and kept current
    by the engine: the LLM operators read a parent's feedback and lineage from them.
    ``diagnoses`` holds the profiled kernels' diagnoses (``profile/``): a mutation of a
    diagnosed parent tries the genes its bound points at first (``profile.advice``).
    """
    spaces: dict[str, Space]                 # backend name -> its space for this op/device
    starts: list[Candidate] = field(default_factory=list)  # stored/default genomes, in order
    results: dict = field(default_factory=dict)   # candidate key -> Result
    history: dict = field(default_factory=dict)   # candidate key -> lines of its lineage path
    key: Callable = field(default=lambda c: "")   # candidate -> its cache key
    extra: dict = field(default_factory=dict)     # for operators that need more (the LLM)
    diagnoses: dict = field(default_factory=dict)  # candidate key (or 'best') -> diagnosis


class Operator(Protocol):
    name: str
    kind: str  # 'draft' | 'mutate' | 'crossover'

    def apply(self, parents: list[Candidate], ctx: Context,
              rng: random.Random) -> Candidate | OperatorFailure: ...


def _genes_of(c: Candidate, ctx: Context) -> dict:
    return ctx.spaces[c.backend].complete(c.genes)


@dataclass(frozen=True)
class FnOperator:
    """An operator written as a plain function (the rule-based ones)."""
    name: str
    kind: str
    fn: Callable

    def apply(self, parents, ctx, rng):
        return self.fn(parents, ctx, rng)


def _sample(parents, ctx, rng):
    backend = rng.choice(sorted(ctx.spaces))
    return Candidate.of(backend, ctx.spaces[backend].sample(rng), origin="sample")


def _mutate_genes(parent: Candidate, ctx: Context, rng: random.Random, count: int,
                  name: str) -> Candidate | OperatorFailure:
    if parent.source is not None:
        return OperatorFailure(name, "the parent is free source; genes do not apply to it")
    space = ctx.spaces[parent.backend]
    mutable = [g for g in space.genes if len(g.values) > 1]
    if not mutable:
        return OperatorFailure(name, f"backend {parent.backend} declares no gene with a choice")
    genes = _genes_of(parent, ctx)
    first = advice.pick(advice.diagnosis_for(ctx, parent), [g.name for g in mutable], count,
                        rng)
    by_name = {g.name: g for g in mutable}
    chosen = [by_name[n] for n in first] if first is not None else \
        rng.sample(mutable, min(count, len(mutable)))
    for g in chosen:
        genes[g.name] = rng.choice([v for v in g.values if v != genes[g.name]])
    return Candidate.of(parent.backend, genes, origin=name)


def _mutate_one(parents, ctx, rng):
    return _mutate_genes(parents[0], ctx, rng, 1, "mutate_one")


def _mutate_many(parents, ctx, rng):
    return _mutate_genes(parents[0], ctx, rng, rng.randint(2, 3), "mutate_many")


def _neighbour(parents, ctx, rng):
    """One step up or down an ordered gene (block size 64 -> 128): local refinement."""
    parent = parents[0]
    if parent.source is not None:
        return OperatorFailure("neighbour", "the parent is free source; genes do not apply")
    space = ctx.spaces[parent.backend]
    ordered = [g for g in space.genes if g.ordered and len(g.values) > 1]
    if not ordered:
        return _mutate_genes(parent, ctx, rng, 1, "neighbour")
    genes = _genes_of(parent, ctx)
    first = advice.pick(advice.diagnosis_for(ctx, parent), [g.name for g in ordered], 1, rng)
    g = next(x for x in ordered if x.name == first[0]) if first else rng.choice(ordered)
    i = g.values.index(genes[g.name])
    steps = [j for j in (i - 1, i + 1) if 0 <= j < len(g.values)]
    genes[g.name] = g.values[rng.choice(steps)]
    return Candidate.of(parent.backend, genes, origin="neighbour")


def _crossover_uniform(parents, ctx, rng):
    """Each gene from either parent; between backends, the genes they share cross over."""
    a, b = parents
    if a.source is not None or b.source is not None:
        return OperatorFailure("crossover", "free-source parents need the LLM crossover")
    child_backend = a.backend if a.backend == b.backend else rng.choice([a.backend, b.backend])
    space = ctx.spaces[child_backend]
    ga, gb = _genes_of(a, ctx), _genes_of(b, ctx)
    if child_backend != a.backend:
        ga, gb = gb, ga  # ga is the child's own backend parent
    genes = dict(ga)
    shared = [g for g in space.genes if g.name in gb and gb[g.name] in g.values]
    if not shared:
        return OperatorFailure("crossover", f"{a.backend} and {b.backend} share no gene")
    for g in shared:
        if rng.random() < 0.5:
            genes[g.name] = gb[g.name]
    return Candidate.of(child_backend, genes, origin="crossover")


SAMPLE = FnOperator("sample", "draft", _sample)
RULE_OPERATORS: dict[str, FnOperator] = {
    "sample": SAMPLE,
    "mutate_one": FnOperator("mutate_one", "mutate", _mutate_one),
    "mutate_many": FnOperator("mutate_many", "mutate", _mutate_many),
    "neighbour": FnOperator("neighbour", "mutate", _neighbour),
    "crossover": FnOperator("crossover", "crossover", _crossover_uniform),
}
DEFAULT_WEIGHTS = {"sample": 1.0, "mutate_one": 3.0, "mutate_many": 1.0, "neighbour": 3.0, "crossover": 1.0}


@dataclass
class OperatorSet:
    """The weighted operators of a run; ``pick(kind, rng)`` draws one of that kind."""
    operators: dict[str, Operator]
    weights: dict[str, float]

    @staticmethod
    def default() -> "OperatorSet":
        return OperatorSet(dict(RULE_OPERATORS), dict(DEFAULT_WEIGHTS))

    def add(self, op: Operator, weight: float) -> None:
        self.operators[op.name] = op
        self.weights[op.name] = weight

    def has(self, kind: str) -> bool:
        return any(o.kind == kind and self.weights.get(n, 0) > 0
                   and getattr(o, "available", lambda: True)()
                   for n, o in self.operators.items())

    def pick(self, kind: str, rng: random.Random) -> Operator:
        names = sorted(n for n, o in self.operators.items()
                       if o.kind == kind and self.weights.get(n, 0) > 0
                       and getattr(o, "available", lambda: True)())
        if kind == "draft" and not names:
            return SAMPLE
        if not names:
            raise KeyError(f"no operator of kind {kind}")
        return self.operators[rng.choices(names, [self.weights[n] for n in names])[0]]
