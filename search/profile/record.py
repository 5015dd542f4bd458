"""A profile: what a profiler measured of one candidate's call, or why it measured nothing.

A value like a ``Result``: stored in the run (a ``profile`` record in lineage.msgpack),
tolerant of unknown fields when read back. Metrics are in base units (ns, bytes,
percent, counts), keyed by the profiler's own metric or event names.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

SCHEMA = 1


class ProfilerUnavailable(Exception):
    """The profiler cannot run here (missing, no device, counters not permitted): one line."""


@dataclass(frozen=True)
class KernelMetrics:
    name: str                       # the kernel's name (perf: the process)
    metrics: dict = field(default_factory=dict)  # metric name -> value in base units
    units: dict = field(default_factory=dict)    # metric name -> the unit it was read in

    def get(self, name: str) -> float | None:
        v = self.metrics.get(name)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Profile:
    tool: str                               # 'ncu' | 'perf' | a fake's name
    ok: bool
    message: str = ""                       # why there is no profile, in one line
    device: str = ""                        # 'cuda' | 'cpu'
    kernels: tuple[KernelMetrics, ...] = ()
    copy_bandwidth: float | None = None     # bytes/s of a plain copy on this machine
    traffic_bytes: int | None = None        # bytes the op must move (the floor's count)
    call_ms: float | None = None            # the profiled call's own time, where measured
    missing: tuple[str, ...] = ()           # metrics the profiler refused or gave no value
    seconds: float | None = None            # what profiling took, wall clock

    @staticmethod
    def unavailable(tool: str, device: str, message: str) -> "Profile":
        return Profile(tool, False, message.strip().splitlines()[0] if message else "",
                       device)

    def to_record(self) -> dict:
        r = asdict(self)
        r["schema"] = SCHEMA
        r["kernels"] = [asdict(k) for k in self.kernels]
        r["missing"] = list(self.missing)
        return r

    @staticmethod
    def from_record(r: dict) -> "Profile":
        known = set(Profile.__dataclass_fields__)
        kw = {k: v for k, v in r.items() if k in known}
        kw["kernels"] = tuple(KernelMetrics(k.get("name", "?"), dict(k.get("metrics") or {}),
                                            dict(k.get("units") or {}))
                              for k in kw.get("kernels") or () if isinstance(k, dict))
        kw["missing"] = tuple(kw.get("missing") or ())
        return Profile(**{"tool": "?", "ok": False, **kw})
