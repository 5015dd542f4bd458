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

    s = sub.add_parser("show", help="print a spec's IR")
    s.add_argument("file")
    s.add_argument("--op")

    k = sub.add_parser("cases", help="list the test shapes of a spec")
    k.add_argument("file")
    k.add_argument("--op")
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("--cases", type=int, default=8, help="cases per dtype")
    return p


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


if __name__ == "__main__":
    sys.exit(main())
