"""Which of the judge's own GPU tensors lie in memory the candidate's process maps.

    python bench/ipc_exposure.py --out DIR specs/rmsnorm.kspec \\
        specs/kernelbench/level1/94_mse_loss.kspec

CUDA IPC hands over a tensor's whole cudaMalloc segment; the judge allocates what it sends
from a pool of its own (``search/eval/ipc_pool.py``) so that those segments hold nothing
else. Each spec's default Triton kernel goes through the full evaluation (the judge in this
process) twice, each in a fresh process: with the pool as the judge uses it, and with it
switched off (allocations as torch makes them: the judge before the pool). At every request
to the candidate's process the allocator's state is read: the segments that hold a tensor
sent to the candidate (mapped by it), and in them every live block that is no such tensor,
with the judge's kept outputs (``timed_calls.plan``'s snapshots) and its pristine inputs
counted apart; and the nonzero bytes of a segment's free blocks the first time it is seen
mapped (what the process had freed there before, for the candidate to read). Writes
DIR/ipc-exposure.json and prints a table.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path


def _tensors(x):
    import torch
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)


def _span(t) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def measure(paths: list[str], pool_on: bool) -> dict:
    """{op: the evaluation's verdict and the most judge's blocks seen in mapped segments}."""
    import torch

    from kdsl import backends, spec
    from kdsl.search.candidate import Candidate
    from kdsl.search.eval import ipc_pool, sandbox, timed_calls
    from kdsl.search.eval.evaluator import evaluate
    from kdsl.search.jobs import EvalConfig, EvalJob

    if not pool_on:  # the judge as it was before the pool
        ipc_pool.allocating = lambda device: contextlib.nullcontext()
        ipc_pool.confine = lambda tensors: None
        ipc_pool.release = lambda device: None
    sent: list = []    # weak references to every CUDA tensor sent to the candidate
    fresh_seen: set = set()  # the mapped segments seen so far
    judges: list = []  # (kind, weak reference) of the judge's kept outputs and pristine inputs
    seen: dict = {}
    plan = timed_calls.plan

    def watched_plan(*a, **k):
        p = plan(*a, **k)
        for snaps in p.snaps.values():
            judges.extend(("kept output", weakref.ref(t)) for t in snaps.values())
        for pristine in p.pristine:
            judges.extend(("pristine input", weakref.ref(t)) for t in pristine.values())
        return p

    def look() -> None:
        live = [_span(t) for r in sent if (t := r()) is not None]
        mapped = [s for s in torch.cuda.memory_snapshot()
                  if any(s["address"] <= lo < s["address"] + s["total_size"] for lo, _ in live)]
        mine = [(kind, _span(t)) for kind, r in judges if (t := r()) is not None]
        foreign, kinds = 0, {}
        for seg in mapped:
            at = seg["address"]
            first = seg["address"] not in fresh_seen
            fresh_seen.add(seg["address"])
            for b in seg["blocks"]:
                lo, hi = b.get("address", at), b.get("address", at) + b["size"]
                at = hi
                if first and b["state"] != "active_allocated":
                    # what the segment held where no tensor is, the first time it is seen
                    free = torch.as_tensor(ipc_pool._Span(lo, b["size"]), device="cuda")
                    seen["stale_bytes"] = seen.get("stale_bytes", 0) + \
                        int(torch.count_nonzero(free))
                if b["state"] != "active_allocated" or \
                        any(lo < e and s < hi for s, e in live):
                    continue
                foreign += 1
                for kind, (s, e) in mine:
                    if lo <= s < hi:
                        kinds[kind] = kinds.get(kind, 0) + 1
        seen["segments"] = max(seen.get("segments", 0), len(mapped))
        seen["judge_blocks"] = max(seen.get("judge_blocks", 0), foreign)
        for kind, n in kinds.items():
            seen[kind] = max(seen.get(kind, 0), n)

    call = sandbox.Sandbox.call

    def watched_call(self, *message):
        if self.device == "cuda":
            reply = call(self, *message)
            sent.extend(weakref.ref(t) for t in _tensors(message[1:]) if t.is_cuda)
            look()
            return reply
        return call(self, *message)

    sandbox.Sandbox.call = watched_call
    timed_calls.plan = watched_plan
    out = {}
    for path in paths:
        sent.clear()
        fresh_seen.clear()
        judges.clear()
        seen.clear()
        op = spec.load(path).ops[0]
        cand = Candidate.of("triton", backends.get("triton").space(op, "cuda").default(),
                            origin="default")
        res = evaluate(EvalJob(op, cand, EvalConfig(device="cuda", timeout_s=300, reps=20,
                                                     baseline="eager")))
        out[op.name] = {"ok": res.ok, "message": res.message[:300], "time_ms": res.time_ms,
                        **seen}
    return out


def table(results: dict) -> str:
    lines = ["| pool | op | ok | figure ms | segments mapped | judge's live blocks in them "
             "| kept outputs in them | pristine inputs in them | nonzero free bytes when "
             "first mapped |", "|---|---|---|---|---|---|---|---|---|"]
    for mode, ops in results.items():
        for name, r in ops.items():
            ms = f"{r['time_ms']:.4g}" if r.get("time_ms") else "-"
            lines.append(f"| {mode} | {name} | {'yes' if r['ok'] else 'no'} | {ms} | "
                         f"{r.get('segments', 0)} | {r.get('judge_blocks', 0)} | "
                         f"{r.get('kept output', 0)} | {r.get('pristine input', 0)} | "
                         f"{r.get('stale_bytes', 0)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--json", help=argparse.SUPPRESS)  # one mode, in a fresh process
    ap.add_argument("--pool", choices=("on", "off"), default="on", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    missing = [p for p in args.specs if not Path(p).is_file()]
    if missing:
        print(f"ipc_exposure: error: no spec file {missing[0]}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(measure(args.specs, args.pool == "on")))
        return 0
    sys.path.insert(0, str(Path(__file__).parent))
    from script_args import device_ready
    if not device_ready("ipc_exposure", "cuda"):
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for mode in ("off", "on"):
        part = out / f"ipc-exposure-pool-{mode}.json"
        subprocess.run([sys.executable, __file__, "--out", str(out), "--json", str(part),
                        "--pool", mode, *args.specs], check=False, env=dict(os.environ))
        results[mode] = json.loads(part.read_text()) if part.exists() else {}
    (out / "ipc-exposure.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
