"""Fake evaluations that Ray workers import by name (this folder is on their PYTHONPATH).

``evaluate`` gives exactly what ``fakes.FakeExecutor`` gives for the fake backend's
genomes, so a search through Ray can be compared with a local one. A few extra
``mode`` genes make a worker misbehave on purpose.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from kdsl.search.result import Result

from fakes import fake_reward


def evaluate(job) -> Result:
    genes = job.candidate.genes
    mode = genes.get("mode")
    if mode == "kill":  # a candidate that takes its worker down (as a segfault would)
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "kill-once":  # an outside kill: the first attempt dies, a re-run is fine
        marker = Path(genes["path"])
        attempts = int(marker.read_text()) + 1 if marker.exists() else 1
        marker.write_text(str(attempts))
        if attempts == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return Result(True, "timing", time_ms=1.0, baseline_ms=1.0,
                      artifacts={"attempts": attempts})
    if mode == "hang":
        Path(genes["path"]).write_text(str(os.getpid()))
        time.sleep(600)
    if mode == "oom":  # as the evaluator reports an out-of-memory stage
        return Result.failure("correctness", "CUDA out of memory", out_of_memory=True,
                              pid=os.getpid())
    if mode == "raise":
        raise RuntimeError("a bug in the evaluation")
    if mode == "probe":  # where and when did this run; with a barrier, with whom
        start = time.time()
        met = _barrier(genes["barrier"], genes["parties"]) if "barrier" in genes else None
        return Result(True, "timing", time_ms=1.0, baseline_ms=1.0, artifacts={
            "pid": os.getpid(), "start": start, "end": time.time(), "met": met,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "triton_interpret": os.environ.get("TRITON_INTERPRET")})
    return fake_result(genes)


def _barrier(folder: str, parties: int, within_s: float = 60.0) -> bool:
    """Wait until ``parties`` evaluations are inside at the same time; False if they never are."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / str(os.getpid())).touch()
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if len(list(Path(folder).iterdir())) >= parties:
            time.sleep(0.2)  # stay inside a little, so a third one cannot slip in alongside
            return True
        time.sleep(0.02)
    return False


def fake_result(genes: dict) -> Result:
    """``FakeExecutor``'s result for ``genes``."""
    r = fake_reward(genes)
    if r == 0.0:
        return Result.failure("correctness", "fake mismatch", source=f"# {genes}\n")
    return Result(True, "timing", time_ms=1.0 / r, baseline_ms=1.0, baseline_name="eager",
                  artifacts={"source": f"# {genes}\n"})
