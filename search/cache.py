"""The measurement cache: candidate key -> Result, shared across runs and policies.

A second run with the same seed and cache sees the same measurements and so
makes the same choices; policies compared on one cache see identical numbers
for identical candidates. SQLite because several runs (``kdsl compare``) and
processes may share one file.

A measurement is only as good as what made it, so every entry is stored under
the candidate's key *and* its environment: the kdsl version, a hash of the
generator sources that rendered the kernel, the device model (the GPU's name,
or the CPU's model name) and the torch and triton versions. A cache shared
across a generator change, a torch upgrade or two GPU models then misses
instead of serving another machine's numbers. The candidate's key (the one a
run's records hold) stays as it was, so a run resumes on another machine.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import platform
import sqlite3
import sys
from dataclasses import asdict
from pathlib import Path

import msgpack

from .jobs import EvalConfig
from .result import Result

# sources every generator renders through, beside its own package
_SHARED = ("lower", "base.py", "__init__.py")


def config_key(config: EvalConfig) -> str:
    """What about the evaluation changes its measurement (all of the config)."""
    return hashlib.sha256(json.dumps(asdict(config), sort_keys=True,
                                     default=str).encode()).hexdigest()[:12]


# ---- the environment a measurement was made in ------------------------------------------

@functools.lru_cache(maxsize=None)
def package_version(dist: str) -> str:
    """An installed distribution's version, 'none' where it is not installed (triton on a
    machine without it is a fact of the environment, not an error). Read from the
    package's metadata: nothing is imported."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


@functools.lru_cache(maxsize=None)
def device_model(device: str) -> str:
    """What the measurements ran on: the GPU's name for 'cuda', the CPU's model name else."""
    if device == "cuda":
        return _gpu_model()
    return _cpu_model()


def _gpu_model() -> str:
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception as e:  # a broken driver: measurements cannot be shared with anyone
        return f"cuda (no model: {type(e).__name__})"
    return "cuda (no device visible)"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def _backend_module(name: str) -> str | None:
    """The module that defines backend ``name`` (its registry entry), without importing
    it where the registry knows the name; None for a name nothing defines."""
    from kdsl import backends
    if name in backends._MODULES:
        return backends._MODULES[name]
    made = backends.REGISTRY.get(name)
    return type(made).__module__ if made is not None else None


def _files_of(name: str) -> list[tuple[str, Path]]:
    """(label, file) of the sources that render backend ``name``'s kernels: its package
    (one of kdsl.backends' subpackages) and the shared lowering; a backend defined
    elsewhere (a plugin, a test's fake) by its own module's file."""
    module = _backend_module(name)
    try:
        spec = importlib.util.find_spec(module) if module else None
    except ValueError:  # a backend defined in a script run as __main__ has no spec
        spec = None
    origin = spec.origin if spec is not None else getattr(sys.modules.get(module or ""),
                                                          "__file__", None)
    if not origin:
        return []
    origin = Path(origin)
    if not module.startswith("kdsl.backends."):
        return [(origin.name, origin)]
    root = Path(importlib.util.find_spec("kdsl.backends").origin).parent
    files = sorted(origin.parent.rglob("*.py"))
    for shared in _SHARED:
        p = root / shared
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p] if p.is_file() else []
    return [(p.relative_to(root).as_posix(), p) for p in files]


@functools.lru_cache(maxsize=None)
def generator_hash(name: str) -> str:
    """A hash of the sources that render backend ``name``'s kernels: any edit to its
    generator or the shared lowering changes it. Computed once per process."""
    files = _files_of(name)
    if not files:
        return "unknown"
    h = hashlib.sha256(name.encode())
    for label, p in files:
        h.update(label.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def environment(device: str, backends: tuple[str, ...]) -> dict:
    """Everything besides the candidate and the evaluation config that a measurement
    depends on; each part is computed once per process."""
    from kdsl import __version__
    return {"kdsl": __version__,
            "generators": {b: generator_hash(b) for b in sorted(set(backends))},
            "device": device, "device_model": device_model(device),
            "torch": package_version("torch"), "triton": package_version("triton")}


def scope_key(env: dict) -> str:
    """The short hash an environment stores its measurements under; equal environments,
    equal keys."""
    return hashlib.sha256(json.dumps(env, sort_keys=True, default=str)
                          .encode()).hexdigest()[:16]


def _observations(db, scope: str, op_class: str, backends: tuple[str, ...], limit: int,
                  other_than: str | None = None) -> list[tuple[dict, float]]:
    marks = ",".join("?" * len(backends))
    other = "" if other_than is None else "AND op_hash IS NOT ? "
    rows = db.execute(
        f"SELECT row, reward FROM observations WHERE scope = ? AND op_class = ? AND "
        f"backend IN ({marks}) {other}ORDER BY rowid DESC LIMIT ?",
        (scope, op_class, *backends, *(() if other_than is None else (other_than,)),
         limit)).fetchall()
    return [(json.loads(r), float(w)) for r, w in reversed(rows)]


def read_only(path: str | Path) -> sqlite3.Connection:
    """Another run's cache, opened so that nothing is written to it (not even its journal
    mode): ``sqlite3.Error`` where it is not a database."""
    return sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True, timeout=30)


