"""Timed code on the CPU allocates from memory it already holds, the baseline's as well as
the candidate's.

A candidate writes its outputs into buffers the judge allocated once (and poisons before
every call, so their pages are mapped and warm). torch's CPU baseline allocates its
outputs at every call; glibc serves a block past its mmap threshold (32 MB at most) with
fresh pages, each faulted in and zeroed by the kernel. On the development VM (2 cores,
2026-12-07) that was most of a large baseline's time: ``x.clone()`` of a 4096 x 4096
float32 tensor 36 ms against 8 ms for ``y.copy_(x)``, a softmax 47 ms against 16 ms with
the heap's blocks reused. A red-team pass had an identical ``memcpy`` judged at 5.8x and
the library's softmax at 2.0x against its 0.87x when it paid for fresh pages as well.

So both sides run as they would on a GPU, whose caching allocator hands a freed block back
without the system: glibc is told to take every block from its heap (``M_MMAP_MAX`` 0)
and to keep what is freed (``M_TRIM_THRESHOLD``), so after the warm-up calls a baseline's
outputs and a kernel's temporaries are memory already mapped. A speedup is then the
kernels' work against each other, not the system's page faults. Where the C library has
no ``mallopt`` (not glibc) nothing changes.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
MMAP_MAX_DEFAULT = 65536       # glibc's own default
TRIM_THRESHOLD_DEFAULT = 128 * 1024
KEEP_FREED = 2 ** 31 - 1       # the largest value the option takes: nothing is trimmed


@functools.cache
def _mallopt():
    try:
        libc = ctypes.CDLL(None)
        fn = libc.mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return fn


def keep_freed_memory() -> bool:
    """Every block from the heap and nothing given back, for the rest of the process (a
    candidate's process, which times calls and then ends). False where it cannot be set."""
    fn = _mallopt()
    return bool(fn and fn(M_MMAP_MAX, 0) and fn(M_TRIM_THRESHOLD, KEEP_FREED))


@contextlib.contextmanager
def freed_memory_kept():
    """``keep_freed_memory`` while timed code runs in a long-lived process (the judge's
    worker, which times the baseline): its blocks are given back afterwards, so the
    bench points of one op after another do not pile up in its heap."""
    kept = keep_freed_memory()
    try:
        yield kept
    finally:
        fn = _mallopt()
        if fn:  # (restored even where only one option took)
            fn(M_MMAP_MAX, MMAP_MAX_DEFAULT)
            fn(M_TRIM_THRESHOLD, TRIM_THRESHOLD_DEFAULT)
            trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
            if trim is not None:
                trim(0)
