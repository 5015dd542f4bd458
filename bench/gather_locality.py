"""What the order of a gather's indices costs: one kernel timed on the bench indices and on
the same indices sorted.

    python bench/gather_locality.py --op embedding_bag_sum [--genome JSON] --out DIR

An op that reads a table by index (``table[idx[i], ...]``) moves, at its floor, only the
distinct rows the indices touch, as if they streamed at the copy rate. Random rows do not
stream: each is a separate short burst from HBM. Sorting the indices keeps the same
multiset (the same distinct rows, so the same floor and the same sums, up to rounding)
while making neighbouring reads neighbouring rows. The gap between the two timings is
what the indices' randomness costs this kernel, and the sorted timing is how near the
kernel comes to the floor when locality is given back. Both orders are checked against
a float64 run of the baseline, and torch's baseline is timed on both too.

Sorted, the distinct rows still lie apart (1.3M indices into 10M rows: about eight rows
between neighbours), so the sorted timing does not separate the memory's cost for
scattered rows from the kernel's. A plain gather does: the same distinct rows copied
to a dense buffer (``torch.index_select``), in the bench order of first appearance and
sorted, each against its own floor (the rows read and written, the indices read).

Writes DIR/gather-locality-OP.json and prints a table; an op without a gathered table,
unknown ops or bad JSON exit 2.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

from script_args import device_name, device_ready, library_op  # bench/script_args.py


def _usage(msg: str) -> int:
    print(f"gather_locality: error: {msg}", file=sys.stderr)
    return 2


def sorted_case(case, index: str):
    """The case with ``index`` sorted: the same multiset of rows, read in table order."""
    import dataclasses

    import numpy as np
    inputs = dict(case.inputs)
    inputs[index] = np.sort(np.asarray(inputs[index]), kind="stable")
    return dataclasses.replace(case, inputs=inputs)


def time_order(op, case, fn, device: str, reps: int) -> dict:
    """The kernel and the eager baseline on ``case``, checked against float64, timed."""
    import torch

    from kdsl import baseline
    from kdsl.search.eval import correctness as corr
    from kdsl.search.eval import device_lock, timing
    ins = corr.fresh_inputs(op, case.dtype, case.inputs, device)
    outs = corr.alloc_outputs(op, case.sizes, case.dtype, device, 0)
    wide = {k: v.double() if v.is_floating_point() else v for k, v in ins.items()}
    with torch.no_grad():
        ref = baseline.outputs_of(op, baseline.baseline_callable(op, case.sizes, wide)())
    del wide
    timer = timing.default_timer(device)
    sizes = dict(case.sizes)
    with device_lock.exclusive(device), torch.no_grad():
        fn(ins, outs, sizes)
        corr.sync(device)
        ok, error = timing.close_on_device(op, case.dtype, outs, ref)
        kernel = timer(lambda: fn(ins, outs, sizes), warmup=5, reps=reps)
        run, name, _ = timing.baseline_runner(op, case.sizes, ins, "eager")
        base = timer(run, warmup=5, reps=reps)
    return {"correct": ok, "max_error": error, "kernel_ms": statistics.median(kernel),
            "baseline_ms": statistics.median(base), "baseline": name}


def distinct_rows(index, order: str):
    """The distinct values of ``index`` in the order of their first appearance ('bench
    order') or sorted."""
    import numpy as np
    values, first = np.unique(np.asarray(index), return_index=True)
    return values if order == "sorted" else np.asarray(index)[np.sort(first)]


def plain_gather(op, case, table: str, index: str, order: str, device: str, reps: int,
                 bw: float) -> dict:
    """The distinct rows ``index`` names, copied from ``table`` to a dense buffer, checked
    against the same rows taken on the host."""
    import torch

    from kdsl.search.eval import correctness as corr
    from kdsl.search.eval import device_lock, timing
    picked = distinct_rows(case.inputs[index], order)
    with device_lock.shared(device):
        src = corr.fresh_inputs(op, case.dtype, case.inputs, device)[table]
        rows = torch.as_tensor(picked, device=device)
    out = torch.empty((rows.numel(), *src.shape[1:]), dtype=src.dtype, device=device)
    nbytes = 2 * out.numel() * out.element_size() + rows.numel() * rows.element_size()
    with device_lock.exclusive(device), torch.no_grad():
        ms = statistics.median(timing.default_timer(device)(
            lambda: torch.index_select(src, 0, rows, out=out), warmup=5, reps=reps))
    expected = torch.from_numpy(case.inputs[table][picked]).to(dtype=src.dtype)
    exact = bool(torch.equal(out.cpu(), expected))
    floor_ms = nbytes / bw * 1e3
    return {"order": order, "rows": rows.numel(), "bytes": nbytes, "gather_ms": ms,
            "floor_ms": floor_ms, "of_floor": ms / floor_ms, "correct": exact}


def measure(op, genome: dict | None, backend_name: str, device: str, reps: int) -> dict:
    from kdsl import backends
    from kdsl.search.eval import floor, timing
    index = sorted(set(floor.gathered_by(op).values()))
    point = timing.bench_point(op, device)
    dtype = timing.bench_dtype(op, point, None)
    case = timing.bench_case(op, point, dtype)
    backend = backends.get(backend_name)
    space = backend.space(op, device)
    full = space.complete(genome or space.default())
    fn = backend.build(op, backend.render(op, full, device), device).fn
    nbytes = floor.traffic_bytes(op, case.sizes, dtype, case.inputs)
    bw = floor.copy_bandwidth(device, nbytes)
    floor_ms = nbytes / bw * 1e3
    rows = []
    for label, c in (("bench order", case), ("sorted", sorted_case(case, index[0]))):
        r = time_order(op, c, fn, device, reps)
        r.update(order=label, floor_ms=floor_ms, of_floor=r["kernel_ms"] / floor_ms)
        rows.append(r)
    table = next(t for t, i in floor.gathered_by(op).items() if i == index[0])
    plain = [plain_gather(op, case, table, index[0], order, device, reps, bw)
             for order in ("bench order", "sorted")]
    return {"genome": full, "index": index[0], "sizes": dict(case.sizes), "dtype": dtype,
            "bytes": nbytes, "bandwidth_gbs": bw / 1e9, "rows": rows, "plain_gather": plain}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", required=True)
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--genome", help="a JSON object of genes (default: the default genome)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    op = library_op("gather_locality", args.op)
    if op is None:
        return 2
    from kdsl.search.eval import floor
    if not floor.gathered_by(op):
        return _usage(f"op '{op.name}' reads no table by index")
    try:
        genome = json.loads(args.genome) if args.genome else None
    except json.JSONDecodeError as e:
        return _usage(f"--genome is not JSON: {e}")
    if genome is not None and not isinstance(genome, dict):
        return _usage("--genome is not a JSON object of genes")
    if args.reps < 1:
        return _usage("--reps must be at least 1")
    if not device_ready("gather_locality", args.device):
        return 2
    from kdsl.search.runs import versions
    doc = {"meta": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "op": op.name, "backend": args.backend, "device": device_name(args.device),
                    "reps": args.reps, "versions": versions(), "command": " ".join(sys.argv)},
           **measure(op, genome, args.backend, args.device, args.reps)}
    print(f"{op.name} {doc['sizes']} {doc['dtype']}, gathered by '{doc['index']}': "
          f"{doc['bytes'] / 1e6:.1f} MB at {doc['bandwidth_gbs']:.0f} GB/s")
    print(f"{'order':12s} {'kernel ms':>10s} {'x floor':>8s} {'eager ms':>10s} correct")
    for r in doc["rows"]:
        print(f"{r['order']:12s} {r['kernel_ms']:10.4g} {r['of_floor']:8.3f} "
              f"{r['baseline_ms']:10.4g} {r['correct']}")
    print(f"plain gather of the {doc['plain_gather'][0]['rows']} distinct rows "
          "(torch.index_select), against its own floor:")
    for r in doc["plain_gather"]:
        print(f"{r['order']:12s} {r['gather_ms']:10.4g} {r['of_floor']:8.3f} "
              f"{'':10s} {r['correct']}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"gather-locality-{op.name}.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
