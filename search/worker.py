"""A long-lived evaluation worker process, as the pool starts it (spawn, never fork).

The worker's environment is fixed before anything heavy is imported: a worker
for device 'cpu' runs with ``TRITON_INTERPRET=1`` (Triton kernels then run in
the interpreter; Triton reads the variable when a kernel is decorated) and sees
no GPU; a 'cuda' worker runs with ``TRITON_INTERPRET`` removed. This module
(and what it imports: ``verdict``, ``result``) uses only the standard library at its top, so nothing imports triton before
the environment is set. A CPU worker's address space is limited (RLIMIT_AS).

Protocol on the pipe: the worker sends ``("ready", pid)`` once torch and the
evaluator are imported; then it receives ``(job_id, pickled EvalJob)`` or
``None`` (stop) and answers ``("result", job_id, Result, retire)``. ``retire``
is True after an out-of-memory job or a broken CUDA context: the worker exits
and the pool starts a fresh one. stdout and stderr go to a log file the pool
reads after a crash; a hang dumps every thread's stack there just before the
pool's deadline.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from dataclasses import dataclass

from .eval import confine  # standard library only, like this module
from .eval.verdict import picklable, verdict  # (so is this)

TRACEBACK_MARGIN_S = 1.0


@dataclass(frozen=True)
class WorkerKind:
    """What a worker is set up for; jobs go only to workers of their kind."""
    device: str
    memory_mb: int | None  # RLIMIT_AS; CPU workers only (CUDA maps far more than it uses)

    @staticmethod
    def of(config) -> "WorkerKind":
        return WorkerKind(config.device, config.memory_mb if config.device == "cpu" else None)

    def environment(self, cpus: int | None = None) -> dict[str, str | None]:
        """Variables to set (None: remove) in the worker before any import. ``cpus``: the
        host's CPUs shared among the pool's workers, which bounds torch.compile's pool of
        compile processes (``compile_threads``; one a CPU of the host by default, in every
        worker). On an H100 host of 16 CPUs (2026-12-06), with that default in each of five
        workers, honest kernels' timed steps read 1.8-10.8 ms a call over their own timers
        and two were rejected as suspect; with three each, the same kernels were not. The
        candidates' OpenMP wait policy (``zygote.SERVER_ENVIRONMENT``) is the worker's own
        too, read by its torch at the import: a baseline timed in the worker then waits as
        the candidates do, and the worker's idle threads do not spin on the cores a
        candidate is timed on. A value the user set stands."""
        from .eval.zygote import SERVER_ENVIRONMENT
        env: dict[str, str | None] = {k: v for k, v in SERVER_ENVIRONMENT.items()
                                      if k not in os.environ}
        if cpus and "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
            env["TORCHINDUCTOR_COMPILE_THREADS"] = str(max(1, cpus))
        if self.device == "cpu":
            return {**env, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
        return {**env, "TRITON_INTERPRET": None}



def main(conn, kind: WorkerKind, log_path: str, initializer: str | None,
         cpus: int | None = None) -> None:
    for name, value in kind.environment(cpus).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    # the pool starts workers as daemons (none outlives the pool), and a daemon may not
    # start processes; this worker's candidates run in processes of their own, which die
    # with it (PR_SET_PDEATHSIG) and which the evaluator stops itself
    import multiprocessing
    multiprocessing.current_process().daemon = False
    confine.redirect_output(log_path)
    confine.limit(kind.memory_mb)
    confine.die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    import faulthandler
    faulthandler.enable()
    if initializer:
        module, _, fn = initializer.partition(":")
        getattr(__import__(module, fromlist=[fn]), fn)()
    import torch  # noqa: F401 - imported once here, not inside the first job's deadline

    from .eval.evaluator import evaluate
    from .eval.sandbox import start_spare
    start_spare(kind.device, kind.memory_mb)  # the first job's candidate process
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        job_id, blob = message
        result, retire = _run(blob, evaluate)
        conn.send(("result", job_id, result, retire))
        if retire:
            return


def _run(blob: bytes, evaluate):
    import faulthandler

    from .result import Result
    try:
        job = pickle.loads(blob)
    except Exception as e:
        return Result.failure("worker", f"job could not be unpickled: {e}"), False
    timeout = job.config.timeout_s
    alarm = threading.Timer(max(timeout - TRACEBACK_MARGIN_S, timeout * 0.9), _dump_stacks)
    alarm.daemon = True
    alarm.start()
    try:
        result = evaluate(job)
    finally:
        alarm.cancel()
    sys.stdout.flush()
    sys.stderr.flush()
    result, why = verdict(job, result)
    if job.config.device == "cuda" and why is None:
        _release_cached_memory()
    return picklable(result), why is not None


def _dump_stacks() -> None:
    """Just before the pool times the job out: the candidate process's threads (where the
    kernel hangs) and this process's (where the judge waits), into this worker's log."""
    import faulthandler
    import time

    from .eval.sandbox import ask_open_stacks, print_open_stacks
    asked = ask_open_stacks()  # first: they write while the judge's are written
    print("Timeout: the job is about to be timed out; the judge's threads:", file=sys.stderr,
          flush=True)
    faulthandler.dump_traceback(all_threads=True)
    time.sleep(0.1)
    print_open_stacks(asked, sys.stderr)


def _release_cached_memory() -> None:
    """Give the GPU memory torch keeps cached back, so many workers fit on one card."""
    try:
        import torch
        torch.cuda.empty_cache()
    except Exception:  # a broken context is the verdict's to judge, not this
        pass
