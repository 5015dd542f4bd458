"""Does torch.compile really compile every spec's baseline when one process does them all?

    python bench/baseline_compile.py --device cuda --out DIR

Builds each op's baseline the way the timing stage does (``timing.baseline_runner``), on a
small test case, one op after another in this one process, and records whether
torch.compile captured a graph (the timing stage labels a compile that captured none as
eager). Before the baseline got a source file of its own, torch < 2.13 stopped compiling
after the eighth op in a process. Writes DIR/baseline_compile.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from kdsl import cases
from kdsl.search.eval import correctness, timing
from kdsl.search.runs import versions
from script_args import device_ready, library_ops  # bench/script_args.py


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--ops", help="comma-separated op names (default: every spec)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    ops = library_ops("baseline_compile", args.ops.split(",") if args.ops else None)
    if ops is None or not device_ready("baseline_compile", args.device):
        return 2
    import torch
    rows = []
    for _, op in ops:
        case = cases.draw(op, cases.shapes(op, 1, 1)[0], 1)
        tensors = correctness.fresh_inputs(op, case.dtype, case.inputs, args.device)
        t0 = time.monotonic()
        with torch.no_grad():
            _, name, note = timing.baseline_runner(op, case.sizes, tensors, "compile")
        rows.append({"op": op.name, "baseline": name, "note": note,
                     "seconds": round(time.monotonic() - t0, 1)})
        print(json.dumps(rows[-1]), flush=True)
    doc = {"meta": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
                    "versions": versions()}, "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "baseline_compile.json").write_text(json.dumps(doc, indent=2))
    compiled = sum(r["baseline"] == "torch.compile" for r in rows)
    print(f"{compiled} of {len(rows)} baselines compiled by torch.compile in one process")
    return 0 if compiled == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
