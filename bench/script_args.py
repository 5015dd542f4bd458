"""What every bench script checks before it measures: the device asked for, the ops named.

Each failure prints one line, ``PROG: error: ...``, and the caller exits 2.
"""
from __future__ import annotations

import sys


def device_ready(prog: str, device: str) -> bool:
    """False (after saying so) when --device cuda was asked for on a machine without one."""
    if device != "cuda":
        return True
    import torch
    if torch.cuda.is_available():
        return True
    print(f"{prog}: error: --device cuda but no CUDA device is visible "
          "(torch.cuda.is_available() is False)", file=sys.stderr)
    return False


def library_ops(prog: str, names: list[str] | None, in_given_order: bool = False):
    """(spec path, op) of the named library ops (every op without names), in library order
    or the order given; None (after saying which names no spec defines) on an unknown one."""
    from kdsl import spec
    try:
        ops = spec.library_ops(names)
    except KeyError as e:
        print(f"{prog}: error: {e.args[0]}", file=sys.stderr)
        return None
    if names and in_given_order:
        ops.sort(key=lambda p: names.index(p[1].name))
    return ops


def library_op(prog: str, name: str):
    """The named library op; None (after saying no spec defines it) on an unknown name."""
    ops = library_ops(prog, [name])
    return None if ops is None else ops[0][1]


def device_name(device: str) -> str:
    """The GPU's name, or the CPU's, for a results file."""
    if device != "cuda":
        import platform
        return platform.processor() or platform.machine()
    import torch
    return torch.cuda.get_device_name(0)


class Kept:
    """An executor lent to one search after another: their ``shutdown`` keeps it running."""

    def __init__(self, executor):
        self.executor, self.workers = executor, executor.workers

    def submit(self, job):
        return self.executor.submit(job)

    def shutdown(self) -> None:
        pass
