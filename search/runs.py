"""Starting and resuming runs: settings -> op, spaces, executor, cache, store, engine."""
from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from kdsl import __version__, backends, ir
from kdsl import spec as spec_mod
from kdsl.errors import UsageError

from . import confirm, learned
from .cache import MeasurementCache, observations_of_others, read_only
from .engine import Display, Engine, Stats
from .files import check_out
from .operators import Context, OperatorSet
from .policies import POLICIES
from .lineage import source_hash
from .runstore import RunError, RunStore
from .settings import SearchSettings
from .starts import starting_points


def load_op(spec_path: str, op_name: str | None) -> tuple[ir.Op, str]:
    """The op and the spec's text; SpecError for a bad spec, UsageError for a bad --op."""
    spec = spec_mod.load(spec_path)
    try:
        op = spec_mod.find_op(spec, op_name)
    except KeyError as e:
        raise UsageError(e.args[0]) from None
    return op, Path(spec_path).read_text()


def spaces_for(op: ir.Op, names: tuple[str, ...], device: str):
    spaces, languages = {}, {}
    for name in names:
        try:
            b = backends.get(name)
        except KeyError as e:
            raise UsageError(e.args[0]) from None
        if device not in b.devices:
            raise UsageError(f"backend '{name}' does not run on {device} "
                             f"(it runs on {', '.join(b.devices)})")
        reason = b.supports(op, device)
        if reason:
            raise UsageError(f"backend '{name}' cannot run op '{op.name}': {reason}")
        spaces[name] = b.space(op, device)
        languages[name] = b.language
    return spaces, languages


def make_executor(settings: SearchSettings):
    if settings.executor == "inline":
        from .executors import InlineExecutor
        return InlineExecutor()
    if settings.executor == "pool":
        from .executors import PoolExecutor
        return PoolExecutor(workers=settings.workers)
    if settings.executor == "ray":
        from .ray_executor import RayExecutor
        return RayExecutor(workers=settings.workers, **settings.executor_options)
    raise UsageError(f"unknown executor '{settings.executor}'; known: inline, pool, ray")


def validate(settings: SearchSettings) -> None:
    if settings.policy not in POLICIES:
        raise UsageError(f"unknown policy '{settings.policy}'; known: {', '.join(POLICIES)}")
    if settings.budget < 1:
        raise UsageError(f"--budget must be at least 1, got {settings.budget}")
    if settings.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {settings.workers}")
    if settings.profile < 0 or settings.profile_during < 0:
        raise UsageError("--profile and --profile-during must be 0 or more")
    sol = settings.stop_at_sol
    if sol is not None and not 0 < sol <= 1:
        raise UsageError(f"--stop-at-sol is a fraction of speed-of-light in (0, 1], not {sol}")
    if sol is not None and settings.profile < 1:
        raise UsageError("--stop-at-sol reads profiles: give --profile K too")


@functools.lru_cache(maxsize=1)
def versions() -> dict:
    out = {"kdsl": __version__, "python": platform.python_version()}
    for mod in ("torch", "triton", "numpy"):
        try:
            out[mod] = importlib.metadata.version(mod)
        except importlib.metadata.PackageNotFoundError:  # a fact to record, not an error
            out[mod] = None
    return out


