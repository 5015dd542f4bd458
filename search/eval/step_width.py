"""How many calls a step of timed calls makes on a GPU: enough that what the step costs by
itself is a small part of its wall.

The judge's clock times a step (one round trip to the candidate's process) and subtracts
what a step of calls of nothing costs, as its probes measured it (``timing.judged_calls``).
On a GPU that cost is 1.1-1.3 ms a step and moves by 0.1-0.4 ms from one process to the next
(``bench/step_costs.py``, one H100, 2026-12-07): a step of two calls of a 0.14 ms kernel is
charged half of that movement a call. The same default max-pool kernel read 0.139 and
0.362 ms in its two confirmations that day, a layer norm's 86% apart, a softmax's 99%.
Spread over more calls, the movement shrinks by the calls a step.

Each call needs inputs no earlier call has seen and outputs of its own (``timed_calls``),
so a wider step needs more buffers: beyond the input sets, copies of them (a buffer ``k``
holds set ``k % sets``, varied at every call like the set's own). Every buffer of one step
is checked against the oracle, so a step is only as wide as the oracle's cost allows, and
its buffers only as many as fit in a share of the card's free memory. On the CPU a step
stays one call a set: caches hold inputs across calls there, and a fast kernel cycling over
13 buffers ran 4x slower than over two (0.45 against 0.11 ms).
"""
from __future__ import annotations

import math

from kdsl import ir

from . import correctness as corr
from . import ipc_pool

# a step's calls should take at least this much of the kernel's own time
STEP_WORK_MS = 4.0
# and make at most this many calls
MAX_STEP_CALLS = 16
# the extra buffers (inputs, outputs and the outputs' kept copy each) take at most this
# many bytes, and at most this share of the card's free memory
EXTRA_BYTES = 6 << 30
FREE_SHARE = 0.25
# the oracles of one checked step (one a buffer) take at most this many seconds
CHECK_S = 1.0
# a widened request times at least this many steps of timed calls only: its figure, the
# median of its calls, then rests on more than one or two round trips
TIMED_STEPS = 4


def calls_a_step(device: str, call_ms: float, sets: int, buffer_bytes: int,
                 free_bytes: int, oracle_s: float | None) -> int:
    """The buffers (calls a step) for a kernel of ``call_ms`` a call: a multiple of the
    ``sets`` input sets, ``sets`` itself where the kernel fills a step alone, on the CPU,
    or where an oracle's cost is unknown. ``call_ms`` is the judge's own figure (its clock's
    share of a probe step, or the baseline's time where that is less): a candidate that
    claimed a slow probe, or slept through it, would otherwise keep its steps narrow, and
    with them the most of a step's head start a forged timer could work through."""
    if device != "cuda" or oracle_s is None or sets < 1:
        return sets
    want = MAX_STEP_CALLS if call_ms * MAX_STEP_CALLS <= STEP_WORK_MS else \
        math.ceil(STEP_WORK_MS / call_ms)
    by_check = int(CHECK_S // oracle_s) if oracle_s > 0 else MAX_STEP_CALLS
    room = min(EXTRA_BYTES, int(free_bytes * FREE_SHARE))
    by_memory = sets + room // max(buffer_bytes, 1)
    n = min(want, by_check, by_memory)
    return max(sets, n // sets * sets)


def buffer_bytes(op: ir.Op, sizes: dict[str, int], dtype: str) -> int:
    """What one more buffer holds: its inputs, its outputs and their kept copy."""
    from .floor import allocated_bytes
    return allocated_bytes(op, sizes, dtype) + allocated_bytes(op, sizes, dtype, op.outputs)


def more_buffers(op: ir.Op, sizes: dict[str, int], dtype: str, device: str,
                 pairs: list, n: int) -> list:
    """``n - len(pairs)`` more (inputs, outputs) buffers, buffer ``k`` a copy of pair
    ``k % len(pairs)``'s inputs (pristine between requests) with outputs of its own."""
    extra = []
    for k in range(len(pairs), n):
        ins, _ = pairs[k % len(pairs)]
        with ipc_pool.allocating(device):  # (the candidate maps them)
            copies = {name: t.clone() for name, t in ins.items()}
        extra.append((copies,
                      corr.alloc_outputs(op, sizes, dtype, device, 0, shared=True)))
    return extra
