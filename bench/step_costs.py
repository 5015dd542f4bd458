"""Where a judged step's time goes: the judge's side of each round trip, probes against
timed steps, with the candidate's wait for the next request polled or blocking.

    python bench/step_costs.py --device cuda --poll both --out DIR \\
        specs/kernelbench/level1/19_relu.kspec specs/kernelbench/level1/40_layer_norm.kspec

Each spec's default kernel goes through the full evaluation (the judge in this process);
every round trip of the clean process's probes and of the timed steps is split into the
judge's phases: waking the process (``resume``), the request until its reply (``recv``),
the stops (``halt``) and the wait until every task is seen stopped (``settle``); and, from
the candidate's own trace on its log (``KDSL_STEP_TRACE``, stamped on the same monotonic
clock), into the request reaching it, its work beyond its samples (the wait, flushes, host
and syncs) and the reply reaching the judge, with whether the step's wait held. What
the judge subtracts from a step is the probes' own cost; what an honest step costs beyond
its samples is the steps' median: their difference is what the honest kernel pays on the
judge's clock (``sandbox.step_costs``, ``timing.judged_calls``). With
``--poll both`` the same specs run twice, in one fresh process each, with the polled wait
(``search/eval/spin.py``) on and off. ``--sets 1,2,4,8`` runs each mode again with that many
input sets a step (the judge's own choice, ``timing.input_sets``, otherwise): a cost the
steps pay once each, beyond the probes', falls as the sets grow, one each call does not.
``--repeat R`` runs each mode R times, each in a fresh process, and prints how far one
kernel's figures lie apart across the runs (what two confirmations of a kernel compare).
Writes DIR/step-costs.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

PHASES = ("resume", "recv", "halt", "settle")
TRACE_ENV = "KDSL_STEP_TRACE"  # (candidate_main.TRACE_ENV)
TRACE_MARK = "kdsl-step-trace "


def last_trace(log_path: str) -> dict | None:
    """The candidate's latest step trace on its log (``candidate_main._trace``)."""
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return None
    at = text.rfind(TRACE_MARK)
    if at < 0:
        return None
    line = text[at + len(TRACE_MARK):].split("\n", 1)[0]
    try:
        return json.loads(line)
    except ValueError:
        return None


