"""A judged step taken apart: two processes, the judge's steps, a known kernel.

    python bench/step_anatomy.py OUT.json        (SIZES_MB=256,1024,16 by default)

The judge's clock on a step runs from waking the candidate's process to seeing it stopped
again (``sandbox.Sandbox.call``). What it subtracts is what steps of calls of nothing cost
(the probes); an honest step that costs more than its probe predicts is charged the rest.
This script rebuilds that round trip (as it was on 2026-12-06: without the probes' 8 ms gap
and the end-of-step drain on the card that came after) without the evaluator around it: a
parent (the judge)
varies a set's input and poisons its output on the card, syncs, wakes a child, asks it for a
step of calls (``CudaTimer.each``: one busy-wait, then a flush and the call, each call
bracketed by events), and stops it again (``stopping.halt`` and ``settle``), or not. The
calls are a plain ``torch.mul`` over inputs of each size, or nothing (the probe). Both ends
stamp the host's monotonic clock, so each step splits into: the request reaching the child,
the child's ``each`` (its wait, flushes, calls and sync), its reply reaching the parent, and
the stops. Prints a JSON line a configuration (medians of 20 steps after 5) and writes them
all to OUT.json."""
import json
import os
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp

from kdsl.search.eval import stopping
from kdsl.search.eval.cuda_timer import CudaTimer

FLUSH = 256 << 20


def child(conn, sets):
    """The candidate's side: a step of calls a request, its samples and stamps back."""
    os.setsid()  # a group of its own, as a candidate's process leads (``stopping``)
    torch.cuda.init()
    timer = CudaTimer(FLUSH)

    def ev():
        return torch.cuda.Event(enable_timing=True)
    while True:
        msg = conn.recv()
        t_recv = time.perf_counter()
        if msg[0] == "quit":
            return
        kind, ks, gpu_marks = msg
        if kind == "probe":
            fns = [lambda: None] * len(ks)
        else:
            fns = [lambda k=k: torch.mul(sets[k][0], 1.5, out=sets[k][1]) for k in ks]
        if gpu_marks:
            a, b = ev(), ev()
            a.record()
        samples = timer.each(fns)
        t_each = time.perf_counter()
        gpu = None
        if gpu_marks:
            b.record(); torch.cuda.synchronize()
            gpu = a.elapsed_time(b)
        conn.send(("ok", samples, {"recv": t_recv, "each": t_each, "send": time.perf_counter(),
                                    "gpu_span": gpu,
                                    "queue_ms": timer.last_step.get("queue_ms", 0.0)}))


def main():
    if len(sys.argv) != 2:
        print("usage: step_anatomy.py OUT.json", file=sys.stderr)
        return 2
    out = sys.argv[1]
    mp.set_start_method("spawn")
    sizes = [int(s) for s in os.environ.get("SIZES_MB", "256,1024,16").split(",")]
    res = []
    for mb in sizes:
        n = (mb << 20) // 4
        sets = [(torch.randn(n, device="cuda"), torch.empty(n, device="cuda")) for _ in range(4)]
        pristine = [s[0].clone() for s in sets]
        parent, kid = mp.Pipe()
        p = mp.Process(target=child, args=(kid, sets))
        p.start()
        time.sleep(0.5)
        scratch = torch.zeros(1024, device="cuda")
        for halt in (True, False):
            stopping.resume(p.pid)
            for gpu_marks in (True,):
                for calls in (1, 2, 4):
                    for kind in ("probe", "real"):
                        rows = []
                        for rep in range(25):
                            ks = list(range(calls))
                            if kind == "real":
                                for k in ks:
                                    torch.mul(pristine[k], 1.0 if rep % 2 else 2.0, out=sets[k][0])
                                    sets[k][1].fill_(float("nan"))
                            else:
                                scratch.add_(1)
                            torch.cuda.synchronize()
                            t0 = time.perf_counter()
                            if halt:
                                stopping.resume(p.pid)
                            parent.send((kind, ks, gpu_marks))
                            _, samples, m = parent.recv()
                            t_recv = time.perf_counter()
                            if halt:
                                stopping.halt(p.pid)
                                stopping.settle(p.pid, ())
                            t1 = time.perf_counter()
                            if rep < 5:
                                continue
                            rows.append({"wall": (t1 - t0) * 1e3,
                                         "to_child": (m["recv"] - t0) * 1e3,
                                         "child_each": (m["each"] - m["recv"]) * 1e3,
                                         "child_after": (m["send"] - m["each"]) * 1e3,
                                         "to_judge": (t_recv - m["send"]) * 1e3,
                                         "halt_settle": (t1 - t_recv) * 1e3,
                                         "samples": sum(samples), "gpu_span": m["gpu_span"] or 0.0,
                                         "queue": m["queue_ms"]})
                        med = {k: round(statistics.median(r[k] for r in rows), 4) for k in rows[0]}
                        mn = {k: round(min(r[k] for r in rows), 4) for k in ("wall", "child_each")}
                        r = {"mb": mb, "halt": halt, "gpu_marks": gpu_marks, "calls": calls,
                             "kind": kind, "median": med, "min": mn}
                        print(json.dumps(r), flush=True)
                        res.append(r)
        stopping.resume(p.pid)
        parent.send(("quit",))
        p.join(10)
        del sets, pristine
        torch.cuda.empty_cache()
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
