"""Stopping, resuming and killing a candidate's processes, whatever it started.

The candidate's process leads a process group of its own and is a subreaper, so what it
forks stays in its group or, if it left the group (``setsid``, refused by the seccomp
filter where that is on), among its descendants. The group is signalled first, in one
call the kernel applies to every member at once; the descendants outside it are found
afterwards, while the group is already stopped. Listing first had left a window the
candidate could stretch at will: a process with thousands of threads (one ``children``
file each) ran on unstopped and unclocked for 40 ms after its reply, long enough to
compute the outputs the judge then read as the reply's.

``settle`` returns once every task is seen stopped, so the judge reads a candidate's
outputs only when nothing of it can still write them, and a request's wall clock ends
there (``sandbox.Sandbox.call``), not at the signal. A signal to a group is taken by one of
its threads, which then stops the others; until that thread runs, the rest run on. A
candidate made that thread starve (SCHED_IDLE, moved onto the core of a thread that spun)
and worked for milliseconds after the signal; with a SIGCONT to itself (now refused by its
seccomp filter) it undid the stop altogether. So each thread is sent a stop of its own
too (``stop_threads``), and the time until all are stopped is the candidate's.
"""
from __future__ import annotations

import os
import signal
import time

STOP_TIMEOUT_S = 10.0  # a task in an uninterruptible wait stops when the wait ends
SWEEPS = 64  # rounds of looking for processes outside the group (a chain of forks that
# exit as soon as they fork is caught one link a round; with setsid refused there is none)


class DidNotStop(Exception):
    """A task of the candidate's was still running ``STOP_TIMEOUT_S`` after the signal."""


def halt(pid: int) -> set[int]:
    """SIGSTOP to ``pid``'s group, to each of its threads, then to every descendant outside
    it and each of theirs; those outside."""
    stop_group(pid)
    stop_threads(pid)
    below = descendants(pid)
    outside = stop_outsiders(pid, below)
    for other in descendants(pid) if outside else below:
        stop_threads(other)
    return outside


def stop_threads(pid: int) -> None:
    """SIGSTOP to each thread of ``pid`` (tgkill). A signal to a process is taken by one of
    its threads, which then stops the others; each thread signalled stops itself at once
    (one running is interrupted), whichever of them runs. The process's group signal came
    first, so no thread it starts after this listing escapes: a clone with a stop pending
    is restarted once the stop is over."""
    for tid in _tids(pid):
        _tgkill(pid, int(tid), signal.SIGSTOP)  # (non-zero: gone)


def _tgkill(tgid: int, tid: int, sig) -> int:
    import ctypes
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC.tgkill(tgid, tid, int(sig))


_LIBC = None


def stop_group(pid: int) -> None:
    """SIGSTOP to ``pid``'s group: every process of it at once, in the kernel."""
    _signal_group(pid, signal.SIGSTOP)


def settle(pid: int, outside=()) -> None:
    """Wait until every task of ``pid``, its descendants and ``outside`` is stopped, and a
    whole pass, every process and task listed and read again, finds them so."""
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while True:
        # listed once a pass: with the stop pending in every process, none of them can fork
        # (a clone with a signal pending is restarted once the stop is over), and a task
        # seen stopped is not read again within the pass
        tasks = _tasks(pid, outside)
        while tasks:
            if time.monotonic() > deadline:
                raise DidNotStop(f"{len(tasks)} of its tasks still ran {STOP_TIMEOUT_S:g} s "
                                 f"after SIGSTOP (e.g. task {tasks[0][1]} of process "
                                 f"{tasks[0][0]})")
            time.sleep(0)  # yield: a preempted task takes its stop when it is next scheduled
            tasks = [(p, tid) for p, tid in tasks if _running(p, tid)]
        # the kernel itself may have continued a task seen stopped (a parent-death signal
        # of SIGCONT, fired when a parent still exiting at the stop finished: the red team
        # ran a worker 16-18 ms at a time so, after the judge had seen it stopped): stopped
        # again, and the wait goes on, on the clock, until a whole pass finds none running
        again = _tasks(pid, outside)
        if not again:
            return
        for p, tid in again:
            _tgkill(p, int(tid), signal.SIGSTOP)