class SummaryWriter:
    """Keeps summary.json and kernels/best.* current after every recorded node.

    Everything is updated incrementally, so the cost per node stays flat as
    the run grows to thousands of nodes.
    """

    def __init__(self, store: RunStore, settings: SearchSettings, op: ir.Op, elapsed0: float,
                 extras=None):
        self.store, self.settings, self.op = store, settings, op
        self.extras = extras or (lambda: {})  # more summary fields (LLM usage, priors)
        self.t0 = time.monotonic() - elapsed0
        self.best_path = store.summary().get("best", {}).get("source_path")
        self.best: dict | None = None
        self.failures: Counter = Counter()
        self.baselines: list[float] = []
        self.baseline_name = None
        # where the evaluations' seconds went, summed over them (they overlap on workers):
        # their stages, the timing stage's phases, and the waits for the device lock
        self.seconds: dict[str, Counter] = {"stages": Counter(), "timing_phases": Counter(),
                                            "lock_wait": Counter()}
        self.count = 0
        self.last_write = 0.0
        self.confirmed: dict | None = None  # the end's re-measurement (confirm.py)
        for r in store.nodes:
            self.add(r)

    def add(self, record: dict) -> bool:
        """Count one node; True when it is the new best."""
        res = record["result"]
        self.count += 1
        if not res.get("ok"):
            self.failures[res.get("stage")] += 1
        if res.get("baseline_ms"):
            self.baselines.append(res["baseline_ms"])
            self.baseline_name = self.baseline_name or res.get("baseline_name")
        arts = res.get("artifacts") or {}
        for key, field in (("stages", "stage_s"), ("timing_phases", "timing_phases_s")):
            self.seconds[key].update({k: v for k, v in (arts.get(field) or {}).items()
                                      if isinstance(v, (int, float))})
        self.seconds["lock_wait"]["total"] += float(arts.get("lock_wait_s") or 0.0)
        s = float(res.get("speedup") or 0.0)
        if s > 0 and (self.best is None or s > float(self.best["result"]["speedup"])):
            self.best = record
            return True
        return False

    def __call__(self, record: dict, stats: Stats | None = None) -> None:
        # a replayed node of a resumed run was counted when the writer was made
        is_new = record is self.store.nodes[-1] and self.count == len(self.store.nodes) - 1
        improved = is_new and self.add(record)
        if improved and record.get("source_path"):
            ext = record["source_path"].rsplit(".", 1)[-1]
            self.best_path = self.store.mark_best(record["source_path"], ext)
        # the records are the truth; the summary is a view, refreshed on news or each second
        if improved or time.monotonic() - self.last_write >= 1.0:
            self.write()

    def adopt_confirmed(self) -> None:
        """kernels/best.* becomes the confirmed best's kernel (the search's own best may
        have lost its crown to a re-measurement)."""
        rel = ((self.confirmed or {}).get("best") or {}).get("source_path")
        if rel and (self.store.root / rel).is_file():
            self.best_path = self.store.mark_best(rel, rel.rsplit(".", 1)[-1])

    def write(self, stopped: str | None = None, finished: bool = False) -> dict:
        """The summary now; ``finished`` once the run reached its budget (or ran out of
        candidates) and confirmed its best: a run killed mid-way has no such mark."""
        best = self.best
        elapsed = time.monotonic() - self.t0
        s = self.settings
        summary = {
            "schema": 1, "spec": s.spec, "op": self.op.name, "op_hash": self.op.hash,
            "backend": ",".join(s.backends), "device": s.device, "policy": s.policy,
            "seed": s.seed, "budget": s.budget, "workers": s.workers, "executor": s.executor,
            "evaluations": self.count,
            "failures": sum(self.failures.values()),
            "failures_by_stage": dict(self.failures),
            "baseline": {"name": self.baseline_name,
                         "time_ms": statistics.median(self.baselines[-101:])
                         if self.baselines else None},
            "best": None if best is None else {
                "node": best["id"], "time_ms": best["result"].get("time_ms"),
                "speedup": best["result"].get("speedup"),
                "source_path": self.best_path or best.get("source_path"),
                "node_source_path": best.get("source_path"),
                "backend": (best.get("candidate") or {}).get("backend"),
                "genome": (best.get("candidate") or {}).get("genome")},
            "seconds": {"stages": _rounded(self.seconds["stages"]),
                        "timing_phases": _rounded(self.seconds["timing_phases"]),
                        "lock_wait": round(self.seconds["lock_wait"]["total"], 3)},
            "elapsed_s": round(elapsed, 3),
            "evaluations_per_s": round(self.count / elapsed, 4) if elapsed > 0 else None,
            "versions": versions(),
        }
        if self.confirmed is not None:
            c = self.confirmed["best"]
            summary["search_best"] = summary["best"]
            summary["best"] = {
                "node": c["node"], "time_ms": c["time_ms"], "speedup": c["median_speedup"],
                "spread": c["spread"], "confirmed": True, "verdict": self.confirmed["verdict"],
                "source_path": self.best_path or c["source_path"],
                "node_source_path": c["source_path"], "backend": c["backend"],
                "genome": c["genome"]}
            summary["confirmed"] = self.confirmed
        summary.update(self.extras())
        self.last_write = time.monotonic()
        if stopped:
            summary["stopped"] = stopped
        if finished:
            summary["finished"] = True
        self.store.write_summary(summary)
        return summary


