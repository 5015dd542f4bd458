"""The float64 oracle a slice at a time, along an axis whose slices do not meet.

A bench point's float64 oracle needs twice its inputs' memory, and the baseline's own
temporaries on top. Where the card had no room for it, it was computed on the host: on an
H100 (2026-12-07, KernelBench level 1, five workers) a group norm's (35) took 18.3 s, and as
long again, 8.6 s, for the check of its timing request; its whole evaluation 62.1 s against
a 60 s target. L1 and L2 norms and an instance norm were the same.

Most such points have a batch axis: a dim whose every output element depends only on the
inputs at its own position along it. The oracle of each slice of that axis is then the
oracle of the whole, sliced, exactly: the same float64 arithmetic on the same values, so
the check is not weakened. The axis is read from the spec's statements, not guessed:

- every output and intermediate has the dim once in its shape, as the dim itself;
- each statement writes it with a plain left-side index, and that index appears in the
  statement's value only as the subscript, at the dim's position, of reads of tensors
  that have the dim, never bound again by a reduction, scan or sort, never in arithmetic;
- every read of a tensor that has the dim reads it there with that index;
- the dim's name appears in no expression but those shapes (a ``/ N`` or a declared range
  of it would change with the slice), and no input is offsets (whose values index across
  the axis).

The baseline is the spec's own torch call, checked against the math on every test case;
it is called on each slice with the dim's size set to the slice's.
"""
from __future__ import annotations

from kdsl import ir


def batch_dim(op: ir.Op) -> tuple[str, dict[str, int]] | None:
    """(dim, tensor -> its position) of an axis the oracle may be sliced along, or None."""
    if any(isinstance(t.domain, ir.Offsets) for t in op.inputs):
        return None
    for dim in op.dims:
        where = _positions(op, dim)
        if where is not None and _statements_keep_slices(op, dim, where):
            return dim, where
    return None


def _positions(op: ir.Op, dim: str) -> dict[str, int] | None:
    """tensor -> the position of ``dim`` in its shape, for those that have it; None where a
    shape uses it other than as itself, twice, or an output or intermediate lacks it."""
    where = {}
    for t in op.tensors:
        spots = [p for p, e in enumerate(t.shape) if e == ir.Name(dim)]
        if any(_mentions(e, dim) for p, e in enumerate(t.shape) if p not in spots) or \
                len(spots) > 1:
            return None
        if spots:
            where[t.name] = spots[0]
        elif t.role != "in":
            return None
    return where


def _statements_keep_slices(op: ir.Op, dim: str, where: dict[str, int]) -> bool:
    for st in op.statements:
        p = where[st.target]
        if p >= len(st.indices):
            return False
        index = st.indices[p]
        if any(r is not None and (_mentions(r.lo, dim) or _mentions(r.hi, dim))
               for r in st.ranges):
            return False
        if not _value_keeps_slices(st.value, index, dim, where):
            return False
    return True


def _value_keeps_slices(e: ir.Expr, index: str, dim: str, where: dict[str, int]) -> bool:
    """Whether ``index`` appears in ``e`` only as the subscript at ``dim``'s position of
    reads of tensors that have the dim, every such read has it there, and ``dim`` itself
    appears nowhere."""
    if isinstance(e, ir.Name):
        return e.name not in (index, dim)
    if isinstance(e, ir.Num):
        return True
    if isinstance(e, ir.Access):
        p = where.get(e.tensor)
        if p is not None and (p >= len(e.subscripts) or e.subscripts[p] != ir.Name(index)):
            return False
        rest = [s for q, s in enumerate(e.subscripts) if q != p]
        if e.pad is not None:
            rest.append(e.pad)
        return all(_value_keeps_slices(s, index, dim, where) for s in rest)
    if isinstance(e, ir.Unary):
        return _value_keeps_slices(e.operand, index, dim, where)
    if isinstance(e, ir.Binary):
        return all(_value_keeps_slices(s, index, dim, where) for s in (e.left, e.right))
    if isinstance(e, ir.Call):
        return all(_value_keeps_slices(a, index, dim, where) for a in e.args)
    if isinstance(e, ir.Reduce):
        if any(r.name == index for r in e.indices):
            return False
        bounds = [b for r in e.indices for b in (r.lo, r.hi) if b is not None]
        return all(_value_keeps_slices(b, index, dim, where) for b in (*bounds, e.body))
    if isinstance(e, ir.Scan):
        return e.index != index and _value_keeps_slices(e.body, index, dim, where)
    if isinstance(e, ir.Collective):
        if e.index.name == index:
            return False
        parts = [b for b in (e.index.lo, e.index.hi, e.k) if b is not None]
        return all(_value_keeps_slices(b, index, dim, where) for b in (*parts, e.body))
    return False  # (a node this rule does not know: no slices)


def _mentions(e, dim: str) -> bool:
    return e is not None and any(isinstance(n, ir.Name) and n.name == dim for n in ir.walk(e))


def sliced_oracle(op: ir.Op, sizes: dict, ins: dict, dim: str, where: dict[str, int],
                  pieces: int, one) -> dict:
    """The oracle of the whole point from ``one(sizes, ins)`` on ``pieces`` slices of
    ``dim`` (each on ``ins``' device), gathered on the host."""
    total = sizes[dim]
    step = max(1, -(-total // max(pieces, 1)))
    out: dict = {}
    for start in range(0, total, step):
        n = min(step, total - start)
        part = {k: v.narrow(where[k], start, n) if k in where else v for k, v in ins.items()}
        got = one({**sizes, dim: n}, part)
        for name, v in got.items():
            if name not in out:
                shape = list(v.shape)
                shape[where[name]] = total
                out[name] = v.new_empty(shape, device="cpu")
            out[name].narrow(where[name], start, n).copy_(v)
        del got, part
    return out
