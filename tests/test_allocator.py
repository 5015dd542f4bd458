"""Timed code allocates from memory the heap already holds (``search.eval.allocator``): a
large block comes from the heap (below the program break), where a freed one is used
again without the system, not from a fresh mapping of its own."""
import subprocess
import sys
import textwrap

import pytest

from search.eval import allocator

pytestmark = pytest.mark.skipif(allocator._mallopt() is None, reason="needs glibc's mallopt")

# whether a 64 MB block lies in the heap, in a fresh interpreter
PROBE = textwrap.dedent("""
    import ctypes, sys
    import numpy as np
    from search.eval import allocator
    libc = ctypes.CDLL(None)
    libc.sbrk.restype = ctypes.c_void_p

    def heap():  # 1: from the heap (kept when freed), 0: a mapping of its own
        a = np.ones(1 << 24, dtype=np.float32)
        return int(a.ctypes.data < libc.sbrk(0))

    mode = sys.argv[1]
    if mode == "kept":
        allocator.keep_freed_memory()
        print(heap())
    elif mode == "context":
        with allocator.freed_memory_kept():
            inside = heap()
        print(inside, heap())
    else:
        print(heap())
""")


def _heap(mode: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         check=True, cwd=".")
    return [int(x) for x in out.stdout.split()]


def test_a_large_block_comes_from_the_heap():
    assert _heap("plain") == [0]  # glibc's default: mapped afresh, unmapped when freed
    assert _heap("kept") == [1]


def test_the_context_gives_blocks_back_afterwards():
    assert _heap("context") == [1, 0]  # the judge's heap does not keep bench points
