"""Distributed evaluation on Ray: each evaluation is one Ray task, behind ``Executor``.

Resources. A cuda job's task asks for ``num_gpus=1`` (and one CPU), any other job's
for one CPU; Ray pins each GPU task to its own device (``CUDA_VISIBLE_DEVICES``),
so a cluster of eight GPUs runs eight evaluations at once. At most
``min(workers, capacity)`` tasks of a kind are in Ray (capacity: the cluster's GPUs
for cuda jobs, its CPUs otherwise); the rest wait on the driver. A task's
environment is the pool worker's (``worker.WorkerKind``), set by a per-task
``runtime_env`` before its process imports anything: a cpu job runs with
``TRITON_INTERPRET=1`` and ``CUDA_VISIBLE_DEVICES=''``, a cuda job with
``TRITON_INTERPRET=0``.

Futures. ``submit`` returns a ``concurrent.futures.Future`` at once. One driver
thread owns every task: it launches each as a streaming Ray task, which yields
``STARTED`` once its worker is up (evaluator imported) and then the ``Result``,
polls them with ``ray.wait`` and resolves our futures, which never raise.

Failures cost their task, never the search; each is ``Result.failure('worker', ..)``:
- a hang: the deadline, ``job.config.timeout_s`` (or ``timeout_s`` here), runs from
  ``STARTED`` (as the pool's runs from a ready worker: a worker's start is not the
  candidate's time); then ``ray.cancel(force=True)`` kills the worker process. A
  task that does not start within ``start_timeout_s`` fails the same way;
- a dead worker (segfault, abort, SIGKILL, the OOM killer): Ray says
  ``WorkerCrashedError`` whoever killed it, so the job is re-run once (Ray's own
  retries are off, ``max_retries=0``). A crash that repeats is the candidate's
  (crashes are deterministic far more often than outside kills are); an outside
  kill is survived. A segfaulting candidate costs two evaluations: the price of
  not blaming a candidate for a preempted worker;
- a lost node (``NodeDiedError``, a dead raylet, a lost object) is re-run up to
  ``LOST_NODE_RETRIES`` times.

Worker processes are reused (a new Ray worker costs seconds, and ``timing``'s
per-process baseline cache amortizes torch.compile); ``fresh_process=True`` gives
each evaluation its own. An out-of-memory evaluation or a lost CUDA context is a
worker failure, worded as the pool words it; since a Ray task cannot end its
process after returning, that worker exits at the start of its next task, which
sees one crash and is re-run on a fresh worker. ``config.memory_mb`` is not
enforced (an address-space limit would break the Ray worker, which maps the object
store); Ray's memory monitor kills a task that exhausts its node instead.

The measurement cache is the driver's (the engine's): this executor only evaluates,
so a run gives the local executors' results for the same seed and cache. Cuda
results carry ``ray_gpu_ids`` (``ray.get_gpu_ids()`` in the task): where it ran.
"""
from __future__ import annotations

import logging
import queue
import sys
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, replace
from typing import Any, Callable

from kdsl.errors import UsageError

from .jobs import EvalJob
from .result import Result
from .eval.verdict import picklable, verdict

try:
    import ray
    from ray import exceptions as rex
except ImportError:  # the optional extra
    raise UsageError("the ray executor needs Ray: pip install 'kdsl[ray]'") from None

log = logging.getLogger(__name__)

CRASH_RETRIES = 1       # re-runs after a dead worker before the candidate is blamed
LOST_NODE_RETRIES = 2   # re-runs after a lost node (never the candidate's doing)
CANCEL_GRACE_S = 30.0   # a cancelled task's slot is freed by then even if Ray is silent
POLL_S = 0.01           # the longest a new submission waits while tasks run
_LOST = (rex.NodeDiedError, rex.LocalRayletDiedError, rex.ObjectLostError,
         rex.RaySystemError)
_CRASHED = (rex.WorkerCrashedError, rex.OutOfMemoryError)
# a task's environment, as the pool's workers have it (``worker.WorkerKind``): a cpu
# evaluation runs Triton interpreted and sees no GPU; a cuda one never interprets
_ENVIRONMENT = {False: {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""},
                True: {"TRITON_INTERPRET": "0"}}


# ---- the worker side ----

