"""Executors: where ``evaluate`` runs. Inline (tests), or a pool of isolated worker processes.

``PoolExecutor`` keeps up to ``workers`` long-lived worker processes (spawn
context, so none inherits the parent's CUDA context) and one dispatcher thread
that owns them. A job goes to an idle worker of its ``WorkerKind`` (device and
memory limit; a 'cpu' worker runs Triton interpreted, see ``worker``), which is
started on demand; an idle worker of another kind is retired to make room.
The dispatcher enforces ``config.timeout_s`` from the moment the job is sent,
and turns a worker that hangs, crashes, exits or runs out of memory into a
``Result.failure('worker', ...)`` for that job alone, then replaces the worker.
Futures never raise, and are resolved outside the dispatcher's lock, so a
done-callback may submit again. As with any spawn pool, the program's main
module must not start work on import (``if __name__ == "__main__":``).
"""
from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import pickle
import shutil
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from . import worker
from .eval import confine
from .jobs import EvalJob
from .result import Result
from .worker import WorkerKind

LOG_TAIL = 4000
RETIRE_GRACE_S = 10.0


def _done(result: Result) -> "Future[Result]":
    f: Future = Future()
    f.set_result(result)
    return f


class InlineExecutor:
    """Judges in this process, at submit time: no time limit and no worker to restart, for
    tests and debugging. The candidate still runs in a process of its own (``sandbox``).
    """

    workers = 1

    def __init__(self, timer=None):
        self.timer = timer

    def submit(self, job: EvalJob) -> "Future[Result]":
        from .eval.evaluator import evaluate
        return _done(evaluate(job, timer=self.timer))

    def shutdown(self) -> None:
        pass


@dataclass
class _Pending:
    job_id: int
    blob: bytes
    kind: WorkerKind
    timeout_s: float
    future: Future


@dataclass
class _Worker:
    kind: WorkerKind
    process: mp.process.BaseProcess
    conn: object
    log_path: str
    state: str = "starting"  # starting | idle | busy
    since: float = field(default_factory=time.monotonic)
    job: _Pending | None = None
    deadline: float = 0.0
    log_offset: int = 0


