"""What every candidate process starts from: a forkserver that has imported torch.

Spawning a fresh interpreter for each candidate cost an import of torch each time
(1.3 s of CPU on the 2-core VM, where two workers' imports competed with the timed
runs). Instead one process per judge, started clean (spawned by the judge, never given
a candidate), imports what every candidate needs and then only forks: each candidate
process is a fresh copy of it, and what a candidate does in its copy stays there.

It imports only what does not depend on the candidate's device: Triton decides at each
``@triton.jit`` whether to interpret (``TRITON_INTERPRET``), and the CUDA runtime reads
``CUDA_VISIBLE_DEVICES`` when it starts, so both are left to the candidate process,
which sets its environment first (``candidate_main.environment``). ``preloaded`` lists
what the server holds; ``check`` refuses a server that would hand a candidate Triton
decorated in another environment.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import sys

# imported in the server, before any fork (the order matters: torch first)
PRELOAD = ["kdsl.search.eval.undumpable", "torch", "torch.multiprocessing", "numpy",
           "kdsl.backends", "kdsl.search.eval.candidate_main"]
DEVICE_BOUND = ("triton",)  # never imported before the candidate's environment is set

_CONTEXT = None


def context():
    """The multiprocessing context that starts candidate processes (started on first use)."""
    global _CONTEXT
    if _CONTEXT is None:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _CONTEXT = ctx
    return _CONTEXT


def release_server() -> None:
    """Run first in each candidate process: let go of the server's lifeline.

    The forkserver lives until every holder of its ``alive`` pipe is gone, and hands that
    pipe to each process it forks (so that one could fork in turn). A candidate kept it,
    and a hung candidate kept the server alive after its judge died, which kept the
    candidate alive (it dies with its parent, the server). Without it: the judge dies,
    the server sees the pipe close and exits, and the candidate is killed with it."""
    from multiprocessing import forkserver
    server = forkserver._forkserver  # the module's one server (no public handle)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None


def check() -> str | None:
    """Run first in each candidate process: why it must not go on (a device-bound module
    came with the fork), else None."""
    held = [m for m in DEVICE_BOUND if m in sys.modules]
    if held:
        return (f"the candidate process inherited {', '.join(held)} from the forkserver; "
                f"it must be imported after the candidate's environment is set")
    return None
