"""kdsl from Python: load a spec, search it, read the run, export the winner.

    import kdsl
    spec = kdsl.load("specs/rmsnorm.kspec")
    run = kdsl.search(spec, backend="c", budget=20, seed=0)
    run.best.speedup, run.best.genome
    run.table()                      # every evaluated candidate, one dict each
    run.export("rmsnorm_kernel.py")  # a torch op, as `kdsl export` writes it

The search runs the same engine, evaluator and run directory as ``kdsl search``; errors
a user can fix are ``kdsl.errors.UsageError`` or ``kdsl.errors.SpecError``. Candidates
are judged in processes of their own: a script calling ``search`` needs the usual
``if __name__ == "__main__":`` guard of Python multiprocessing (a notebook does not).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import ir
from . import spec as spec_mod
from .errors import UsageError

__all__ = ["Best", "Run", "import_module", "load", "open_run", "search"]


def load(path: str | Path) -> ir.Spec:
    """The checked spec in a ``.kspec`` file (its ``.ops``); SpecError for a bad one."""
    return spec_mod.load(path)


@dataclass(frozen=True)
class Best:
    """A run's best kernel: its speedup over the baseline, its time, genome and source."""
    node: int
    backend: str
    speedup: float
    time_ms: float
    baseline_ms: float | None
    genome: dict
    source: str


class Run:
    """A run directory, read on demand (a run still going shows what it has so far)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        best = self.best
        what = f"best {best.speedup:.3f}x (node {best.node})" if best else "no correct kernel"
        return f"Run({str(self.path)!r}: {what})"

    def _store(self):
        from kdsl.search.runs import open_run as open_store
        return open_store(self.path)[0]

    @property
    def summary(self) -> dict:
        return self._store().summary()

    @property
    def best(self) -> Best | None:
        from kdsl.search import lineage
        store = self._store()
        top = lineage.best(store.nodes)
        if top is None:
            return None
        res, cand = top["result"], top.get("candidate") or {}
        source = ""
        if top.get("source_path"):
            try:
                source = (self.path / top["source_path"]).read_text()
            except (OSError, UnicodeDecodeError):
                source = ""  # a damaged kernel file: `kdsl resume` rewrites it
        return Best(node=top["id"], backend=cand.get("backend", ""),
                    speedup=float(res.get("speedup") or 0.0), time_ms=res.get("time_ms"),
                    baseline_ms=res.get("baseline_ms"), genome=dict(cand.get("genome") or {}),
                    source=source)

    def table(self) -> list[dict]:
        """Every evaluated candidate, in evaluation order: one flat dict each."""
        rows = []
        for r in self._store().nodes:
            res, cand = r.get("result") or {}, r.get("candidate") or {}
            rows.append({"node": r.get("id"), "parents": list(r.get("parents") or []),
                         "operator": r.get("operator"), "backend": cand.get("backend"),
                         "genome": dict(cand.get("genome") or {}), "ok": bool(res.get("ok")),
                         "stage": res.get("stage"), "time_ms": res.get("time_ms"),
                         "baseline_ms": res.get("baseline_ms"),
                         "speedup": float(res.get("speedup") or 0.0),
                         "message": res.get("message") or "",
                         "source_path": r.get("source_path")})
        return rows

    def export(self, path: str | Path, format: str = "module", force: bool = False) -> Path:
        """Write the best kernel as a module (``format='module'``) or a KernelBench file
        (``'kernelbench'``); see ``kdsl export``. A confirmed best slower than the run's start
        or the baseline is refused (UsageError) unless ``force``, as ``kdsl export --force``.
        Returns the path written."""
        from kdsl.search.export import kernel_of_run, write
        return write(kernel_of_run(self.path, force=force), path, format)


def open_run(path: str | Path) -> Run:
    """An existing run directory (from ``kdsl search`` or ``kdsl.search``)."""
    Run(path)._store()  # UsageError now, for a directory that is not a run
    return Run(path)


def search(spec_or_path, backend: str | tuple[str, ...] = "c", budget: int = 30,
           device: str = "cpu", policy: str = "mcts", seed: int = 0, workers: int = 1,
           out: str | Path | None = None, *, op: str | None = None, executor: str = "pool",
           cache: str | Path | None = None, llm: str = "off", baseline: str = "auto",
           use_stored: bool = True, use_priors: bool = True, cost_model: str = "auto",
           confirm_rounds: int = 3, verbose: bool = False) -> Run:
    """Search kernels for one op of a spec (a path, a ``kdsl.load`` result or an op of
    it) and return the finished run. ``out``: the run directory (a fresh temporary one
    when None). ``executor``: 'pool' (workers), 'inline' or 'ray'. The other arguments
    are ``kdsl search``'s flags."""
    from kdsl.search import runs
    from kdsl.search.display import LogDisplay, QuietDisplay
    from kdsl.search.jobs import SEARCH_SLOW_CUTOFF, EvalConfig
    from kdsl.search.llm.setup import resolve_mode
    from kdsl.search.settings import SearchSettings
    path, op_name = _spec_path(spec_or_path, op)
    backends = (backend,) if isinstance(backend, str) else tuple(backend)
    backends = tuple(b.strip() for name in backends for b in name.split(",") if b.strip())
    if not backends:
        raise UsageError("backend: give at least one backend")
    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="kdsl-run-")) / "run"
    from kdsl.search.policies import parse as parse_policy
    try:
        policy, params = parse_policy(policy)
    except ValueError as e:
        raise UsageError(f"policy: {e}") from None
    settings = SearchSettings(
        spec=str(path), op=op_name, backends=backends, device=device, policy=policy,
        policy_params=params, seed=seed, budget=budget, workers=workers, executor=executor,
        llm=resolve_mode(llm), use_priors=use_priors, use_stored=use_stored,
        cost_model=cost_model, confirm_rounds=confirm_rounds,
        eval=EvalConfig(device=device, slow_cutoff=SEARCH_SLOW_CUTOFF, baseline=baseline))
    display = LogDisplay() if verbose else QuietDisplay()
    runs.start(settings, out, str(cache) if cache else None, display)
    return Run(out)