def measure(paths: list[str], device: str) -> dict:
    """{op: {round trip kind: {phase: median ms}, ...}, ...} for each spec's default kernel,
    evaluated here."""
    from kdsl import backends, spec
    from kdsl.search.candidate import Candidate
    from kdsl.search.eval import sandbox, stopping
    from kdsl.search.eval.evaluator import evaluate
    from kdsl.search.jobs import EvalConfig, EvalJob

    trips: dict = defaultdict(lambda: defaultdict(list))
    call = sandbox.Sandbox.call
    last_end: list = []

    def timed_call(self, *message):
        kind = message[0]
        if kind not in ("probe", "steps"):
            return call(self, *message)
        marks: dict = {}

        def lap(name, fn):
            def wrapped(*a, **k):
                out = fn(*a, **k)
                marks[name] = time.perf_counter()
                return out
            return wrapped
        saved = stopping.resume, stopping.halt
        stopping.resume, stopping.halt = lap("resume", saved[0]), lap("halt", saved[1])
        self._receive, self._settle = lap("recv", self._receive), lap("settle", self._settle)
        start = time.perf_counter()
        gap = (start - last_end[0]) * 1e3 if last_end else None
        try:
            reply = call(self, *message)
        finally:
            stopping.resume, stopping.halt = saved
            del self._receive, self._settle
        key = f"probe of {message[1]}" if kind == "probe" else f"step of {len(message[1])}"
        row = trips[key]
        traced = last_trace(self.log_path)
        if traced is not None:  # the candidate's side, stamped on the same clock
            row["to_candidate"].append((traced["read_at"] - start) * 1e3)
            row["in_candidate_beyond_samples"].append(
                (traced["reply_at"] - traced["read_at"]) * 1e3 - sum(reply[1]))
            row["to_judge"].append((marks["recv"] - traced["reply_at"]) * 1e3)
            step = traced.get("step")
            if step:  # (a GPU's timer: its wait, whether it held, the host's queuing)
                row["wait"].append(step.get("wait_ms", 0.0))
                row["held"].append(1.0 if step.get("held") else 0.0)
                row["host_queuing"].append(step.get("queue_ms", 0.0))
        for name in PHASES:
            row[name].append((marks[name] - start) * 1e3)
            start = marks[name]
        row["wall"].append(self.last_wall_ms)
        if gap is not None:  # the judge's own time since the previous timed round trip
            row["gap_before"].append(gap)
        last_end[:] = [time.perf_counter()]
        row["beyond_samples"].append(self.last_wall_ms - sum(reply[1]))
        row["threads"].append(len(os.listdir(f"/proc/{self.pid}/task")))
        return reply

    sandbox.Sandbox.call = timed_call
    os.environ[TRACE_ENV] = "1"  # (read by the candidate processes started from here)
    if os.environ.get("KDSL_PROBE_GAP_MS"):  # (this process only: a study of the gap)
        sandbox.PROBE_GAP_MS[device] = float(os.environ["KDSL_PROBE_GAP_MS"])
    if os.environ.get("KDSL_STEP_SETS"):  # (this process only: a study of the set count)
        from kdsl.search.eval import timing
        forced = int(os.environ["KDSL_STEP_SETS"])
        timing.input_sets = lambda op, case, device: forced
    backend = "triton" if device == "cuda" else "c"
    out = {}
    for path in paths:
        trips.clear()
        last_end.clear()
        op = spec.load(path).ops[0]
        cand = Candidate.of(backend, backends.get(backend).space(op, device).default(),
                            origin="default")
        res = evaluate(EvalJob(op, cand, EvalConfig(device=device, timeout_s=300, reps=20,
                                                     baseline="eager")))
        art = res.artifacts or {}
        out[op.name] = {
            "ok": res.ok, "message": res.message[:300], "time_ms": res.time_ms,
            "input_sets": art.get("input_sets"), "step_buffers": art.get("step_buffers"),
            "clock": {k: art.get(k) for k in ("judge_clock_ms", "step_trip_ms",
                                               "probed_trip_ms", "step_call_ms",
                                               "calls_a_step", "step_overhead_ms")},
            "claimed_median_ms": statistics.median(art["claimed_ms"])
            if art.get("claimed_ms") else None,
            "trips": {k: {name: {"median": round(statistics.median(v), 4),
                                 "min": round(min(v), 4)} for name, v in row.items()}
                      | {"n": len(row["wall"])} for k, row in trips.items()}}
    return out


