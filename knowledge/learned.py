"""Learned knowledge: what earlier runs taught about operators and genes, per op class.

After a run, ``record_run`` adds its evidence under the key
(op class, backend, device): for each operator, how many children it made,
how many beat their parent, the summed speedup gain over the parent, and how
many failed; and which gene values the run's best kernels used. Before a run,
``priors`` turns that into operator weight multipliers and ``gene_hints``
into suggested gene values.

Conventions:

* reward = speedup when the result is ok, else 0 (as in the search);
* a child's parent reward is its best parent's (crossover has two); a node
  without parents (a draft) is compared with the baseline, reward 1.0;
* the store is one JSON file, ``{"version": 1, "entries": {key: entry}}``,
  written atomically; unknown fields are kept. A missing file is an empty
  store; a corrupt one is copied to ``<file>.bak`` and started afresh. The
  store is advisory: nothing here raises into a search.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import warnings
from pathlib import Path

VERSION = 1
PRIOR_RANGE = (0.5, 2.0)
SHRINK_N = 10          # observations at which a prior moves halfway to its evidence
TOP_FRACTION = 0.1     # the "best kernels" of a run: this share of its ok nodes ...
TOP_MIN, TOP_MAX = 3, 10   # ... but at least 3 and at most 10 of them
HINT_MIN_COUNT = 2
HINT_MIN_SHARE = 0.5


def default_path() -> Path:
    """``$KDSL_KNOWLEDGE_DIR/learned.json``, else ``~/.local/share/kdsl/learned.json``."""
    base = os.environ.get("KDSL_KNOWLEDGE_DIR")
    return (Path(base) if base else Path.home() / ".local" / "share" / "kdsl") / "learned.json"


def key(op_class: str, backend: str, device: str) -> str:
    return f"{op_class}|{backend}|{device}"


# ---- the file ------------------------------------------------------------------

def _empty() -> dict:
    return {"version": VERSION, "entries": {}}


def _valid(data) -> bool:
    return (isinstance(data, dict) and isinstance(data.get("entries"), dict)
            and all(isinstance(e, dict) for e in data["entries"].values()))


def load(path: str | Path) -> dict:
    """The store at ``path``; empty when missing; a corrupt file is kept as ``.bak``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return _empty()
    except OSError as e:
        warnings.warn(f"learned knowledge: cannot read {p}: {e}; using an empty store")
        return _empty()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not _valid(data):
        bak = p.with_name(p.name + ".bak")
        with contextlib.suppress(OSError):
            shutil.copyfile(p, bak)
        warnings.warn(f"learned knowledge: {p} is corrupt; saved it as {bak}, starting afresh")
        return _empty()
    return data


