"""``kdsl import model.py [--out DIR] [--no-check]``: the CLI face of ``import_model``.

The lead wires these two functions into ``kdsl/cli.py``: ``add_parser(subparsers)`` then
``run(args)`` for the ``import`` subcommand.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import UsageError
from . import import_model
from .agreement import Disagreement
from .errors import ImportFailure


def add_parser(subparsers):
    p = subparsers.add_parser(
        "import", help="make a .kspec spec of a PyTorch module in KernelBench's form",
        description="Trace a module file (class Model, get_inputs(), get_init_inputs()) with "
                    "torch.export to core ATen, map each op to index notation, and write one "
                    ".kspec spec; by default the spec is checked against the module's output.")
    p.add_argument("files", nargs="+", metavar="model.py",
                   help="module files in KernelBench's form")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="folder to write NAME.kspec into (created if missing); "
                        "default: print the spec to stdout")
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="skip running the module against the spec's float64 reference "
                        "(on by default)")
    return p


def run(args) -> int:
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a directory")
    status = 0
    for path in args.files:
        if not Path(path).is_file():
            raise UsageError(f"{path}: no such file")
        try:
            imported = import_model(path, check=args.check)
        except Disagreement as e:
            print(f"{path}: error: {e}", file=sys.stderr)
            status = 2
            continue
        except ImportFailure as e:
            print(f"{path}: error: {e}", file=sys.stderr)
            status = 2
            continue
        if out is None:
            sys.stdout.write(imported.spec_text)
            continue
        try:
            out.mkdir(parents=True, exist_ok=True)
            target = out / f"{imported.name}.kspec"
            target.write_text(imported.spec_text)
        except OSError as e:
            raise UsageError(f"--out {args.out}: cannot write: {e.strerror}") from None
        checked = "agrees with the module" if imported.checked else "not checked"
        print(f"wrote {target} ({checked})")
    return status
