"""A candidate kernel: a backend, a schedule genome and/or free source text.

Its content hash (with the op's structural hash and the device) keys the
measurement cache, so identical candidates are measured once and every
policy compared on one cache sees the same numbers for them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


def _canonical_genome(genome: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(genome.items()))


@dataclass(frozen=True)
class Candidate:
    backend: str
    genome: tuple[tuple[str, Any], ...] = ()
    source: str | None = None  # free text (LLM rewrite); overrides rendering when set
    origin: str = field(default="", compare=False)  # operator that produced it, for display

    @staticmethod
    def of(backend: str, genome: dict[str, Any] | None = None, source: str | None = None,
           origin: str = "") -> "Candidate":
        return Candidate(backend, _canonical_genome(genome or {}), source, origin)

    @property
    def genes(self) -> dict[str, Any]:
        return dict(self.genome)

    def key(self, op_hash: str, device: str) -> str:
        """The measurement-cache key: what is measured, for which op, on which device."""
        blob = json.dumps([op_hash, device, self.backend, [list(g) for g in self.genome],
                           self.source], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    def to_record(self) -> dict:
        return {"backend": self.backend, "genome": dict(self.genome), "source": self.source,
                "origin": self.origin}

    @staticmethod
    def from_record(r: dict) -> "Candidate":
        return Candidate.of(r["backend"], r.get("genome") or {}, r.get("source"),
                            r.get("origin", ""))