STARTED = "started"  # a task's first item: its deadline starts when this arrives
_poisoned: str | None = None  # why this worker process must not evaluate again


def _evaluate_task(job: EvalJob, evaluate_fn: Callable | None, gpu: bool):
    """Runs in a Ray worker: yields ``STARTED`` once it can evaluate, then the ``Result``."""
    global _poisoned
    if _poisoned:
        import os
        print(f"kdsl: restarting a Ray worker: {_poisoned}", file=sys.stderr)
        os._exit(70)  # the driver sees a crash and re-runs this job on a fresh worker
    if evaluate_fn is None:
        from .eval.evaluator import evaluate as evaluate_fn  # torch too: outside the deadline
    yield STARTED
    try:
        result = evaluate_fn(job)
    except (Exception, SystemExit) as e:  # evaluate never raises; a fake or a bug might
        import traceback
        result = Result.failure("worker", f"evaluation raised {type(e).__name__}: {e}",
                                traceback=traceback.format_exc()[-4000:])
    result, _poisoned = verdict(job, result)
    if gpu:
        result = replace(result, artifacts={**result.artifacts,
                                            "ray_gpu_ids": list(ray.get_gpu_ids())})
    yield picklable(result)


# ---- the driver side ----

@dataclass(eq=False)
class _Task:
    job: EvalJob
    future: Future
    kind: str                   # 'cuda' | 'cpu': which slots it takes
    gen: Any = None             # the ObjectRefGenerator of the attempt in Ray, if any
    started: bool = False       # its STARTED item arrived
    deadline: float = 0.0       # to start (before STARTED), then to finish
    crashes: int = 0
    lost: int = 0
    cancelled_at: float | None = None


