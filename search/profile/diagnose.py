"""A profile read as a diagnosis: what bounds the kernel, and how far from speed-of-light.

GPU (Nsight Compute), over the call's kernels weighted by their durations:

- **memory side**: achieved DRAM bandwidth (bytes read and written over the duration)
  against the machine's measured copy bandwidth, the same rate the memory floor uses;
  where that is unknown, DRAM throughput against its peak. The busiest memory unit
  (L1, L2 or DRAM, ``gpu__compute_memory_throughput``) counts too: a kernel that
  saturates L1 with narrow loads is memory-bound though DRAM idles.
- **compute side**: SM throughput against peak, and the busiest pipe (tensor, FMA).
- **bound**: whichever side is at ``BUSY`` of its peak or more (the higher one); neither
  busy is latency-bound: too few warps (achieved occupancy, eligible warps per
  scheduler) or warps waiting (the top stall reasons) to keep either side fed.
- **speed-of-light**: the busier side's fraction of its peak, at most 1.

CPU (perf stat): instructions per cycle against ``PEAK_IPC`` is the compute side;
last-level-cache misses times the line size over the call's time, against the copy
bandwidth, the memory side; neither busy is latency-bound (cache misses, dependencies).

One line for a human (``line``), the rest a record for the operators and the cost model.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from . import metrics as m
from .record import Profile

BUSY = 0.6       # a side at this fraction of its peak or more bounds the kernel
PEAK_IPC = 4.0   # instructions per cycle a current x86-64 core retires at best
TOP_STALLS = 3


@dataclass(frozen=True)
class Diagnosis:
    bound: str                          # 'memory' | 'compute' | 'latency' | 'unknown'
    sol: float | None = None            # fraction of speed-of-light, 0..1
    memory_sol: float | None = None     # the memory side's fraction of its peak
    compute_sol: float | None = None    # the compute side's
    dram_bandwidth: float | None = None  # bytes/s achieved (CPU: from LLC misses)
    copy_bandwidth: float | None = None  # bytes/s of a plain copy, the memory side's peak
    occupancy: float | None = None      # achieved warps over the SM's maximum, 0..1
    theoretical_occupancy: float | None = None
    limiter: str = ""                   # what limits the theoretical occupancy
    eligible_warps: float | None = None  # per scheduler per cycle
    issue_active: float | None = None   # fraction of cycles a scheduler issued
    stalls: tuple = ()                  # ((reason, % of active warps), ...) top first
    tensor_pipe: float | None = None    # fraction of peak
    fma_pipe: float | None = None
    waves: float | None = None          # the grid over what the GPU runs at once
    ipc: float | None = None            # CPU: instructions per cycle
    cache_miss_rate: float | None = None  # CPU: misses over references
    kernels: int = 0
    line: str = ""

    def to_record(self) -> dict:
        r = asdict(self)
        r["stalls"] = [list(s) for s in self.stalls]
        return r

    @staticmethod
    def from_record(r: dict) -> "Diagnosis":
        known = set(Diagnosis.__dataclass_fields__)
        kw = {k: v for k, v in r.items() if k in known}
        kw["stalls"] = tuple(tuple(s) for s in kw.get("stalls") or ())
        return Diagnosis(**{"bound": "unknown", **kw})


def diagnose(profile: Profile) -> Diagnosis | None:
    """The diagnosis of a profile; None when it holds nothing to read."""
    if not profile.ok or not profile.kernels:
        return None
    if profile.tool == "perf" or profile.device == "cpu":
        return _cpu(profile)
    return _gpu(profile)


# ---- GPU --------------------------------------------------------------------

def _weighted(kernels, name: str) -> float | None:
    """The metric over the kernels, each weighted by its duration (equal where unknown)."""
    pairs = [(k.get(name), k.get(m.DURATION) or 1.0) for k in kernels]
    pairs = [(v, w) for v, w in pairs if v is not None]
    if not pairs:
        return None
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total > 0 else None


def _sum(kernels, name: str) -> float | None:
    vals = [k.get(name) for k in kernels if k.get(name) is not None]
    return sum(vals) if vals else None


def _pct(v: float | None) -> float | None:
    return None if v is None else v / 100.0


def _max(*vals) -> float | None:
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def _gpu(p: Profile) -> Diagnosis:
    ks = p.kernels
    ns = _sum(ks, m.DURATION)
    moved = _sum(ks, m.DRAM_READ)
    written = _sum(ks, m.DRAM_WRITE)
    dram_bw = (moved + (written or 0.0)) / (ns * 1e-9) if moved is not None and ns else None
    dram_pct = _pct(_weighted(ks, m.DRAM_THROUGHPUT))
    dram_side = dram_bw / p.copy_bandwidth if dram_bw and p.copy_bandwidth else dram_pct
    memory_sol = _max(dram_side, _pct(_weighted(ks, m.MEMORY_THROUGHPUT)))
    tensor = _pct(_weighted(ks, m.TENSOR_PIPE))
    fma = _pct(_weighted(ks, m.FMA_PIPE))
    compute_sol = _max(_pct(_weighted(ks, m.SM_THROUGHPUT)), tensor, fma)
    stalls = sorted(((r, v) for r, name in m.STALLS.items()
                     if (v := _weighted(ks, name)) is not None and v > 0),
                    key=lambda rv: (-rv[1], rv[0]))[:TOP_STALLS]
    main = max(ks, key=lambda k: k.get(m.DURATION) or 0.0)
    limits = {what: main.get(name) for what, name in m.LIMITS.items()
              if main.get(name) is not None}
    limiter = min(limits, key=lambda w: (limits[w], w)) if limits else ""
    d = dict(memory_sol=memory_sol, compute_sol=compute_sol, dram_bandwidth=dram_bw,
             copy_bandwidth=p.copy_bandwidth,
             occupancy=_pct(_weighted(ks, m.ACHIEVED_OCCUPANCY)),
             theoretical_occupancy=_pct(main.get(m.THEORETICAL_OCCUPANCY)),
             limiter=limiter, eligible_warps=_weighted(ks, m.ELIGIBLE_WARPS),
             issue_active=_pct(_weighted(ks, m.ISSUE_ACTIVE)),
             stalls=tuple((r, round(v, 2)) for r, v in stalls), tensor_pipe=tensor,
             fma_pipe=fma, waves=main.get(m.WAVES), kernels=len(ks))
    bound, sol = _bound(memory_sol, compute_sol)
    return Diagnosis(bound, sol, line=_gpu_line(bound, sol, d), **d)


def _bound(memory: float | None, compute: float | None) -> tuple[str, float | None]:
    if memory is None and compute is None:
        return "unknown", None
    mem, comp = memory or 0.0, compute or 0.0
    sol = min(max(mem, comp), 1.0)
    if max(mem, comp) < BUSY:
        return "latency", sol
    return ("memory" if mem >= comp else "compute"), sol


def _f(x: float | None, pct: bool = True) -> str:
    if x is None:
        return "?"
    return f"{x * 100:.0f}%" if pct else f"{x:.2g}"


def _tbs(bw: float) -> str:
    return f"{bw / 1e12:.2f} TB/s" if bw >= 1e11 else f"{bw / 1e9:.3g} GB/s"


def _gpu_line(bound: str, sol, d: dict) -> str:
    parts = []
    if bound == "memory":
        if d["dram_bandwidth"] and d["copy_bandwidth"]:
            parts.append(f"DRAM {_tbs(d['dram_bandwidth'])}, "
                         f"{d['dram_bandwidth'] / d['copy_bandwidth'] * 100:.0f}% of the "
                         f"{_tbs(d['copy_bandwidth'])} copy bandwidth")
        parts.append(f"busiest memory unit {_f(d['memory_sol'])} of peak")
        parts.append(f"occupancy {_f(d['occupancy'])}")
    elif bound == "compute":
        pipes = ", ".join(f"{n} pipe {_f(v)}" for n, v in (("tensor", d["tensor_pipe"]),
                                                           ("FMA", d["fma_pipe"]))
                          if v is not None)
        parts.append(f"SM {_f(d['compute_sol'])} of peak" + (f" ({pipes})" if pipes else ""))
        parts.append(f"memory {_f(d['memory_sol'])}")
    else:
        parts.append(f"SM {_f(d['compute_sol'])}, memory {_f(d['memory_sol'])} of peak")
        occ = f"occupancy {_f(d['occupancy'])}"
        if d["theoretical_occupancy"] is not None:
            occ += f" of {_f(d['theoretical_occupancy'])} possible"
            if d["limiter"]:
                occ += f" (limited by {d['limiter']})"
        parts.append(occ)
        if d["eligible_warps"] is not None:
            parts.append(f"{d['eligible_warps']:.2f} eligible warps per scheduler")
        if d["waves"] is not None and d["waves"] < 1:
            parts.append(f"the grid fills {d['waves']:.2f} of a wave")
    if d["stalls"]:
        parts.append("stalls " + ", ".join(f"{r} {v:.0f}%" for r, v in d["stalls"]))
    n = d["kernels"]
    head = f"{bound}-bound" if bound != "unknown" else "no reading"
    tail = f"{_f(sol)} of speed-of-light" + (f" ({n} kernels)" if n > 1 else "")
    return f"{head}: " + "; ".join(parts + [tail])


# ---- CPU --------------------------------------------------------------------

def _cpu(p: Profile) -> Diagnosis:
    k = p.kernels[0]
    cycles, inst = k.get(m.CYCLES), k.get(m.INSTRUCTIONS)
    ipc = inst / cycles if cycles and inst is not None else None
    misses = sum(v for v in (k.get(m.LLC_LOAD_MISSES), k.get(m.LLC_STORE_MISSES))
                 if v is not None) or k.get(m.CACHE_MISSES)
    refs = k.get(m.CACHE_REFERENCES)
    seconds = (p.call_ms / 1e3) if p.call_ms else (k.get(m.TASK_CLOCK) or 0.0) / 1e3 or None
    bw = misses * m.LINE_BYTES / seconds if misses is not None and seconds else None
    memory_sol = bw / p.copy_bandwidth if bw is not None and p.copy_bandwidth else None
    compute_sol = ipc / PEAK_IPC if ipc is not None else None
    rate = k.get(m.CACHE_MISSES) / refs if refs and k.get(m.CACHE_MISSES) is not None else None
    bound, sol = _bound(memory_sol, compute_sol)
    parts = [f"IPC {ipc:.2f} (of {PEAK_IPC:g})" if ipc is not None else "IPC ?"]
    if bw is not None:
        parts.append(f"memory {_tbs(bw)}" + (f", {memory_sol * 100:.0f}% of the "
                                             f"{_tbs(p.copy_bandwidth)} copy bandwidth"
                                             if memory_sol is not None else ""))
    if rate is not None:
        parts.append(f"cache misses {rate * 100:.0f}% of references")
    head = f"{bound}-bound" if bound != "unknown" else "no reading"
    line = f"{head}: " + "; ".join(parts + [f"{_f(sol)} of speed-of-light"])
    return Diagnosis(bound, sol, memory_sol=memory_sol, compute_sol=compute_sol,
                     dram_bandwidth=bw, copy_bandwidth=p.copy_bandwidth, ipc=ipc,
                     cache_miss_rate=rate, kernels=1, line=line)
