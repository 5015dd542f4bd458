"""Search policies behind one ask/tell interface; ``make(name, ...)`` builds one."""
from __future__ import annotations

import inspect

from .base import ROOT, Policy, Proposal, Tree  # noqa: F401
from .evolution import Evolution
from .greedy import Greedy
from .mcts import MCTS
from .sampling import RandomSampling
from .uct import UCT

POLICIES: dict[str, type[Policy]] = {
    "mcts": MCTS, "uct": UCT, "greedy": Greedy, "random": RandomSampling,
    "evolution": Evolution,
}


def make(name: str, seed: int = 0, starts: int = 1, spaces=None, model=None, scale=None,
         **params) -> Policy:
    """A policy; ``spaces`` (backend -> Space), the cost ``model`` and the op's ``scale``
    features go to the policies that decide over genomes themselves."""
    if name not in POLICIES:
        raise KeyError(f"unknown policy '{name}'; known: {', '.join(POLICIES)}")
    cls = POLICIES[name]
    if cls.needs_spaces:
        return cls(seed=seed, starts=starts, spaces=spaces, model=model, scale=scale, **params)
    return cls(seed=seed, starts=starts, **params)


def parse(text: str) -> tuple[str, dict]:
    """``name`` or ``name:key=value:key=value`` (``mcts:c=0.3``) -> (name, params); a
    ValueError that says what is wrong for an unknown policy, parameter or value."""
    name, *items = [t.strip() for t in text.strip().split(":")]
    if name not in POLICIES:
        raise ValueError(f"unknown policy '{name}'; known: {', '.join(POLICIES)}")
    sig = inspect.signature(POLICIES[name].__init__)
    settable = {k: p.default for k, p in sig.parameters.items()
                if k not in ("self", "seed", "starts", "spaces", "model", "scale")
                and p.default is not inspect.Parameter.empty}
    params = {}
    for item in items:
        key, eq, raw = item.partition("=")
        if not eq or key not in settable:
            known = ", ".join(sorted(settable)) or "none"
            raise ValueError(f"policy '{name}' has no parameter '{key}' (its parameters: "
                             f"{known}; write {name}:NAME=VALUE)")
        kind = type(settable[key])
        try:
            params[key] = kind(raw) if kind in (int, float) else raw
        except ValueError:
            raise ValueError(f"policy '{name}': {key} takes a {kind.__name__}, not "
                             f"'{raw}'") from None
    return name, params
