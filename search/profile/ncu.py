"""Nsight Compute: the command that profiles a target process, and its failures in one line.

The target (``target.py``) calls the kernel a few times to compile and warm it, then once
between ``cudaProfilerStart`` and ``cudaProfilerStop``; ncu starts with profiling off
(``--profile-from-start off``) so only that call's kernels are replayed. The clocks are
left alone (``--clock-control none``: what the timings saw, and what the lent H200s
allow), and numbers come back in base units on the raw page, one row per kernel.

Every flag below was checked against ``ncu --help`` of Nsight Compute 2024.1.1 and the
NsightComputeCli guide ("Command Line Options": Launch, Profile, File, Console Output);
the messages ``why_failed`` looks for are strings of that ncu and its injection library,
and the Kernel Profiling Guide's FAQ.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

from . import ncu_csv
from .metrics import NCU_METRICS
from .record import KernelMetrics, ProfilerUnavailable

FLAGS = (
    # CSV on the raw page: every collected metric of a launch in one row (Console Output)
    "--csv", "--page", "raw",
    # base units. The guide says --csv implies it, but ncu 2024.1.1 printed "usecond" and
    # "Kbyte" in CSV without the flag (both pages, --import of an sm_90 report): keep it
    "--print-units", "base",
    # profile only between cu(da)ProfilerStart and cu(da)ProfilerStop (Profile options);
    # the target's warm-up calls and Triton's compile stay out of the replay
    "--profile-from-start", "off",
    # base | none | reset; none leaves the clocks as the timings saw them (Profile options)
    "--clock-control", "none",
    # application-only | all (Launch options; the default is all, ncu --help 2024.1.1).
    # all is what a target whose kernels run in a child process needs; the target here
    # launches them itself, so this only pins the default for older or configured ncus
    "--target-processes", "all",
)
SEARCH_PATHS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")
RETRIES = 4  # runs again without the metrics an ncu did not know, at most this many times


def find() -> str | None:
    """The ncu executable: on PATH, else where CUDA and Nsight Compute install it."""
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in SEARCH_PATHS:
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None


def command(ncu: str, metrics: tuple[str, ...], log: str, argv: list[str]) -> list[str]:
    # --metrics: only these metrics are collected when no --section is given (Profile
    # options); --log-file: all tool output, the CSV included, goes to that file and the
    # target's own output stays on stdout (File options)
    return [ncu, *FLAGS, "--metrics", ",".join(metrics), "--log-file", log, *argv]


# "==ERROR== Failed to find metric NAME". A name that needs a suffix is expanded to its
# first-level sub-metrics (--metrics, Profile options), and the message then shows the
# expansion: "Failed to find metric regex:^flop_count_sp\.(sum|min|max|avg|pct|ratio|
# max_rate)$" (as public reports of ncu runs show). Both shapes are read.
_UNKNOWN_METRIC = re.compile(r"Failed to find metric\s+(\S+)")
_EXPANSION = re.compile(r"\\?\.\((?:\w+\|)+\w+\)\$?$")


def unknown_metrics(output: str, asked: tuple[str, ...] | None = None) -> list[str]:
    """The metric names an ncu run said it does not know; with ``asked``, the names asked
    for that those messages name (a name, or its suffix expansion, that ncu did not find)."""
    names = []
    for raw in _UNKNOWN_METRIC.findall(output):
        name = raw.rstrip(".,;:").removeprefix("regex:").lstrip("^")
        name = _EXPANSION.sub("", name).rstrip("$").replace("\\.", ".")
        names.append(name)
    if asked is None:
        return names
    return [a for a in asked if any(a == n or a.startswith(n + ".") for n in names)]


def no_value(kernels: list[KernelMetrics], metrics: tuple[str, ...]) -> list[str]:
    """The metrics asked for that no kernel has a number for. An ncu may answer "n/a"
    for a metric the GPU does not have instead of failing (Kernel Profiling Guide, FAQ:
    "n/a metric values"); the profile lists those with the ones ncu refused."""
    return [m for m in metrics if not any(m in k.metrics for k in kernels)]


def why_failed(output: str, rc: int) -> str:
    """One line that says why an ncu run gave no metrics."""
    # "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU
    # Performance Counters on the target device 0. ..." (a vGPU gets the same sentence
    # without the code); the target still runs, ncu exits non-zero or profiles nothing
    if "ERR_NVGPUCTRPERM" in output or "permission to access NVIDIA GPU Performance" in output:
        return ("ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): run "
                "as root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0")
    # Kernel Profiling Guide, FAQ: another client (DCGM, a CUPTI profiler) holds the
    # performance monitor
    if "driver resource was unavailable" in output:
        return ("ncu could not reserve the GPU's performance monitor: another profiler "
                "(DCGM, CUPTI) holds it; pause it (dcgmi profile --pause) and profile again")
    # a status string of ncu's injection library (libcuda-injection.so, 2024.1.1)
    if "LibraryNotLoaded" in output:
        return ("ncu could not start its profiler here (LibraryNotLoaded: this machine "
                "exposes no GPU performance counters, as on a gVisor sandbox)")
    # "==WARNING== No kernels were profiled." (ncu prints "No %ss were profiled.")
    if "No kernels were profiled" in output:
        return ("ncu profiled no kernel: the candidate launched none in the profiled call "
                "(or the target failed before it)")
    if "unrecognised option" in output or "unrecognized option" in output:
        line = next(ln for ln in output.splitlines() if "option" in ln)
        return f"this ncu is too old for kdsl's flags: {line.strip()}"
    errors = [ln.strip() for ln in output.splitlines() if "==ERROR==" in ln or "Error" in ln]
    if errors:
        return f"ncu failed: {errors[-1][:300]}"
    tail = output.strip().splitlines()[-1][:300] if output.strip() else "no output"
    return f"ncu exited with code {rc}: {tail}"


def run(argv: list[str], log: str, timeout_s: float, env: dict | None = None,
        metrics: tuple[str, ...] = NCU_METRICS
        ) -> tuple[list[KernelMetrics], tuple[str, ...]]:
    """Profile the process ``argv`` starts: (its kernels, the metrics ncu did not know).
    ProfilerUnavailable (one line) when ncu is missing or could not measure."""
    ncu = find()
    if ncu is None:
        raise ProfilerUnavailable("ncu (Nsight Compute) is not installed or not on PATH")
    dropped: list[str] = []
    for _ in range(RETRIES + 1):
        if os.path.exists(log):
            os.unlink(log)
        try:
            proc = subprocess.run(command(ncu, metrics, log, argv), capture_output=True,
                                  text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            raise ProfilerUnavailable(f"ncu did not finish in {timeout_s:g} s") from None
        text = _read(log)
        output = f"{proc.stdout}\n{proc.stderr}\n{text}"
        unknown = unknown_metrics(output, metrics)
        if unknown:
            dropped += unknown
            metrics = tuple(x for x in metrics if x not in unknown)
            continue
        kernels = ncu_csv.parse(text)
        if proc.returncode == 0 and kernels:
            return kernels, tuple(dropped + no_value(kernels, metrics))
        raise ProfilerUnavailable(why_failed(output, proc.returncode))
    raise ProfilerUnavailable(f"ncu did not know the metrics {', '.join(dropped[:4])}")


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""