def _tasks(pid: int, outside) -> list[tuple[int, str]]:
    """Every task of ``pid``, its descendants and ``outside`` not seen stopped now."""
    return [(p, tid) for p in [pid, *outside, *descendants(pid)] for tid in _tids(p)
            if _running(p, tid)]


def resume(pid: int) -> None:
    """SIGCONT to the group only: a process that left it stays stopped, and is killed at
    the end."""
    _signal_group(pid, signal.SIGCONT)


def kill(pid: int) -> None:
    """Everything of the candidate's, killed: stopped first (so that nothing forks or
    leaves while it is listed), listed, then killed, before the leader's death hands its
    orphans to another reaper."""
    outside = halt(pid)
    below = descendants(pid)
    _signal_group(pid, signal.SIGKILL)
    for other in {*outside, *below}:
        signal_pid(other, signal.SIGKILL)


def _signal_group(pid: int, sig) -> None:
    """``sig`` to the group ``pid`` leads, the leader gone or not: a group outlives its
    leader, and its id is never handed to another process while it has members. (Asked
    through the leader, the group of a candidate whose process had exited, leaving a child
    to answer for it, was out of reach.) Before the candidate made its group, to it alone."""
    try:
        os.killpg(pid, sig)
        return
    except (ProcessLookupError, PermissionError, TypeError):
        pass
    signal_pid(pid, sig)


def exited(pid: int) -> bool:
    """Whether process ``pid`` is gone or a zombie."""
    return _state(f"/proc/{pid}/stat") in ("Z", "X", "")


def stop_outsiders(pid: int, listed: list[int] | None = None) -> set[int]:
    """Stop the descendants of ``pid`` outside its group, sweep after sweep until a sweep
    finds no new one; those found. ``listed``: the descendants, just listed (the first
    sweep's)."""
    found: set[int] = set()
    for sweep in range(SWEEPS):
        new = []
        for other in listed if sweep == 0 and listed is not None else descendants(pid):
            try:
                if other not in found and os.getpgid(other) != pid:
                    new.append(other)
            except ProcessLookupError:
                pass
        if not new:
            break
        for other in new:
            signal_pid(other, signal.SIGSTOP)
        found.update(new)
    return found


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, from each thread's /proc children list (a process
    with none costs one directory read)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        for text in _per_task(p, "children"):
            try:
                kids = [int(k) for k in text.split()]
            except ValueError:
                continue
            found += kids
            todo += kids
    return found


def _running(pid: int, tid: str) -> bool:
    """Whether the task is neither stopped (state T or t), dead (Z, X) nor gone."""
    return _state(f"/proc/{pid}/task/{tid}/stat") not in ("T", "t", "Z", "X", "")


def _state(stat_path: str) -> str:
    """The state letter of a /proc ``stat`` file ("" when it is gone)."""
    text = _read(stat_path)
    return text.rpartition(b")")[2][1:2].decode() if text else ""


def _read(path: str) -> bytes:
    """A /proc file's bytes, b"" when it is gone. Read raw (``os.open``), not through a
    text file object: the stops read a file or three a thread, on the judge's clock, and a
    text ``open`` cost about three times as much (on the 2-core VM, halt and settle of a
    13-thread process took 1.15 ms that way). Read to the end: a thread's list of
    thousands of children is longer than a page."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError:
        pass
    finally:
        os.close(fd)
    return b"".join(chunks)


def _tids(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def _per_task(pid: int, name: str):
    """The bytes of /proc/PID/task/TID/``name`` for each thread of ``pid`` still there."""
    for tid in _tids(pid):
        text = _read(f"/proc/{pid}/task/{tid}/{name}")
        if text:
            yield text


def signal_pid(pid, sig) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, TypeError):
        pass  # gone: the next receive says how
