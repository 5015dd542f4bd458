"""Where a search starts: the stored best genome for the op (if any), then the defaults.

The repo keeps the best genome found per (op, backend, device) in
``specs/genomes/<op>.json`` so a user's first search starts from it.
"""
from __future__ import annotations

import json
from pathlib import Path

from kdsl import ir
from kdsl.backends.base import Space
from kdsl.spec import library_dir

from .candidate import Candidate


def genomes_dir() -> Path:
    return library_dir() / "genomes"


def stored_genome(op: ir.Op, backend: str, device: str) -> dict | None:
    path = genomes_dir() / f"{op.name}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    entry = data.get(backend, {}).get(device)
    return entry.get("genome") if isinstance(entry, dict) else None


def starting_points(op: ir.Op, spaces: dict[str, Space], device: str,
                    stored: bool = True) -> list[Candidate]:
    """The stored best genome of each backend (when ``stored``), then its defaults."""
    out: list[Candidate] = []
    for backend in sorted(spaces):
        space = spaces[backend]
        genome = stored_genome(op, backend, device) if stored else None
        if genome:
            out.append(Candidate.of(backend, space.complete(genome), origin="stored"))
        default = Candidate.of(backend, space.default(), origin="default")
        if default not in out:
            out.append(default)
    return out
