"""Record and replay of LLM exchanges, keyed by a hash of the request.

Every request (model, system prompt, messages, max_tokens; never the API key)
and its final outcome (a reply, malformed or not, or the error that ended the
retries) is appended to a msgpack file in the run directory. Replay returns
the recorded outcomes of a request in the order they happened, so a replayed
run makes the same choices as the recorded one, failures included.

Texts (prompts, system prompt, replies) are stored once per content: a
``{"type": "text", "sha": ...}`` record (zlib-compressed when long) the first
time a text is seen, and ``{"$text": sha}`` wherever it is used. The system
prompt of every call and a reply asked again on resume cost one copy. Logs
written before this (texts inline) are read as they are.
"""
from __future__ import annotations

import hashlib
import json
import os
import zlib
from pathlib import Path

import msgpack

COMPRESS_FROM = 1024  # characters; shorter texts are stored as they are


def request_key(request: dict) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:24]


def text_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class ExchangeLog:
    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self.by_key: dict[str, list[dict]] = {}
        self._texts: dict[str, str | bytes] = {}  # sha -> text, or its zlib bytes
        self._valid_bytes = 0
        self._checked_tail = False
        if self.path and self.path.exists():
            unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
            unpacker.feed(self.path.read_bytes())
            try:
                for rec in unpacker:  # a torn last record (kill mid-write) is not read
                    self._valid_bytes = unpacker.tell()
                    self._load(rec)
            except (msgpack.UnpackException, ValueError):
                pass  # garbage after the last good record: the records before it stand
        self.served: dict[str, int] = {}

    def _load(self, rec) -> None:
        if not isinstance(rec, dict):
            return
        if rec.get("type") == "text" and isinstance(rec.get("sha"), str):
            self._texts[rec["sha"]] = rec["z"] if "z" in rec else rec.get("text", "")
        elif "key" in rec:
            reply = rec.get("reply")
            if isinstance(reply, dict) and isinstance(reply.get("text"), dict):
                rec = {**rec, "reply": {**reply, "text": self.text(reply["text"]["$text"])}}
            self.by_key.setdefault(rec["key"], []).append(rec)

    def text(self, sha: str) -> str:
        """A stored text by its hash ('' if the log lost it)."""
        t = self._texts.get(sha, "")
        return zlib.decompress(t).decode() if isinstance(t, bytes) else t

    def request_of(self, rec: dict) -> dict:
        """A recorded request with its texts filled in (for people and tests)."""
        def fill(v):
            if isinstance(v, dict) and set(v) == {"$text"}:
                return self.text(v["$text"])
            if isinstance(v, dict):
                return {k: fill(x) for k, x in v.items()}
            if isinstance(v, list):
                return [fill(x) for x in v]
            return v
        return fill(rec.get("request") or {})

    # ---- writing ----
    def append(self, key: str, request: dict, outcome: dict) -> None:
        rec = {"key": key, "request": request, **outcome}
        self.by_key.setdefault(key, []).append(rec)
        self.served[key] = self.served.get(key, 0) + 1  # what we just lived through
        if self.path is None:
            return
        out: list[dict] = []
        stored = {"key": key, "request": self._refs(request, out), **outcome}
        reply = outcome.get("reply")
        if isinstance(reply, dict) and isinstance(reply.get("text"), str):
            stored["reply"] = {**reply, "text": {"$text": self._intern(reply["text"], out)}}
        out.append(stored)
        self._write(out)

    def _refs(self, request: dict, out: list[dict]) -> dict:
        req = dict(request)
        if isinstance(req.get("system"), str):
            req["system"] = {"$text": self._intern(req["system"], out)}
        req["messages"] = [{**m, "content": {"$text": self._intern(m["content"], out)}}
                           if isinstance(m.get("content"), str) else m
                           for m in req.get("messages") or []]
        return req

    def _intern(self, text: str, out: list[dict]) -> str:
        sha = text_sha(text)
        if sha not in self._texts:
            if len(text) >= COMPRESS_FROM:
                z = zlib.compress(text.encode(), 6)
                self._texts[sha] = z
                out.append({"type": "text", "sha": sha, "z": z})
            else:
                self._texts[sha] = text
                out.append({"type": "text", "sha": sha, "text": text})
        return sha

    def _write(self, records: list[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as fh:
            if not self._checked_tail:
                # cut a torn record left by a kill, so what follows can be read again
                if fh.tell() > self._valid_bytes:
                    fh.truncate(self._valid_bytes)
                self._checked_tail = True
            fh.write(b"".join(msgpack.packb(r) for r in records))
            fh.flush()
            os.fsync(fh.fileno())
            self._valid_bytes = fh.tell()

    # ---- reading back ----
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