def save(path: str | Path, data: dict) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=p.name, suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on ``<file>.lock`` while the store is read, changed and written."""
    try:
        import fcntl
    except ImportError:  # not POSIX: last writer wins
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# ---- recording -----------------------------------------------------------------

def _reward(node: dict) -> float:
    res = node.get("result") or {}
    if not res.get("ok"):
        return 0.0
    try:
        s = float(res.get("speedup") or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return s if math.isfinite(s) else 0.0


def _genome(node: dict) -> dict:
    g = (node.get("candidate") or {}).get("genome") or {}
    return g if isinstance(g, dict) else {}


def _add(entry: dict, nodes: list[dict], by_id: dict) -> None:
    ops = entry.setdefault("operators", {})
    for n in nodes:
        name = str(n.get("operator") or "?")
        parents = [by_id[p] for p in (n.get("parents") or []) if p in by_id]
        base = max((_reward(p) for p in parents), default=1.0)
        r = _reward(n)
        s = ops.setdefault(name, {})
        for k in ("children", "wins", "failures"):
            s.setdefault(k, 0)
        s.setdefault("gain_sum", 0.0)
        s["children"] += 1
        s["wins"] += int(r > base)
        s["failures"] += int(not (n.get("result") or {}).get("ok"))
        s["gain_sum"] += r - base
    ok = sorted((n for n in nodes if _reward(n) > 0), key=_reward, reverse=True)
    top = ok[:max(TOP_MIN, min(TOP_MAX, math.ceil(TOP_FRACTION * len(ok))))]
    genes = entry.setdefault("genes", {})
    for n in top:
        for name, value in _genome(n).items():
            v = json.dumps(value, sort_keys=True, default=str)
            counts = genes.setdefault(str(name), {})
            counts[v] = counts.get(v, 0) + 1
    if ok:
        entry["best_speedup"] = max(entry.get("best_speedup", 0.0), _reward(ok[0]))


def record_run(store_path: str | Path, op_class: str, backend: str, device: str,
               nodes: list[dict], run_id: str | None = None) -> bool:
    """Add one run's nodes to the store; True when recorded.

    Each node has ``id``, ``operator``, ``parents`` (ids), ``result`` ({ok,
    speedup}) and ``candidate`` ({genome, ...}). Nodes whose candidate names
    another backend are left out (their ids still serve as parents). With a
    ``run_id``, recording the same run twice (a resume) counts it once.
    Failures to read or write the store are warnings, never exceptions.
    """
    by_id = {n.get("id"): n for n in nodes if n.get("id") is not None}
    mine = [n for n in nodes
            if (n.get("candidate") or {}).get("backend", backend) == backend]
    if not mine:
        return False
    p = Path(store_path)
    try:
        with _locked(p):
            data = load(p)
            entry = data["entries"].setdefault(key(op_class, backend, device), {})
            seen = entry.setdefault("run_ids", [])
            if run_id is not None and run_id in seen:
                return False
            _add(entry, mine, by_id)
            entry["runs"] = entry.get("runs", 0) + 1
            if run_id is not None:
                seen.append(run_id)
            save(p, data)
    except Exception as e:  # advisory: a search never fails on its knowledge
        warnings.warn(f"learned knowledge: could not record the run in {p}: {e}")
        return False
    return True


# ---- reading -------------------------------------------------------------------

def _entry(path, op_class, backend, device) -> dict:
    return load(path)["entries"].get(key(op_class, backend, device)) or {}


def _stats(entry: dict) -> dict[str, dict]:
    ops = entry.get("operators")
    return {k: v for k, v in ops.items() if isinstance(v, dict)} if isinstance(ops, dict) else {}


def _priors_of(entry: dict) -> dict[str, float]:
    ops = _stats(entry)
    total_n = sum(int(s.get("children", 0)) for s in ops.values())
    total_w = sum(int(s.get("wins", 0)) for s in ops.values())
    pooled = (total_w + 1) / (total_n + 2)
    lo, hi = PRIOR_RANGE
    out = {}
    for name, s in ops.items():
        n, w = int(s.get("children", 0)), int(s.get("wins", 0))
        ratio = ((w + 1) / (n + 2)) / pooled        # this operator's win rate vs everyone's
        trust = n / (n + SHRINK_N)                  # few observations: stay near 1.0
        out[name] = round(min(hi, max(lo, ratio ** trust)), 4)
    return out


def priors(path: str | Path, op_class: str, backend: str, device: str) -> dict[str, float]:
    """Operator weight multipliers in [0.5, 2.0]; operators never seen are absent (1.0)."""
    try:
        return _priors_of(_entry(path, op_class, backend, device))
    except Exception as e:  # advisory: a search never fails on its knowledge
        warnings.warn(f"learned knowledge: cannot use {path}: {e}")
        return {}


def _hints_of(entry: dict) -> dict:
    out = {}
    for name, counts in sorted((entry.get("genes") or {}).items()):
        if not isinstance(counts, dict) or not counts:
            continue
        value, c = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if c >= HINT_MIN_COUNT and c >= HINT_MIN_SHARE * sum(counts.values()):
            with contextlib.suppress(ValueError):
                out[name] = json.loads(value)
    return out


def gene_hints(path: str | Path, op_class: str, backend: str, device: str) -> dict:
    """Gene values that most of the best kernels of earlier runs agreed on."""
    try:
        return _hints_of(_entry(path, op_class, backend, device))
    except Exception as e:  # advisory, as for priors
        warnings.warn(f"learned knowledge: cannot use {path}: {e}")
        return {}


def describe(path: str | Path) -> str:
    """The store as text, one block per (op class, backend, device): ``kdsl knowledge show``."""
    data = load(path)
    if not data["entries"]:
        return f"{path}: no learned knowledge yet"
    out = [f"learned knowledge in {path}"]
    for k in sorted(data["entries"]):
        e = data["entries"][k]
        op_class, backend, device = (k.split("|") + ["?", "?"])[:3]
        out.append("")
        out.append(f"{op_class} on {backend}/{device}: {e.get('runs', 0)} run(s), "
                   f"best speedup {e.get('best_speedup', 0.0):.3g}x")
        pri = _priors_of(e)
        rows = [("operator", "children", "wins", "win%", "mean gain", "failed", "prior")]
        for name, s in sorted(_stats(e).items()):
            n = int(s.get("children", 0))
            rows.append((name, str(n), str(s.get("wins", 0)),
                         f"{100 * s.get('wins', 0) / n:.0f}" if n else "-",
                         f"{s.get('gain_sum', 0.0) / n:+.3f}" if n else "-",
                         str(s.get("failures", 0)), f"{pri.get(name, 1.0):.2f}"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            out.append("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                        for i, (c, w) in enumerate(zip(r, widths))))
        hints = _hints_of(e)
        if hints:
            out.append("  gene hints: " + ", ".join(f"{g}={json.dumps(v)}"
                                                    for g, v in hints.items()))
    return "\n".join(out)
