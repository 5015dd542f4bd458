"""How many threads the judge's own torch work takes on the host's CPUs.

The judge's bookkeeping (drawing and uploading cases, the float64 oracle, the comparisons,
varying the inputs between timed calls) is mostly memory-bound, and it runs beside other
workers' evaluations. With every worker's torch using every core, OpenMP threads wait on
each other for cores: on the 2-core VM with two workers, the checks after layernorm's timed
runs took 3.4 s instead of 0.5 s alone, and a worker's checks lengthen the other's timed
runs. So that work runs on one thread (``judge_work``). What is timed as a figure, the
baseline and the copy that sets the memory floor, runs with torch's default count
(``timed_work``): a baseline timed on one thread would flatter every candidate.
"""
from __future__ import annotations

import contextlib

_DEFAULT: list[int] = []  # torch's own count in this process, read once


def _set(n: int) -> int:
    import torch
    before = torch.get_num_threads()
    if not _DEFAULT:
        _DEFAULT.append(before)
    if n != before:
        torch.set_num_threads(n)
    return before


@contextlib.contextmanager
def judge_work():
    """The block's torch work on one thread."""
    before = _set(1)
    try:
        yield
    finally:
        _set(before)


@contextlib.contextmanager
def timed_work():
    """The block's torch work on torch's default count, inside ``judge_work`` too."""
    import torch
    if not _DEFAULT:
        _DEFAULT.append(torch.get_num_threads())
    before = _set(_DEFAULT[0])
    try:
        yield
    finally:
        _set(before)
