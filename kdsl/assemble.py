"""Raw parsed items -> ``ir.Op``: the declaration-level checks.

Catches what is wrong with an op's sections (duplicates, unknown dtypes,
missing baseline or tolerance) before ``checker.py`` looks at its math.
"""
from __future__ import annotations

from . import dtypes, ir
from .errors import Diagnostic
from .intervals import MAX_INT_BITS, too_large
from .show import format_expr
from .sizes import NotASize, evaluate

DEVICES = ("cpu", "cuda")
MAX_SIZE = (1 << 63) - 1  # a bench size, like any size, fits 64 bits
# Limits on what one op may declare, each well above what the library needs (19 dims,
# 8 tensors, rank 5, 5 statements, 8 test conditions, 2 bench points), so that checking
# and drawing sizes, which work per dim, per tensor and per condition, stay fast.
LIMITS = {"op": 64, "dim": 32, "tensor": 32, "statement": 64, "bench line": 16}
MAX_RANK = 8
MAX_CONDITIONS = 16
# Terms in the shapes and test conditions, evaluated at every size drawn (up to 1,600 draws
# an op when the conditions are hard to meet): per op (the library's most: 135) and per file.
MAX_SIZE_TERMS = 1000
MAX_FILE_SIZE_TERMS = 2000


class _Collector:
    def __init__(self, path: str):
        self.path = path
        self.diagnostics: list[Diagnostic] = []

    def error(self, loc: ir.Loc, message: str) -> None:
        self.diagnostics.append(Diagnostic(self.path, loc.line, loc.column, message))


def assemble_op(raw, path: str, text: str, out: _Collector) -> ir.Op:
    _, name, loc, items = raw
    dims: list[str] = []
    tensors: list[ir.Tensor] = []
    statements: list[ir.Statement] = []
    baseline = tolerance = test = None
    bench: list[ir.BenchPoint] = []
    seen: dict[str, ir.Loc] = {}

    def declare(nm: str, where: ir.Loc, what: str) -> None:
        if nm in seen:
            out.error(where, f"'{nm}' is already declared (line {seen[nm].line}); {what} "
                             "names must be unique within an op")
        seen[nm] = where

    counts: dict[str, int] = {}

    def count(what: str, where: ir.Loc) -> None:
        counts[what] = counts.get(what, 0) + 1
        if counts[what] == LIMITS[what] + 1:
            out.error(where, f"op '{name}' declares more than {LIMITS[what]} {what}s")

    for item in items:
        kind = item[0]
        if kind == "dims":
            for dim, dloc in item[1]:
                count("dim", dloc)
                declare(dim, dloc, "dim and tensor")
                dims.append(dim)
        elif kind == "tensor":
            t, dtype_locs = item[1], item[2]
            count("tensor", t.loc)
            if len(t.shape) > MAX_RANK:
                out.error(t.loc, f"'{t.name}' has rank {len(t.shape)}; at most {MAX_RANK}")
            declare(t.name, t.loc, "dim and tensor")
            for dt, dloc in zip(t.dtypes, dtype_locs):
                if dt not in dtypes.ALL:
                    out.error(dloc, f"unknown dtype '{dt}'; known: {', '.join(dtypes.ALL)}")
            if t.like is not None and t.like not in {x.name for x in tensors}:
                out.error(dtype_locs[0], f"'like {t.like}': no tensor '{t.like}' declared above")
            tensors.append(t)
        elif kind == "statement":
            count("statement", item[1].loc)
            statements.append(item[1])
        elif kind == "baseline":
            if baseline is not None:
                out.error(item[1].loc, "a second baseline; an op has one")
            baseline = item[1]
        elif kind == "tolerance":
            if tolerance is not None:
                out.error(item[2], "a second tolerance line; an op has one")
            tolerance = item[1]
            for dt, dloc in (item[3] if len(item) > 3 else []):
                if dt not in dtypes.FLOAT:
                    out.error(dloc, f"tolerances are per float dtype ({', '.join(dtypes.FLOAT)})"
                                    f", not '{dt}'")
        elif kind == "test":
            if test is not None:
                out.error(item[2], "a second test line; put all ranges on one")
            test = item[1]
            if len(test.conditions) > MAX_CONDITIONS:
                out.error(_start(test.conditions[MAX_CONDITIONS]),
                          f"more than {MAX_CONDITIONS} test conditions")
        elif kind == "bench":
            count("bench line", item[2])
            bench.append(_bench_point(item, out))

    if baseline is None:
        out.error(loc, f"op '{name}' has no baseline (the torch expression to beat)")
    if tolerance is None:
        out.error(loc, f"op '{name}' has no tolerance line (per dtype, or 'exact')")
    if test is None:
        out.error(loc, f"op '{name}' has no test line (size ranges for correctness checks)")
    if not bench:
        out.error(loc, f"op '{name}' has no bench line (the sizes speed is judged on)")
    if not any(t.role == "out" for t in tensors):
        out.error(loc, f"op '{name}' declares no output")
    return ir.Op(name, tuple(dims), tuple(tensors), tuple(statements), baseline, tolerance,
                 test, tuple(bench), loc, path, text)


