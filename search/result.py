"""The outcome of evaluating one candidate: a value, ok or failed at a named stage.

Stages run in order: render -> build -> guards -> correctness -> timing. Each
leaves its artifact (source, compiler log and metadata, cases checked, timings)
in ``artifacts``; a failure names its stage and carries the message a human
(or an LLM repair prompt) needs: compiler log, mismatch with the worst element,
timeout, crash signal.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

STAGES = ("render", "guards", "build", "correctness", "timing")
SCHEMA = 1


@dataclass(frozen=True)
class Result:
    ok: bool
    stage: str                    # the last stage reached: where it failed, or 'timing'
    message: str = ""
    time_ms: float | None = None  # candidate median on the bench point
    baseline_ms: float | None = None
    baseline_name: str = ""       # 'torch.compile' or 'eager'
    artifacts: dict = field(default_factory=dict)  # source, log, meta, cases, timings, suspect

    @property
    def speedup(self) -> float:
        """The reward: baseline time over candidate time; 0 for any failure."""
        if not self.ok or not self.time_ms or not self.baseline_ms:
            return 0.0
        return self.baseline_ms / self.time_ms

    @staticmethod
    def failure(stage: str, message: str, **artifacts) -> "Result":
        if stage not in STAGES and stage not in ("worker", "operator"):
            raise ValueError(f"unknown stage {stage}")
        return Result(False, stage, message, artifacts=artifacts)

    def to_record(self) -> dict:
        r = asdict(self)
        r["schema"] = SCHEMA
        r["speedup"] = self.speedup
        return r

    @staticmethod
    def from_record(r: dict) -> "Result":
        known = {"ok", "stage", "message", "time_ms", "baseline_ms", "baseline_name",
                 "artifacts"}
        return Result(**{k: v for k, v in r.items() if k in known})
