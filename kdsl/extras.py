"""Optional dependencies: which extra of the distribution brings each, and the one-line error
that names it when a feature is asked for without it.

A plain ``pip install kdsl-kernels`` runs check, search and export on the C, numpy and torch
backends. The rest is imported only inside the code that needs it (pyproject.toml's
``[project.optional-dependencies]`` lists the same packages).
"""
from __future__ import annotations

import importlib.util

from .errors import UsageError

DISTRIBUTION = "kdsl-kernels"
# import name -> the extra that installs it
EXTRA_OF = {"triton": "triton", "anthropic": "llm", "bm25s": "llm", "matplotlib": "plot",
            "lightgbm": "model"}


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (triton takes a second)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def missing(feature: str, *modules: str) -> str | None:
    """None when every module is installed, else what ``feature`` needs and how to get it."""
    absent = [m for m in modules if not installed(m)]
    if not absent:
        return None
    extras = ",".join(sorted({EXTRA_OF[m] for m in absent}))
    names = " and ".join(absent)
    return (f"{feature} needs {names}, not installed: "
            f"pip install '{DISTRIBUTION}[{extras}]'")


def require(feature: str, *modules: str) -> None:
    """A UsageError (one line, exit 2) when ``feature`` cannot run here."""
    why = missing(feature, *modules)
    if why:
        raise UsageError(why)
