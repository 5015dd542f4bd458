"""Does the timer's head start on the GPU last as long under load as when it was sized?

    python bench/wait_clock.py --out FILE [--loads idle,copy,gemm] [--mb 4096] [--rounds 20]

Every timed call on a GPU (``search/eval/cuda_timer.py``) starts behind a busy-wait of
``torch.cuda._sleep``, sized in SM clock cycles once a process (``cycles_per_ms``). The
judge's clock subtracts the cost of such a call as probed before the candidate's code ran;
if the SM clock is lower while a kernel loads the card, the wait lasts longer than the
probe's, and every honest step reads dearer by the difference. This sizes the wait as the
timer does, then times the same 1 ms wait with CUDA events right after each load: idle (no
load), the card idle for 50 ms (``pause``: does the clock drop between steps?), a
device-to-device copy of ``--mb`` MB (memory-bound), and a 4096^3 f32 GEMM
(compute-bound). Prints one row a load (the wait's median and range, ms) and writes FILE
as JSON with every sample. On a steady clock every row reads 1.00 ms.

Then the host's wall of the same wait and a sync, right after nothing, after a small write
of this process's, and after a small and a ``--mb`` write of another process's (each with
its sync): a judged step starts right after the judge's own work on the card, a probe does
not, and a switch between the two processes' contexts would cost every step that much.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from script_args import device_ready  # noqa: E402

LOADS = ("idle", "pause", "copy", "gemm")
# what the GPU last ran before a timed step's head start, another process's or this one's:
# a judged step follows the judge's own work on the card (its inputs varied, its outputs
# poisoned, then a sync), which a probe of calls of nothing does not
BEFORE = ("nothing", "own-small", "other-small", "other-big")


def measure(loads: list[str], mb: int, rounds: int) -> dict:
    import torch

    from kdsl.search.eval.cuda_timer import FIRST_WAIT_MS, CudaTimer
    cycles = int(FIRST_WAIT_MS * CudaTimer(0).cycles_per_ms(torch))
    src = torch.empty(mb << 20, dtype=torch.int8, device="cuda")
    dst = torch.empty_like(src)
    a = torch.randn(4096, 4096, device="cuda")
    work = {"idle": lambda: None, "pause": lambda: time.sleep(0.01),
            "copy": lambda: dst.copy_(src),
            "gemm": lambda: torch.mm(a, a)}
    out = {}
    for name in loads:
        samples = []
        for _ in range(rounds):
            for _ in range(5):  # long enough for the clock to settle under the load
                work[name]()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        out[name] = {"median_ms": round(statistics.median(samples), 4),
                     "min_ms": round(min(samples), 4), "max_ms": round(max(samples), 4),
                     "samples_ms": [round(s, 4) for s in samples]}
    return {"device": torch.cuda.get_device_name(), "wait_ms_asked": FIRST_WAIT_MS,
            "cycles": cycles, "loads": out, "step_walls": step_walls(cycles, mb, rounds),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def _other(conn, mb: int) -> None:
    """A second process with a context on the card: runs a small or a large write and a
    sync when asked, then answers."""
    import torch
    x = torch.zeros(mb << 18, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    conn.send("ready")
    while (what := conn.recv()) != "stop":
        (x[:1024] if what == "small" else x).add_(1)
        torch.cuda.synchronize()
        conn.send(what)


def step_walls(cycles: int, mb: int, rounds: int) -> dict:
    """The host's wall time of a head start and a sync (ms) right after each of BEFORE: the
    part of a judged step's cost that a GPU context switch would add."""
    import multiprocessing as mp

    import torch
    own = torch.zeros(1024, device="cuda")
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    child = ctx.Process(target=_other, args=(there, mb), daemon=True)
    child.start()
    there.close()  # (a child that dies then ends the read below instead of hanging it)
    here.recv()
    before = {"nothing": lambda: None,
              "own-small": lambda: (own.add_(1), torch.cuda.synchronize()),
              "other-small": lambda: (here.send("small"), here.recv()),
              "other-big": lambda: (here.send("big"), here.recv())}
    out = {}
    try:
        for _ in range(3):  # warm every path once
            for fn in before.values():
                fn()
        for name in BEFORE:
            walls = []
            for _ in range(rounds):
                before[name]()
                start = time.perf_counter()
                torch.cuda._sleep(cycles)
                torch.cuda.synchronize()
                walls.append((time.perf_counter() - start) * 1e3)
            out[name] = {"median_ms": round(statistics.median(walls), 4),
                         "min_ms": round(min(walls), 4), "max_ms": round(max(walls), 4)}
    finally:
        if child.is_alive():
            here.send("stop")
        child.join(10)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--loads", default=",".join(LOADS))
    ap.add_argument("--mb", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    loads = [x for x in args.loads.split(",") if x]
    unknown = [x for x in loads if x not in LOADS]
    if unknown or not loads:
        print(f"wait_clock: error: --loads takes {', '.join(LOADS)} (got "
              f"'{args.loads}')", file=sys.stderr)
        return 2
    if args.mb < 1 or args.rounds < 1:
        print("wait_clock: error: --mb and --rounds must be at least 1", file=sys.stderr)
        return 2
    if not device_ready("wait_clock", "cuda"):
        return 2
    result = measure(loads, args.mb, args.rounds)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"{result['device']}: a {result['wait_ms_asked']:g} ms wait "
          f"({result['cycles']} cycles) after each load")
    for name, r in result["loads"].items():
        print(f"  {name:5s} median {r['median_ms']:.4f} ms  ({r['min_ms']:.4f}-{r['max_ms']:.4f})")
    print("the host's wall of the same wait and a sync, right after:")
    for name, r in result["step_walls"].items():
        print(f"  {name:11s} median {r['median_ms']:.4f} ms  ({r['min_ms']:.4f}-"
              f"{r['max_ms']:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