class RayExecutor:
    """Evaluates jobs as Ray tasks on a local cluster (no ``address``) or a running one."""

    def __init__(self, workers: int, address: str | None = None,
                 evaluate_fn: Callable[[EvalJob], Result] | None = None,
                 num_cpus: int | None = None, num_gpus: int | None = None,
                 temp_dir: str | None = None, timeout_s: float | None = None,
                 start_timeout_s: float = 300.0, runtime_env: dict | None = None,
                 fresh_process: bool = False, log_to_driver: bool = False):
        """``evaluate_fn`` must be importable by the workers (or picklable by value);
        None means ``kdsl.search.eval.evaluator.evaluate``. ``num_cpus``, ``num_gpus`` and
        ``temp_dir`` shape a local cluster this executor starts; ``runtime_env`` is
        added to every task's (e.g. ``{'env_vars': {'PYTHONPATH': ...}}``).
        ``timeout_s`` overrides the jobs' ``config.timeout_s``; ``start_timeout_s``
        bounds the wait for a worker (its start, its runtime_env, a free device)."""
        from .eval.lockdown import not_dumpable
        not_dumpable()  # what holds the run's results: its memory closed to candidates
        self.workers = max(1, workers)
        self.evaluate_fn = evaluate_fn
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.runtime_env = dict(runtime_env or {})
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            self._init_ray(address, num_cpus, num_gpus, temp_dir, log_to_driver)
        self._remote = ray.remote(max_calls=1 if fresh_process else 0)(_evaluate_task)
        self.resources: dict = {}
        self.refresh_resources()
        self.submitted = 0
        self._events: queue.Queue = queue.Queue()
        self._pending: list[_Task] = []
        self._running: list[_Task] = []
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="kdsl-ray-executor",
                                        daemon=True)
        self._thread.start()

    def _init_ray(self, address, num_cpus, num_gpus, temp_dir, log_to_driver) -> None:
        if address:
            kw: dict = {"address": address}
        else:
            kw = {"num_cpus": num_cpus, "num_gpus": num_gpus, "include_dashboard": False,
                  "_temp_dir": temp_dir}
        try:
            ray.init(**kw, log_to_driver=log_to_driver, logging_level=logging.WARNING)
        except ConnectionError as e:
            raise UsageError(f"cannot connect to the Ray cluster at {address}: {e}") from None

    # ---- capacity ----
    def refresh_resources(self) -> dict:
        self.resources = {k: v for k, v in ray.cluster_resources().items()
                          if not k.startswith("node:")}
        log.info("ray cluster resources: %s; parallelism: cpu %d, cuda %d",
                 self.resources, self.slots("cpu"), self.slots("cuda"))
        return self.resources

    def slots(self, kind: str) -> int:
        """How many evaluations of this kind run at once: min(workers, cluster capacity)."""
        cpus = int(self.resources.get("CPU", 0))
        if kind == "cuda":
            return min(self.workers, int(self.resources.get("GPU", 0)), cpus)
        return min(self.workers, cpus)

    def task_options(self, job: EvalJob) -> dict:
        """The Ray options of ``job``'s task: its resources and its environment."""
        cuda = job.config.device == "cuda"
        # a task holds one CPU (``num_cpus``): torch.compile's compile processes too, as a
        # pool worker's share of the host (``worker.WorkerKind.environment``); a value the
        # caller's runtime environment sets stands
        env = {"TORCHINDUCTOR_COMPILE_THREADS": "1",
               **(self.runtime_env.get("env_vars") or {}), **_ENVIRONMENT[cuda]}
        return {"num_cpus": 1, "num_gpus": 1 if cuda else 0, "max_retries": 0,
                "retry_exceptions": False, "num_returns": "streaming",
                "runtime_env": {**self.runtime_env, "env_vars": env}}

    # ---- the Executor interface ----
    def submit(self, job: EvalJob) -> "Future[Result]":
        fut: Future = Future()
        if self._closed:
            fut.set_result(Result.failure("worker", "the Ray executor is shut down"))
            return fut
        task = _Task(job, fut, "cuda" if job.config.device == "cuda" else "cpu")
        fut.add_done_callback(lambda f: f.cancelled() and self._events.put(("cancel", task)))
        self.submitted += 1
        self._events.put(("submit", task))
        return fut

    def shutdown(self) -> None:
        """Cancel what is in flight (its futures resolve as failures); stop Ray if ours."""
        if not self._closed:
            self._closed = True
            self._events.put(("stop", None))
            self._thread.join(timeout=60)
        if self.owns_ray and ray.is_initialized():
            ray.shutdown()

    # ---- the driver thread: the only code that touches tasks ----
    def _loop(self) -> None:
        while True:
            try:
                if not self._take_events():
                    self._stop_all()
                    return
                self._collect()
                self._expire()
                self._launch_pending()
            except Exception as e:  # a bug here must not hang the search: fail what is open
                log.exception("ray executor loop")
                for t in self._pending + self._running:
                    self._cancel(t, Result.failure("worker", f"ray executor error: {e}"))
                self._pending.clear()
                self._running.clear()

    def _take_events(self) -> bool:
        """Apply the submissions and cancellations; False on stop. Blocks only when idle."""
        block = not self._running
        while True:
            try:
                event, task = self._events.get(block=block)
            except queue.Empty:
                return True
            block = False
            if event == "stop":
                return False
            if event == "submit":
                self._pending.append(task)
            elif event == "cancel":
                self._cancel(task, None)

    def _collect(self) -> None:
        """Wait briefly for the running tasks' next items and handle those that came."""
        if not self._running:
            return
        gens = [t.gen for t in self._running]
        due = min(t.deadline if t.cancelled_at is None else t.cancelled_at + CANCEL_GRACE_S
                  for t in self._running)
        wait = min(POLL_S, max(0.0, due - time.monotonic()))
        ready, _ = ray.wait(gens, num_returns=1, timeout=wait)
        if ready:
            ready, _ = ray.wait(gens, num_returns=len(gens), timeout=0)
        ready_ids = {id(g) for g in ready}
        for task in [t for t in self._running if id(t.gen) in ready_ids]:
            self._next_item(task)

    def _next_item(self, task: _Task) -> None:
        try:
            value = ray.get(next(task.gen))
        except StopIteration:
            value = Result.failure("worker", "the Ray task ended without a result")
        except Exception as error:  # how the worker failed: the attempt is over
            self._running.remove(task)
            if not task.future.done():
                self._failed(task, error)
            return
        if value == STARTED and not task.started:
            task.started = True
            task.deadline = time.monotonic() + self._timeout(task)
            return
        self._running.remove(task)
        _resolve(task, value if isinstance(value, Result) else Result.failure(
            "worker", f"evaluation returned {type(value).__name__}, not a Result"))

    def _failed(self, task: _Task, error: BaseException) -> None:
        if isinstance(error, _CRASHED):
            task.crashes += 1
            if task.crashes <= CRASH_RETRIES:
                log.warning("worker died evaluating %s; re-running it once", task.job.candidate)
                self._pending.insert(0, task)
            else:
                _resolve(task, Result.failure(
                    "worker", f"the worker process died evaluating this candidate, "
                              f"{task.crashes} times in a row (a crash such as a segfault or "
                              f"abort, or a kill by the OS); not retried further. Ray: "
                              f"{_first_line(error)}"))
        elif isinstance(error, _LOST):
            task.lost += 1
            if task.lost <= LOST_NODE_RETRIES:
                log.warning("lost a node evaluating %s: %s; re-running",
                            task.job.candidate, _first_line(error))
                self._pending.insert(0, task)
            else:
                _resolve(task, Result.failure(
                    "worker", f"lost the Ray node {task.lost} times: {_first_line(error)}"))
        elif isinstance(error, rex.TaskCancelledError):
            _resolve(task, Result.failure("worker", "the Ray task was cancelled"))
        else:
            _resolve(task, Result.failure(
                "worker", f"the Ray task failed ({type(error).__name__}): {_first_line(error)}"))

    def _timeout(self, task: _Task) -> float:
        return self.timeout_s if self.timeout_s is not None else task.job.config.timeout_s

    def _expire(self) -> None:
        now = time.monotonic()
        for task in list(self._running):
            if task.cancelled_at is not None:
                if now >= task.cancelled_at + CANCEL_GRACE_S:
                    log.warning("a cancelled Ray task did not report back; freeing its slot")
                    self._running.remove(task)
            elif now >= task.deadline and task.started:
                timeout = self._timeout(task)
                self._cancel(task, Result.failure(
                    "worker", f"timed out after {timeout:g} s (driver-side deadline); "
                              "the Ray task was cancelled and its worker killed",
                    timeout_s=timeout))
            elif now >= task.deadline:
                self._cancel(task, Result.failure(
                    "worker", f"the Ray task did not start within {self.start_timeout_s:g} s "
                              f"(no free worker with a {'GPU' if task.kind == 'cuda' else 'CPU'}"
                              f"? cluster resources: {self.resources})"))

    def _launch_pending(self) -> None:
        for task in list(self._pending):
            if task.future.done():  # cancelled by the engine while it waited
                self._pending.remove(task)
                continue
            if self.slots(task.kind) == 0:
                self.refresh_resources()  # a cluster may have grown since the start
                if self.slots(task.kind) == 0:
                    self._pending.remove(task)
                    _resolve(task, Result.failure(
                        "worker", f"the Ray cluster has no "
                                  f"{'GPU' if task.kind == 'cuda' else 'CPU'} to run a "
                                  f"{task.job.config.device} evaluation (resources: "
                                  f"{self.resources})"))
                    continue
            busy = sum(1 for t in self._running if t.kind == task.kind)
            if busy < self.slots(task.kind) and len(self._running) < self.workers:
                self._pending.remove(task)
                self._start(task)

    def _start(self, task: _Task) -> None:
        opts = self.task_options(task.job)
        task.gen = self._remote.options(**opts).remote(task.job, self.evaluate_fn,
                                                       opts["num_gpus"] > 0)
        task.started, task.cancelled_at = False, None
        task.deadline = time.monotonic() + self.start_timeout_s
        self._running.append(task)

    def _cancel(self, task: _Task, result: Result | None) -> None:
        """Stop ``task`` (its slot stays taken until Ray reports the cancellation)."""
        if task in self._pending:
            self._pending.remove(task)
        if task in self._running and task.cancelled_at is None:
            task.cancelled_at = time.monotonic()
            try:
                ray.cancel(task.gen, force=True)
            except Exception as e:  # already finished, or its node is gone
                log.debug("ray.cancel: %s", e)
        if result is not None:
            _resolve(task, result)

    def _stop_all(self) -> None:
        stopped = Result.failure("worker", "the Ray executor shut down before this evaluation "
                                           "finished")
        for task in list(self._running):
            self._cancel(task, stopped)
        for task in self._pending:
            _resolve(task, stopped)
        self._pending.clear()


def _resolve(task: _Task, result: Result) -> None:
    try:
        task.future.set_result(result)
    except InvalidStateError:  # cancelled by the engine, or already resolved
        pass


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__
