"""Profiles: why a kernel is slow, measured by a profiler and read as a diagnosis.

A profile runs one candidate's kernel once at the bench point under a profiler (Nsight
Compute on CUDA, ``perf stat`` on the CPU), parses the counters into a ``Profile`` value
and reads them as a ``Diagnosis``: memory-, compute- or latency-bound, with the fraction of
speed-of-light. A search opted in with ``--profile K`` profiles its new bests as it goes
(their diagnosis reaches the operators, the LLM prompts and the cost model) and its K best
kernels at the end; ``kdsl profile`` profiles one candidate. A machine whose profiler is
missing or may not read counters gives a profile that says so, in one line.

    record.py    the Profile value and its per-kernel metrics
    metrics.py   the Nsight Compute metrics and perf events asked for
    ncu_csv.py   ncu's CSV (raw or details page) -> per-kernel metrics in base units
    ncu.py       the ncu command, its failures read into one line
    perf.py      perf stat: the command, its CSV, its failures
    target.py    the profiled process: the candidate built and called at the bench point
    diagnose.py  metrics -> Diagnosis (GPU and CPU)
    advice.py    what a diagnosis changes: genes tried first, retrieval words, prompt text
    profiler.py  one candidate profiled: job file, device lock, tool, diagnosis
    loop.py      a search's profiles: new bests, the end's top K, early stop
    command.py   ``kdsl profile``
"""
from .diagnose import Diagnosis, diagnose
from .record import KernelMetrics, Profile

__all__ = ["Diagnosis", "KernelMetrics", "Profile", "diagnose"]
