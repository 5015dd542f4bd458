"""Import every KernelBench level-1 and level-2 problem and check each spec.

    python bench/import_kernelbench.py --kernelbench /path/to/KernelBench --out bench/results

A problem passes when ``kdsl import`` makes a spec of it, the spec passes ``kdsl check``'s
verification (the baseline agrees with the float64 reference on the generated cases) and
the spec agrees with the module's own output. KernelBench is read from the checkout given,
never copied. Writes ``import_kernelbench.json`` (one record per problem) and
``import_kernelbench.md`` (counts per level and each failure's one-line reason).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

LEVELS = ("level1", "level2")


def _alarm(signum, frame):
    raise TimeoutError("timed out")


def run_one(job) -> dict:
    path, timeout = job
    from kdsl.agreement import check_agreement
    from kdsl.importer import ImportFailure, import_model
    from kdsl.spec import parse_text
    record = {"level": Path(path).parent.name, "problem": Path(path).name, "ok": False,
              "stage": None, "reason": None}
    start = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        try:
            imported = import_model(path, check=True)
        except ImportFailure as e:
            record["stage"], record["reason"] = "import", str(e).splitlines()[0]
            return record
        record["name"] = imported.name
        op = parse_text(imported.spec_text, f"{imported.name}.kspec").ops[0]
        a = check_agreement(op, seed=0, per_dtype=4)
        if not a.ok:
            record["stage"] = "check"
            record["reason"] = f"{len(a.failures)} of {a.cases} cases: {a.failures[0]}"
            return record
        record["ok"] = True
        record["statements"] = len(op.statements)
    except TimeoutError:
        record["stage"], record["reason"] = "timeout", f"past {timeout} s"
    except Exception as e:  # a bug of the importer: counted, with its type, never fatal
        record["stage"] = "crash"
        record["reason"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        signal.alarm(0)
        record["seconds"] = round(time.perf_counter() - start, 2)
    return record


def _key(path: Path):
    head = path.name.split("_", 1)[0]
    return (path.parent.name, int(head) if head.isdigit() else 10 ** 6, path.name)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernelbench", required=True,
                   help="a KernelBench checkout (the folder holding KernelBench/level1 or level1)")
    p.add_argument("--out", default="bench/results", help="folder for the JSON and markdown")
    p.add_argument("--levels", default="level1,level2", help="comma-separated levels")
    p.add_argument("--jobs", type=int, default=2, help="worker processes")
    p.add_argument("--timeout", type=int, default=300, help="seconds per problem")
    p.add_argument("--only", default="", help="only problems whose file name contains this")
    args = p.parse_args(argv)
    root = Path(args.kernelbench)
    if (root / "KernelBench").is_dir():
        root = root / "KernelBench"
    files = []
    for level in args.levels.split(","):
        if not (root / level).is_dir():
            print(f"error: no {level} folder under {root}", file=sys.stderr)
            return 2
        files += sorted((root / level).glob("*.py"), key=_key)
    files = [f for f in files if args.only in f.name]
    start = time.time()
    with multiprocessing.get_context("fork").Pool(args.jobs, maxtasksperchild=20) as pool:
        records = []
        for r in pool.imap_unordered(run_one, [(str(f), args.timeout) for f in files]):
            records.append(r)
            print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['level']}/{r['problem']} ({r['seconds']} s)"
                  + ("" if r["ok"] else f": {r['stage']}: {r['reason']}"), flush=True)
    records.sort(key=lambda r: _key(Path(r["level"]) / r["problem"]))
    summary = {lv: {"problems": sum(r["level"] == lv for r in records),
                    "passing": sum(r["level"] == lv and r["ok"] for r in records)}
               for lv in args.levels.split(",")}
    meta = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": "python bench/import_kernelbench.py " + " ".join(argv or sys.argv[1:]),
            "machine": f"{platform.machine()} {multiprocessing.cpu_count()} cores",
            "wall_seconds": round(time.time() - start, 1)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "import_kernelbench.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "problems": records}, indent=1) + "\n")
    (out / "import_kernelbench.md").write_text(_markdown(meta, summary, records))
    for lv, s in summary.items():
        print(f"{lv}: {s['passing']} of {s['problems']} pass")
    return 0


def _markdown(meta, summary, records) -> str:
    lines = ["# kdsl import on KernelBench", "",
             f"`{meta['command']}`, {meta['date']}, {meta['machine']}, {meta['wall_seconds']} s.",
             "A problem passes when its spec imports, passes `kdsl check`'s verification and "
             "agrees with the module.", "",
             "| level | problems | passing |", "|---|---|---|"]
    lines += [f"| {lv} | {s['problems']} | {s['passing']} |" for lv, s in summary.items()]
    lines += ["", "## Failures", "", "| problem | stage | reason |", "|---|---|---|"]
    for r in records:
        if not r["ok"]:
            reason = (r["reason"] or "").replace("|", "\\|")[:300]
            lines.append(f"| {r['level']}/{r['problem']} | {r['stage']} | {reason} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
