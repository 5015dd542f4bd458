"""One candidate profiled: its job file, the device lock, the tool, the diagnosis.

``profile_source`` never raises for the machine's sake: a missing profiler, a missing GPU,
counters it may not read, a target that crashed, each is a ``Profile`` that is not ok and
says why in one line (``ProfilerUnavailable`` where the machine cannot profile at all, so
a search stops asking).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from . import ncu, perf
from .diagnose import Diagnosis, diagnose
from .record import Profile, ProfilerUnavailable

TIMEOUT_S = 300.0
CPU_LOOP_S = 0.5  # the CPU loop perf counts: long enough that the process's start is noise


def tool_for(device: str) -> str:
    return "ncu" if device == "cuda" else "perf"


def cuda_ready() -> str | None:
    """None when a CUDA device is there to profile on; else why not, in one line."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device on this machine (ncu profiles CUDA kernels)"
    return None


def profile_source(spec: str, op_name: str, backend: str, source: str, device: str, *,
                   copy_bandwidth: float | None = None, traffic_bytes: int | None = None,
                   timeout_s: float = TIMEOUT_S) -> tuple[Profile, Diagnosis | None]:
    """Profile ``source`` (a ``backend`` kernel for op ``op_name`` of the spec file ``spec``)
    at its bench point on ``device``; the profile and its diagnosis (None when not ok)."""
    tool = tool_for(device)
    t0 = time.monotonic()
    try:
        if device == "cuda":
            why = cuda_ready()
            if why:
                raise ProfilerUnavailable(why)
        with tempfile.TemporaryDirectory(prefix="kdsl-profile-") as tmp:
            job = {"spec": str(Path(spec).resolve()), "op": op_name, "backend": backend,
                   "source": source, "device": device,
                   "measure_copy": copy_bandwidth is None,
                   "count_traffic": traffic_bytes is None and device == "cpu"}
            if device == "cuda":
                profile = _gpu(job, tmp, timeout_s)
            else:
                profile = _cpu(job, tmp, timeout_s)
    except ProfilerUnavailable as e:
        return _with(Profile.unavailable(tool, device, str(e)), None, None,
                     time.monotonic() - t0), None
    except Exception as e:  # noqa: BLE001 - a failed profile is a value, never a dead search
        return _with(Profile.unavailable(tool, device, f"{type(e).__name__}: {e}"), None, None,
                     time.monotonic() - t0), None
    profile = _with(profile, copy_bandwidth, traffic_bytes, time.monotonic() - t0)
    return profile, diagnose(profile)


def _with(p: Profile, bandwidth, traffic, seconds) -> Profile:
    from dataclasses import replace
    return replace(p, copy_bandwidth=p.copy_bandwidth or bandwidth,
                   traffic_bytes=p.traffic_bytes or traffic, seconds=round(seconds, 3))


def _argv(job: dict, tmp: str, name: str) -> tuple[list[str], str]:
    path = os.path.join(tmp, f"{name}.json")
    out = os.path.join(tmp, f"{name}.out.json")
    with open(path, "w") as f:
        json.dump({**job, "out": out}, f)
    return [sys.executable, "-m", "kdsl.search.profile.target", path], out


def _report(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _environment(device: str) -> dict:
    env = dict(os.environ)
    if device == "cuda":
        env.pop("TRITON_INTERPRET", None)
    return env


def _gpu(job: dict, tmp: str, timeout_s: float) -> Profile:
    argv, out = _argv({**job, "range": True}, tmp, "ncu")
    # the target holds the GPU alone while ncu replays its call (target.py)
    kernels, missing = ncu.run(argv, os.path.join(tmp, "ncu.csv"), timeout_s,
                               _environment("cuda"))
    rep = _report(out)
    return Profile("ncu", True, device="cuda", kernels=tuple(kernels),
                   copy_bandwidth=rep.get("copy_bandwidth"), missing=missing)


def _cpu(job: dict, tmp: str, timeout_s: float) -> Profile:
    loop_argv, loop_out = _argv({**job, "loop_s": CPU_LOOP_S}, tmp, "loop")
    base_argv, _ = _argv({**job, "measure_copy": False, "count_traffic": False}, tmp, "base")
    env = _environment("cpu")
    loop = perf.run(loop_argv, os.path.join(tmp, "loop.perf"), timeout_s, env)
    base = perf.run(base_argv, os.path.join(tmp, "base.perf"), timeout_s, env)
    rep = _report(loop_out)
    calls = max(int(rep.get("calls") or 1), 1)  # counts per call, as call_ms is
    counts = {k: v / calls for k, v in perf.difference(loop, base).items()}
    return Profile("perf", True, device="cpu", kernels=(perf.kernel_of(counts),),
                   copy_bandwidth=rep.get("copy_bandwidth"),
                   traffic_bytes=rep.get("traffic_bytes"), call_ms=rep.get("call_ms"))
