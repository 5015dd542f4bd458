"""``kdsl import model.py [--out DIR] [--no-check]``: the CLI face of ``import_model``
(its options are parsed in ``kdsl/cli.py``, which stays cheap to load)."""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import UsageError
from . import import_model
from .agreement import Disagreement
from .errors import ImportFailure


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
