"""What a process that runs evaluations confines itself with, before heavy imports.

Standard library only: the judge's worker and the candidate process import it while
their environment is still being set. Output goes to a log file; cores are not dumped;
an optional cap on the size of any file written (a process that prints without end fills
its log to the cap, not the disk: SIGXFSZ is ignored, so the write fails with EFBIG);
an optional address-space limit; and death with the parent.
"""
from __future__ import annotations

import os
import signal
import sys


def redirect_output(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def limit(memory_mb: int | None, file_cap: int | None = None) -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash is reported, not dumped
    if file_cap:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        cap = file_cap if hard == resource.RLIM_INFINITY else min(file_cap, hard)
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, hard))
    if memory_mb:
        cap = memory_mb << 20
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies, even mid-hang."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(0)
    except OSError:
        pass


def subreaper() -> None:
    """Linux: orphaned descendants are re-parented to this process, not to init, so they
    stay its descendants (a forked process that called setsid and whose parent exited)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    except OSError:
        pass


def exit_text(code: int) -> str:
    """How a process ended, from its exit code: 'killed by signal SIGSEGV', 'exited with
    code 3' (a SIGKILL is most often the kernel's out-of-memory killer)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"killed by signal {name}{hint}"
    return f"exited with code {code}"
