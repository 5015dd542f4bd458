"""Nsight Compute's CSV output -> one ``KernelMetrics`` per profiled kernel launch.

Two layouts, as ``ncu --csv`` writes them:

- the raw page (``--page raw``): a header of identity columns ("ID", "Kernel Name", ...)
  and metric names, then a row of units, then one row per kernel;
- the details page (the default): one row per metric, with "Metric Name",
  "Metric Unit" and "Metric Value" columns, grouped by "ID".

ncu's own lines (``==PROF==``, ``==WARNING==``) may be mixed in and are skipped. Numbers
may carry thousands separators ("1,048,576"); units are scaled to base units (ns, bytes,
bytes/s, Hz) so a profile read with ``--print-units auto`` means the same as one read with
``base``. A value that is not a number ("n/a", "(256, 1, 1)") is left out.
"""
from __future__ import annotations

import csv
import io

from .record import KernelMetrics

_PREFIX = {"": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "K": 1e3, "k": 1e3, "M": 1e6,
           "G": 1e9, "T": 1e12}
_BASES = ("second", "byte", "hz", "cycle", "inst", "sector", "request")


def to_base(value: float, unit: str) -> tuple[float, str]:
    """``value`` in ``unit`` as (value, unit) in base units: 135.9 usecond -> 135900
    nsecond; 1.2 Gbyte/second -> 1.2e9 byte/second. Units it does not know stay as they are."""
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
    for base in _BASES:
        if part.lower().endswith(base):
            f = _PREFIX.get(part[:len(part) - len(base)])
            if f is None:
                return None
            return ("nsecond", f * 1e9) if base == "second" else (base, f)
    return None


def number(text: str) -> float | None:
    """'1,048,576' -> 1048576.0; 'n/a', '' or '(1, 1, 1)' -> None."""
    t = (text or "").strip().replace(",", "")
    if not t:
        return None
    try:
        return float(t)
    except ValueError:
        return None


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
    if rows and (rows[0][0].strip() == "" if rows[0] else False):
        units = {i: rows[0][i] for i in metric_cols if i < len(rows[0])}
        rows = rows[1:]
    out = []
    for row in rows:
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
        out.append(KernelMetrics(name, metrics, used))
    return out


def _details(header: list[str], rows: list[list[str]]) -> list[KernelMetrics]:
    col = {c: i for i, c in enumerate(header)}
    kernels: dict[str, tuple[str, dict, dict]] = {}
    for row in rows:
        if len(row) < len(header):
            continue
        kid = row[col["ID"]] if "ID" in col else "0"
        name = row[col["Kernel Name"]] if "Kernel Name" in col else "?"
        _, metrics, units = kernels.setdefault(kid, (name, {}, {}))
        v = number(row[col["Metric Value"]])
        if v is None:
            continue
        unit = row[col["Metric Unit"]] if "Metric Unit" in col else ""
        v, unit = to_base(v, unit)
        metrics[row[col["Metric Name"]]] = v
        units[row[col["Metric Name"]]] = unit
    return [KernelMetrics(name, m, u) for name, m, u in kernels.values()]
