"""Waiting for the other end of a timed step by polling, not by sleeping in a read.

A timed step is a round trip: the judge wakes the candidate's process and sends a request,
the process runs its calls and replies, and the judge's clock runs throughout. Each side
that sleeps in a blocking read is woken by the scheduler, on a core that may have gone
idle meanwhile. On an H100 (2026-12-05, ``bench/step_costs.py``) a step of one call of
nothing took 1.40 ms at its fastest and 1.82 ms at its median, and a step around a 4.2 ms
relu about 0.28 ms more than that median besides. The judge subtracted only a step's
fastest own cost then (anything more would be time a candidate could work unclocked), so
every honest step paid the spread: 0.7 ms a call on that relu, a sixth of its time (since
2026-12-07 it subtracts the probes' median on a GPU, at most 0.25 ms above the fastest,
``sandbox.step_costs``). Wake-ups are the part of a step that polling removes; how much of the
spread they are on a GPU is what ``bench/step_costs.py --poll both`` measures.

Only on a GPU, whose calls leave the host's cores idle: on the CPU the candidate computes
on the cores a polling judge would take (on the 2-core VM, a relu's two calls a step read
17.2 ms polled against 12.0 blocking). The judge polls for at most ``JUDGE_S`` of a
request; the candidate, after a reply to a timed request, for at most ``CANDIDATE_CPU_S``
of its own CPU time (a thread's CPU clock stands still while the judge has it stopped, so
the budget spans the stop between two steps, and a process the judge is done with soon
sleeps again). ``KDSL_POLL=0`` turns it off (measurement).
"""
from __future__ import annotations

import os
import time

TIMED = ("steps", "probe")   # the requests whose round trips are on the judge's clock
BEFORE_TIMED = TIMED + ("sets",)  # and those a timed request follows (the inputs mapped)
JUDGE_S = 0.25               # of wall time, then the blocking read
CANDIDATE_CPU_S = 0.02       # of the polling thread's own CPU time, then the blocking read


def polls(device: str, message, kinds=TIMED) -> bool:
    """Is ``message`` one of ``kinds`` (a timed request: the judge polls for its reply) on a
    device whose calls leave the host idle?"""
    return device == "cuda" and os.environ.get("KDSL_POLL", "1") != "0" and \
        isinstance(message, tuple) and bool(message) and message[0] in kinds


def polls_after(device: str, message) -> bool:
    """Does the candidate poll for the request after ``message``: a timed one, or the
    mapping of the inputs that the first timed step follows?"""
    return polls(device, message, BEFORE_TIMED)


def judge_wait(conn) -> None:
    """Poll ``conn`` until it has data or ``JUDGE_S`` has passed (the read follows)."""
    end = time.perf_counter() + JUDGE_S
    while not conn.poll(0) and time.perf_counter() < end:
        pass


def candidate_wait(conn) -> None:
    """Poll ``conn`` until it has data or this thread has spent ``CANDIDATE_CPU_S`` of CPU
    time polling (the read follows)."""
    end = time.thread_time() + CANDIDATE_CPU_S
    while not conn.poll(0) and time.thread_time() < end:
        pass
