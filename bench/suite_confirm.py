"""The suite's confirmations: each op's best kernel and default genome checked in full and
timed again, against torch eager and against torch.compile, one op behind the searches.

A confirmation runs in its own worker process (one per op, so that no state of one op's
torch.compile, a limit or a cache, can reach the next op's figures) while the next op's
search runs, two confirmations at a time. All of them run bench-size kernels only under
the host-wide device lock (``kdsl.search.eval.device_lock``), so a confirmation's timed runs
never share the GPU with another worker's bench-size kernels; what they share is the
host's CPUs (the search compiles on them), uploads over PCIe and, now and then, a search
worker's small correctness case or the one bench-size run with which torch.compile ends
its compile, any of which can lengthen a sample or two of the hundred whose median is
reported. The suite's summary flags a kernel whose two timings (against eager, against
torch.compile) disagree. ``--serial-confirm`` confirms each op alone before the next
search starts.
"""
from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future

import suite_table  # noqa: E402  (bench/suite_table.py)


def confirm(op, genome: dict | None, pool, args) -> dict:
    """One kernel checked in full and timed against eager, then timed against
    torch.compile (its correctness checked again on the bench dtype only), in one worker."""
    from kdsl import backends
    from kdsl.search.candidate import Candidate
    from kdsl.search.jobs import EvalConfig, EvalJob
    from kdsl.search.eval.timing import bench_dtype, bench_point
    point = bench_point(op, args.device)
    space = backends.get(args.backend).space(op, args.device)
    cand = Candidate.of(args.backend, space.complete(genome or space.default()))
    out = {}
    for mode in ("eager", "compile"):
        light = {} if mode == "eager" else {"seeds": (13,), "cases_per_dtype": 1,
                                            "dtypes": (bench_dtype(op, point, None),)}
        cfg = EvalConfig(device=args.device, baseline=mode, reps=args.confirm_reps, warmup=10,
                         timeout_s=600.0, **{"seeds": (11, 12), **light})
        res = pool.submit(EvalJob(op, cand, cfg)).result()
        a = res.artifacts or {}
        out[mode] = {"ok": res.ok, "stage": res.stage, "message": res.message[:400],
                     "time_ms": res.time_ms, "baseline_ms": res.baseline_ms,
                     "baseline_name": res.baseline_name, "floor_ms": a.get("floor_ms"),
                     "bandwidth_gbs": a.get("bandwidth_gbs"),
                     "max_error": a.get("bench_max_error"),
                     "kernels": {name: {k: m.get(k) for k in ("n_regs", "n_spills", "shared")}
                                 for name, m in (a.get("meta") or {}).items()
                                 if isinstance(m, dict)},
                     "baseline_fallback": a.get("baseline_fallback")}
    return out


def confirm_row(op, row: dict, best: dict, pool, args) -> dict:
    """Fills ``row`` with the default's and the best's confirmations."""
    t = time.monotonic()
    row["default"] = confirm(op, None, pool, args)
    # a best genome that runs the default's kernels at the bench point is not timed again
    same = best and suite_table.runs_as_default(op.name, dict(best.get("genome") or {}),
                                                args.backend, args.device)
    row["best"] = row["default"] if same else \
        confirm(op, best.get("genome"), pool, args) if best else None
    row["confirm_s"] = round(time.monotonic() - t, 1)
    return row


CONFIRMATION_FIELDS = ("default", "best", "confirm_s", "confirmed_beside_search")


class Confirmations:
    """Confirms ops on ``lanes`` threads beside the searches; rows come back in the order given.

    Two lanes by default: a confirmation waits for the device lock whenever a search of a
    large bench point holds it for a whole stage, and one lane fell behind the searches
    (an H200 suite: 14 ops searched in 360 s, 5 confirmed)."""

    def __init__(self, args, serial: bool = False, lanes: int = 2):
        self.args, self.serial = args, serial
        self.lanes = 1 if serial else lanes
        self._confirm_s: list[float] = []  # how long the rows handed back took to confirm
        self._queue: list[tuple[dict, Future]] = []  # rows not yet handed back, in order
        self._work: queue.Queue = queue.Queue()
        self._pools: set = set()  # the workers of the confirmations in progress
        self._lock = threading.Lock()  # orders a lane's finishing against a cut
        self._stopped = False
        for i in range(self.lanes):
            threading.Thread(target=self._loop, name=f"confirm-{i}", daemon=True).start()

    def submit(self, op, row: dict, best: dict) -> None:
        future: Future = Future()
        row["confirmed_beside_search"] = not self.serial
        self._queue.append((row, future))
        self._work.put((op, row, best, future))
        if self.serial:
            future.result()

    def backlog_s(self) -> float:
        """The seconds the confirmations not yet finished should take, by those finished so
        far (40 s each before any has: the fifth round's took 18-56 s)."""
        times = [r["confirm_s"] for r, f in self._queue if f.done() and r.get("confirm_s")]
        times += self._confirm_s
        each = sum(times) / len(times) if times else 40.0
        pending = sum(1 for _, f in self._queue if not f.done())
        return pending * each / self.lanes

    def move_done(self, into: list, wait: bool = False) -> list[dict]:
        """Appends the rows confirmed so far to ``into``, in order (all of them, waiting,
        when ``wait``), and returns them. A row is appended before it leaves the queue, so
        a stop at any moment finds it in one or both (``cut`` skips what ``into`` has)."""
        moved = []
        while self._queue and (wait or self._queue[0][1].done()):
            row = self._queue[0][1].result()
            if row.get("confirm_s"):
                self._confirm_s.append(row["confirm_s"])
            into.append(row)
            self._queue.pop(0)
            moved.append(row)
        return moved

    def cut(self, why: str, recorded: list) -> list[dict]:
        """Stops what is not confirmed yet. Returns the rows not in ``recorded``: those
        confirmed, and the others with their search's figures, marked as cut."""
        with self._lock:  # which confirmations finished, decided before any is stopped
            self._stopped = True
            pools = list(self._pools)
            finished = [f.done() for _, f in self._queue]
        for pool in pools:
            pool.shutdown()  # the confirmation in progress ends (its row is dropped below)
        have = {r["op"] for r in recorded}
        rows = [f.result() if done else
                {**{k: v for k, v in row.items() if k not in CONFIRMATION_FIELDS},
                 "skipped": f"{why} during its confirmation"}
                for (row, f), done in zip(self._queue, finished) if row["op"] not in have]
        self._queue.clear()
        return rows

    def _loop(self) -> None:
        from kdsl.search.executors import PoolExecutor
        while True:
            op, row, best, future = self._work.get()
            pool = None
            try:
                with self._lock:
                    if self._stopped:
                        continue
                    # a worker per op, so that nothing of one op's torch.compile reaches
                    # the next
                    pool = PoolExecutor(workers=1)
                    self._pools.add(pool)
                confirm_row(op, row, best, pool, self.args)
            except BaseException as e:  # one op's failure is a row, not the end of the suite
                row["error"] = f"confirmation: {type(e).__name__}: {e}"
            finally:
                if pool is not None:
                    pool.shutdown()
                with self._lock:
                    self._pools.discard(pool)
                    future.set_result(row)  # under the lock: a cut sees it finished or not