def _rounded(counts: Counter) -> dict:
    return {k: round(v, 3) for k, v in counts.items()}


def _engine(settings: SearchSettings, op: ir.Op, store: RunStore, cache_path,
            display: Display | None, executor=None):
    spaces, languages = spaces_for(op, settings.backends, settings.device)
    ctx = Context(spaces=spaces, starts=starting_points(op, spaces, settings.device,
                                                          stored=settings.use_stored))
    operators = OperatorSet.default()
    from .llm.setup import configure
    session = configure(settings, op, ctx, operators, languages, store.root)
    operators.weights.update(settings.operator_weights)
    for name, m in (store.header.get("priors") or {}).items():  # fixed when the run began
        if name in operators.weights:
            operators.weights[name] *= m

    def extras() -> dict:
        out = {"operator_weights": operators.weights, "environment": cache.env}
        if hook is not None:
            out["profiles"] = hook.rows()
            if engine.stopped:
                out["stopped_early"] = engine.stopped
        out["cost_model"] = model.to_record() if model is not None else None
        out["llm"] = {"mode": settings.llm, "model": settings.model,
                      **session.client.usage.to_record()} if session else {"mode": "off"}
        return out

    cache = MeasurementCache(cache_path, settings.device, settings.backends)
    executor = executor or make_executor(settings)
    model = cost_model_of(store.header)
    hook = profile_hook(settings, op, store, ctx, model)
    writer = SummaryWriter(store, settings, op, store.summary().get("elapsed_s") or 0.0,
                           extras)
    engine = Engine(op, store, executor, cache, ctx, operators, settings.eval, settings.policy,
                    settings.seed, settings.workers, settings.policy_params, display,
                    languages, on_record=writer, model=model, profiles=hook)
    return engine, writer, executor, cache


def profile_hook(settings: SearchSettings, op: ir.Op, store: RunStore, ctx, model):
    """The run's profiles (``--profile K``), or None when it profiles nothing."""
    if settings.profile < 1:
        return None
    from .profile.loop import ProfileHook
    from .profile.profiler import profile_source

    def profile_fn(candidate, source, artifacts):
        bandwidth = artifacts.get("bandwidth_gbs")
        return profile_source(str(store.root / "spec.kspec"), op.name, candidate.backend,
                              source, settings.device,
                              copy_bandwidth=bandwidth * 1e9 if bandwidth else None,
                              traffic_bytes=artifacts.get("bytes"))
    return ProfileHook(store, ctx, profile_fn, top=settings.profile,
                       during=settings.profile_during, stop_at=settings.stop_at_sol,
                       model=model)


def cost_model_header(settings: SearchSettings, op: ir.Op, cache_path) -> dict:
    """What the run's cost model starts from, fixed when the run begins (so a resume ranks
    as the first run did): whether it is on, and the earlier runs' rows of this op's class
    from the measurement cache (none when the run uses no earlier knowledge)."""
    on = cost_model_on(settings.cost_model)
    prior = []
    from kdsl.knowledge.opclass import op_class
    cls = op_class(op)
    if on and settings.use_priors and cache_path and Path(cache_path).exists():
        cache = MeasurementCache(cache_path, settings.device, settings.backends)
        try:
            prior = cache.observations(cls, tuple(settings.backends))
        finally:
            cache.close()
    if settings.warm_from:
        need_cost_model(on)
    for path in settings.warm_from:
        # other ops only (a model told this op's own times would be recalling, not
        # ranking), read without writing a byte to the other cache
        rows = observations_of_others(path, settings.device, tuple(settings.backends), cls,
                                      op.hash)
        if not rows:
            print(f"kdsl: warning: --warm-from {path}: no rows of other {cls} ops measured "
                  f"in this environment (the same device, backends, their generators and "
                  f"versions); the model starts without it", file=sys.stderr)
        prior += rows
    return {"on": on, "prior": [[row, reward] for row, reward in prior]}


