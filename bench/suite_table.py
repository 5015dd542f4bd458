"""The GPU suite's results: the JSON document, its Markdown table, and storing the winners.

A row (one op) holds the search's figures and two confirmations, ``default`` and
``best``, each ``{'eager': {...}, 'compile': {...}}`` with the kernel's time,
the baseline's time and the floor measured in one worker process.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

FLOOR_TARGET = 1.15  # memory-bound ops: best kernel within this factor of the traffic floor


def write(out: Path, doc: dict) -> None:
    tmp = out / "suite.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out / "suite.json")
    (out / "suite.md").write_text(markdown(doc) + "\n")


def _ok(conf: dict | None, mode: str) -> dict | None:
    c = (conf or {}).get(mode) or {}
    return c if c.get("ok") else None


def _wrong(c: dict) -> bool:
    """A confirmation that found the kernel computing something else (a timeout or a
    device's failure says nothing of its outputs)."""
    return isinstance(c, dict) and not c.get("ok") and (
        c.get("stage") == "correctness" or "wrong" in (c.get("message") or ""))


def wrong_in(row: dict, which: str) -> dict | None:
    """The confirmation of ``which`` ('best' or 'default') that found it wrong, if one did:
    the same kernel, so one such finding makes it wrong in both (a best with f32 products in
    TF32 failed its eager-side confirmation's f32 cases and passed the other's draw)."""
    return next((c for c in (row.get(which) or {}).values() if _wrong(c)), None)


def figures(row: dict) -> dict:
    """The numbers a table shows for one op (None where not measured).

    A confirmation times each kernel twice, once beside each baseline: each speedup
    pairs a baseline with the kernel's time beside it, and the kernel's shown time is
    the mean of its two. Where the best kernel's confirmation lacks a baseline (its
    torch.compile captured no graph, or it failed), the default's confirmation gives the
    baseline and the best's mean time stands in for the time beside it."""
    be, bc = (None, None) if wrong_in(row, "best") else \
        (_ok(row.get("best"), "eager"), _ok(row.get("best"), "compile"))
    de, dc = (None, None) if wrong_in(row, "default") else \
        (_ok(row.get("default"), "eager"), _ok(row.get("default"), "compile"))
    # a compile confirmation whose torch.compile fell back to eager has no compile figure
    confirmed = [c for c in (bc, dc) if c]
    compiled = [c for c in confirmed if c.get("baseline_name") == "torch.compile"]
    f = {"eager_ms": (be or de or {}).get("baseline_ms"),
         "compile_ms": compiled[0]["baseline_ms"] if compiled else None,
         "compile_fell_back": bool(confirmed) and not compiled,
         "default_ms": _mean_time(de, dc),
         "best_ms": _mean_time(be, bc),
         "floor_ms": (be or bc or de or {}).get("floor_ms")}
    beside_compile = bc["time_ms"] if compiled and compiled[0] is bc else f["best_ms"]
    f["vs_eager"] = _ratio(f["eager_ms"], be["time_ms"] if be else f["best_ms"])
    f["vs_compile"] = _ratio(f["compile_ms"], beside_compile)
    f["of_floor"] = _ratio(f["best_ms"], f["floor_ms"])
    return f


def _mean_time(*confirmations) -> float | None:
    times = [c["time_ms"] for c in confirmations if c]
    return sum(times) / len(times) if times else None


def beats_default(row: dict) -> bool:
    """Was the best kernel confirmed, and faster than the default, beside every baseline the
    default was timed beside? (A one-sided win is within what two timings of one kernel
    differ by; a best that failed a confirmation the default passed did not win.)"""
    pairs = [(_ok(row.get("best"), m), _ok(row.get("default"), m)) for m in ("eager", "compile")]
    timed = [(b, d) for b, d in pairs if d]
    return bool(timed) and all(b and b["time_ms"] < d["time_ms"] for b, d in timed)


def _ratio(a, b):
    return a / b if a and b else None


def _g(v, digits=4) -> str:
    return "-" if v is None else f"{v:.{digits}g}"


def line(row: dict) -> str:
    if row.get("error") or row.get("skipped"):
        return f"{row['op']}: {row.get('error') or 'skipped: ' + row['skipped']}"
    f, s = figures(row), row.get("search") or {}
    return (f"{row['op']}: best {_g(f['best_ms'])} ms, eager {_g(f['eager_ms'])}, compile "
            f"{_g(f['compile_ms'])}, floor {_g(f['floor_ms'])}; {_g(f['vs_eager'], 3)}x eager, "
            f"{_g(f['vs_compile'], 3)}x compile, {_g(f['of_floor'], 3)}x floor; "
            f"{s.get('evaluations')} evals in {s.get('wall_s')} s")


def _geomean(values) -> float | None:
    vals = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def markdown(doc: dict) -> str:
    m = doc["meta"]
    v = m.get("versions") or {}
    h = m.get("host") or {}
    out = [f"{m['date']} · {h.get('gpu')} ({h.get('sms')} SMs, {h.get('memory_gib')} GiB) · "
           f"{h.get('cpus')} CPUs · torch {v.get('torch')} · triton {v.get('triton')} · "
           f"policy {m.get('policy')}, seed {m.get('seed')}, budget {m.get('budget')}, "
           f"up to {m.get('workers')} workers", "",
           "| op | class | shape | dtype | eager ms | compile ms | default ms | best ms | "
           "floor ms | ×eager | ×compile | best/floor | evals | fails | search s | eval/s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = [r for r in doc["rows"] if not r.get("skipped")]
    for r in rows:
        shape = ",".join(f"{k}={v}" for k, v in (r.get("shape") or {}).items())
        if r.get("error"):
            out.append(f"| {r['op']} | | {shape} | {r.get('dtype')} | {r['error'][:80]} |"
                       + " |" * 11)
            continue
        f, s = figures(r), r.get("search") or {}
        best = _g(f["best_ms"]) if f["best_ms"] else _failed(r)
        out.append(f"| {r['op']} | {r.get('class', '')} | {shape} | {r['dtype']} | "
                   f"{_g(f['eager_ms'])} | {_g(f['compile_ms'])} | {_g(f['default_ms'])} | "
                   f"{best} | {_g(f['floor_ms'])} | {_g(f['vs_eager'], 3)} | "
                   f"{_g(f['vs_compile'], 3)} | {_g(f['of_floor'], 3)} | "
                   f"{s.get('evaluations')} | {s.get('failures')} | {s.get('wall_s')} | "
                   f"{_g(s.get('evaluations_per_s'), 3)} |")
    out += ["", *summary_lines(doc)]
    return "\n".join(out)


def _failed(row: dict) -> str:
    c = wrong_in(row, "best") or ((row.get("best") or {}).get("eager") or {})
    return f"failed ({c.get('stage', 'no correct kernel')})"


REPEAT_TOLERANCE = 0.02  # one kernel's two confirmation timings; serial ones agreed to 0.3%


def repeat_spread(row: dict) -> float | None:
    """How far a confirmation's two timings of one kernel (the eager run's and the
    torch.compile run's, same worker) disagree, worst of the default and the best: on a
    GPU no one else uses they agree (within 0.3% for ten ops on an H200), so more says
    something else ran beside the timed runs."""
    worst = None
    for which in ("default", "best"):
        e, c = _ok(row.get(which), "eager"), _ok(row.get(which), "compile")
        if e and c and e.get("time_ms") and c.get("time_ms"):
            spread = max(e["time_ms"], c["time_ms"]) / min(e["time_ms"], c["time_ms"]) - 1
            worst = spread if worst is None else max(worst, spread)
    return worst


def search_seconds(rows: list[dict]) -> tuple[dict, float] | None:
    """The searches' stage seconds and device-lock waits, summed over every evaluation of
    ``rows`` (None where no search recorded them)."""
    recorded = [s for s in ((r.get("search") or {}).get("seconds") for r in rows) if s]
    if not recorded:
        return None
    stages: dict = {}
    for s in recorded:
        for k, v in (s.get("stages") or {}).items():
            stages[k] = stages.get(k, 0.0) + v
    return stages, sum(s.get("lock_wait") or 0.0 for s in recorded)


def summary_lines(doc: dict) -> list[str]:
    rows = [r for r in doc["rows"] if not r.get("skipped") and not r.get("error")]
    figs = {r["op"]: figures(r) for r in rows}
    correct = [op for op, f in figs.items() if f["best_ms"]]
    mem = [r["op"] for r in rows if r.get("class") == "memory"]
    within = [op for op in mem if (figs[op]["of_floor"] or 99) <= FLOOR_TARGET]
    wall = doc["meta"].get("wall_s")
    evals = sum((r.get("search") or {}).get("evaluations") or 0 for r in rows)
    fell_back = [op for op, f in figs.items() if f["compile_fell_back"]]
    again = doc["meta"].get("remeasured") or []
    retried = doc["meta"].get("retried") or []
    spreads = {r["op"]: repeat_spread(r) for r in rows}
    seconds = search_seconds(rows)
    wrong = [(r["op"], which, c) for r in rows for which in ("default", "best")
             if (c := wrong_in(r, which))]
    noisy = [f"{op} {100 * v:.1f}%" for op, v in spreads.items()
             if v is not None and v > REPEAT_TOLERANCE]
    return [
        *([f"- one kernel's two confirmation timings disagree by more than "
           f"{100 * REPEAT_TOLERANCE:g}% (something ran beside them): {', '.join(noisy)}"]
          if noisy else []),
        *([f"- measured again in a later part (that part's row replaces the earlier one): "
           f"{', '.join(again)}"] if again else []),
        *([f"- failed in an earlier part, then run again: {', '.join(retried)}"]
          if retried else []),
        *([f"- the searches' evaluations, seconds summed over them (they overlap): "
           + ", ".join(f"{k} {v:.0f}" for k, v in seconds[0].items())
           + f"; waiting for the device lock {seconds[1]:.0f}"] if seconds else []),
        *([f"- found wrong by a confirmation (no figure): "
           + "; ".join(f"{op} {which}: {((c.get('message') or '').splitlines() or [''])[0][:160]}"
                       for op, which, c in wrong)] if wrong else []),
        *([f"- torch.compile captured no graph in the confirming worker (no compile figure, "
           f"left out of the compile mean): {', '.join(fell_back)}"] if fell_back else []),
        f"- correct best kernel: {len(correct)} of {len(rows)} ops",
        f"- geometric mean speedup over eager: {_g(_geomean(f['vs_eager'] for f in figs.values()), 3)}x;"
        f" over torch.compile: {_g(_geomean(f['vs_compile'] for f in figs.values()), 3)}x",
        f"- memory-bound ops within {FLOOR_TARGET}x of the floor: {len(within)} of {len(mem)}"
        + (f" (missed: {', '.join(op for op in mem if op not in within)})" if mem else ""),
        f"- {evals} evaluations in {wall} s of suite wall time ({evals / wall:.2f} eval/s "
        "overall, confirmations included)" if wall else
        f"- {evals} evaluations; suite wall time not recorded (a part was stopped by its "
        "time limit)",
    ]


def finished(docs: list[dict]) -> set[str]:
    """The ops these suite documents measured (not skipped by a deadline or a stop, nor
    failed with an error, which a later part should try again)."""
    return {r["op"] for d in docs for r in d["rows"] if not r.get("skipped") and
            not r.get("error")}


def merge(docs: list[dict]) -> dict:
    """One document from suite runs split across calls (rows in order; the first run's host).

    An op measured again in a later part takes that part's row, in the earlier row's place
    (listed in ``meta['remeasured']``): a re-run after a generator change supersedes the
    old figures. Runs on different GPUs are refused: their figures do not belong in one
    table."""
    gpus = {d["meta"]["host"].get("gpu") for d in docs}
    if len(gpus) > 1:
        raise ValueError(f"suite runs from different GPUs: {', '.join(sorted(map(str, gpus)))}")
    meta = dict(docs[0]["meta"])
    dates = sorted({day for d in docs for day in d["meta"]["date"].split(" to ")})
    meta["date"] = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    # a part may itself be a merge: its budgets read "12/16" and its parts are kept as parts
    budgets = {int(b) for d in docs for b in str(d["meta"]["budget"]).split("/")}
    meta["budget"] = "/".join(str(b) for b in sorted(budgets))
    # a part stopped by its time limit recorded no wall time, and then neither has the whole
    walls = [d["meta"].get("wall_s") for d in docs]
    meta["wall_s"] = round(sum(walls), 1) if all(w is not None for w in walls) else None  # 0: no ops
    meta["parts"] = [p for d in docs for p in d["meta"].get("parts") or [d["meta"]]]
    rows: dict[str, dict] = {}
    remeasured = list(meta.get("remeasured") or [])
    retried = list(meta.get("retried") or [])  # failed in an earlier part, then run again
    for d in docs:
        for r in d["rows"]:
            if r.get("skipped"):
                continue
            earlier = rows.get(r["op"])
            if earlier is not None:
                again = retried if earlier.get("error") else remeasured
                if r["op"] not in again:
                    again.append(r["op"])
            rows[r["op"]] = r
    for key, ops in (("remeasured", remeasured), ("retried", retried)):
        if ops:
            meta[key] = ops
    return {"meta": meta, "rows": list(rows.values())}


def runs_as_default(op_name: str, genome: dict, backend: str = "triton",
                    device: str = "cuda") -> bool:
    """Does ``genome`` run today's default kernels of a library op at its bench point?
    Launchers clamp genes (a sort's rows a program, for one), so two genomes can run the
    same kernels, where the backend can tell (``bench_identity``). False for an op not in
    specs/."""
    from kdsl import backends, spec
    try:
        ((_, op),) = spec.library_ops([op_name])
    except KeyError:
        return False
    be = backends.get(backend)
    space = be.space(op, device)
    if space.complete(genome) == space.default():
        return True
    tell = getattr(be, "bench_identity", None)
    runs = tell(op, space.complete(genome), device) if tell is not None else None
    return runs is not None and runs == tell(op, space.default(), device)


def store_genomes(suite_json: Path, genomes_dir: Path) -> int:
    """Merge each op's confirmed best triton/cuda genome into specs/genomes/<op>.json."""
    doc = json.loads(suite_json.read_text())
    meta = doc["meta"]
    stored = dropped = 0
    for row in doc["rows"]:
        f = figures(row) if not row.get("error") and not row.get("skipped") else {}
        if not f.get("best_ms") or not row.get("best_genome"):
            continue
        path = genomes_dir / f"{row['op']}.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        if f["default_ms"] and not beats_default(row) or \
                runs_as_default(row["op"], row["best_genome"]):
            # the default won or tied in a confirmation (or the search's best is the default
            # itself): searches start from it anyway, and a genome stored earlier did not
            # beat it, so it is no longer the best start
            if data.get("triton", {}).pop("cuda", None) is not None:
                if not data["triton"]:
                    del data["triton"]
                if data:
                    path.write_text(json.dumps(data, indent=2) + "\n")
                else:
                    path.unlink()
                dropped += 1
            continue
        data.setdefault("triton", {})["cuda"] = {
            "genome": row["best_genome"],
            "speedup": round(f["vs_compile"] or f["vs_eager"] or 0.0, 3) or None,
            "baseline": "torch.compile" if f["vs_compile"] else "eager",
            "evaluations": (row.get("search") or {}).get("evaluations"),
            "measured": f"{meta['date'][:10]}, {meta['host']['gpu']}",
            "run": f"python bench/gpu_suite.py --ops {row['op']} --budget "
                   f"{(row.get('search') or {}).get('evaluations')} --seed {meta['seed']}"}
        path.write_text(json.dumps(data, indent=2) + "\n")
        stored += 1
    print(f"stored {stored} genomes in {genomes_dir}; dropped {dropped} that the default beat "
          "or matched")
    return 0