def _spec_path(spec_or_path, op: str | None) -> tuple[Path, str | None]:
    """A spec file for the run to copy, and the op's name."""
    if isinstance(spec_or_path, (str, Path)):
        return Path(spec_or_path), op
    if isinstance(spec_or_path, ir.Op):
        file, texts, op = spec_or_path.source_file, [spec_or_path.source_text], \
            op or spec_or_path.name
    elif isinstance(spec_or_path, ir.Spec):
        file, texts = spec_or_path.path, [o.source_text for o in spec_or_path.ops]
    else:
        raise TypeError(f"kdsl.search: give a .kspec path, a kdsl.load() spec or one of "
                        f"its ops, not {type(spec_or_path).__name__}")
    if file and Path(file).is_file():
        return Path(file), op
    text = next((t for t in texts if t), "")
    if not text:  # an IR built by hand: nothing a run could copy
        raise UsageError("kdsl.search: this spec carries no text to run; pass its .kspec path")
    tmp = Path(tempfile.mkdtemp(prefix="kdsl-spec-")) / "spec.kspec"
    tmp.write_text(text)
    return tmp, op


def import_module(path: str | Path, out: str | Path | None = None) -> ir.Spec:
    """A PyTorch module file in KernelBench's form (``Model``, ``get_inputs``,
    ``get_init_inputs``) as a checked spec, through ``kdsl import``'s importer, which
    checks the spec against the module's own output. With ``out`` (a file, or a
    directory for ``NAME.kspec``), the spec text is written there too."""
    from kdsl.importer import import_model  # imported here: it pulls in torch.export
    imported = import_model(path, check=True)
    target = None
    if out is not None:
        target = Path(out)
        if target.is_dir() or str(out).endswith(("/", "\\")):
            target = target / f"{imported.name}.kspec"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(imported.spec_text)
    return spec_mod.parse_text(imported.spec_text, str(target or f"<{imported.name}>"))
