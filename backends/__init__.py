"""Backends: code generators from IR + schedule genome to runnable kernels.

``REGISTRY`` maps a backend's name to its instance; ``get(name)`` is the one
way in, so a backend whose module fails to import is reported, not fatal.
"""
from __future__ import annotations

import importlib

from kdsl.backends.base import Backend, BuildError, Built, Gene, Genome, Space, Unsupported  # noqa: F401

# name -> module that defines BACKEND
_MODULES = {
    "c": "kdsl.backends.c.backend",
    "triton": "kdsl.backends.triton.backend",
    "torch": "kdsl.backends.array.torch_backend",
    "numpy": "kdsl.backends.array.numpy_backend",
}
REGISTRY: dict[str, Backend] = {}


def names() -> tuple[str, ...]:
    return tuple(_MODULES)


def get(name: str) -> Backend:
    if name not in REGISTRY:
        if name not in _MODULES:
            raise KeyError(f"unknown backend '{name}'; known: {', '.join(_MODULES)}")
        REGISTRY[name] = importlib.import_module(_MODULES[name]).BACKEND
    return REGISTRY[name]
