"""The ``kdsl`` command line."""
from __future__ import annotations

import argparse
import sys

from . import __version__
from .errors import SpecError, UsageError

SEARCH_BUDGET = 30  # evaluations a search makes unless told (about a minute for c, 2 cores)


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage in one line with exit code 2."""

    def error(self, message):  # noqa: D401
        raise UsageError(message)


class _Help(argparse.HelpFormatter):
    """Shows each option's default after its help, where there is one to show (a None or
    False default means "not given"; such options say in their help what that does)."""

    def _get_help_string(self, action):
        text = action.help or ""
        d = action.default
        if ("%(default)" in text or not action.option_strings or d is None or d is False
                or d is argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


HelpFormatter = _Help  # for subcommands defined in other modules


def subcommand(sub, name: str, text: str) -> argparse.ArgumentParser:
    """A subcommand whose help shows each option's default; every option needs ``help=``
    (tests/test_cli_polish.py checks all of them)."""
    return sub.add_parser(name, help=text, description=text, formatter_class=_Help)


def _build() -> argparse.ArgumentParser:
    p = _Parser(prog="kdsl", description="Search for fast, correct compute kernels.",
                formatter_class=_Help)
    p.add_argument("--version", action="version", version=f"kdsl {__version__}",
                   help="print kdsl's version and exit")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return subcommand(sub, name, text)

    c = command("check", "parse, check and verify the baseline of specs")
    c.add_argument("files", nargs="+", help=".kspec files to check")
    c.add_argument("--seed", type=int, default=0, help="seed of the generated test cases")
    c.add_argument("--cases", type=int, default=8, help="cases per dtype")

    s = command("show", "print a spec's IR, or a run directory's summary and candidates")
    s.add_argument("file", help="a .kspec file or a run directory")
    s.add_argument("--op", help="(specs) the op to show (default: every op in the file)")
    s.add_argument("--json", action="store_true",
                   help="(runs) print the summary and every candidate as JSON")
    s.add_argument("--top", type=_positive, metavar="N",
                   help="(runs) list only the N fastest candidates (default: all, by id)")
    s.add_argument("--plot", metavar="FILE",
                   help="(runs) draw best-so-far and the lineage tree to FILE, a .png (default: "
                        "no drawing)")

    k = command("cases", "list the test shapes of a spec")
    k.add_argument("file", help="a .kspec file")
    k.add_argument("--op", help="the op whose cases to list (default: every op in the file)")
    k.add_argument("--seed", type=int, default=0, help="seed of the generated test cases")
    k.add_argument("--cases", type=int, default=8, help="cases per dtype")

    e = command("eval", "evaluate one candidate kernel and print each stage")
    e.add_argument("spec", help="a .kspec file")
    e.add_argument("--op", help="the op to evaluate (default: the file's only op)")
    e.add_argument("--backend", required=True, help="the backend that renders the kernel")
    e.add_argument("--genome", help="JSON object of genes (default: the backend's default "
                                    "genome)")
    e.add_argument("--source", metavar="FILE",
                   help="a kernel source file to evaluate (default: render one from the "
                        "genome)")
    e.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where to run and time the kernel")
    e.add_argument("--no-time", action="store_true", help="check correctness only")
    _baseline_option(e)

    r = command("search", "search for fast kernels for an op")
    r.add_argument("spec", help="a .kspec file")
    _search_options(r)
    r.add_argument("--out", metavar="DIR",
                   help="the run directory to create (default: runs/SPEC-POLICY-SEED, with "
                        "-2, -3, ... when taken)")
    r.add_argument("--cache", metavar="FILE",
                   help="a measurement cache (SQLite file) shared between runs (default: "
                        "DIR/cache.sqlite, the run's own)")

    m = command("resume", "continue a stopped run, or extend a finished one")
    m.add_argument("run", help="the run directory")
    m.add_argument("--budget", type=int, metavar="N",
                   help="evaluate N more candidates beyond those recorded (default: go on "
                        "to the budget the run was started with)")
    m.add_argument("--quiet", action="store_true", help="log lines instead of a live display")

    c = command("compare", "pit search policies against each other")
    c.add_argument("spec", help="a .kspec file")
    _search_options(c, compare=True)
    c.add_argument("--policies", default="mcts,greedy,random,evolution",
                   help="policies to compare, joined by commas, each with parameters after "
                        "colons if wanted: mcts,uct:c=0.3,greedy")
    c.add_argument("--seeds", default="0-4", help="a range 0-4 or a list 0,1,2")
    c.add_argument("--out", required=True, metavar="DIR",
                   help="a directory for the runs (one per policy and seed), their shared "
                        "cache, compare.json and compare.png; a run already there is reused")

    pr = command("profile", "profile one candidate at its bench point: ncu on cuda, perf "
                            "stat on cpu, and what bounds it")
    pr.add_argument("spec", help="a .kspec file")
    pr.add_argument("--op", help="the op to profile (default: the file's only op)")
    pr.add_argument("--backend", default="triton", help="the backend that renders the kernel")
    pr.add_argument("--genome", help="JSON object of genes (default: the backend's default "
                                     "genome)")
    pr.add_argument("--source", metavar="FILE",
                    help="a kernel source file to profile (default: render one from the "
                         "genome)")
    pr.add_argument("--device", choices=("cpu", "cuda"),
                    help="where to run it (default: cuda for triton, else cpu)")
    pr.add_argument("--json", action="store_true",
                    help="print the profile and its diagnosis as JSON")

    k2 = command("knowledge", "what kdsl has learned, and its notes")
    k2.add_argument("action", choices=("show", "notes"),
                    help="show: what earlier runs learned; notes: list the hardware notes")
    k2.add_argument("--path", metavar="FILE",
                    help="the learned-knowledge store (default: $KDSL_KNOWLEDGE_DIR/"
                         "learned.json, else ~/.local/share/kdsl/learned.json)")

    x = command("export", "write a run's best kernel as a standalone module")
    x.add_argument("run", help="the run directory")
    x.add_argument("--out", required=True, metavar="FILE",
                   help="the Python file to write: a file name, not a directory (unlike "
                        "search's and compare's --out), in a directory that exists")
    x.add_argument("--format", choices=("module", "kernelbench"), default="module",
                   help="module: a torch op and a run() function; kernelbench: a "
                        "KernelBench ModelNew")
    x.add_argument("--force", action="store_true",
                   help="export the run's best even where its re-measurement found it slower "
                        "than the run's starting genome or the baseline")
    i = command("import", "make a .kspec spec of a PyTorch module in KernelBench's form")
    i.description = ("Trace a module file (class Model, get_inputs(), get_init_inputs()) with "
                     "torch.export to core ATen, map each op to index notation, and write one "
                     ".kspec spec; by default the spec is checked against the module's output.")
    i.add_argument("files", nargs="+", metavar="model.py",
                   help="module files in KernelBench's form")
    i.add_argument("--out", metavar="DIR",
                   help="folder to write NAME.kspec into, created if missing (default: "
                        "print the spec)")
    i.add_argument("--no-check", dest="check", action="store_false",
                   help="skip running the module against the spec's float64 reference (it "
                        "runs by default)")
    return p


def _search_options(p, compare: bool = False) -> None:
    p.add_argument("--op", help="the op to search (default: the file's only op)")
    p.add_argument("--backend", default="c", help="a backend, or several joined by commas")
    if not compare:
        p.add_argument("--policy", default="mcts",
                       help="search policy: mcts (a tree over the genome's decisions), uct (a "
                            "tree over mutated kernels), greedy, random or evolution; "
                            "parameters after colons, e.g. mcts:c=0.3:mutation=0.2")
        p.add_argument("--seed", type=int, default=0, metavar="N",
                       help="seed of every random choice")
    p.add_argument("--budget", type=_positive, default=SEARCH_BUDGET, metavar="N",
                   help="candidates to evaluate" + (" per run" if compare else ""))
    p.add_argument("--workers", type=int, default=1, metavar="N", help="evaluations run at once")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where kernels run and are timed")
    _baseline_option(p)
    p.add_argument("--executor", choices=("inline", "pool", "ray"), default="pool",
                   help="where evaluations run: in this process (inline), in local worker "
                        "processes (pool) or on a Ray cluster")
    p.add_argument("--ray-address", metavar="ADDRESS",
                   help="(ray) address of a running cluster (default: start a local one)")
    p.add_argument("--quiet", action="store_true", help="log lines instead of a live display")
    p.add_argument("--llm", choices=("auto", "off", "anthropic", "replay"), default="auto",
                   help="LLM operators; auto is anthropic when ANTHROPIC_API_KEY is set and "
                        "the llm extra is installed, else off")
    p.add_argument("--model", default="claude-sonnet-4-5", help="(LLM) the model to ask")
    p.add_argument("--max-llm-calls", type=int, metavar="N",
                   help="(LLM) calls a run may make (default: no limit)")
    p.add_argument("--llm-repairs", type=int, default=2, metavar="N",
                   help="(LLM) repair attempts per failed child")
    p.add_argument("--llm-call-timeout", type=_seconds, default=300.0, metavar="SECONDS",
                   help="deadline of one LLM call, its retries and their waits included; a "
                        "call that reaches it is a failed child")
    p.add_argument("--llm-run-budget", type=_seconds_or_none, default=3600.0,
                   metavar="SECONDS",
                   help="seconds a run may spend waiting on LLM calls in all; when they are "
                        "spent the search goes on without LLM operators ('none': no limit)")
    p.add_argument("--replay-from", metavar="RUN",
                   help="(--llm replay) the run (or exchanges file) whose exchanges to replay "
                        "(default: none; --llm replay needs it)")
    p.add_argument("--no-priors", action="store_true",
                   help="ignore what earlier runs learned about operator weights")
    p.add_argument("--no-stored", action="store_true",
                   help="start from the backend's defaults, not the best genome in specs/genomes/")
    if compare:
        p.add_argument("--confirm-rounds", type=int, default=3, metavar="N",
                       help="after the runs, evaluate the 4 fastest kernels of all runs, then "
                            "every kernel timed at the target (95%% of the best), N times more "
                            "and read every curve with their medians (0: the searches' single "
                            "timings)")
    else:
        p.add_argument("--confirm-rounds", type=int, default=3, metavar="N",
                       help="at the end, re-measure the best candidates and the starting "
                            "genome N times each, interleaved, and crown the best median (0: "
                            "keep the search's single timings)")
    if not compare:
        p.add_argument("--profile", type=int, default=0, metavar="K",
                       help="profile the K best kernels at the end (ncu on cuda, perf stat "
                            "on cpu) and each new best during the search, whose diagnosis "
                            "steers the operators, the LLM prompts and the cost model "
                            "(0: no profiles)")
        p.add_argument("--profile-during", type=int, default=3, metavar="N",
                       help="(--profile) new bests profiled during the search, at most")
        p.add_argument("--stop-at-sol", type=float, metavar="F",
                       help="(--profile) stop the search once a profiled best runs at this "
                            "fraction of speed-of-light, e.g. 0.9 (default: never)")
    p.add_argument("--cost-model", choices=("auto", "on", "off"), default="auto",
                   help="rank proposals with a learned cost model (lightgbm, the model extra); "
                        "auto: on when lightgbm is installed")
    p.add_argument("--warm-from", action="append", metavar="CACHE",
                   help="a measurement cache (a search's --cache, a compare's "
                        "DIR/cache.sqlite) whose rows of other ops of this op's class "
                        "warm-start the cost model; may be given more than once" +
                        (" (the runs of policies marked +warm, e.g. mcts+warm, or every "
                         "run where none is marked)" if compare else "") +
                        (" (default: none)" if compare else " (default: none; without "
                         "--no-priors the run's own --cache warms it too)"))


def _baseline_option(p) -> None:
    p.add_argument("--baseline", choices=("auto", "eager", "compile"), default="auto",
                   help="what speedups are measured against: the spec's torch baseline, run "
                        "eagerly or under torch.compile; auto is torch.compile on cuda and "
                        "eager on cpu")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


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
        args = _build().parse_args(argv)  # --help and --version exit (SystemExit, code 0)
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