def cost_model_on(choice: str) -> bool:
    """Whether ``--cost-model CHOICE`` turns the model on here (UsageError for a bad choice,
    and for 'on' without lightgbm)."""
    from . import costmodel
    if choice not in ("auto", "on", "off"):
        raise UsageError(f"--cost-model takes auto, on or off, not '{choice}'")
    if choice == "on" and not costmodel.available():
        from kdsl import extras
        extras.require("the cost model (--cost-model on)", "lightgbm")
    return choice == "on" or (choice == "auto" and costmodel.available())


def need_cost_model(on: bool) -> None:
    """A warm start asked of a model that is off: said, not dropped."""
    if not on:
        raise UsageError("--warm-from starts the cost model, which is off here (--cost-model "
                         "off, or lightgbm is not installed: pip install 'kdsl-kernels[model]')")


def check_warm_from(paths) -> tuple[str, ...]:
    """``--warm-from``'s caches, each an existing measurement cache (UsageError, one line,
    for one that is not), opened read only."""
    import sqlite3
    for path in paths:
        if not Path(path).is_file():
            raise UsageError(f"--warm-from {path}: no such measurement cache")
        try:
            with contextlib.closing(read_only(path)) as db:
                db.execute("SELECT row, reward FROM observations LIMIT 1").fetchall()
        except sqlite3.Error as e:
            raise UsageError(f"--warm-from {path}: not a measurement cache ({e})") from None
    return tuple(str(p) for p in paths)


def cost_model_of(header: dict):
    """The run's cost model, from its header (None: off, or a run from before models)."""
    from . import costmodel
    spec = header.get("cost_model") or {}
    if not spec.get("on"):
        return None
    if not costmodel.available():
        from kdsl import extras
        extras.require("this run's cost model", "lightgbm")
    seed = int((header.get("settings") or {}).get("seed") or 0)
    return costmodel.CostModel([(row, costmodel.target(r)) for row, r in spec.get("prior") or []],
                               seed=seed)


def execute(settings: SearchSettings, store: RunStore, op: ir.Op, cache_path,
            display: Display | None = None, executor=None) -> dict:
    """Run the engine to the settings' budget; always leaves a consistent summary."""
    engine, writer, executor, cache = _engine(settings, op, store, cache_path, display,
                                              executor)
    stopped, finished = None, False
    try:
        engine.run(settings.budget)
        writer.confirmed = confirm.confirm(op, executor, settings.eval, store.nodes,
                                           settings.seed, settings.confirm_top,
                                           settings.confirm_rounds)
        writer.adopt_confirmed()
        if engine.profiles is not None:
            engine.profiles.finish(store.nodes, writer.confirmed,
                                   lambda r, c: r.get("key") or engine.key(c))
        finished = True
    except KeyboardInterrupt:
        stopped = "interrupted"
    finally:
        executor.shutdown()
        summary = writer.write(stopped=stopped, finished=finished)
        cache.close()
        store.close()
    try:
        learned.record(settings, op, store.nodes)
    except ImportError:
        pass
    if stopped:
        raise KeyboardInterrupt
    return summary


def _priors(settings: SearchSettings, op: ir.Op) -> dict:
    try:
        return learned.priors_for(settings, op)
    except ImportError:
        return {}


def start(settings: SearchSettings, out: str | Path, cache_path: str | None = None,
          display: Display | None = None, executor=None) -> tuple[RunStore, dict]:
    validate(settings)
    op, text = load_op(settings.spec, settings.op)
    settings.op = op.name
    spaces_for(op, settings.backends, settings.device)  # bad backends fail before the dir
    check_out(out, "--out")  # an unwritable place fails here, before any directory is made
    if cache_path:
        check_out(Path(cache_path).parent, "--cache")
    header = {"settings": settings.to_record(), "op_hash": op.hash,
              "cache": str(cache_path) if cache_path else None, "created": time.time(),
              "priors": _priors(settings, op),
              "cost_model": cost_model_header(settings, op, cache_path)}
    try:
        store = RunStore.create(out, header, text)
    except RunError as e:
        raise UsageError(str(e)) from None
    cache_path = cache_path or str(Path(out) / "cache.sqlite")
    return store, execute(settings, store, op, cache_path, display, executor)


def open_run(run_dir: str | Path) -> tuple[RunStore, SearchSettings]:
    """A run directory and its settings; UsageError (one line) for anything not a usable run."""
    try:
        store = RunStore.open(run_dir)
    except RunError as e:
        raise UsageError(str(e)) from None
    try:
        settings = SearchSettings.from_record(store.header["settings"])
    except (TypeError, ValueError) as e:
        raise UsageError(f"{run_dir}: the run's settings are damaged ({e})") from None
    return store, settings


