"""The subcommands behind ``kdsl``: each takes parsed args and returns an exit code."""
from __future__ import annotations

import sys

from . import spec as spec_mod
from .agreement import check_agreement
from .cases import shapes
from .errors import SpecError, UsageError
from .show import format_op


def _load_op(path: str, op_name: str | None):
    spec = spec_mod.load(path)
    try:
        return spec_mod.find_op(spec, op_name)
    except KeyError as e:
        raise UsageError(e.args[0]) from None


def cmd_check(args) -> int:
    status = 0
    for path in args.files:
        try:
            spec = spec_mod.load(path)
        except SpecError as e:
            print(e.render(), file=sys.stderr)
            status = 2
            continue
        for op in spec.ops:
            a = check_agreement(op, seed=args.seed, per_dtype=args.cases)
            if a.ok:
                n = len(a.dtypes)
                print(f"ok {op.name}: {n} dtype{'s' * (n != 1)}, baseline agrees on "
                      f"{a.cases} cases")
            else:
                status = 2
                where = f"{path}:{op.loc.line}:{op.loc.column}: error: baseline of '{op.name}'"
                if a.failures:
                    print(f"{where} disagrees with the reference on {len(a.failures)} of "
                          f"{a.cases} cases", file=sys.stderr)
                    for f in a.failures[:5]:
                        print(f"  {f}", file=sys.stderr)
                if a.upper_failures:
                    print(f"{where} raises on {len(a.upper_failures)} of the judge's {a.upper} "
                          f"upper-end cases (each test range at its maximum, the others "
                          f"small): narrow the test ranges or make the baseline take them",
                          file=sys.stderr)
                    for f in a.upper_failures[:5]:
                        print(f"  {f}", file=sys.stderr)
    return status


def cmd_show(args) -> int:
    from pathlib import Path
    if Path(args.file).is_dir():
        from kdsl.search.show_run import show_run
        return show_run(args.file, args.plot, as_json=args.json, top=args.top)
    if args.json or args.top or args.plot:
        flag = "--json" if args.json else "--top" if args.top else "--plot"
        raise UsageError(f"{flag} is for run directories, and {args.file} is not one")
    op = _load_op(args.file, args.op) if args.op else None
    ops = [op] if op else spec_mod.load(args.file).ops
    print("\n\n".join(format_op(o) for o in ops))
    return 0


def cmd_cases(args) -> int:
    spec = spec_mod.load(args.file)
    ops = [_load_op(args.file, args.op)] if args.op else spec.ops
    for op in ops:
        print(f"op {op.name} (seed {args.seed})")
        for s in shapes(op, args.seed, args.cases):
            print(f"  {s.index:>2} {s.describe()}")
    return 0


def cmd_eval(args) -> int:
    from kdsl.search.eval_command import run
    return run(args)


def cmd_search(args) -> int:
    from kdsl.search.commands import search
    return search(args)


def cmd_resume(args) -> int:
    from kdsl.search.commands import resume
    return resume(args)


def cmd_compare(args) -> int:
    from kdsl.search.compare import compare
    from kdsl.search.files import check_out
    check_out(args.out, "--out")  # before any run is started in it
    return compare(args)


def cmd_export(args) -> int:
    from kdsl.search.export import export
    return export(args)


def cmd_profile(args) -> int:
    from kdsl.search.profile.command import run
    return run(args)


def cmd_knowledge(args) -> int:
    from kdsl.knowledge import learned, notes
    if args.action == "show":
        path = args.path or learned.default_path()
        print(learned.describe(path))
    else:
        for n in notes.load():
            print(f"{n.path}: {n.title}")
    return 0


def cmd_import(args) -> int:
    from .importer.command import run  # (sympy and torch.export: loaded only here)
    return run(args)
