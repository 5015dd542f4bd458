"""Nsight Compute's CSV output -> one ``KernelMetrics`` per profiled kernel launch.

Two layouts, as ``ncu --csv`` writes them (NsightComputeCli, "Output Pages" and "Console
Output"; the shapes below were checked against what ncu 2024.1.1 itself prints for a report
recorded on an sm_90 GPU):

- the raw page (``--page raw``): a header of identity columns ("ID", "Process ID",
  "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
  "Grid Size", "Device", "CC") and then one column per metric, sorted by name; then a row
  of units (empty under the identity columns); then one row per kernel launch;
- the details page (the default): one row per metric, with "Section Name", "Metric Name",
  "Metric Unit" and "Metric Value" columns, grouped by "ID"; in 2024.1 five rule columns
  follow in the header ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup
  Type", "Estimated Speedup"), a metric row stops after its value, and a rule row fills
  the rule columns and leaves the metric ones empty.

ncu's own lines (``==PROF==``, ``==WARNING==``, ``==ERROR==``) may be mixed in and are
skipped. ncu 2024.1 prints plain numbers in CSV ("8355840"); older versions wrote thousands
separators ("1,048,576"), which are read too. A metric ncu could not measure for a launch
reads "nan" or "-nan" (2024.1), or is empty (launch__* metrics of a launch without launch
data); a ratio over zero reads "inf"; a metric the GPU lacks may read "n/a" (Kernel
Profiling Guide, FAQ). All of these are left out, as is any other value that is not a
number ("(256, 1, 1)"). Units are scaled to base units (ns, bytes, bytes/s, Hz) so a
profile read with ``--print-units auto`` means the same as one read with ``base``.
"""
from __future__ import annotations

import csv
import io
import math

from .record import KernelMetrics

_PREFIX = {"": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "K": 1e3, "k": 1e3, "M": 1e6,
           "G": 1e9, "T": 1e12}
_BASES = ("second", "byte", "hz", "cycle", "inst", "sector", "request", "block", "thread",
          "warp", "register")
# Abbreviated time units. ncu 2024.1 writes "nsecond", "usecond", "msecond" (checked);
# reports of newer ncu releases show "ns", "us", "ms" in the details page (not checked
# against a real ncu here), so both spellings are read.
_TIME_ABBREV = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def to_base(value: float, unit: str) -> tuple[float, str]:
    """``value`` in ``unit`` as (value, unit) in base units: 135.9 usecond -> 135900
    nsecond; 1.2 Gbyte/second -> 1.2e9 byte/second; 1.56 cycle/nsecond -> 1.56e9
    cycle/second. Units it does not know stay as they are."""
    parts = unit.split("/")
    out_parts, factor = [], 1.0
    for i, part in enumerate(parts):
        scaled = _scale_of(part)
        if scaled is None:
            return value, unit
        base, f = scaled
        if i > 0 and base == "nsecond":  # a rate is per second
            base, f = "second", f / 1e9
        factor = factor * f if i == 0 else factor / f
        out_parts.append(base)
    return value * factor, "/".join(out_parts)


def _scale_of(part: str) -> tuple[str, float] | None:
    """(base unit, factor) of one unit word: 'usecond' -> ('nsecond', 1e3)."""
    if part in ("%", ""):
        return part, 1.0
    if part in _TIME_ABBREV:
        return "nsecond", _TIME_ABBREV[part] * 1e9
    for base in _BASES:
        if part.lower().endswith(base):
            f = _PREFIX.get(part[:len(part) - len(base)])
            if f is None:
                return None
            return ("nsecond", f * 1e9) if base == "second" else (base, f)
    return None


def number(text: str) -> float | None:
    """'1,048,576' -> 1048576.0; 'n/a', 'nan', '-nan', 'inf', '' or '(1, 1, 1)' -> None."""
    t = (text or "").strip().replace(",", "")
    if not t:
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    # ncu 2024.1 prints "nan"/"-nan" for a metric it did not measure for a launch, and
    # "inf" for a ratio over zero: float() accepts all three, the diagnosis must not
    return v if math.isfinite(v) else None


def _rows(text: str) -> list[list[str]]:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("==")]
    return [r for r in csv.reader(io.StringIO("\n".join(lines))) if r]


def parse(text: str) -> list[KernelMetrics]:
    """Every kernel in ``text`` (either layout), in the order ncu profiled them."""
    rows = _rows(text)
    if not rows:
        return []
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:
        return _details(header, rows[1:])
    return _raw(header, rows[1:])


def _is_metric(column: str) -> bool:
    return "__" in column  # ncu's names: unit__counter.rollup


def _raw(header: list[str], rows: list[list[str]]) -> list[KernelMetrics]:
    name_at = header.index("Kernel Name") if "Kernel Name" in header else None
    metric_cols = [i for i, c in enumerate(header) if _is_metric(c)]
    units: dict[int, str] = {}
    out = []
    for row in rows:
        if row == header:  # a repeated header (more than one table in the log)
            continue
        if not row[0].strip():  # the units row: empty under "ID"
            units = {i: row[i] for i in metric_cols if i < len(row)}
            continue
        name = row[name_at] if name_at is not None and name_at < len(row) else "?"
        metrics, used = {}, {}
        for i in metric_cols:
            if i >= len(row):
                continue
            v = number(row[i])
            if v is None:
                continue
            v, unit = to_base(v, units.get(i, ""))
            metrics[header[i]] = v
            used[header[i]] = unit
        if metrics:  # a launch ncu measured nothing for ("nan" throughout) is no reading
            out.append(KernelMetrics(name, metrics, used))
    return out


def _details(header: list[str], rows: list[list[str]]) -> list[KernelMetrics]:
    col = {c: i for i, c in enumerate(header)}
    # ncu 2024.1.1 ends a metric row after "Metric Value" (16 fields under a 20-column
    # header: the rule columns are left off), so a row only needs the columns read here
    need = max(col[c] for c in ("ID", "Kernel Name", "Metric Name", "Metric Unit",
                                "Metric Value") if c in col)
    kernels: dict[str, tuple[str, dict, dict]] = {}
    for row in rows:
        if len(row) <= need or row == header:
            continue
        kid = row[col["ID"]] if "ID" in col else "0"
        name = row[col["Kernel Name"]] if "Kernel Name" in col else "?"
        _, metrics, units = kernels.setdefault(kid, (name, {}, {}))
        v = number(row[col["Metric Value"]])
        if v is None or not row[col["Metric Name"]]:  # rule rows carry no metric
            continue
        unit = row[col["Metric Unit"]] if "Metric Unit" in col else ""
        v, unit = to_base(v, unit)
        metrics[row[col["Metric Name"]]] = v
        units[row[col["Metric Name"]]] = unit
    return [KernelMetrics(name, m, u) for name, m, u in kernels.values() if m]
