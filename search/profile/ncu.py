"""Nsight Compute: the command that profiles a target process, and its failures in one line.

The target (``target.py``) calls the kernel a few times to compile and warm it, then once
between ``cudaProfilerStart`` and ``cudaProfilerStop``; ncu starts with profiling off
(``--profile-from-start off``) so only that call's kernels are replayed. The clocks are
left alone (``--clock-control none``: what the timings saw, and what the lent H200s
allow), and numbers come back in base units on the raw page, one row per kernel.
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

FLAGS = ("--csv", "--page", "raw", "--print-units", "base", "--profile-from-start", "off",
         "--clock-control", "none", "--target-processes", "all")
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
    return [ncu, *FLAGS, "--metrics", ",".join(metrics), "--log-file", log, *argv]


_UNKNOWN_METRIC = re.compile(r"Failed to find metric\s+(?:regex:)?([\w.]+)")


def unknown_metrics(output: str) -> list[str]:
    """The metric names an ncu run said it does not know."""
    return _UNKNOWN_METRIC.findall(output)


def why_failed(output: str, rc: int) -> str:
    """One line that says why an ncu run gave no metrics."""
    if "ERR_NVGPUCTRPERM" in output:
        return ("ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): run "
                "as root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0")
    if "LibraryNotLoaded" in output:
        return ("ncu could not start its profiler here (LibraryNotLoaded: this machine "
                "exposes no GPU performance counters, as on a gVisor sandbox)")
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
        unknown = [u for u in unknown_metrics(output) if u in metrics]
        if unknown:
            dropped += unknown
            metrics = tuple(x for x in metrics if x not in unknown)
            continue
        kernels = ncu_csv.parse(text)
        if proc.returncode == 0 and kernels:
            return kernels, tuple(dropped)
        raise ProfilerUnavailable(why_failed(output, proc.returncode))
    raise ProfilerUnavailable(f"ncu did not know the metrics {', '.join(dropped[:4])}")


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""
