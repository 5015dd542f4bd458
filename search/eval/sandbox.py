"""The judge's side of the candidate process: start it, send it work, read its verdicts.

A ``Sandbox`` is one candidate process (``candidate_main``), used for one candidate
and then stopped. It is forked from a server that has imported torch (``zygote``); what
is left to it (the backends, and on a GPU Triton and a CUDA context, 1-3 s on the H200
host) is done ahead: the judge keeps one spare started, ``open_sandbox`` takes it and
starts the next, which then gets ready while this evaluation runs.

``RemoteKernel`` is the candidate as the correctness and timing stages see it: a
callable ``kernel(ins, outs, sizes)`` plus ``time``, whose calls the judge asks for one
at a time and times on its own clock as well (``walls``). The judge's own
tensors go to the candidate, in memory the judge owns (CUDA tensors through CUDA IPC;
CPU tensors moved into shared memory in place, once), so what the judge checks is what
the candidate wrote, where it wrote it. Between requests the process is
stopped (SIGSTOP): nothing it left running on the host can write into that memory while
the judge reads it, or work while the judge times the baseline; and on a GPU a timed
request's clock runs until the card has nothing of it left to run (``drain_card``).
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.util  # noqa: F401 - Finalize
import os
import shutil
import signal
import statistics
import tempfile
import time
import weakref

from . import (candidate_main, confine, fd_passing, ipc_pool, lockdown, replies, spin, stopping,
               timed_calls, zygote)

READY_TIMEOUT_S = 300.0
ARENA_MAX_BYTES = 256 << 20  # cases up to this size go through the arena
ARENA_MIN_BYTES = 1 << 20
ARENA_ALIGN = 256
LOG_TAIL = 16000
PROBES = 12  # steps of timed calls of nothing, asked of a fresh process: what a step costs
PROBES_KEPT = 10  # the last ones (the first calls of a timer can be slow: a CUDA flush buffer)
PROBE_CALLS = 8  # calls in the longer probe step: a call's own cost apart from the step's
# how long the judge works before each probe, the process stopped (``_judge_work``), as it
# does between two timed steps (the inputs varied, the outputs kept: 1.5-85 ms a step on an
# H100). A process stopped that long wakes, answers and stops more slowly than one asked
# again at once, its cores idle meanwhile, and the probes asked back to back missed that:
# on an H100 (2026-12-07, ``bench/step_costs.py``, nine specs) the request reached the
# candidate in 0.04-0.08 ms at a probe and 0.12-0.24 at a step, its reply the judge in
# 0.05-0.09 against 0.11-0.19. With 8 ms of the judge's work before each probe they took
# 0.10-0.21 and 0.10-0.13, and the fastest probe rose by 0.15-0.2 ms, what every honest
# step had paid on top of its calls. A forger gains nothing from it that a step does not
# cost it too: it is stopped through the judge's work as through a probe's. None on the
# CPU: there the judge's work between steps runs on the candidate's cores, which do not
# idle. With the gap there (and, then, the median bound of the request's steps, since put
# back to the least on the CPU) a forged timer claimed 0.009 ms for its 0.11 ms softmax,
# one run in five (``tests/attacks``); which of the two let it through was not isolated.
PROBE_GAP_MS = {"cuda": 8.0, "cpu": 0.0}
# the most a step's subtracted cost may stand above its fastest probe (``step_costs``). None
# on the CPU, where the baseline is timed on the judge's clock as candidates are (it pays
# what they pay) and kernels of 0.1 ms run two calls a step: a quarter of a millisecond
# a step let a forged timer claim 0.02 ms for its 0.11 ms softmax (``tests/attacks``,
# clock_slack_walk_once.c, one run in three). On a GPU a forged timer could already skip
# the step's wait (``cuda_timer.STEP_WAIT_MS``), and the baseline is timed by its events.
TRIP_SPREAD_MS = {"cpu": 0.0, "cuda": 0.25}


# A timed request's clock on a GPU ends once a write of the judge's own comes back this fast
# (``drain_card``): the card had nothing else to run. The judge's code in a candidate's
# process syncs before every reply, so an honest step's first write pays only the switch
# between the two contexts (0.15 ms on an H100, ``bench/wait_clock.py``). A process still
# running work on the card after DRAIN_MAX_MS is stopped, its candidate failed.
DRAIN_QUIET_MS = 0.5
DRAIN_MAX_MS = 1000.0


def drain_card(scratch) -> float | None:
    """Writes of the judge's own into ``scratch`` on the GPU, each synced, until one takes
    at most ``DRAIN_QUIET_MS``: the ms it took, or None if the card still ran other work
    after ``DRAIN_MAX_MS``. Work that a candidate queued and did not wait for runs on after
    its reply, while its process is stopped; the card switches between contexts when the
    running one runs dry or at the end of its time slice, so each write waits for that work
    or a slice of it, and the writes go on until it is done. (This rests on a time slice
    longer than DRAIN_QUIET_MS; ``bench/unsynced_reply.py`` measures it.)"""
    import torch
    start = time.perf_counter()
    while True:
        before = time.perf_counter()
        scratch.add_(1)
        torch.cuda.synchronize()
        now = time.perf_counter()
        if (now - before) * 1e3 <= DRAIN_QUIET_MS:
            return (now - start) * 1e3
        if (now - start) * 1e3 > DRAIN_MAX_MS:
            return None


def step_costs(ones: list[float], manys: list[float], calls: int,
               spread_ms: float) -> tuple[float, float]:
    """(a step's own cost, a call's) from the probes' extras (wall less samples) of steps of
    one call and of ``calls`` calls: the median of each, but never more than
    ``TRIP_SPREAD_MS`` above the fastest. Whatever is subtracted from a wall is time the
    candidate could have worked unclocked; what is not subtracted, an honest kernel pays.
    The fastest probe was subtracted until 2026-12-07: on an H100 the probes of a step
    spread 0.1-0.3 ms above their fastest, the timed steps as much, and every honest
    kernel's figure carried that spread over its calls (0.08 ms a call of a 0.18 ms
    softmax, two calls a step). Their median stands where the steps' does, once the probes
    follow the judge's work as steps do (``PROBE_GAP_MS``). The cap is for a busy host:
    on the 2-core VM, with two other processes busy on its cores, the median read 3.6 ms
    against 0.12 ms on a quiet host, and a worker thread left running after the reply
    computed a step's outputs of a softmax inside that allowance (accepted at 0.05 ms a
    call against its honest twin's 0.55; since then the clock also runs until every task
    is seen stopped)."""
    one = min(statistics.median(ones), min(ones) + spread_ms)
    many = min(statistics.median(manys), min(manys) + spread_ms)
    call = max(0.0, (many - one) / (calls - 1))
    return max(0.0, one - call), call


class CandidateFault(Exception):
    """The candidate raised, tampered with what it was handed, or its process died."""


class Sandbox:
    def __init__(self, device: str, memory_mb: int | None):
        lockdown.not_dumpable()  # this process is a judge: its memory closed to candidates
        self.device, self.memory_mb = device, memory_mb
        self._ctx = zygote.context()
        fd, self.log_path = tempfile.mkstemp(prefix="kdsl-candidate-", suffix=".log")
        os.close(fd)
        self.conn, child = self._ctx.Pipe()
        self.process = self._ctx.Process(
            target=candidate_main.main,
            args=(child, device, memory_mb, self.log_path, dict(os.environ)),
            name=f"kdsl-candidate-{device}", daemon=True)
        self.process.start()
        child.close()
        self.pid = None
        self.started = time.monotonic()
        self.last_wall_ms = 0.0  # the latest request's round trip, on the judge's clock
        self.trip_ms = 0.0       # a step's own cost, measured before any candidate code
        self.call_ms = 0.0       # and a timed call's own cost within a step (the timer)
        self.confinement: dict = {}  # what the process gave up (``lockdown``), as it says
        self._scratch = None     # the judge's own memory on the GPU, for ``_judge_work``
        self._files: dict = {}   # the memory files passed to it (``fd_passing.shrunk``)

    @property
    def kind(self) -> tuple:
        return (self.device, self.memory_mb)

    def ready(self) -> None:
        """Wait for the process to have imported torch (at most READY_TIMEOUT_S)."""
        if self.pid is not None:
            return
        if not self.conn.poll(READY_TIMEOUT_S):
            raise CandidateFault(f"the candidate process was not ready after "
                                 f"{READY_TIMEOUT_S:g}s")
        tag, self.pid, self.confinement = self._receive()
        assert tag == "ready", tag
        if "proc" in self.confinement:  # how a GPU candidate's /proc is confined here: the
            os.environ[candidate_main.CUDA_PROC_ENV] = self.confinement["proc"]  # next
            # processes take it without trying again (``candidate_main._cuda_proc``)
        self._settle(stopping.halt(self.pid))
        from .device_lock import exclusive
        # a GPU's probes hold it alone, as the timed runs they stand for do: beside another
        # process's correctness cases (time-sliced with them) a call of nothing read 9.8 ms
        # on an H200, and a step's cost so measured left the judge's clock no bound at all.
        # On the CPU the next spare, started as this process was taken, is importing on the
        # same cores: paused, as it is while anything is timed
        with exclusive(self.device), spares_paused(self.device):
            self.trip_ms, self.call_ms = self._probe()

    def _probe(self) -> tuple[float, float]:
        """(a step's own cost, a timed call's), from steps of one call and of PROBE_CALLS
        calls of nothing (the judge's clock less the process's own samples), asked while the
        process is still clean: what a step adds to its calls, which no candidate code has
        had a chance to change."""
        extra = {1: [], PROBE_CALLS: []}
        for _ in range(PROBES):
            for n in extra:
                self._judge_work()
                _, got = self.call("probe", n)
                extra[n].append(max(0.0, self.last_wall_ms - sum(got)))
        return step_costs(extra[1][-PROBES_KEPT:], extra[PROBE_CALLS][-PROBES_KEPT:],
                          PROBE_CALLS, TRIP_SPREAD_MS.get(self.device, 0.0))

    def _judge_work(self) -> None:
        """What comes before every timed step: the judge's own work on the device (the
        step's inputs varied and its outputs poisoned, ``RemoteKernel.time``), then a sync,
        and on the host for ``PROBE_GAP_MS``.
        On a GPU the step's first call then waits for the card to switch from the judge's
        context to the candidate's, so a probe without it measured a step too cheap: on an
        H100 (2026-12-06, ``bench/wait_clock.py``) a 1 ms wait and a sync took 1.13 ms on
        the host's wall after another process's small write, 0.98 ms after one of its own."""
        until = time.perf_counter() + PROBE_GAP_MS.get(self.device, 0.0) / 1e3
        self._write_on_card()
        while time.perf_counter() < until:  # (busy, as the judge is between steps)
            pass

    def _write_on_card(self) -> None:
        """A small write of the judge's own on the GPU, and a sync (nothing elsewhere)."""
        if self.device != "cuda":
            return
        import torch
        self._card_scratch().add_(1)
        torch.cuda.synchronize()

    def _card_scratch(self):
        if self._scratch is None:
            import torch
            self._scratch = torch.zeros(1024, device="cuda")
        return self._scratch

    def call(self, *message):
        """Send one request; its reply, or CandidateFault for what went wrong."""
        self.ready()
        # the clock starts before the wake-up: waking every task of a process costs about a
        # microsecond a thread, and a process of thousands of idle threads had a few
        # milliseconds unclocked in which a task woken first could work
        start = time.perf_counter()
        stopping.resume(self.pid)  # (its group only: what left it stays stopped)
        try:
            for fd, key, size in fd_passing.send(self.conn, message):
                self._files[key] = (fd, size)
        except (OSError, ValueError) as e:
            raise CandidateFault(f"the candidate process is gone: {self._death(e)}") from None
        if spin.polls(self.device, message):
            spin.judge_wait(self.conn)
        reply = self._receive()
        outside = stopping.halt(self.pid)
        if outside and self.confinement.get("seccomp") == "on":  # (stopped; killed with it)
            self.stop()
            raise CandidateFault(f"its processes {sorted(outside)} left its process "
                                 f"group, which its seccomp filter should have refused")
        # the clock ends once every task is seen stopped, not at the signal: a group's stop
        # is taken by one thread, which passes it on, and until then the others run. A
        # thread spinning on the core of the taking thread (made SCHED_IDLE) worked on after
        # the signal, unclocked (``stopping``); so a step's wall is all the time the
        # candidate could have worked in. The stops, the sweep and the wait cost the judge a
        # /proc read or two a thread (0.1-0.3 ms a step on the 2-core VM), which the probes
        # of the clean process pay too and ``trip_ms`` takes off
        self._settle(outside)
        if message[0] in spin.TIMED and self.device == "cuda" and \
                drain_card(self._card_scratch()) is None:
            # (and once the card has run what the candidate queued; the probes pay the
            # drain too, an honest step only the switch between contexts)
            self.stop()
            raise CandidateFault(f"its process left work running on the GPU for more than "
                                 f"{DRAIN_MAX_MS:g} ms after its reply")
        self.last_wall_ms = (time.perf_counter() - start) * 1e3
        cut = fd_passing.shrunk(self._files)
        if cut:  # (before the judge reads any of that memory again)
            self.stop()
            raise CandidateFault(f"tampering: {cut}")
        if stopping.exited(self.pid):
            # what answered was a process it forked, below no process the judge lists
            self.stop()
            raise CandidateFault("the candidate's process exited during the request; its "
                                 "reply may have come from a process it forked")
        tag = reply[0]
        if tag == "raised":
            raise CandidateFault(f"kernel raised {reply[1]}")
        if tag == "tampered":
            raise CandidateFault(f"tampering: {reply[1]}")
        return reply

    def _settle(self, outside) -> None:
        """Wait until the candidate is stopped whole (``stopping``): its group, and what
        left it; a process that does not stop is killed."""
        try:
            stopping.settle(self.pid, outside)
        except stopping.DidNotStop as e:
            self.stop()
            raise CandidateFault(f"its process did not stop: {e}") from None

    def _receive(self):
        try:
            return replies.receive(self.conn)
        except replies.Refused as e:
            self.stop()  # what it sends next cannot be trusted to line up with a request
            raise CandidateFault(f"tampering: {e}") from None
        except (EOFError, OSError) as e:
            raise CandidateFault(f"the candidate process died: {self._death(e)}") from None

    def _death(self, e) -> str:
        self.process.join(2)
        code = self.process.exitcode
        what = type(e).__name__ if code is None else confine.exit_text(code)
        tail = self.log_tail()
        fatal = tail.rfind("Fatal Python error")  # faulthandler's report: where it died
        shown = tail[fatal:fatal + 1500] if fatal >= 0 else tail[-600:]
        # the log's last line (a traceback's exception) first: a one-line report keeps it
        last = next((ln.strip() for ln in reversed(tail.splitlines()) if ln.strip()), "")
        what += f" ({last[:300]})" if last and fatal < 0 else ""
        return what + (f"; its log: {shown.strip()}" if shown.strip() else "")

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - LOG_TAIL))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Kill the process (a candidate is never given a second chance) and forget it."""
        _OPEN.discard(self)
        if self.pid is not None:
            stopping.kill(self.pid)
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
        if self.process.pid:  # where its C builds went
            from kdsl.backends.c.build import private_dir
            shutil.rmtree(private_dir(self.process.pid), ignore_errors=True)


_SPARE: dict[tuple, Sandbox] = {}
_SPARE_FINALIZER: list = []


_OPEN: set = set()  # the sandboxes serving a candidate now (not the spare)
_PAUSED: set = set()  # the spares ``spares_paused`` holds stopped now


def open_sandbox(device: str, memory_mb: int | None) -> Sandbox:
    """A fresh candidate process: the spare started ahead when there is one of this kind;
    the next spare starts now, so it has this whole evaluation to get ready."""
    kind = (device, memory_mb)
    box = _SPARE.pop(kind, None)
    if box is not None and not box.process.is_alive():
        box.stop()
        box = None
    box = box or Sandbox(device, memory_mb)
    start_spare(device, memory_mb)
    _OPEN.add(box)
    return box


def ask_open_stacks() -> list:
    """Each candidate serving now dumps every thread's Python stack into its own log
    (SIGUSR1, faulthandler); the sandboxes asked, for ``print_open_stacks``."""
    boxes = [b for b in _OPEN if b.process.is_alive()]
    for box in boxes:
        stopping.signal_pid(box.process.pid, signal.SIGUSR1)
        stopping.signal_pid(box.process.pid, signal.SIGCONT)  # (handled once resumed)
    return boxes


def print_open_stacks(boxes: list, out) -> None:
    """The end of each asked candidate's log (its stacks, once written) to ``out``."""
    for box in boxes:
        tail = box.log_tail().strip()
        print(f"--- the candidate process ({box.process.pid}), its log's end:\n"
              f"{tail or '(empty)'}", file=out, flush=True)