def table(results: dict) -> str:
    lines = ["| poll | op | ok | figure ms | judge's clock ms | step's own cost subtracted ms "
             "| one-call probe beyond samples, min / median ms | steps beyond samples, "
             "median ms | in the candidate beyond samples, probe / steps ms | steps held | "
             "threads |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for poll, ops in results.items():
        for name, r in ops.items():
            one = r["trips"].get("probe of 1", {}).get("beyond_samples", {})
            steps = [v for k, v in r["trips"].items() if k.startswith("step")]
            beyond = max((s["beyond_samples"]["median"] for s in steps), default=None)
            threads = max((s["threads"]["median"] for s in steps), default=None)
            inside = max((s.get("in_candidate_beyond_samples", {}).get("median", -1)
                          for s in steps), default=None)
            held = min((s.get("held", {}).get("median", -1) for s in steps), default=None)
            probe_inside = r["trips"].get("probe of 1", {}).get(
                "in_candidate_beyond_samples", {}).get("median")
            c = r["clock"]
            lines.append(f"| {poll} | {name} | {'yes' if r['ok'] else 'no'} | "
                         f"{r['time_ms'] and round(r['time_ms'], 4)} | {c.get('judge_clock_ms')} | "
                         f"{c.get('step_trip_ms')} + {c.get('step_call_ms')} a call | "
                         f"{one.get('min')} / {one.get('median')} | {beyond} | "
                         f"{probe_inside} / {inside} | {held} | {threads} |")
    return "\n".join(lines)


def agreement(results: dict) -> str:
    """Each op's figures across the runs of one mode, against its own timer's, and how far
    they lie apart (the greatest over the least)."""
    runs: dict = defaultdict(lambda: defaultdict(list))
    for mode, ops in results.items():
        base = mode.split(", run ")[0]
        for name, r in ops.items():
            runs[base][name].append(r)
    lines = ["| mode | op | figures ms | own timer ms | figures' spread | figure over own |",
             "|---|---|---|---|---|---|"]
    for base, ops in runs.items():
        for name, rs in ops.items():
            figs = [r["time_ms"] for r in rs if r["ok"] and r["time_ms"]]
            own = [r["claimed_median_ms"] for r in rs if r.get("claimed_median_ms")]
            spread = max(figs) / min(figs) if figs else None
            over = [f / o for f, o in zip(figs, own)] if len(own) == len(figs) else []
            lines.append(f"| {base} | {name} | {' / '.join(f'{f:.4g}' for f in figs)} | "
                         f"{' / '.join(f'{o:.4g}' for o in own)} | "
                         f"{'-' if spread is None else f'{spread:.3f}'} | "
                         f"{' / '.join(f'{x:.3f}' for x in over) or '-'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--poll", choices=("on", "off", "both"), default="both")
    ap.add_argument("--out", required=True)
    ap.add_argument("--sets", default="",
                    help="input sets a step, comma-separated (default: the judge's choice)")
    ap.add_argument("--probe-gap-ms", default="",
                    help="the judge's busy time before each probe (sandbox.PROBE_GAP_MS), "
                         "comma-separated values to run in turn (default: the judge's)")
    ap.add_argument("--repeat", default="1",
                    help="runs of each mode, each in a fresh process (default: 1)")
    ap.add_argument("--json", help=argparse.SUPPRESS)  # one mode, in a fresh process
    args = ap.parse_args(argv)
    try:
        sets = [int(n) for n in args.sets.split(",") if n.strip()]
        gaps = [float(g) for g in args.probe_gap_ms.split(",") if g.strip()]
        repeat = int(args.repeat)
        if any(n < 1 for n in sets) or any(not 0 <= g < 1000 for g in gaps) or \
                not 1 <= repeat <= 100:
            raise ValueError
    except ValueError:
        print(f"step_costs: error: --sets {args.sets!r}, --probe-gap-ms "
              f"{args.probe_gap_ms!r} and --repeat {args.repeat!r}: whole numbers from 1, ms "
              f"from 0 to 1000, joined by commas, and 1 to 100 runs", file=sys.stderr)
        return 2
    missing = [p for p in args.specs if not Path(p).is_file()]
    if missing:
        print(f"step_costs: error: no spec file {missing[0]}", file=sys.stderr)
        return 2
    from kdsl import spec
    from kdsl.errors import SpecError
    for path in args.specs:
        try:
            spec.load(path)
        except SpecError as e:
            print(f"step_costs: error: {path} does not parse: {e}".splitlines()[0],
                  file=sys.stderr)
            return 2
    if args.json:
        Path(args.json).write_text(json.dumps(measure(args.specs, args.device)))
        return 0
    sys.path.insert(0, str(Path(__file__).parent))
    from script_args import device_ready
    if not device_ready("step_costs", args.device):
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for poll in (("on", "off") if args.poll == "both" else (args.poll,)):
        for n, gap, run in [(n, g, r) for n in sets or [None] for g in gaps or [None]
                            for r in range(1, repeat + 1)]:
            mode = poll + ("" if n is None else f", {n} sets") + \
                ("" if gap is None else f", probe gap {gap:g} ms") + \
                ("" if run == 1 else f", run {run}")
            part = out / (f"step-costs-poll-{poll}{'' if n is None else f'-sets-{n}'}"
                          f"{'' if gap is None else f'-gap-{gap:g}'}"
                          f"{'' if run == 1 else f'-run-{run}'}.json")
            env = dict(os.environ, KDSL_POLL="1" if poll == "on" else "0")
            env.pop("KDSL_STEP_SETS", None)
            env.pop("KDSL_PROBE_GAP_MS", None)
            if n is not None:
                env["KDSL_STEP_SETS"] = str(n)
            if gap is not None:
                env["KDSL_PROBE_GAP_MS"] = str(gap)
            subprocess.run([sys.executable, __file__, *args.specs, "--device", args.device,
                            "--out", str(out), "--json", str(part)], env=env, check=True)
            results[mode] = json.loads(part.read_text())
    meta = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "device": args.device}
    if args.device == "cuda":
        import torch
        meta["device"] = torch.cuda.get_device_name()
    (out / "step-costs.json").write_text(json.dumps({"meta": meta, "results": results},
                                                    indent=1))
    print(f"{meta['when']} · {meta['device']}\n\n{table(results)}")
    if repeat > 1:
        print(f"\n{agreement(results)}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
