"""The search loop: propose, make candidates, evaluate (cached), record, observe.

Determinism under parallel evaluation: up to ``workers`` evaluations are in
flight, and results are taken back strictly in proposal order. The sequence
of propose/observe calls therefore depends only on the seed and the
measurements, never on which worker finished first, so the same seed and
cache reproduce a run exactly, and a resumed run replays its records to the
same state before it continues. Where a backend tells what a candidate runs at
the bench point (``bench_identity``), which children count as new depends on
that too: it asks no GPU, so the same kdsl, torch and triton agree on any
machine with them, and a replay follows its records whatever it says.
"""
from __future__ import annotations

import random
import time
from collections import deque
from concurrent.futures import Future, wait
from dataclasses import dataclass, field, replace

from kdsl import backends, ir

from kdsl.knowledge.opclass import op_class

from . import costmodel
from .cache import MeasurementCache, config_key
from .candidate import Candidate
from .jobs import EvalConfig, EvalJob, Executor
from .lineage import source_hash
from .operators import Context, FatalOperatorError, OperatorFailure, OperatorSet
from .policies import make as make_policy
from .policies.base import Proposal
from .policies.decisions import Decisions
from .result import Result
from .runstore import RunError, RunStore

DEDUP_TRIES = 8   # attempts at a child whose genome was not seen yet
TWIN_TRIES = 32   # attempts in all, counting children that run an evaluated kernel


@dataclass
class Stats:
    budget: int
    done: int = 0
    failures: int = 0
    best_speedup: float = 0.0
    best_node: int | None = None
    cache_hits: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def rate(self) -> float:
        dt = time.monotonic() - self.started
        return self.done / dt if dt > 0 else 0.0


class Display:
    """What the engine reports progress to; the default shows nothing."""

    def start(self, stats: Stats) -> None: ...
    def update(self, stats: Stats, record: dict) -> None: ...
    def stop(self, stats: Stats) -> None: ...


def _done(result: Result) -> Future:
    f: Future = Future()
    f.set_result(result)
    return f


