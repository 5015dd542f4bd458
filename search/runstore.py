"""A run directory: the header, every evaluated node, kernels, and the summary.

    RUN/
      lineage.msgpack   append-only stream: a header record, then one record per node
                        (and a ``profile`` record per profiled node, after it)
      summary.json      rewritten atomically after every node
      kernels/          the source of every evaluated kernel, by content hash (each
                        written atomically); best.<ext> is a copy of the best one
      spec.kspec        the spec as it was when the run started

Each node record is appended and flushed before the next proposal, so
a ``kill -9`` loses only what was in flight; a torn last record (killed mid-
write) is dropped on load and cut off before the next append. Records carry a
schema version and unknown fields are ignored, so older and newer kdsl read
each other's runs; a record without the fields kdsl needs (a hand-edited or
damaged run) is a RunError naming it. A node's free source (an LLM's kernel)
is stored once, in kernels/, and the record points to it.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import msgpack

from .files import atomic_write, why

SCHEMA = 1
LINEAGE = "lineage.msgpack"
SUMMARY = "summary.json"


class RunError(Exception):
    """A run directory that cannot be used: one clear line for the user."""


class RunStore:
    def __init__(self, root: Path, header: dict, nodes: list[dict], valid_bytes: int = 0,
                 profiles: list[dict] | None = None):
        self.root = root
        self.header = header
        self.nodes = nodes
        self.profiles = profiles or []  # profile records (search/profile/loop.py), in order
        self._fh = None
        self._valid_bytes = valid_bytes  # where the last complete record of the file ends

    # ---- creating and opening ----
    @staticmethod
    def create(root: str | Path, header: dict, spec_text: str) -> "RunStore":
        root = Path(root)
        if (root / LINEAGE).exists():
            raise RunError(f"{root} already holds a run; use 'kdsl resume {root}' or another --out")
        if root.exists() and not root.is_dir():
            raise RunError(f"{root} exists and is not a directory")
        made = _missing_ancestor(root)
        try:
            (root / "kernels").mkdir(parents=True, exist_ok=True)
            atomic_write(root / "spec.kspec", spec_text)
            header = {"type": "header", "schema": SCHEMA, **header}
            store = RunStore(root, header, [])
            store._append(header)
        except OSError as e:
            # what this call made goes again, so a failed start leaves no half run behind
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
            raise RunError(f"cannot create the run directory {root}: {why(e)}") from None
        return store

    @staticmethod
    def open(root: str | Path) -> "RunStore":
        root = Path(root)
        path = root / LINEAGE
        if not root.is_dir():
            raise RunError(f"{root} is not a kdsl run directory")
        if not path.is_file():
            raise RunError(f"{root} is not a kdsl run (no {LINEAGE})")
        records, end = _read_records(path)
        if not records or records[0].get("type") != "header":
            raise RunError(f"{path} is corrupt: it does not start with a run header")
        header = records[0]
        if not isinstance(header.get("settings"), dict):
            raise RunError(f"{path} is damaged: its header has no settings "
                           "(a hand-edited or truncated run)")
        nodes = [r for r in records[1:] if r.get("type") == "node"]
        for n, r in enumerate(nodes):
            problem = _node_problem(r)
            if problem:
                raise RunError(f"{path} is damaged: node record {n} "
                               f"(id {r.get('id', '?')}) {problem}")
        profiles = [r for r in records[1:] if r.get("type") == "profile"
                    and isinstance(r.get("node"), int) and isinstance(r.get("profile"), dict)]
        return RunStore(root, header, nodes, end, profiles)

    # ---- writing ----
    def _append(self, record: dict) -> None:
        if self._fh is None:
            self._fh = open(self.root / LINEAGE, "ab")
            if self._valid_bytes and self._fh.tell() > self._valid_bytes:
                # a torn record from a kill mid-write: new records go where it began,
                # or every later load would stop at it
                self._fh.truncate(self._valid_bytes)
        # flush hands the record to the OS, which is what survives a kill -9 of this
        # process; an fsync per node (power-loss safety) would cost more than the engine
        self._fh.write(msgpack.packb(record, default=str))
        self._fh.flush()

    def append_node(self, record: dict) -> dict:
        record = {"type": "node", "schema": SCHEMA, **record}
        cand = record.get("candidate")
        src = cand.get("source") if isinstance(cand, dict) else None
        if src and record.get("source_path") and record.get("source_hash") == _hash(src):
            # the kernel file holds this text already: keep one copy, point to it
            record["candidate"] = {**cand, "source": None, "source_ref": record["source_path"]}
        self._append(record)
        self.nodes.append(record)
        return record

    def append_profile(self, record: dict) -> dict:
        """A node's profile and diagnosis, appended after the node's own record."""
        record = {"type": "profile", "schema": SCHEMA, **record}
        self._append(record)
        self.profiles.append(record)
        return record

    def write_kernel(self, source_hash: str, source: str, ext: str) -> str:
        """Kernels are stored by content: nodes with the same source share one file.

        Written atomically; a file left damaged by an older kdsl (a kill mid-write) is
        written again when its content no longer matches its name.
        """
        rel = f"kernels/{source_hash}.{ext}"
        path = self.root / rel
        if not (path.is_file() and _file_hash(path) == source_hash):
            atomic_write(path, source)
        return rel

    def damaged_kernels(self) -> list[dict]:
        """The node records whose kernel file is missing or does not match its hash."""
        out, checked = [], {}
        for r in self.nodes:
            rel, h = r.get("source_path"), r.get("source_hash")
            if not rel or not h:
                continue
            if rel not in checked:
                path = self.root / rel
                checked[rel] = path.is_file() and _file_hash(path) == h
            if not checked[rel]:
                out.append(r)
        return out

    def mark_best(self, rel: str, ext: str) -> str:
        best = f"kernels/best.{ext}"
        atomic_write(self.root / best, (self.root / rel).read_bytes())
        return best

    def write_summary(self, summary: dict) -> None:
        atomic_write(self.root / SUMMARY, json.dumps(summary, indent=2, default=str) + "\n")

    def summary(self) -> dict:
        try:
            s = json.loads((self.root / SUMMARY).read_text())
        except (OSError, ValueError):
            return {}
        return s if isinstance(s, dict) else {}

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _hash(text: str) -> str:
    # the same key as lineage.source_hash (kept here so the store needs no lineage import)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _file_hash(path: Path) -> str | None:
    try:
        return _hash(path.read_bytes().decode())
    except (OSError, UnicodeDecodeError):
        return None


def _missing_ancestor(root: Path) -> Path | None:
    """The topmost directory of ``root`` that does not exist yet (None if it exists)."""
    top = None
    p = root
    while not p.exists():
        top = p
        if p.parent == p:
            break
        p = p.parent
    return top


def _node_problem(r: dict) -> str | None:
    """What a node record lacks that kdsl reads from it, or None."""
    if not isinstance(r.get("id"), int) or isinstance(r.get("id"), bool):
        return "has no integer 'id'"
    res = r.get("result")
    if not isinstance(res, dict):
        return "has no 'result'"
    if not isinstance(res.get("ok"), bool) or not isinstance(res.get("stage"), str):
        return "has a 'result' without 'ok' and 'stage'"
    for key in ("speedup", "time_ms", "baseline_ms"):
        if res.get(key) is not None and not isinstance(res[key], (int, float)):
            return f"has a non-numeric result '{key}'"
    parents = r.get("parents", [])
    if not isinstance(parents, list) or not all(isinstance(p, int) for p in parents):
        return "has 'parents' that are not a list of node ids"
    if r.get("candidate") is not None and not isinstance(r["candidate"], dict):
        return "has a 'candidate' that is not a record"
    rel = r.get("source_path")
    if rel is not None and (not isinstance(rel, str) or not rel.startswith("kernels/")
                            or ".." in Path(rel).parts):
        return f"has a 'source_path' outside the run's kernels/ ({rel!r})"
    return None


def _read_records(path: Path) -> tuple[list[dict], int]:
    """Every complete record, and the offset where the last one ends; a torn record at the
    very end (a kill mid-write) is dropped."""
    data = path.read_bytes()
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    records = []
    end = 0
    try:
        for r in unpacker:
            if not isinstance(r, dict):
                raise RunError(f"{path} is corrupt: record {len(records)} is not a record")
            records.append(r)
            end = unpacker.tell()
    except (msgpack.UnpackException, ValueError) as e:
        raise RunError(f"{path} is corrupt after record {len(records)}: {e}") from None
    # Unpacker stops silently at a truncated tail: that is the torn-write case.
    return records, end