def _bench_point(item, out: _Collector) -> ir.BenchPoint:
    _, device, loc, entries = item
    if device is not None and device not in DEVICES:
        out.error(loc, f"unknown bench device '{device}'; known: {', '.join(DEVICES)}")
    sizes, dtype = [], None
    for key, value, kloc in entries:
        if key == "dtype":
            if not isinstance(value, ir.Name) or value.name not in dtypes.ALL:
                out.error(kloc, f"bench dtype must be one of {', '.join(dtypes.ALL)}")
            else:
                dtype = value.name
            continue
        big = too_large(value)
        if big is not None:
            out.error(_start(big), arithmetic_too_large(big))
            continue
        try:
            size = evaluate(value, {})
        except NotASize as e:
            out.error(getattr(e.node, "loc", kloc) or kloc, f"bench size {key}: {e.why}")
            continue
        if abs(size) > MAX_SIZE:
            out.error(kloc, f"bench size {key} takes {abs(size).bit_length()} bits; a size fits "
                            f"64 bits (below 2**63)")
            continue
        sizes.append((key, size))
    return ir.BenchPoint(device, tuple(sizes), dtype, loc)


def size_terms(op: ir.Op) -> int:
    exprs = [e for t in op.tensors for e in t.shape]
    exprs += list(op.test.conditions) if op.test is not None else []
    return sum(1 for e in exprs for _ in ir.walk(e))


def arithmetic_too_large(e: ir.Expr) -> str:
    shown = format_expr(e)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return (f"integer arithmetic too large: {shown} can pass {MAX_INT_BITS} bits (sizes, "
            f"indices and integer values are 64-bit)")


def _start(e: ir.Expr) -> ir.Loc:
    """Where ``e`` starts in the source (a binary node's own location is its operator's)."""
    while isinstance(e, ir.Binary):
        e = e.left
    return getattr(e, "loc", ir.NO_LOC)


def assemble(raw_ops, path: str, text: str) -> tuple[list[ir.Op], list[Diagnostic]]:
    out = _Collector(path)
    ops, names = [], {}
    if len(raw_ops) > LIMITS["op"]:
        out.error(raw_ops[LIMITS["op"]][2], f"more than {LIMITS['op']} ops in one spec")
        return ops, out.diagnostics
    total = 0
    for raw in raw_ops:
        op = assemble_op(raw, path, text, out)
        terms = size_terms(op)
        total += terms
        if terms > MAX_SIZE_TERMS:
            out.error(op.loc, f"the shapes and test conditions of '{op.name}' hold {terms} "
                              f"terms; at most {MAX_SIZE_TERMS}")
        elif total > MAX_FILE_SIZE_TERMS and total - terms <= MAX_FILE_SIZE_TERMS:
            out.error(op.loc, f"the shapes and test conditions of the ops up to '{op.name}' "
                              f"hold {total} terms; a spec holds at most {MAX_FILE_SIZE_TERMS}")
        if op.name in names:
            out.error(op.loc, f"op '{op.name}' is already declared on line {names[op.name]}")
        names[op.name] = op.loc.line
        ops.append(op)
    if not raw_ops:
        out.error(ir.Loc(1, 1), "no op declared (a spec starts with 'op NAME')")
    return ops, out.diagnostics