def start_spare(device: str, memory_mb: int | None) -> None:
    """Start the next candidate process now, so that it is ready when a job comes."""
    kind = (device, memory_mb)
    for other in [k for k in _SPARE if k != kind]:  # one spare at a time
        _SPARE.pop(other).stop()
    if kind not in _SPARE:
        if not _SPARE_FINALIZER:
            # stopped (and its log removed) when this process exits, a pool worker included
            _SPARE_FINALIZER.append(mp.util.Finalize(None, stop_spares, exitpriority=10))
        _SPARE[kind] = Sandbox(device, memory_mb)


@contextlib.contextmanager
def spares_paused(device: str):
    """The spare candidate processes stopped (SIGSTOP) while ``device`` is timed, where
    they share the cores being timed: on the 2-core CI VM a spare importing torch during
    the timed runs cost an OpenMP kernel a scheduler slice a call (0.03 ms calls ran 7.7 ms
    apiece on the judge's clock). A GPU's timing needs no cores of theirs."""
    # (re-entrant: a block inside another pauses only what the outer one did not, and
    # continues only what it paused itself. Sandbox.ready pauses the spare while it
    # probes, inside the timing stage's block when the judge opens the baseline's
    # process: its exit once continued the spare the stage had paused, which then
    # imported torch through the baseline's timed calls, 0.1 ms judged at 8-10 ms)
    paused = [box for box in _SPARE.values() if device == "cpu" and box.process.is_alive()
              and box not in _PAUSED]
    for box in paused:
        stopping.signal_pid(box.process.pid, signal.SIGSTOP)
        _PAUSED.add(box)
    try:
        yield
    finally:
        for box in paused:
            _PAUSED.discard(box)
            stopping.signal_pid(box.process.pid, signal.SIGCONT)


