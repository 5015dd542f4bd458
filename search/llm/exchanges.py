"""Record and replay of LLM exchanges, keyed by a hash of the request.

Every request (model, system prompt, messages, max_tokens; never the API key)
and its final outcome (a reply or the error that ended the retries) is
appended to a msgpack file in the run directory. Replay returns the recorded
outcomes of a request in the order they happened, so a replayed run makes
the same choices as the recorded one, failures included.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import msgpack


def request_key(request: dict) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:24]


class ExchangeLog:
    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self.by_key: dict[str, list[dict]] = {}
        if self.path and self.path.exists():
            unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
            unpacker.feed(self.path.read_bytes())
            for rec in unpacker:  # a torn last record (kill mid-write) is simply not read
                if isinstance(rec, dict) and "key" in rec:
                    self.by_key.setdefault(rec["key"], []).append(rec)
        self.served: dict[str, int] = {}

    def append(self, key: str, request: dict, outcome: dict) -> None:
        rec = {"key": key, "request": request, **outcome}
        self.by_key.setdefault(key, []).append(rec)
        self.served[key] = self.served.get(key, 0) + 1  # what we just lived through
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as fh:
            fh.write(msgpack.packb(rec))
            fh.flush()
            os.fsync(fh.fileno())

    def next_outcome(self, key: str) -> dict | None:
        """The next recorded outcome of this request (the last one repeats), or None."""
        recs = self.by_key.get(key)
        if not recs:
            return None
        i = self.served.get(key, 0)
        self.served[key] = i + 1
        return recs[min(i, len(recs) - 1)]

    def unserved(self, key: str) -> dict | None:
        """A recorded outcome of this request not yet given out in this process, or None."""
        recs = self.by_key.get(key) or []
        i = self.served.get(key, 0)
        if i >= len(recs):
            return None
        self.served[key] = i + 1
        return recs[i]

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_key.values())