class PoolExecutor:
    """``workers`` isolated processes evaluating jobs, each with a time and memory limit."""

    def __init__(self, workers: int = 2, initializer: str | None = None,
                 start_timeout_s: float = 180.0):
        """``initializer``: 'module:function' each worker calls at start (e.g. registering
        a test backend); it is imported after the worker's environment is set."""
        from .eval.lockdown import not_dumpable
        not_dumpable()  # what holds the run's results: its memory closed to candidates
        self.workers = workers
        self.initializer = initializer
        self.start_timeout_s = start_timeout_s
        self._ctx = mp.get_context("spawn")
        self._lock = threading.Lock()
        self._pending: deque[_Pending] = deque()
        self._pool: list[_Worker] = []
        self._ids = itertools.count()
        self._retired: list[tuple[mp.process.BaseProcess, float]] = []
        self._closed = False
        self._logs = tempfile.mkdtemp(prefix="kdsl-workers-")
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._settled: list[tuple[Future, Result]] = []  # resolved outside the lock
        self._thread = threading.Thread(target=self._loop, name="kdsl-pool", daemon=True)
        self._thread.start()

    # ---- interface ----
    def submit(self, job: EvalJob) -> "Future[Result]":
        try:
            blob = pickle.dumps(job)
        except Exception as e:
            return _done(Result.failure("worker", f"the job cannot be sent to a worker: {e}"))
        future: Future = Future()
        with self._lock:
            if self._closed:
                return _done(Result.failure("worker", "the executor is shut down"))
            self._pending.append(_Pending(next(self._ids), blob, WorkerKind.of(job.config),
                                          job.config.timeout_s, future))
        self._wake()
        return future

    def shutdown(self) -> None:
        """Stop every worker; jobs not finished by then get a worker failure."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake()
        if threading.current_thread() is not self._thread:  # a done-callback may call this
            self._thread.join()
            os.close(self._wake_r)
            os.close(self._wake_w)
            shutil.rmtree(self._logs, ignore_errors=True)

    def __enter__(self) -> "PoolExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # ---- the dispatcher thread ----
    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:  # full (a wake-up is pending anyway) or closed
            pass

    def _settle(self, future: Future, result: Result) -> None:
        self._settled.append((future, result))

    def _resolve(self) -> None:
        """Set settled futures' results, outside the lock: a callback may submit again."""
        with self._lock:
            settled, self._settled = self._settled, []
        for future, result in settled:
            if not future.done():
                future.set_result(result)

    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._closed:
                        break
                    self._dispatch()
                    waitables = [self._wake_r]
                    for w in self._pool:
                        waitables += [w.conn, w.process.sentinel]
                    timeout = self._next_deadline()
                    if self._retired:
                        timeout = 1.0 if timeout is None else min(timeout, 1.0)
                ready = wait(waitables, timeout)
                with self._lock:
                    if self._wake_r in ready:
                        os.read(self._wake_r, 4096)
                    self._collect(ready)
                    self._expire()
                    self._reap()
                self._resolve()
        except BaseException as e:  # a bug here must not leave futures hanging
            with self._lock:
                self._fail_everything(f"executor failed: {type(e).__name__}: {e}")
            self._resolve()
            raise
        with self._lock:
            self._fail_everything("the executor was shut down before the job finished")
        self._resolve()

    def _dispatch(self) -> None:
        unplaced: dict[WorkerKind, int] = {}
        for p in list(self._pending):
            w = next((w for w in self._pool if w.kind == p.kind and w.state == "idle"), None)
            if w is None:
                unplaced[p.kind] = unplaced.get(p.kind, 0) + 1
                continue
            self._pending.remove(p)
            self._send(w, p)
        for kind, n in unplaced.items():
            n -= sum(1 for w in self._pool if w.kind == kind and w.state == "starting")
            while n > 0:
                if len(self._pool) >= self.workers:
                    other = next((w for w in self._pool if w.state == "idle"), None)
                    if other is None:
                        break
                    self._stop(other)
                self._start(kind)
                n -= 1

    def _start(self, kind: WorkerKind) -> None:
        parent, child = self._ctx.Pipe()
        fd, log_path = tempfile.mkstemp(dir=self._logs, suffix=".log")
        os.close(fd)
        cpus = max(1, _host_cpus() // max(1, self.workers))
        process = self._ctx.Process(target=worker.main, args=(child, kind, log_path,
                                                              self.initializer, cpus),
                                    name=f"kdsl-worker-{kind.device}", daemon=True)
        process.start()
        child.close()
        self._pool.append(_Worker(kind, process, parent, log_path))

    def _send(self, w: _Worker, p: _Pending) -> None:
        w.log_offset = os.path.getsize(w.log_path)
        try:
            w.conn.send((p.job_id, p.blob))
        except OSError:
            self._pending.appendleft(p)  # it died idle; the job waits for another worker
            return
        w.state, w.job, w.since = "busy", p, time.monotonic()
        w.deadline = w.since + p.timeout_s

    def _next_deadline(self) -> float | None:
        now, soonest = time.monotonic(), None
        for w in self._pool:
            due = w.deadline if w.state == "busy" else \
                w.since + self.start_timeout_s if w.state == "starting" else None
            if due is not None:
                soonest = due if soonest is None else min(soonest, due)
        return None if soonest is None else max(0.0, soonest - now)

    def _collect(self, ready) -> None:
        for w in list(self._pool):
            if w.conn in ready:
                try:
                    message = w.conn.recv()
                except (EOFError, OSError):
                    message = None
                if message is not None:
                    self._on_message(w, message)
        for w in list(self._pool):
            if w in self._pool and not w.process.is_alive():
                while w in self._pool and w.conn.poll():  # what it said before it died
                    try:
                        self._on_message(w, w.conn.recv())
                    except (EOFError, OSError):
                        break
                if w in self._pool:
                    self._on_death(w, self._describe_exit(w.process.exitcode))

    def _on_message(self, w: _Worker, message) -> None:
        if message[0] == "ready":
            w.state, w.since = "idle", time.monotonic()
            return
        _, job_id, result, retire = message
        if w.job is not None and w.job.job_id == job_id:
            self._settle(w.job.future, result)
        w.job, w.state = None, "idle"
        if retire:
            self._stop(w)

    def _on_death(self, w: _Worker, why: str) -> None:
        self._pool.remove(w)
        log = self._log_tail(w)
        if w.state == "busy" and w.job is not None:
            self._settle(w.job.future, Result.failure("worker", why, worker_log=log))
        elif w.state == "starting":
            p = next((p for p in self._pending if p.kind == w.kind), None)
            if p is not None:
                self._pending.remove(p)
                self._settle(p.future, Result.failure("worker", f"the worker failed to start: "
                                                                f"{why}", worker_log=log))
        self._discard(w)

    def _expire(self) -> None:
        now = time.monotonic()
        for w in list(self._pool):
            if w.state == "busy" and now >= w.deadline:
                self._kill(w)
                self._on_death(w, f"timed out after {w.job.timeout_s:g}s")
            elif w.state == "starting" and now >= w.since + self.start_timeout_s:
                self._kill(w)
                self._on_death(w, f"not ready after {self.start_timeout_s:g}s")

    def _describe_exit(self, code: int | None) -> str:
        if code is None:
            return "the worker vanished"
        text = confine.exit_text(code)
        return f"worker {text}" if code >= 0 else text

    def _log_tail(self, w: _Worker) -> str:
        try:
            with open(w.log_path, "rb") as f:
                f.seek(w.log_offset)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return text[-LOG_TAIL:]

    def _kill(self, w: _Worker) -> None:
        if w.process.is_alive():
            w.process.kill()
        w.process.join(5)

    def _stop(self, w: _Worker) -> None:
        """Retire an idle worker: ask it to exit; it is reaped later, never waited on here."""
        try:
            w.conn.send(None)
        except OSError:
            pass
        self._pool.remove(w)
        self._discard(w)
        self._retired.append((w.process, time.monotonic() + RETIRE_GRACE_S))

    def _reap(self, wait_s: float = 0.0) -> None:
        for process, kill_at in list(self._retired):
            process.join(wait_s)
            if process.is_alive() and time.monotonic() >= kill_at:
                process.kill()
                process.join(1)
            if not process.is_alive():
                self._retired.remove((process, kill_at))

    def _discard(self, w: _Worker) -> None:
        w.conn.close()
        try:
            os.unlink(w.log_path)
        except OSError:
            pass

    def _fail_everything(self, why: str) -> None:
        for p in self._pending:
            self._settle(p.future, Result.failure("worker", why))
        self._pending.clear()
        for w in list(self._pool):
            if w.job is not None:
                self._settle(w.job.future, Result.failure("worker", why))
                self._kill(w)
            elif w.state == "starting":  # still importing; nothing of its own to finish
                self._kill(w)
            else:
                try:
                    w.conn.send(None)
                except OSError:
                    pass
        for w in list(self._pool):
            w.process.join(5)
            if w.process.is_alive():
                self._kill(w)
            self._pool.remove(w)
            self._discard(w)
        for process, _ in self._retired:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join(1)
        self._retired.clear()


def _host_cpus() -> int:
    """The CPUs this process may run on (all of the machine's where that is not known)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
