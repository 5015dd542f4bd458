"""Loading specs: file -> checked ``ir.Spec``, or a ``SpecError`` with every diagnostic."""
from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

from . import ir
from .assemble import assemble
from .checker import check_op
from .errors import Diagnostic, SpecError
from .parser import MAX_SPEC_BYTES, check_size, decode, parse_tree


def parse_text(text: str, path: str = "<spec>") -> ir.Spec:
    raw = parse_tree(text, path)
    ops, diagnostics = assemble(raw, path, text)
    checked = []
    if not diagnostics:
        for op in ops:
            c, diags = check_op(op, path)
            diagnostics += diags
            if c is not None:
                # the spec's own text rides along (not hashed) for prompts and exports
                checked.append(dataclasses.replace(c, source_file=path, source_text=text))
    if diagnostics:
        raise SpecError(diagnostics, text)
    return ir.Spec(tuple(checked), path)


def load(path: str | Path) -> ir.Spec:
    path = str(path)
    try:
        with open(path, "rb") as f:  # no further than the limit: a spec may be /dev/zero
            data = f.read(MAX_SPEC_BYTES + 512)
    except OSError as e:
        raise SpecError([Diagnostic(path, 0, 0, f"cannot read: {e.strerror}")]) from None
    check_size(data, path)
    return parse_text(decode(data, path), path)


def library_dir() -> Path:
    """The shipped operator library (``specs/``, installed as ``kdsl.specs``)."""
    return Path(str(resources.files("kdsl.specs")))


def library() -> list[Path]:
    return sorted(library_dir().glob("*.kspec"))


def library_ops(names: list[str] | None = None) -> list[tuple[Path, ir.Op]]:
    """(spec path, op) for every op of the library, in library order; with ``names``, only
    those, and a KeyError naming any that no spec defines."""
    ops = [(path, op) for path in library() for op in load(path).ops]
    if names is None:
        return ops
    unknown = sorted(set(names) - {op.name for _, op in ops})
    if unknown:
        raise KeyError(f"no spec defines {', '.join(unknown)}")
    return [(path, op) for path, op in ops if op.name in names]


def find_op(spec: ir.Spec, name: str | None) -> ir.Op:
    """The op named ``name``, or the only op; KeyError with a helpful message otherwise."""
    if name is None:
        if len(spec.ops) == 1:
            return spec.ops[0]
        raise KeyError(f"{spec.path} declares {len(spec.ops)} ops "
                       f"({', '.join(o.name for o in spec.ops)}); pick one with --op")
    for op in spec.ops:
        if op.name == name:
            return op
    raise KeyError(f"no op '{name}' in {spec.path}; it declares "
                   f"{', '.join(o.name for o in spec.ops)}")
