"""Jobs let into an executor only as far as the memory they will hold fits.

A bench script hands an executor more work than its memory can hold at once: on an H100
(80 GB, 2026-12-06) four workers each given a KernelBench activation (a 6.4 GB input,
held several times over by the judge and the candidate's process) ran out of the card's
memory on 12 of 14 activations, and the retries alone came after the call's time was
spent. So each job declares what it will hold of each resource (the device's memory,
the host's), and ``admitted`` submits a job only while the jobs in flight and it fit every
budget; a job over a budget on its own runs when nothing else is in flight. Where more
fit than the executor has workers, the workers bound it.
"""
from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Callable, Hashable, Iterator, Sequence


@dataclass(frozen=True)
class Ask:
    key: Hashable               # what the caller knows the job by
    needs: tuple[float, ...]    # what it holds of each budgeted resource while it runs


def admitted(asks: Sequence[Ask], submit: Callable[[Hashable], Future],
             budgets: tuple[float, ...], at_once: int,
             deadline: float | None = None) -> Iterator[tuple[Future, Hashable]]:
    """(future, key) of each job as it finishes, each submitted (``submit(key)``) once at
    most ``at_once`` are in flight and what they need, with its own, fits ``budgets``.
    Jobs go in the order given, except that a later one that fits goes before an earlier
    one that does not (the earlier one runs once enough has finished). Past ``deadline``
    (``time.monotonic()``) none is submitted: those in flight finish, the rest never start
    (a call on a lent machine ends inside its limit instead of being cut mid-job)."""
    waiting = list(asks)
    flight: dict[Future, Ask] = {}
    at_once = max(at_once, 1)  # (none at once would wait on nothing, forever)
    while flight or (waiting and (deadline is None or time.monotonic() < deadline)):
        if deadline is not None and time.monotonic() >= deadline:
            waiting = []
        held = [sum(a.needs[i] for a in flight.values()) for i in range(len(budgets))]
        for ask in list(waiting):
            if len(flight) >= at_once:
                break
            fits = all(h + n <= b for h, n, b in zip(held, ask.needs, budgets))
            if fits or not flight:
                waiting.remove(ask)
                flight[submit(ask.key)] = ask
                held = [h + n for h, n in zip(held, ask.needs)]
        done, _ = wait(list(flight), return_when=FIRST_COMPLETED)
        for fut in done:
            yield fut, flight.pop(fut).key
