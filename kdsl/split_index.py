"""A left-side subscript that splits one axis into two indices, as users write grouped ops:
``y[n, g * (C // G) + k, l] = ...`` (group ``g``, channel ``k`` within it).

The statement becomes one over a single index of that axis, with the two read back from it
(``g = c // (C // G)``, ``k = c % (C // G)``): every later stage (checker, reference,
generators) sees a left side of plain index names. Writing the axis as ``g * A + k`` says
that ``k`` runs over ``0 .. A`` and ``g`` over the groups, and the one index covers exactly
those places, so the two forms write the same elements.
"""
from __future__ import annotations

import dataclasses

from . import ir


class SplitError(ValueError):
    """A subscript of the form that cannot be split; ``loc`` says where."""

    def __init__(self, loc: ir.Loc, message: str):
        super().__init__(message)
        self.loc = loc


def split_form(s: ir.Expr) -> tuple[ir.Name, ir.Name, ir.Expr] | None:
    """(outer, inner, multiplier) of ``outer * A + inner`` (either operand order of both
    the sum and the product), or None for any other expression."""
    if not (isinstance(s, ir.Binary) and s.op == "+"):
        return None
    for prod, inner in ((s.left, s.right), (s.right, s.left)):
        if not (isinstance(inner, ir.Name) and isinstance(prod, ir.Binary) and prod.op == "*"):
            continue
        for outer, mult in ((prod.left, prod.right), (prod.right, prod.left)):
            if isinstance(outer, ir.Name) and outer.name != inner.name:
                return outer, inner, mult
    return None


def _first_name(e, names: set[str]) -> ir.Name | None:
    """The first ``Name`` in ``e`` (in source order) that is one of ``names``."""
    found = [n for n in ir.walk(e) if isinstance(n, ir.Name) and n.name in names]
    return min(found, key=lambda n: (n.loc.line, n.loc.column)) if found else None


def names_in(e) -> set[str]:
    """Every ``Name`` in ``e`` and every name it binds."""
    return {n.name for n in ir.walk(e) if isinstance(n, ir.Name)} | bound_in(e)


def bound_in(e) -> set[str]:
    """The names ``e`` binds: reduction and collective indices, scanned indices."""
    out: set[str] = set()
    for n in ir.walk(e):
        if isinstance(n, ir.Reduce):
            out.update(r.name for r in n.indices)
        elif isinstance(n, ir.Collective):
            out.add(n.index.name)
        elif isinstance(n, ir.Scan):
            out.add(n.index)
    return out


def replace_names(e, mapping: dict[str, ir.Expr], whole: dict | None = None):
    """``e`` with each ``Name`` in ``mapping`` replaced (the caller has made sure none of
    those names is bound inside ``e``), and each split form of ``whole`` ((outer, inner,
    multiplier's structural hash) -> index) by its index."""
    if isinstance(e, ir.Name):
        return mapping.get(e.name, e)
    form = split_form(e) if whole else None
    if form is not None:
        key = (form[0].name, form[1].name, ir.structural_hash(form[2]))
        if key in whole:
            return whole[key]
    if not dataclasses.is_dataclass(e) or isinstance(e, ir.Loc):
        return e
    changes = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, tuple):
            nv = tuple(replace_names(y, mapping, whole) if dataclasses.is_dataclass(y) else y
                       for y in v)
        elif dataclasses.is_dataclass(v):
            nv = replace_names(v, mapping, whole)
        else:
            continue
        if nv is not v:
            changes[f.name] = nv
    return dataclasses.replace(e, **changes) if changes else e


def split(subs: list, value: ir.Expr) -> tuple[list, ir.Expr]:
    """The left side's subscripts with each split one (``g * A + k``) a fresh plain index,
    and ``value`` reading ``g`` and ``k`` back from it; SplitError where a split cannot be
    read back (``A`` reads an index, ``g`` or ``k`` is used twice on the left side or bound
    inside the right side)."""
    forms = {p: split_form(s) for p, s in enumerate(subs)}
    if not any(forms.values()):
        return subs, value
    plain = [s.name for s in subs if isinstance(s, (ir.Name, ir.IndexRange))]
    parts = {n.name for f in forms.values() if f for n in f[:2]}
    taken = set(plain) | names_in(value) | parts
    bound = bound_in(value)
    mapping: dict[str, ir.Expr] = {}
    whole: dict = {}  # a read of the same form is the new index itself, not its parts
    out = list(subs)
    for p, form in forms.items():
        if form is None:
            continue
        outer_node, inner_node, mult = form
        outer, inner = outer_node.name, inner_node.name
        used = _first_name(mult, set(plain) | parts)
        if used is not None:
            raise SplitError(used.loc, f"the multiplier of '{outer}' in this left-side "
                                       f"subscript reads the index '{used.name}'; it must "
                                       f"be sizes only")
        for node in (outer_node, inner_node):
            if node.name in plain or node.name in mapping:
                raise SplitError(node.loc, f"index '{node.name}' appears twice on the left "
                                           f"side")
            if node.name in bound:
                raise SplitError(node.loc, f"index '{node.name}' of this left-side subscript "
                                           f"is bound again on the right side; rename one "
                                           f"of them")
        loc = outer_node.loc
        new = f"{outer}_{inner}"
        while new in taken:
            new += "_"
        taken.add(new)
        index = ir.Name(new, loc)
        mapping[outer] = ir.Binary("//", index, mult, loc)
        mapping[inner] = ir.Binary("%", index, mult, loc)
        whole[(outer, inner, ir.structural_hash(mult))] = index
        out[p] = index
    return out, replace_names(value, mapping, whole)
