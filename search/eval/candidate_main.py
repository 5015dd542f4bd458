"""The candidate process: one candidate's code, run on tensors the judge owns.

Started by ``sandbox`` for one candidate only, forked from a clean server that has
imported torch (``zygote``), and never given another. It holds nothing worth attacking: no reference, no oracle, no judge, no
baseline. Its environment is fixed before anything heavy is imported (like the
judge's worker: ``TRITON_INTERPRET=1`` and no GPU for 'cpu'); this module uses only
the standard library at its top for that reason.

Protocol on the pipe, one request and one reply at a time:

- ``("load", backend, op, source, device, linked)``: build the candidate (the backend's
  own build: a compile, then the module or shared object loaded here; ``linked``: the
  digests of what the judge compiled for it) ->
  ``("built", log, meta, can_prepare)`` or ``("build_error", message, log)``.
- ``("prepare", shapes)``: compile ahead for these (sizes, dtype) pairs.
- ``("run", ins, outs, sizes)``: one call -> ``("ok", None)``.
- ``("sets", sets, sizes)``: the (ins, outs) input sets of the timed calls to come.
- ``("steps", [k, ...])``: one timed call on each set ``k`` in order -> ``("ok", [ms,
  ...])``. The judge varies the inputs, poisons the outputs and keeps the outputs it
  checks between steps, in its own process, while this one is stopped; it times each
  step on its own clock too.
- ``("probe", n)``: ``n`` timed calls of nothing -> ``("ok", [ms, ...])``: asked before
  any candidate code is loaded, they give the judge a step's own cost (pipe, signals)
  and a call's (the timer).
- ``None``: exit.

Any request may be answered ``("raised", text)`` (the candidate raised) or
``("tampered", text)`` (it added a key to, or rebound a tensor in, what it was
handed, or set an attribute on a tensor: state that could pay across calls).
Tensors arrive through torch's shared-memory reductions (CPU shared memory, CUDA IPC):
the same memory the judge reads once the reply is in.
"""
from __future__ import annotations

import os
import signal
import sys
import time

from . import allocator, confine, fd_passing, spin  # standard library only, like this module
from .replies import trim  # (so is this)

LOG_CAP_BYTES = 64 << 20  # RLIMIT_FSIZE: the candidate's log, and any file it writes
# ``KDSL_STEP_TRACE=1``: a line on the log for each timed step and probe, for a study of
# what a step costs (``bench/step_costs.py``): when the request was read and the reply sent
# on the host's monotonic clock (the judge's too), and the step's wait. The judge never
# reads it: it comes from the process it judges.
TRACE_ENV = "KDSL_STEP_TRACE"


