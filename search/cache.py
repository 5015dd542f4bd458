"""The measurement cache: candidate key -> Result, shared across runs and policies.

A second run with the same seed and cache sees the same measurements and so
makes the same choices; policies compared on one cache see identical numbers
for identical candidates. SQLite because several runs (``kdsl compare``) and
processes may share one file.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import asdict
from pathlib import Path

import msgpack

from .jobs import EvalConfig
from .result import Result


def config_key(config: EvalConfig) -> str:
    """What about the evaluation changes its measurement (all of the config)."""
    return hashlib.sha256(json.dumps(asdict(config), sort_keys=True,
                                     default=str).encode()).hexdigest()[:12]


class MeasurementCache:
    def __init__(self, path: str | Path | None):
        self.path = str(path) if path else ":memory:"
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30)
        # WAL: readers never block the writer, and a commit is not a full disk sync
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, record BLOB)")
        self.db.commit()
        self.hits = 0

    def get(self, key: str) -> Result | None:
        row = self.db.execute("SELECT record FROM results WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        self.hits += 1
        return Result.from_record(msgpack.unpackb(row[0], strict_map_key=False))

    def put(self, key: str, result: Result) -> None:
        blob = msgpack.packb(result.to_record(), default=str)
        self.db.execute("INSERT OR REPLACE INTO results VALUES (?, ?)", (key, blob))
        self.db.commit()

    def __len__(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def close(self) -> None:
        self.db.close()
