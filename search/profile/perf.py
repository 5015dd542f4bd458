"""perf stat on the CPU: the command, its CSV (``-x,``), and its failures in one line.

Counters of a whole process include its start (Python, torch, the build): the target runs
twice, once with the timed loop and once without it, and the difference is the loop's
(``difference``). A VM without a performance-monitoring unit answers ``<not supported>``
for every hardware event, and a kernel with a strict ``perf_event_paranoid`` refuses them:
either way the profile says so in one line.
"""
from __future__ import annotations

import shutil
import subprocess

from .metrics import PERF_EVENTS, TASK_CLOCK
from .record import KernelMetrics, ProfilerUnavailable


def find() -> str | None:
    return shutil.which("perf")


def command(perf: str, out: str, argv: list[str], events=PERF_EVENTS) -> list[str]:
    return [perf, "stat", "-x", ",", "-o", out, "-e", ",".join(events), "--", *argv]


def _event(name: str) -> str:
    """'cpu_core/cycles/' -> 'cycles'; 'instructions:u' -> 'instructions'."""
    if "/" in name:
        parts = [p for p in name.split("/") if p]
        name = parts[1] if len(parts) > 1 else parts[0]
    return name.split(":")[0]


def parse(text: str) -> tuple[dict[str, float], list[str]]:
    """(event -> count, the events perf could not count) from ``perf stat -x,`` output."""
    counts: dict[str, float] = {}
    refused: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) < 3:
            continue
        value, event = fields[0].strip(), _event(fields[2].strip())
        if value.startswith("<"):  # <not supported>, <not counted>
            refused.append(event)
            continue
        try:
            counts[event] = counts.get(event, 0.0) + float(value)
        except ValueError:
            continue
    return counts, refused


def why_failed(output: str, refused: list[str]) -> str | None:
    """One line when perf could not count the hardware events; None when it could."""
    if "perf_event_paranoid" in output or "not permitted" in output.lower() \
            or "access to performance monitoring" in output.lower():
        return ("perf may not read hardware counters here (kernel.perf_event_paranoid "
                "forbids it: run as root, or lower it to 1 or less)")
    hardware = [e for e in refused if e != TASK_CLOCK]
    if hardware:
        return (f"perf cannot count hardware events on this machine ({', '.join(hardware[:3])}"
                " <not supported>: a virtual machine without a performance-monitoring unit)")
    return None


def difference(loop: dict[str, float], base: dict[str, float]) -> dict[str, float]:
    """The loop's own counts: each event of the run with it less the run without it."""
    return {k: max(v - base.get(k, 0.0), 0.0) for k, v in loop.items()}


def run(argv: list[str], out: str, timeout_s: float, env: dict | None = None
        ) -> dict[str, float]:
    """Event counts of the process ``argv`` starts; ProfilerUnavailable (one line) if none."""
    perf = find()
    if perf is None:
        raise ProfilerUnavailable("perf is not installed (linux-perf / linux-tools)")
    try:
        proc = subprocess.run(command(perf, out, argv), capture_output=True, text=True,
                              timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise ProfilerUnavailable(f"perf stat did not finish in {timeout_s:g} s") from None
    try:
        with open(out) as f:
            text = f.read()
    except OSError:
        text = ""
    counts, refused = parse(text)
    why = why_failed(f"{proc.stderr}\n{text}", refused)
    if why:
        raise ProfilerUnavailable(why)
    if proc.returncode != 0 or not counts:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise ProfilerUnavailable(f"the profiled process failed under perf: {tail}")
    return counts


def kernel_of(counts: dict[str, float]) -> KernelMetrics:
    return KernelMetrics("process", dict(counts),
                         {k: ("msec" if k == TASK_CLOCK else "") for k in counts})