def environment(device: str) -> dict[str, str | None]:
    """Variables to set (None: remove) before any import; as the judge's worker has them."""
    if device == "cpu":
        return {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    return {"TRITON_INTERPRET": None}


def main(conn, device: str, memory_mb: int | None, log_path: str,
         judge_environment: dict | None = None) -> None:
    """``judge_environment``: the judge's variables when it asked for this process (the
    forkserver it is forked from has them as they were when the server started; cache
    folders and thread counts set since must reach the candidate too)."""
    from .zygote import check, release_server
    release_server()
    refused = check()
    if refused:
        raise SystemExit(refused)
    if judge_environment is not None:
        os.environ.clear()
        os.environ.update(judge_environment)
    for name, value in environment(device).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    confine.redirect_output(log_path)
    confine.limit(memory_mb, file_cap=LOG_CAP_BYTES)
    allocator.keep_freed_memory()  # a kernel's temporaries, a baseline's outputs: reused
    confine.die_with_parent()
    os.setpgid(0, 0)  # a group of its own: the judge stops and kills what it forks with it
    confine.subreaper()  # and what leaves the group stays below it, where the judge looks
    confinement = _lock_down(device)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import faulthandler
    faulthandler.enable()
    # the judge asks where a hanging candidate is (sandbox.dump_open_stacks)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    import torch
    import torch.multiprocessing  # noqa: F401 - the shared-memory reductions for tensors
    _warm(device, torch)
    conn.send(("ready", os.getpid(), confinement))
    host = _Host(device)
    polled = False  # the next request is timed: it is polled for (``spin``)
    traced = os.environ.get(TRACE_ENV) == "1"
    while True:
        try:
            if polled:
                spin.candidate_wait(conn)
            message = fd_passing.receive(conn)
        except (EOFError, OSError):
            return
        if message is None:
            return
        read_at = time.perf_counter()
        polled = spin.polls_after(device, message)
        try:
            reply = host.handle(message)
        except _Tampered as e:
            reply = ("tampered", trim(str(e)))
        except BaseException as e:  # noqa: BLE001 - every failure is the candidate's verdict
            import traceback
            tb = traceback.format_exception(type(e), e, e.__traceback__)
            reply = ("raised", trim(f"{type(e).__name__}: {trim(str(e), 4096)}\n"
                                    f"{''.join(tb[-3:]).rstrip()}"))
        if traced and message[0] in spin.TIMED:
            _trace(message[0], read_at, device)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return
        # a reply can hold tensors of this process; dropping them here lets the judge
        # free its memory (CUDA IPC counts references across processes)
        del reply, message


def _trace(kind: str, read_at: float, device: str) -> None:
    import json

    from .timers import default_timer
    step = getattr(default_timer(device), "last_step", None)
    print("kdsl-step-trace " + json.dumps({"kind": kind, "read_at": read_at,
                                            "reply_at": time.perf_counter(), "step": step}),
          file=sys.stderr)


def _lock_down(device: str) -> dict[str, str]:
    """The process confined (``lockdown``) before anything of the candidate's loads; its
    temporary files go to its private folder, the one it may write (with Triton's kernel
    cache, where Triton compiles). ``KDSL_CONFINE=0`` leaves it unconfined (debugging)."""
    import tempfile

    from kdsl.backends.c.build import private_dir
    from .device_lock import LOCK_DIR_ENV
    # the judges' device locks (flock on a file it could open read-only would hold a GPU's
    # judges), in the judge's temporary folder unless the variable says where
    locks = os.path.join(os.environ.get(LOCK_DIR_ENV) or tempfile.gettempdir(),
                         "kdsl-device-locks")
    private = str(private_dir(os.getpid()))
    os.environ["TMPDIR"] = tempfile.tempdir = private
    if os.environ.get("KDSL_CONFINE", "1") == "0":
        os.makedirs(private, exist_ok=True)
        return {"all": "off: KDSL_CONFINE=0"}
    from . import lockdown
    from .lockdown import lock_down
    triton_cache = os.environ["TRITON_CACHE_DIR"] = candidates_triton_cache()
    try:
        os.makedirs(triton_cache, exist_ok=True)
    except OSError:
        pass
    from multiprocessing import forkserver
    server = getattr(forkserver._forkserver, "_forkserver_address", None)  # (no public handle)
    hidden = ((server,) if server else ()) + (locks,)
    confined = dict(writable=(triton_cache,), hidden=hidden, private_shm=device == "cpu",
                    cuda=device == "cuda")
    proc = _cuda_proc(private, confined) if device == "cuda" else lockdown.PROC_OWN
    report = lock_down(private, proc=proc, **confined)
    if device == "cuda":
        report["proc"] = proc
    # nor can it pass as one of the judge's family to any multiprocessing listener (the
    # key every process multiprocessing starts inherits): it needs none, its requests'
    # descriptors come on its own socket (``fd_passing``)
    import multiprocessing
    multiprocessing.current_process().authkey = os.urandom(32)
    return report


CUDA_PROC_ENV = "KDSL_CUDA_PROC"  # the /proc mode a GPU candidate takes, once known


def _cuda_proc(private: str, confined: dict) -> str:
    """The strictest /proc under which CUDA starts here (``lockdown.PROC_OWN``, else
    ``PROC_ALL_BUT_KERNEL``): the judge's answer when it has one (``CUDA_PROC_ENV``, from
    an earlier process's report), else a forked child's, confined and starting CUDA. (A
    confinement that broke CUDA failed every GPU candidate: this finds it out on the
    machine, once per judge, at the cost of one CUDA start.)"""
    from . import lockdown
    known = os.environ.get(CUDA_PROC_ENV)
    if known in (lockdown.PROC_OWN, lockdown.PROC_ALL_BUT_KERNEL):
        return known
    child = os.fork()
    if child == 0:  # (single-threaded, and CUDA not started: as a candidate is here)
        code = 1
        try:
            report = lockdown.lock_down(private, proc=lockdown.PROC_OWN, **confined)
            import torch
            if all(v == "on" for v in report.values()):
                torch.ones(8, device="cuda").sum().item()
                code = 0
        except BaseException:  # noqa: BLE001 - any failure to start says the same
            pass
        os._exit(code)
    _, status = os.waitpid(child, 0)
    ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    return lockdown.PROC_OWN if ok else lockdown.PROC_ALL_BUT_KERNEL


def candidates_triton_cache() -> str:
    """The Triton kernel cache candidates compile into: a folder beside the judge's own,
    never the same. Triton loads a cached kernel by a hash of its source and options, which
    a candidate can compute for any kernel it can foresee, so one writing the judge's cache
    could plant a slow binary under the key of the baseline's torch.compile kernels."""
    judge = os.environ.get("TRITON_CACHE_DIR") or os.path.join(
        os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache")
    judge = judge.rstrip("/")
    return judge if judge.endswith(CANDIDATES_SUFFIX) else judge + CANDIDATES_SUFFIX


CANDIDATES_SUFFIX = "-kdsl-candidates"


def _warm(device: str, torch) -> None:
    """What every candidate's build would otherwise wait for, done while this process is
    still the spare: the backends imported; on a GPU, Triton and the CUDA context. (On the
    CPU, C candidates never need Triton: an interpreted Triton build imports it itself.)"""
    import kdsl.backends  # noqa: F401
    if device == "cuda":
        try:
            import triton  # noqa: F401
            import triton.language  # noqa: F401
        except ImportError:  # a machine without triton runs the other backends
            pass
        torch.cuda.init()
        torch.empty(1, device="cuda")


class _Tampered(Exception):
    pass


class _Host:
    """What runs the candidate: builds it, calls it, times it; checks what it was handed."""

    def __init__(self, device: str):
        self.device = device
        self.built = None
        self.arena = None
        self.sets, self.sizes = [], {}

    def handle(self, message):
        kind, *args = message
        return getattr(self, f"_{kind}")(*args)

    def _load(self, backend, op, source, device, linked=None):
        """``linked``: {build key: sha256} of what the judge compiled for this source; a C
        build loads a cached object only if it has that digest (``c.build.CACHE_TRUST``)."""
        from kdsl.backends import BuildError
        from kdsl.backends.c import build as c_build
        c_build.CACHE_TRUST = dict(linked or {})
        try:
            self.built = backend.build(op, source, device)
        except BuildError as e:
            return ("build_error", trim(str(e)), trim(e.log or ""))
        return ("built", trim(self.built.log or ""), dict(self.built.meta),
                self.built.prepare is not None)

    def _baseline(self, op, name):
        """The spec's baseline as the kernel (``baseline_kernel``), in a process that has
        loaded no candidate."""
        from .baseline_kernel import BaselineKernel
        # compiled into a Triton cache of its own: the candidates' one holds what earlier
        # candidates wrote there, perhaps under the keys of the baseline's kernels
        own = os.environ["TRITON_CACHE_DIR"] = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                            "triton-baseline")
        os.makedirs(own, exist_ok=True)
        self.built = BaselineKernel(op, name)
        return ("ok", None)

    def _prepare(self, shapes):
        self.built.prepare(shapes)
        return ("ok", None)

    def _run(self, ins, outs, sizes):
        self._call(ins, outs, sizes)
        self._sync()
        return ("ok", None)

    def _arena(self, arena):
        self.arena = arena
        return ("ok", None)

    def _run_in_arena(self, ins, outs, sizes):
        """A call on views of the arena, at the offsets the judge gives."""
        def views(places):
            return {name: self.arena[at:at + _nbytes(shape, dtype)].view(dtype).view(shape)
                    for name, (at, shape, dtype) in places.items()}
        return self._run(views(ins), views(outs), sizes)

    def _sets(self, sets, sizes):
        self.sets, self.sizes = [(dict(ins), dict(outs)) for ins, outs in sets], dict(sizes)
        return ("ok", None)

    def _steps(self, ks):
        """One timed call on each set of ``ks``, in order: their samples. On a GPU the
        step's calls are queued behind one head start (``CudaTimer.each``), not one each:
        the judge subtracts a step's and a call's own costs exactly, and a forged timer
        could work through them, so 0.5 ms a step (1 ms until 2026-12-07) and 0.09 a call
        (the wait; the flush) give less away than 1.15 ms a call (a wait, a sync and the
        flush; H100, 2026-12-06)
        wherever a step has two calls or more, and a step of four calls of a GELU took
        1.9 ms of wall instead of 5.6. What each call was handed is checked as it
        returns."""
        def call(ins, outs):
            handed = (dict(ins), dict(outs))
            self.built.fn(ins, outs, dict(self.sizes))
            _check_handed(ins, outs, handed)
        return ("ok", self._timed([lambda ins=ins, outs=outs: call(ins, outs)
                                   for ins, outs in (self.sets[k] for k in ks)]))

    def _probe(self, n):
        return ("ok", self._timed([lambda: None] * n))

    def _timed(self, fns) -> list[float]:
        """One call of each of ``fns`` on this process's own timer, and a device sync: ms."""
        import torch

        from .timers import default_timer
        with torch.no_grad():
            samples = default_timer(self.device).each(fns)
            self._sync()
        return [float(ms) for ms in samples]

    def _call(self, ins, outs, sizes):
        handed = (dict(ins), dict(outs))
        self.built.fn(ins, outs, dict(sizes))
        _check_handed(ins, outs, handed)

    def _sync(self):
        if self.device == "cuda":
            import torch
            torch.cuda.synchronize()


def _nbytes(shape, dtype) -> int:
    n = dtype.itemsize
    for d in shape:
        n *= d
    return n


def _check_handed(ins: dict, outs: dict, handed) -> None:
    """Nothing added to, or rebound in, the dicts; no attribute left on a tensor."""
    for role, now, before in (("inputs", ins, handed[0]), ("outputs", outs, handed[1])):
        if set(now) != set(before):
            extra = sorted(set(now) ^ set(before))
            raise _Tampered(f"the kernel changed the keys of its {role} dict: {extra}")
        for name, t in before.items():
            if now[name] is not t:
                raise _Tampered(f"the kernel rebound {role}['{name}'] instead of writing "
                                f"into the tensor it was given")
        for name, t in now.items():
            if getattr(t, "__dict__", None):
                raise _Tampered(f"the kernel set attributes on {role}['{name}']: "
                                f"{sorted(t.__dict__)[:5]}")