class Engine:
    def __init__(self, op: ir.Op, store: RunStore, executor: Executor, cache: MeasurementCache,
                 ctx: Context, operators: OperatorSet, config: EvalConfig, policy: str,
                 seed: int, workers: int, policy_params: dict | None = None,
                 display: Display | None = None, languages: dict[str, str] | None = None,
                 on_record=None, model=None, profiles=None):
        self.op, self.store, self.executor, self.cache = op, store, executor, cache
        self.ctx, self.operators, self.config = ctx, operators, config
        self.seed, self.workers = seed, max(1, workers)
        # the op's scale, the cost model's features shared across ops (see costmodel.py)
        self.scale = costmodel.op_features(op, config.device)
        self.decisions = Decisions(ctx.spaces)
        self.op_class = op_class(op)
        self.policy = make_policy(policy, seed=seed, starts=len(ctx.starts),
                                  spaces=ctx.spaces, model=model, scale=self.scale,
                                  **(policy_params or {}))
        self.policy.novel = self.novel
        self.display = display or Display()
        self.languages = languages or {}
        self.on_record = on_record  # summary writer, called after every recorded node
        self.candidates: dict[int, Candidate] = {}
        self.seen: set[str] = set()
        # what each candidate runs at the bench point, where its backend can tell
        # (``bench_identity``; timed searches only): a child that runs what an earlier
        # candidate ran, and did not fail, is no new candidate. Kept in proposal order
        # (added at launch, dropped when a result comes back failed), so it is as
        # deterministic as the rest; a replay follows the records, not this rule.
        self.identities: dict[str, tuple | None] = {}
        self.seen_runs: set[tuple] = set()
        self.config_key = config_key(config)
        self.op_hash = op.hash
        self.replay = {r["id"]: r for r in store.nodes}  # recorded nodes of a resumed run
        self.stats = Stats(budget=0)
        self.ctx.key = self.key
        self.followups: deque[Proposal] = deque()  # repairs the engine asked for
        self.repair_depth: dict[int, int] = {}
        self.max_repairs = int(ctx.extra.get("max_repairs", 0))
        # profiles of new bests (profile/loop.py; None: the run profiles nothing), and why
        # the search stopped before its budget (a best at its speed-of-light target)
        self.profiles = profiles
        self.stopped: str | None = None

    # ---- candidates ----
    def key(self, c: Candidate) -> str:
        return f"{c.key(self.op_hash, self.config.device)}:{self.config_key}"

    def identity(self, c: Candidate) -> tuple | None:
        """(backend, what ``c`` runs at the bench point), or None: free source, an untimed
        search, or a backend that cannot tell."""
        key = self.key(c)
        if key not in self.identities:
            tell = getattr(backends.REGISTRY.get(c.backend), "bench_identity", None)
            runs = None
            if tell is not None and c.source is None and self.config.time:
                try:
                    runs = tell(self.op, c.genes, self.config.device, self.config.bench_dtype)
                except Exception:  # a backend's bug costs the dedupe, not the search
                    runs = None
            self.identities[key] = (c.backend, runs) if runs is not None else None
        return self.identities[key]

    def novel(self, backend: str, genes: dict) -> bool:
        """Whether a genome would be a new candidate: not seen, not running a kernel an
        earlier candidate ran (a policy that proposes genomes asks before it proposes)."""
        c = Candidate.of(backend, genes)
        recorded = (self.replay.get(self.policy.tree.next_id) or {}).get("key")
        if recorded is not None:
            # replaying: the first genome the recorded run found new was the one it
            # recorded, so exactly that one is new now (whatever this kdsl's backends can
            # tell of twins that the recording one could not)
            return self.key(c) == recorded
        if self.key(c) in self.seen:
            return False
        runs = self.identity(c)
        return runs is None or runs not in self.seen_runs

    def make(self, p: Proposal) -> tuple[str, Candidate | OperatorFailure]:
        """The operator's name and its child (or its failure) for proposal ``p``."""
        if p.kind == "start":
            return "start", self.ctx.starts[p.start_index]
        if p.kind == "decide":  # the policy chose the genome itself
            return "decide", Candidate.of(p.backend, dict(p.genome), origin=self.policy.name)
        parents = [self.candidates[i] for i in p.parents if i in self.candidates]
        recorded = (self.replay.get(p.node) or {}).get("key")
        name, seen, twins, first = "?", 0, 0, None
        for attempt in range(TWIN_TRIES):
            rng = random.Random(f"kdsl-op:{self.seed}:{p.node}:{attempt}")
            try:
                operator = self.operators.pick(p.kind, rng)
                name = operator.name
                child = operator.apply(parents, self.ctx, rng)
            except FatalOperatorError:
                raise
            except Exception as e:  # an operator's bug is a failed child, not a dead search
                return name, OperatorFailure(name, f"{type(e).__name__}: {e}")
            if isinstance(child, OperatorFailure):
                return name, child
            if self.key(child) in self.seen:
                seen += 1
                if seen >= DEDUP_TRIES:
                    break
                continue
            if recorded is not None:  # replaying: the child the record names, else diverge
                if self.key(child) == recorded:
                    return name, child
                first = first or child
                continue
            runs = self.identity(child)
            if runs is None or runs not in self.seen_runs:
                return name, child
            twins += 1
        if first is not None:
            return name, first  # _launch reports the divergence
        why = f"{twins} ran kernels already evaluated, " if twins else ""
        return name, OperatorFailure(name, f"no new candidate in {seen + twins} tries ({why}"
                                           f"{seen} were genomes already seen)")

    def submit(self, c: Candidate) -> tuple[Future, bool]:
        cached = self.cache.get(self.key(c))
        if cached is not None:
            return _done(cached), True
        return self.executor.submit(EvalJob(self.op, c, self.config)), False

    # ---- the loop ----
    def run(self, budget: int) -> Stats:
        """Evaluate until ``budget`` nodes exist (replayed ones included)."""
        self.stats = stats = Stats(budget=budget)
        inflight: deque = deque()
        self.display.start(stats)
        try:
            while (stats.done + len(inflight) < budget and not self.stopped) or inflight:
                while len(inflight) < self.workers and stats.done + len(inflight) < budget \
                        and not self.stopped:
                    p = self.followups.popleft() if self.followups else self.policy.propose(1)[0]
                    inflight.append(self._launch(p))
                self._finish(*self._alone_if_crowded(inflight.popleft(), inflight))
        except KeyboardInterrupt:
            for _, _, fut, *_ in inflight:
                fut.cancel()
            raise
        finally:
            self.display.stop(stats)
        return stats

    def _launch(self, p: Proposal):
        name, child = self.make(p)
        if isinstance(child, OperatorFailure):
            how = "replay" if p.node in self.replay else False
            return p, name, _done(Result.failure("operator", child.reason)), None, how
        self.candidates[p.node] = child
        self.policy.placed(p.node, child.backend, child.genes if child.source is None else None)
        self.seen.add(self.key(child))
        if (runs := self.identity(child)) is not None:
            self.seen_runs.add(runs)
        recorded = self.replay.get(p.node)
        if recorded is not None:
            if recorded.get("key") != self.key(child):
                raise RunError(f"resume diverged at node {p.node}: the run's records do "
                               "not match what this kdsl proposes (different version?)")
            return p, name, _done(Result.from_record(recorded["result"])), child, "replay"
        fut, hit = self.submit(child)
        return p, name, fut, child, hit

    def _alone_if_crowded(self, item: tuple, inflight: deque) -> tuple:
        """An evaluation that ran out of memory while others could run beside it on the
        same device is evaluated once more alone, once those are done: the memory may
        have been theirs. The result it records says so (``alone_after``, the first
        message). Nothing new launches meanwhile, so the order of proposals and results
        (and with it reproducibility) is as it was."""
        p, name, fut, child, how = item
        if how is not False or child is None or self.workers == 1:
            return item
        first: Result = fut.result()
        if first.ok or not ran_out_of_memory(first):
            return item
        wait([f for _, _, f, *_ in inflight])
        again = self.executor.submit(EvalJob(self.op, child, self.config)).result()
        again = replace(again, artifacts={**again.artifacts, "alone_after": first.message})
        return p, name, _done(again), child, how

    def _finish(self, p: Proposal, name: str, fut: Future, child, how) -> None:
        result: Result = fut.result()
        stats = self.stats
        if child is not None:
            self._remember(p, name, child, result)
            if not result.ok:  # a twin may yet run where this one failed
                self.seen_runs.discard(self.identity(child))
        stats.done += 1
        reward = result.speedup
        self.policy.observe([(p.node, reward)])
        if not result.ok:
            stats.failures += 1
        improved = reward > stats.best_speedup
        if improved:
            stats.best_speedup, stats.best_node = reward, p.node
        if how == "replay":
            record = self.replay[p.node]
        else:
            if how:
                stats.cache_hits += 1
            elif child is not None:
                self.cache.put(self.key(child), result)
                self._share(child, reward)
            record = self._record(p, name, child, result, stats.done - 1)
        if improved and self.profiles is not None and child is not None:
            self.profiles.on_best(p.node, self.key(child), child, result.artifacts)
            self.stopped = self.stopped or self.profiles.stop
        if self.on_record:
            self.on_record(record, stats)
        self.display.update(stats, record)

    def _share(self, child: Candidate, reward: float) -> None:
        """A fresh measurement of a genome, as a row later runs' cost models start from."""
        if child.source is not None or child.backend not in self.ctx.spaces:
            return
        row = costmodel.encode(child.backend, self.ctx.spaces[child.backend].complete(
            child.genes), self.decisions.by_backend[child.backend], self.scale)
        self.cache.add_observation(self.op_class, child.backend, self.op_hash, row, reward)

    def _remember(self, p: Proposal, name: str, child: Candidate, result: Result) -> None:
        """Feed what was learned back to the operators: results, lineage, repairs."""
        key = self.key(child)
        self.ctx.results[key] = result
        parent = self.candidates.get(p.parents[0]) if p.parents else None
        before = self.ctx.history.get(self.key(parent), []) if parent is not None else []
        outcome = f"{result.speedup:.3f}x" if result.ok else f"failed at {result.stage}"
        self.ctx.history[key] = (before + [f"node {p.node} ({name}): {outcome}"])[-12:]
        depth = self.repair_depth.get(p.parents[0], 0) + 1 if p.kind == "repair" else 0
        self.repair_depth[p.node] = depth
        repairable = result.stage in ("render", "build", "guards", "correctness", "worker")
        if (not result.ok and repairable and child.source is not None
                and depth < self.max_repairs and self.operators.has("repair")):
            self.followups.append(self.policy.follow_up(p.node, "repair"))

    def _record(self, p: Proposal, name: str, child, result: Result, iteration: int) -> dict:
        source = result.artifacts.get("source") if child is not None else None
        rel = None
        if source:
            ext = "c" if self.languages.get(child.backend) == "c" else "py"
            rel = self.store.write_kernel(source_hash(source), source, ext)
        record = {"id": p.node, "parents": list(p.parents), "kind": p.kind, "operator": name,
                  "candidate": child.to_record() if child is not None else None,
                  "key": self.key(child) if child is not None else None,
                  "result": _slim(result), "iteration": iteration,
                  "source_hash": source_hash(source), "source_path": rel,
                  "time": time.time()}
        return self.store.append_node(record)


def ran_out_of_memory(result: Result) -> bool:
    """Whether a failed evaluation ran out of memory (its worker says so, or was killed
    in a way that suggests it)."""
    return bool(result.artifacts.get("out_of_memory")) or (
        result.stage == "worker" and "out of memory" in result.message)


def _slim(result: Result) -> dict:
    """The result record without the bulky source (it lives in kernels/)."""
    r = result.to_record()
    r["artifacts"] = {k: v for k, v in r["artifacts"].items() if k != "source"}
    return r
