"""``kdsl show RUN``: the summary, every candidate, the best kernel's lineage, failures by
stage, each profiled kernel's diagnosis; ``--json`` the same as one machine-readable record. Figures are rounded: a time to
4 significant digits, a speedup to 3 decimals (JSON keeps 6 significant digits)."""
from __future__ import annotations

import json
import math
import sys

from rich.console import Console
from rich.table import Table

from kdsl.errors import UsageError

from . import lineage
from .files import check_out
from .policies.base import ROOT
from .runstore import RunError, RunStore

JSON_DIGITS = 6  # significant digits of a float in --json


def _changed(parent: dict | None, node: dict) -> str:
    genes = (node.get("candidate") or {}).get("genome") or {}
    if not isinstance(genes, dict):
        return str(genes)
    if parent is None:
        return ", ".join(f"{k}={v}" for k, v in genes.items())
    before = (parent.get("candidate") or {}).get("genome") or {}
    diff = [f"{k}={v}" for k, v in genes.items() if before.get(k) != v]
    return ", ".join(diff) or "(same genes)"


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _x(speedup) -> str:
    """A speedup as '1.234x'; whatever a hand-edited summary holds, as it is."""
    return f"{speedup:.3f}x" if _is_number(speedup) else f"{speedup}x"


def _ms(value) -> str:
    """A time as '0.01234 ms' (4 significant digits); '-' where there is none."""
    if value is None:
        return "-"
    return f"{value:.4g} ms" if _is_number(value) else f"{value} ms"


def _figure(value) -> str:
    """Any summary value as text, a float to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def rounded(value, digits: int = JSON_DIGITS):
    """``value`` with every float in it to ``digits`` significant digits (and a float that
    is not finite as None, which JSON can hold)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


def candidate_rows(nodes: list[dict], best_node: int | None = None) -> list[dict]:
    """One plain record per candidate, in id order: what a table or a script needs.
    ``best_node``: the run's confirmed best (summary.json), else the fastest record."""
    top = next((r for r in nodes if r["id"] == best_node), None) if best_node is not None \
        else None
    top = top or lineage.best(nodes)
    on_path = {r["id"] for r in lineage.path_to(nodes, top["id"])} if top else set()
    rows = []
    for r in sorted(nodes, key=lambda r: r["id"]):
        res, cand = r["result"], r.get("candidate") or {}
        message = str(res.get("message") or "")
        rows.append({
            "id": r["id"], "parents": [p for p in r.get("parents", []) if p != ROOT],
            "kind": r.get("kind"), "operator": r.get("operator"),
            "backend": cand.get("backend"), "genome": cand.get("genome"),
            "ok": res["ok"], "stage": res["stage"],
            "message": message.splitlines()[0][:200] if message and not res["ok"] else "",
            "time_ms": res.get("time_ms"), "baseline_ms": res.get("baseline_ms"),
            "speedup": res.get("speedup") if res["ok"] else 0.0,
            "source_path": r.get("source_path"),
            "best": top is not None and r["id"] == top["id"],
            "on_best_lineage": r["id"] in on_path})
    return rows


def _open(path: str) -> RunStore:
    try:
        return RunStore.open(path)
    except RunError as e:
        raise UsageError(str(e)) from None


def show_run(path: str, plot: str | None = None, as_json: bool = False,
             top: int | None = None) -> int:
    if plot:
        check_out(plot, "--plot", kind="file")
        from .plots import require
        require()  # a missing matplotlib said before the summary, not after it
    store = _open(path)
    s = store.summary()
    confirmed = (s.get("confirmed") or {}).get("best_node") if isinstance(s, dict) else None
    rows = candidate_rows(store.nodes, confirmed)
    if as_json:
        best = next((r for r in store.nodes if r["id"] == confirmed), None) \
            or lineage.best(store.nodes)
        record = {"run": str(path), "summary": s,
                  "best_lineage": [r["id"] for r in lineage.path_to(store.nodes, best["id"])]
                  if best else [],
                  "candidates": rows, "profiles": _profile_rows(store)}
        print(json.dumps(rounded(record), indent=2, default=str))
    else:
        _print_tables(path, store, s, rows, top)
    if plot:
        from .plots import run_figure
        run_figure(store.nodes, plot, f"{s.get('op')} · {s.get('policy')} · seed {s.get('seed')}")
        print(f"plot: {plot}", file=sys.stderr if as_json else sys.stdout)
    return 0


def _print_tables(path: str, store: RunStore, s: dict, rows: list[dict],
                  top: int | None) -> None:
    con = Console()
    con.print(_summary_table(path, s))
    con.print(_candidates_table(rows, top))
    best = lineage.best(store.nodes)
    if best is not None:
        con.print(_lineage_table(store.nodes, best))
    profiles = _profile_rows(store)
    if profiles:
        con.print(_profiles_table(profiles))
    by_stage = s.get("failures_by_stage")
    by_stage = by_stage if isinstance(by_stage, dict) else {}
    if not by_stage:
        con.print("failures by stage: none")
        return
    f = Table(title="failures by stage")
    f.add_column("stage")
    f.add_column("count", justify="right")
    for stage, n in sorted(by_stage.items(), key=lambda kv: str(kv[0])):
        f.add_row(str(stage), str(n))
    con.print(f)


