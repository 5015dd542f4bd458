"""What an executor runs: one evaluation job, and the executor interface.

Executors (inline, local process pool, Ray) all take an ``EvalJob`` and give
back a future of a ``Result``; the search engine never knows which one runs.
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from kdsl import ir

from .candidate import Candidate
from .result import Result


# a search's slow cutoff: a candidate already this many times slower than the baseline
# is ranked by one timed run; figures that are published time every rep (the default)
SEARCH_SLOW_CUTOFF = 10.0


@dataclass(frozen=True)
class EvalConfig:
    device: str = "cpu"                   # 'cpu' | 'cuda'
    seeds: tuple[int, ...] | None = None  # correctness: fresh cases from each seed; None:
                                          # ``drawn_seeds`` seeds drawn from the OS at each
                                          # evaluation (a kernel cannot know its cases)
    drawn_seeds: int = 2
    cases_per_dtype: int = 3              # per seed, plus the spec's edge sizes
    dtypes: tuple[str, ...] | None = None  # None: every dtype the op declares
    max_case_elements: int = 1 << 20      # skip test shapes bigger than this (interpreter speed)
    time: bool = True                     # False: correctness only
    bench_dtype: str | None = None        # None: the bench point's dtype
    warmup: int = 3
    reps: int = 10
    slow_cutoff: float | None = None      # a kernel whose first timed run is this many times
                                          # the baseline's time gets no more runs (None: all
                                          # reps; searches set SEARCH_SLOW_CUTOFF)
    baseline: str = "auto"                # 'auto' (compile on cuda, eager on cpu) | 'eager' | 'compile'
    also_baselines: tuple[str, ...] = ()  # more baselines timed beside it (artifact
                                          # 'baselines_ms'): a benchmark's eager figure too
    timeout_s: float = 300.0              # wall clock per evaluation, build included
    memory_mb: int = 8192                 # address-space limit of a CPU worker
    exclusive_bench_bytes: int = 1 << 30  # bench points this big hold the GPU for the whole
                                          # timing stage, not only its timed runs


@dataclass(frozen=True)
class EvalJob:
    op: ir.Op
    candidate: Candidate
    config: EvalConfig


class Executor(Protocol):
    workers: int

    def submit(self, job: EvalJob) -> "Future[Result]":
        """Start evaluating ``job``; the future never raises: failures are Results."""

    def shutdown(self) -> None:
        ...
