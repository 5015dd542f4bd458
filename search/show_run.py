"""``kdsl show RUN``: the summary, the best kernel's lineage path, failures by stage."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kdsl.errors import UsageError

from . import lineage
from .files import check_out
from .runstore import RunError, RunStore


def _changed(parent: dict | None, node: dict) -> str:
    genes = (node.get("candidate") or {}).get("genome") or {}
    if not isinstance(genes, dict):
        return str(genes)
    if parent is None:
        return ", ".join(f"{k}={v}" for k, v in genes.items())
    before = (parent.get("candidate") or {}).get("genome") or {}
    diff = [f"{k}={v}" for k, v in genes.items() if before.get(k) != v]
    return ", ".join(diff) or "(same genes)"


def _x(speedup) -> str:
    """A speedup as '1.234x'; whatever a hand-edited summary holds, as it is."""
    return f"{speedup:.3f}x" if isinstance(speedup, (int, float)) else f"{speedup}x"


def show_run(path: str, plot: str | None = None) -> int:
    if plot:
        check_out(plot, "--plot", kind="file")
    try:
        store = RunStore.open(path)
    except RunError as e:
        raise UsageError(str(e)) from None
    s = store.summary()
    con = Console()
    t = Table(title=f"run {path}", show_header=False)
    for key in ("spec", "op", "backend", "device", "policy", "seed", "budget", "evaluations",
                "failures", "elapsed_s", "evaluations_per_s", "stopped"):
        if key in s:
            t.add_row(key, str(s[key]))
    base = s.get("baseline") if isinstance(s.get("baseline"), dict) else {}
    t.add_row("baseline", f"{base.get('name')} {base.get('time_ms')} ms")
    best = s.get("best")
    if isinstance(best, dict):
        t.add_row("best", f"node {best.get('node')}: {_x(best.get('speedup'))}, "
                          f"{best.get('time_ms')} ms, {best.get('source_path')}")
    con.print(t)

    top = lineage.best(store.nodes)
    if top is not None:
        p = Table(title="lineage of the best kernel")
        for col in ("node", "operator", "backend", "speedup", "genes changed"):
            p.add_column(col)
        prev = None
        for r in lineage.path_to(store.nodes, top["id"]):
            res = r["result"]
            p.add_row(str(r["id"]), str(r.get("operator", "?")),
                      str((r.get("candidate") or {}).get("backend", "")),
                      _x(res.get("speedup")) if res.get("ok") else f"failed ({res['stage']})",
                      _changed(prev, r))
            prev = r
        con.print(p)

    f = Table(title="failures by stage")
    f.add_column("stage")
    f.add_column("count", justify="right")
    by_stage = s.get("failures_by_stage")
    for stage, n in sorted((by_stage if isinstance(by_stage, dict) else {}).items(),
                           key=lambda kv: str(kv[0])):
        f.add_row(str(stage), str(n))
    con.print(f)
    if plot:
        from .plots import run_figure
        run_figure(store.nodes, plot, f"{s.get('op')} · {s.get('policy')} · seed {s.get('seed')}")
        con.print(f"plot: {plot}")
    return 0