def _profile_rows(store: RunStore) -> list[dict]:
    from .profile.loop import row_of
    return [row_of(r) for r in store.profiles]


def _profiles_table(rows: list[dict]) -> Table:
    t = Table(title="profiles (what bounds each profiled kernel)")
    for col, justify in (("node", "right"), ("when", "left"), ("tool", "left"),
                         ("speed-of-light", "right"), ("diagnosis", "left")):
        t.add_column(col, justify=justify, overflow="fold")
    for r in rows:
        sol = f"{r['sol'] * 100:.0f}%" if _is_number(r.get("sol")) else "-"
        t.add_row(str(r["node"]), str(r.get("when") or ""), str(r.get("tool") or ""), sol,
                  r["line"] if r["ok"] else f"no profile: {r['line']}")
    return t


def _summary_table(path: str, s: dict) -> Table:
    t = Table(title=f"run {path}", show_header=False)
    for key in ("spec", "op", "backend", "device", "policy", "seed", "budget", "evaluations",
                "failures"):
        if key in s:
            t.add_row(key, _figure(s[key]))
    if _is_number(s.get("elapsed_s")):
        t.add_row("elapsed", f"{s['elapsed_s']:.1f} s")
    if _is_number(s.get("evaluations_per_s")):
        t.add_row("evaluations per s", f"{s['evaluations_per_s']:.3g}")
    if "stopped" in s:
        t.add_row("stopped", str(s["stopped"]))
    if s.get("stopped_early"):
        t.add_row("stopped early", str(s["stopped_early"]))
    base = s.get("baseline") if isinstance(s.get("baseline"), dict) else {}
    t.add_row("baseline", f"{base.get('name')} {_ms(base.get('time_ms'))}")
    best = s.get("best")
    if isinstance(best, dict):
        spread = best.get("spread")
        how = (f" (median of re-measurements, spread {_x(spread[0])}-{_x(spread[1])}; "
               f"{best.get('verdict')})" if isinstance(spread, list) and len(spread) == 2
               and all(_is_number(v) for v in spread) else "")
        t.add_row("best", f"node {best.get('node')}: {_x(best.get('speedup'))}{how}, "
                          f"{_ms(best.get('time_ms'))}, {best.get('source_path')}")
    env = s.get("environment")
    if isinstance(env, dict) and env.get("device_model"):
        t.add_row("measured on", f"{env.get('device_model')} (torch {env.get('torch')}, "
                                 f"triton {env.get('triton')}, kdsl {env.get('kdsl')})")
    return t


def _candidates_table(rows: list[dict], top: int | None) -> Table:
    shown = rows
    title = f"candidates ({len(rows)}; the best in bold, its lineage in green)"
    if top is not None:
        shown = sorted((r for r in rows if r["ok"]), key=lambda r: (-r["speedup"], r["id"]))
        shown = shown[:top]
        title = f"the {len(shown)} fastest of {len(rows)} candidates"
    cells = [(str(r["id"]), ",".join(map(str, r["parents"])) or "-", str(r["operator"]),
              str(r["backend"] or "-"), "ok" if r["ok"] else f"failed: {r['stage']}",
              _ms(r["time_ms"]) if r["ok"] else "-", _x(r["speedup"]) if r["ok"] else "-")
             for r in shown]
    t = Table(title=title)
    # figures are never cut short: a narrow terminal wraps the words instead
    for i, (col, figure) in enumerate((("id", True), ("parent", False), ("operator", False),
                                       ("backend", False), ("stage/ok", False),
                                       ("time", True), ("speedup", True))):
        width = max([len(col)] + [len(c[i]) for c in cells]) if figure else None
        t.add_column(col, justify="right" if figure else "left", no_wrap=figure,
                     min_width=width, overflow="fold")
    for r, row in zip(shown, cells):
        style = "bold green" if r["best"] else "green" if r["on_best_lineage"] else None
        t.add_row(*row, style=style)
    return t


def _lineage_table(nodes: list[dict], best: dict) -> Table:
    p = Table(title="lineage of the best kernel")
    for col in ("node", "operator", "backend", "time", "speedup", "genes changed"):
        p.add_column(col)
    prev = None
    for r in lineage.path_to(nodes, best["id"]):
        res = r["result"]
        p.add_row(str(r["id"]), str(r.get("operator", "?")),
                  str((r.get("candidate") or {}).get("backend", "")),
                  _ms(res.get("time_ms")) if res.get("ok") else "-",
                  _x(res.get("speedup")) if res.get("ok") else f"failed ({res['stage']})",
                  _changed(prev, r))
        prev = r
    return p