def stop_spares() -> None:
    for box in _SPARE.values():
        box.stop()
    _SPARE.clear()


class RemoteKernel:
    """The candidate, called from the judge: ``kernel(ins, outs, sizes)`` and ``time``."""

    def __init__(self, box: Sandbox):
        self.box = box
        self.arena = None  # one shared buffer, sent once, for the small cases
        self.walls = None  # the latest timing request's steps on the judge's clock (ms)
        self.step_extras = None  # and each step's wall less what its calls claimed
        self.shares = None  # the calls in each timed call's step
        self.sent = None  # which buffers the candidate's process holds now

    def __call__(self, ins: dict, outs: dict, sizes: dict) -> None:
        tensors = [*ins.values(), *outs.values()]
        need = sum(_span(t) for t in tensors)
        if need > ARENA_MAX_BYTES or not all(t.is_contiguous() for t in tensors) or \
                all(not t.is_cuda and t.is_shared() for t in tensors):  # (sent as they are)
            ipc_pool.confine(tensors)  # (at once: tensors that share a storage keep sharing)
            self.box.call("run", _shared(ins), _shared(outs), dict(sizes))
            return
        # a small case: copied into the arena, sent as offsets. Handing its tensors over
        # one by one cost a file descriptor or an IPC handle each, about a second an
        # evaluation of small cases on the CPU
        arena = self._arena(need, tensors[0].device)
        views, places, at = {}, {}, 0
        for role, group in (("in", ins), ("out", outs)):
            for name, t in group.items():
                views[role, name] = v = arena[at:at + t.numel() * t.element_size()] \
                    .view(t.dtype).view(t.shape)
                v.copy_(t)
                places[role, name] = (at, tuple(t.shape), t.dtype)
                at += _span(t)
        _settle(tensors[0])
        self.box.call("run_in_arena", {n: places["in", n] for n in ins},
                      {n: places["out", n] for n in outs}, dict(sizes))
        for role, group in (("in", ins), ("out", outs)):
            for name, t in group.items():
                t.copy_(views[role, name])

    def _arena(self, need: int, device):
        import torch
        if self.arena is None or self.arena.numel() < need or self.arena.device != device:
            size = max(need, 2 * (self.arena.numel() if self.arena is not None else 0),
                       ARENA_MIN_BYTES)
            with ipc_pool.allocating(device):  # (zeros: its tail is mapped, never written)
                self.arena = torch.zeros(size, dtype=torch.uint8, device=device)
            ipc_pool.confine([self.arena])
            self.box.call("arena", _shared({"arena": self.arena})["arena"])
        return self.arena

    def time(self, sets: list[tuple[dict, dict]], sizes: dict, warmup: int, reps: int,
             poisons: list[tuple[str, str, int]], plan=None) -> list[float]:
        """Timed calls cycling over the buffers ``sets``, asked a step at a time: a step is
        one call on each buffer, and before it the judge varies their inputs and poisons
        their outputs, after it keeps the outputs the plan checks (``timed_calls``), here,
        while the candidate's process is stopped. The samples are the process's own;
        ``walls[i]`` is the judge's clock on the step of timed call i, ``shares[i]`` the
        number of calls in that step (``trip_ms`` and ``call_ms``: a step's own cost and a
        call's); ``step_extras`` each step's wall less its samples and its calls' own cost."""
        calls = timed_calls.Calls(None, sets, sizes, poisons, plan)
        tensors = [t for i, o in sets for t in (*i.values(), *o.values())]
        # mapped once a stage (each new mapping faults its pages in); known by weak
        # references, since an id alone can come back for a new tensor once the old is freed
        if self.sent is None or len(self.sent) != len(tensors) or \
                any(r() is not t for r, t in zip(self.sent, tensors)):
            ipc_pool.confine(tensors)
            self.box.call("sets", [(_shared(i), _shared(o)) for i, o in sets], dict(sizes))
            self.sent = [weakref.ref(t) for t in tensors]
        samples, walls, shares, extras = [], [], [], []
        total = warmup + reps
        for first in range(0, total, len(sets)):
            step = list(range(first, min(total, first + len(sets))))
            ks = [calls.prepare(c) for c in step]
            _settle(next(iter(sets[ks[-1]][1].values())))
            _, got = self.box.call("steps", ks)
            if not (isinstance(got, list) and len(got) == len(step) and
                    all(isinstance(ms, float) and 0 < ms < float("inf") for ms in got)):
                raise CandidateFault("the candidate process answered a step of timed calls "
                                     "with something other than its samples")
            wall = self.box.last_wall_ms
            extras.append(wall - sum(got) - len(step) * self.call_ms)
            for c, ms in zip(step, got):
                calls.keep(c)
                if c >= warmup:
                    samples.append(ms)
                    walls.append(wall)
                    shares.append(len(step))
        self.walls, self.shares, self.step_extras = walls, shares, extras
        return samples

    @property
    def trip_ms(self) -> float:
        return self.box.trip_ms

    @property
    def call_ms(self) -> float:
        return self.box.call_ms


def _shared(tensors: dict) -> dict:
    """The tensors, where the candidate process can map them: CPU storage moved into shared
    memory in place (the same tensor objects, once); CUDA memory as it is, which each
    message's sender has confined to the pool first (``ipc_pool.confine``, once for all of
    a message's tensors: IPC maps whole segments)."""
    for t in tensors.values():
        if not t.is_cuda and not t.is_shared():
            t.share_memory_()
    for t in tensors.values():
        _settle(t)
        break
    return dict(tensors)


def _settle(t) -> None:
    """The judge's own queued work on the GPU done before another process reads the memory
    (the candidate's stream knows nothing of the judge's)."""
    if t.is_cuda:
        import torch
        torch.cuda.synchronize(t.device)


def _span(t) -> int:
    """Bytes a tensor takes in the arena, rounded up to keep every view aligned."""
    n = t.numel() * t.element_size()
    return (n + ARENA_ALIGN - 1) // ARENA_ALIGN * ARENA_ALIGN