def observations_of_others(path: str | Path, device: str, backends: tuple[str, ...],
                           op_class: str, op_hash: str, limit: int = 1024
                           ) -> list[tuple[dict, float]]:
    """The cost-model rows another cache holds of ops of ``op_class`` other than the one
    hashed ``op_hash``, measured in this environment, oldest first; read only."""
    db = read_only(path)
    try:
        return _observations(db, scope_key(environment(device, tuple(backends))), op_class,
                             backends, limit, other_than=op_hash)
    finally:
        db.close()


def measurement_key(key: str, env: dict) -> str:
    """Where a candidate's measurement (``key``, the engine's candidate key) is stored."""
    return f"{key}@{scope_key(env)}"


# ---- the store --------------------------------------------------------------------------

class MeasurementCache:
    """Results by candidate key, within one environment (see the module's docstring).

    ``device`` and ``backends`` say what the environment is: the run's device and every
    backend it may render with (a candidate's key names its backend only inside a hash,
    so all of them count). ``env`` gives the environment outright (tests)."""

    def __init__(self, path: str | Path | None, device: str = "cpu",
                 backends: tuple[str, ...] = (), env: dict | None = None):
        self.path = str(path) if path else ":memory:"
        self.env = env if env is not None else environment(device, tuple(backends))
        self.scope = scope_key(self.env)
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30)
        # WAL: readers never block the writer, and a commit is not a full disk sync
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, record BLOB)")
        # what each scope stands for, so a person reading the file can tell them apart
        self.db.execute("CREATE TABLE IF NOT EXISTS environments "
                        "(scope TEXT PRIMARY KEY, description TEXT)")
        # cost-model rows (features, reward) of fresh measurements, by op class: what a
        # later run's model starts from (``costmodel.py``)
        self.db.execute("CREATE TABLE IF NOT EXISTS observations (scope TEXT, op_class TEXT, "
                        "backend TEXT, op_hash TEXT, row TEXT, reward REAL)")
        self.db.execute("INSERT OR IGNORE INTO environments VALUES (?, ?)",
                        (self.scope, json.dumps(self.env, sort_keys=True)))
        self.db.commit()
        self.hits = 0

    def _key(self, key: str) -> str:
        return f"{key}@{self.scope}"  # measurement_key(key, self.env), hashed once

    def get(self, key: str) -> Result | None:
        row = self.db.execute("SELECT record FROM results WHERE key = ?",
                              (self._key(key),)).fetchone()
        if row is None:
            return None
        self.hits += 1
        return Result.from_record(msgpack.unpackb(row[0], strict_map_key=False))

    def put(self, key: str, result: Result) -> None:
        blob = msgpack.packb(result.to_record(), default=str)
        self.db.execute("INSERT OR REPLACE INTO results VALUES (?, ?)", (self._key(key), blob))
        self.db.commit()

    def add_observation(self, op_class: str, backend: str, op_hash: str, row: dict,
                        reward: float) -> None:
        self.db.execute("INSERT INTO observations VALUES (?, ?, ?, ?, ?, ?)",
                        (self.scope, op_class, backend, op_hash,
                         json.dumps(row, sort_keys=True), float(reward)))
        self.db.commit()

    def observations(self, op_class: str, backends: tuple[str, ...],
                     limit: int = 1024) -> list[tuple[dict, float]]:
        """The latest ``limit`` rows of ops of ``op_class`` on these backends, measured in
        this environment, oldest first."""
        return _observations(self.db, self.scope, op_class, backends, limit)

    def __len__(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def close(self) -> None:
        self.db.close()