def resume(run_dir: str | Path, budget: int | None = None, display: Display | None = None,
           executor=None, *, more: int | None = None) -> tuple[RunStore, dict]:
    """Continue a run: its recorded nodes are replayed (not evaluated again), then the
    search goes on. ``budget`` is the run's new total of evaluations, ``more`` the
    number to evaluate beyond those recorded (``kdsl resume --budget N``); with
    neither, the run goes on to the budget it was started with."""
    store, settings = open_run(run_dir)
    if budget is not None and more is not None:
        raise UsageError("give a total budget or a number more, not both")
    if more is not None:
        if more < 1:
            raise UsageError(f"--budget must be at least 1, got {more}")
        settings.budget = len(store.nodes) + more
    elif budget is not None:
        if budget < 1:
            raise UsageError(f"--budget must be at least 1, got {budget}")
        settings.budget = budget
    check_out(run_dir, "resume:")  # a run on a read-only disk cannot go on: say so first
    spec_copy = Path(run_dir) / "spec.kspec"
    if not spec_copy.is_file():
        raise UsageError(f"{run_dir}: the run's copy of its spec (spec.kspec) is missing")
    op, _ = load_op(str(spec_copy), settings.op)
    if op.hash != store.header.get("op_hash"):
        raise UsageError(f"{run_dir}: its spec.kspec no longer matches the run's op "
                         f"(hash {op.hash} vs {store.header.get('op_hash')})")
    cache_path = store.header.get("cache") or str(Path(run_dir) / "cache.sqlite")
    repair_kernels(store, settings, op, cache_path)
    return store, execute(settings, store, op, cache_path, display, executor)


def repair_kernels(store: RunStore, settings: SearchSettings, op: ir.Op, cache_path) -> int:
    """Write again every kernel file that is missing or damaged (a kill mid-write under an
    older kdsl): from the measurement cache, the record's own source or a fresh render,
    whichever matches the recorded hash. One that cannot be rebuilt is removed, with a
    warning, so no damaged kernel stays behind a record. Returns the number rewritten."""
    damaged = store.damaged_kernels()
    if not damaged:
        return _refresh_best(store)
    cache = MeasurementCache(cache_path, settings.device, settings.backends)
    fixed = 0
    try:
        for r in damaged:
            rel, want = r["source_path"], r["source_hash"]
            src = next((t for t in _sources_of(r, cache, op, settings.device)
                        if t and source_hash(t) == want), None)
            if src is not None:
                store.write_kernel(want, src, rel.rsplit(".", 1)[-1])
                fixed += 1
            elif (store.root / rel).exists():
                (store.root / rel).unlink()
                print(f"kdsl: warning: {store.root / rel} was damaged and cannot be rebuilt "
                      f"(node {r['id']}); removed", file=sys.stderr)
    finally:
        cache.close()
    _refresh_best(store)
    return fixed


def _sources_of(record: dict, cache: MeasurementCache, op: ir.Op, device: str):
    """Where a node's source may still be found, cheapest first."""
    if record.get("key"):
        res = cache.get(record["key"])
        if res is not None:
            yield res.artifacts.get("source")
    cand = record.get("candidate") or {}
    yield cand.get("source")
    if cand.get("backend") and not cand.get("source_ref") and cand.get("source") is None:
        try:
            yield backends.get(cand["backend"]).render(op, cand.get("genome") or {}, device)
        except Exception:  # a backend gone or changed since: nothing to rebuild from
            return


def _refresh_best(store: RunStore) -> int:
    """kernels/best.* a copy of the best node's kernel again, if it is not."""
    best = store.summary().get("best") or {}
    rel, node_rel = best.get("source_path"), best.get("node_source_path")
    if not (isinstance(rel, str) and isinstance(node_rel, str) and rel != node_rel):
        return 0
    node_file, best_file = store.root / node_rel, store.root / rel
    if not node_file.is_file():
        return 0
    if best_file.is_file() and best_file.read_bytes() == node_file.read_bytes():
        return 0
    store.mark_best(node_rel, node_rel.rsplit(".", 1)[-1])
    return 1
