"""A candidate that answers before the work it queued on the GPU has run: does the judge's
clock still see that work?

    python bench/unsynced_reply.py OUT.json        (WORK_MS=0.5,2,8,50 by default)

The judge's code in a candidate's process syncs the device before every reply; a candidate
that got past the source guards could reply at once and leave its kernels queued, to run
while its process is stopped and the judge's clock has ended. Since 2026-12-07 a timed
request's clock on a GPU ends only once a synced write of the judge's own comes back fast
(``sandbox.drain_card``): the card switches between the two contexts when the running one
runs dry or at the end of its time slice, so each write waits for the queued work or a
slice of it.

This script rebuilds the round trip in two processes around a known amount of queued work
(``torch.mul`` over 1 GB, repeated to about WORK_MS on the card, each repetition writing a
value of its own): the child queues it and replies either after a sync (honest) or at once
(unsynced); the parent stops it as the judge does and ends its clock with the judge's
drain or without it. For each it prints the wall's median and whether the output held the
last repetition's value when the parent read it right after its clock ended (what the
judge's kept outputs would hold). Writes OUT.json.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp

from kdsl.search.eval import stopping
from kdsl.search.eval.sandbox import drain_card

N = (1 << 30) // 4  # float32 elements of each tensor: 1 GB


def child(conn, x, y):
    os.setsid()  # a group of its own, as a candidate's process leads (``stopping``)
    torch.cuda.init()
    while True:
        msg = conn.recv()
        if msg[0] == "quit":
            return
        _, reps, synced, scale = msg
        for k in range(reps):  # (x is ones: y holds the last repetition's value at the end)
            torch.mul(x, scale + k, out=y)
        if synced:
            torch.cuda.synchronize()
        conn.send("ok")


def one_mul_ms(x, y) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.mul(x, 1.0, out=y)
    start.record()
    for _ in range(5):
        torch.mul(x, 1.0, out=y)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 5


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: unsynced_reply.py OUT.json", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("unsynced_reply: error: needs a CUDA device", file=sys.stderr)
        return 2
    mp.set_start_method("spawn")
    x = torch.ones(N, device="cuda")
    y = torch.empty(N, device="cuda")
    mul_ms = one_mul_ms(x, y)
    scratch = torch.zeros(1024, device="cuda")
    parent, kid = mp.Pipe()
    p = mp.Process(target=child, args=(kid, x, y))
    p.start()
    time.sleep(1.0)
    rows = []
    for work_ms in [float(w) for w in os.environ.get("WORK_MS", "0.5,2,8,50").split(",")]:
        reps = max(1, round(work_ms / mul_ms))
        for synced, drained in ((True, False), (True, True), (False, False), (False, True)):
            walls, complete, faults = [], [], 0
            for rep in range(12):
                scale = float(1000 * rep + 2)
                y.zero_()
                scratch.add_(1)
                torch.cuda.synchronize()
                time.sleep(0.005)
                t0 = time.perf_counter()
                stopping.resume(p.pid)
                parent.send(("step", reps, synced, scale))
                parent.recv()
                stopping.halt(p.pid)
                stopping.settle(p.pid, ())
                drain_ms = drain_card(scratch) if drained else 0.0
                walls.append((time.perf_counter() - t0) * 1e3)
                # what the judge would keep now: the output's last element, read at once
                complete.append(float(y[-1].item()) == scale + reps - 1)
                faults += drain_ms is None
                time.sleep(3 * reps * mul_ms / 1e3 + 0.01)  # (leftovers run out before the next)
            row = {"work_ms": round(reps * mul_ms, 3), "reps": reps,
                   "reply": "after a sync" if synced else "at once",
                   "clock_ends": "after the judge's write" if drained else "at the stop",
                   "wall_median_ms": round(statistics.median(walls[2:]), 3),
                   "wall_min_ms": round(min(walls[2:]), 3),
                   "output_complete": f"{sum(complete[2:])}/{len(complete) - 2}",
                   "drain_gave_up": faults}
            print(json.dumps(row), flush=True)
            rows.append(row)
    stopping.resume(p.pid)
    parent.send(("quit",))
    p.join(10)
    meta = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "device": torch.cuda.get_device_name(), "one_mul_ms": round(mul_ms, 4)}
    with open(sys.argv[1], "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
