"""A run directory: the header, every evaluated node, kernels, and the summary.

    RUN/
      lineage.msgpack   append-only stream: a header record, then one record per node
      summary.json      rewritten atomically after every node
      kernels/          the source of every evaluated kernel, by content hash;
                        best.<ext> is a copy of the best one
      spec.kspec        the spec as it was when the run started

Each node record is appended and flushed before the next proposal, so
a ``kill -9`` loses only what was in flight; a torn last record (killed mid-
write) is dropped on load. Records carry a schema version and unknown fields
are ignored, so older and newer kdsl read each other's runs.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import msgpack

SCHEMA = 1
LINEAGE = "lineage.msgpack"
SUMMARY = "summary.json"


class RunError(Exception):
    """A run directory that cannot be used: one clear line for the user."""


class RunStore:
    def __init__(self, root: Path, header: dict, nodes: list[dict]):
        self.root = root
        self.header = header
        self.nodes = nodes
        self._fh = None

    # ---- creating and opening ----
    @staticmethod
    def create(root: str | Path, header: dict, spec_text: str) -> "RunStore":
        root = Path(root)
        if (root / LINEAGE).exists():
            raise RunError(f"{root} already holds a run; use 'kdsl resume {root}' or another --out")
        if root.exists() and not root.is_dir():
            raise RunError(f"{root} exists and is not a directory")
        (root / "kernels").mkdir(parents=True, exist_ok=True)
        (root / "spec.kspec").write_text(spec_text)
        header = {"type": "header", "schema": SCHEMA, **header}
        store = RunStore(root, header, [])
        store._append(header)
        return store

    @staticmethod
    def open(root: str | Path) -> "RunStore":
        root = Path(root)
        path = root / LINEAGE
        if not path.is_file():
            raise RunError(f"{root} is not a kdsl run (no {LINEAGE})")
        records = _read_records(path)
        if not records or records[0].get("type") != "header":
            raise RunError(f"{path} is corrupt: it does not start with a run header")
        nodes = [r for r in records[1:] if r.get("type") == "node"]
        return RunStore(root, records[0], nodes)

    # ---- writing ----
    def _append(self, record: dict) -> None:
        if self._fh is None:
            self._fh = open(self.root / LINEAGE, "ab")
        # flush hands the record to the OS, which is what survives a kill -9 of this
        # process; an fsync per node (power-loss safety) would cost more than the engine
        self._fh.write(msgpack.packb(record, default=str))
        self._fh.flush()

    def append_node(self, record: dict) -> dict:
        record = {"type": "node", "schema": SCHEMA, **record}
        self._append(record)
        self.nodes.append(record)
        return record

    def write_kernel(self, source_hash: str, source: str, ext: str) -> str:
        """Kernels are stored by content: nodes with the same source share one file."""
        rel = f"kernels/{source_hash}.{ext}"
        path = self.root / rel
        if not path.exists():
            path.write_text(source)
        return rel

    def mark_best(self, rel: str, ext: str) -> str:
        best = f"kernels/best.{ext}"
        _atomic_write(self.root / best, (self.root / rel).read_text())
        return best

    def write_summary(self, summary: dict) -> None:
        _atomic_write(self.root / SUMMARY, json.dumps(summary, indent=2, default=str) + "\n")

    def summary(self) -> dict:
        try:
            return json.loads((self.root / SUMMARY).read_text())
        except (OSError, ValueError):
            return {}

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _read_records(path: Path) -> list[dict]:
    """Every complete record; a torn record at the very end (a kill mid-write) is dropped."""
    data = path.read_bytes()
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    records = []
    try:
        for r in unpacker:
            if not isinstance(r, dict):
                raise RunError(f"{path} is corrupt: record {len(records)} is not a record")
            records.append(r)
    except (msgpack.UnpackException, ValueError) as e:
        raise RunError(f"{path} is corrupt after record {len(records)}: {e}") from None
    # Unpacker stops silently at a truncated tail: that is the torn-write case.
    return records
