"""The ``kdsl`` command line."""
from __future__ import annotations

import argparse
import sys

from .errors import SpecError, UsageError


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage in one line with exit code 2."""

    def error(self, message):  # noqa: D401
        raise UsageError(message)


def _build() -> argparse.ArgumentParser:
    p = _Parser(prog="kdsl", description="Search for fast, correct compute kernels.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    c = sub.add_parser("check", help="parse, check and verify the baseline of specs")
    c.add_argument("files", nargs="+")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--cases", type=int, default=8, help="cases per dtype")

    s = sub.add_parser("show", help="print a spec's IR, or a run directory's summary")
    s.add_argument("file", help="a .kspec file or a run directory")
    s.add_argument("--op")
    s.add_argument("--plot", help="(runs) draw best-so-far and the lineage tree to FILE.png")

    k = sub.add_parser("cases", help="list the test shapes of a spec")
    k.add_argument("file")
    k.add_argument("--op")
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("--cases", type=int, default=8, help="cases per dtype")
    e = sub.add_parser("eval", help="evaluate one candidate kernel and print each stage")
    e.add_argument("spec")
    e.add_argument("--op")
    e.add_argument("--backend", required=True)
    e.add_argument("--genome", help="JSON object of genes (default genome when omitted)")
    e.add_argument("--source", help="a kernel source file to evaluate instead of rendering")
    e.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    e.add_argument("--no-time", action="store_true", help="check correctness only")
    r = sub.add_parser("search", help="search for fast kernels for an op")
    r.add_argument("spec")
    _search_options(r)
    r.add_argument("--out", help="run directory (default runs/OP-POLICY-SEED)")
    r.add_argument("--cache", help="measurement cache shared between runs")

    m = sub.add_parser("resume", help="continue a stopped run")
    m.add_argument("run")
    m.add_argument("--budget", type=int)
    m.add_argument("--quiet", action="store_true")

    c = sub.add_parser("compare", help="pit search policies against each other")
    c.add_argument("spec")
    _search_options(c, compare=True)
    c.add_argument("--policies", default="mcts,greedy,random,evolution")
    c.add_argument("--seeds", default="0-4", help="a range 0-4 or a list 0,1,2")
    c.add_argument("--out", required=True)

    k2 = sub.add_parser("knowledge", help="what kdsl has learned, and its notes")
    k2.add_argument("action", choices=("show", "notes"))
    k2.add_argument("--path", help="the learned-knowledge store (default: the user's)")

    x = sub.add_parser("export", help="write a run's best kernel as a standalone module")
    x.add_argument("run")
    x.add_argument("--out", required=True)
    x.add_argument("--format", choices=("module", "kernelbench"), default="module")
    return p


def _search_options(p, compare: bool = False) -> None:
    p.add_argument("--op")
    p.add_argument("--backend", default="c", help="a backend, or several joined by commas")
    if not compare:
        p.add_argument("--policy", default="mcts")
        p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", type=int, default=None)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--executor", choices=("inline", "pool", "ray"), default="pool")
    p.add_argument("--ray-address", help="(ray) address of a running cluster")
    p.add_argument("--quiet", action="store_true", help="log lines instead of a live display")
    p.add_argument("--llm", choices=("auto", "off", "anthropic", "replay"), default="auto",
                   help="LLM operators (auto: anthropic when ANTHROPIC_API_KEY is set)")
    p.add_argument("--model", default="claude-sonnet-4-5")
    p.add_argument("--max-llm-calls", type=int)
    p.add_argument("--llm-repairs", type=int, default=2, help="repair attempts per failed child")
    p.add_argument("--llm-call-timeout", type=_seconds, default=300.0, metavar="SECONDS",
                   help="deadline of one LLM call, its retries and their waits included; a "
                        "call that reaches it is a failed child (default: 300)")
    p.add_argument("--llm-run-budget", type=_seconds_or_none, default=3600.0,
                   metavar="SECONDS",
                   help="seconds a run may spend waiting on LLM calls in all; when they are "
                        "spent the search goes on without LLM operators ('none': no limit; "
                        "default: 3600)")
    p.add_argument("--replay-from", help="(--llm replay) the run whose exchanges to replay")
    p.add_argument("--no-priors", action="store_true",
                   help="ignore what earlier runs learned about operator weights")
    p.add_argument("--no-stored", action="store_true",
                   help="start from the backend's defaults, not the best genome in specs/genomes/")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got '{text}'") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got '{text}'")
    return value


def _seconds_or_none(text: str) -> float | None:
    return None if text.strip().lower() in ("none", "off", "unlimited") else _seconds(text)


def main(argv=None) -> int:
    try:
        args = _build().parse_args(argv)
        from . import commands
        return getattr(commands, f"cmd_{args.command}")(args)
    except UsageError as e:
        print(f"kdsl: error: {e}", file=sys.stderr)
        return 2
    except SpecError as e:
        print(e.render(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kdsl: interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        # a place the user named that cannot be read or written (a full disk, a path
        # through /proc): one line, as for any other bad input, never a traceback
        print(f"kdsl: error: {_os_error(e)}", file=sys.stderr)
        return 2


def _os_error(e: OSError) -> str:
    what = e.strerror or str(e)
    names = " -> ".join(str(n) for n in (e.filename, e.filename2) if n)
    return f"{names}: {what[:1].lower() + what[1:]}" if names else what


if __name__ == "__main__":
    sys.exit(main())
