"""The search's side of learned knowledge: priors in at the start, what helped out at the end.

The store itself (``kdsl.knowledge.learned``) keeps, per op class, backend and
device, how often each operator improved on its parent. A run multiplies its
operator weights by those priors; the multipliers are written into the run's
header, so a resumed run uses the same weights whatever was learned since.
"""
from __future__ import annotations

from kdsl import ir

from .settings import SearchSettings


def _store_path(settings: SearchSettings):
    from kdsl.knowledge import learned
    return settings.knowledge_path or learned.default_path()


def priors_for(settings: SearchSettings, op: ir.Op) -> dict[str, float]:
    if not settings.use_priors:
        return {}
    from kdsl.knowledge import learned
    from kdsl.knowledge.opclass import op_class
    out: dict[str, float] = {}
    for backend in settings.backends:
        for name, m in learned.priors(_store_path(settings), op_class(op), backend,
                                      settings.device).items():
            out[name] = max(out.get(name, 0.0), m)
    return out


def record(settings: SearchSettings, op: ir.Op, nodes: list[dict]) -> None:
    """Add this run's evidence to the store (never fails the run: the store is advisory)."""
    from kdsl.knowledge import learned
    from kdsl.knowledge.opclass import op_class
    for backend in settings.backends:
        mine = [r for r in nodes if (r.get("candidate") or {}).get("backend") == backend]
        if mine:
            learned.record_run(_store_path(settings), op_class(op), backend, settings.device,
                               mine)
