"""A sum over a one-hot indicator (``lower.scatter``) as one array scatter-add.

The statement's grid is the scatter's loops (looped output indices and summed indices,
each a plain axis; nested reductions of the value open axes after them). The keys and
the value are evaluated over it once, and ``rt.scatter_add`` adds each value at its
keys where every keyed key is inside its range (numpy: ``bincount``, or ``add.at`` for
integer weights, exact; torch: ``index_add_``). Integers accumulate in int64, floats in
float64 before the store casts them: the order differs from a dense sum's, the counts
do not. Loops whose ranges are not static (a jagged range) keep the dense sum.
"""
from __future__ import annotations

from kdsl import ir

from kdsl.backends.array import analysis as aa
from kdsl.backends.array.dialect import Val
from kdsl.backends.array.lowering import Axis, Block, Env
from kdsl.backends.lower.scatter import Scatter, kind


def static(op: ir.Op, sc: Scatter) -> bool:
    """Every loop's range is made of dims and numbers only."""
    for r in sc.loops:
        for x in (r.lo, r.hi):
            if any(isinstance(n, ir.Access) for n in ir.walk(x)) or \
                    aa.free_names(x) - set(op.dims):
                return False
    return True


def statement(low, st: ir.Statement, sc: Scatter) -> list[str]:
    """The lines of ``st`` as a scatter-add (``low``: the ``Lowering``)."""
    target = low.op.tensor(st.target)
    loops = sc.loops
    n = len(loops)
    depth = aa.bound_depth(sc.value)
    low.nd = n + depth
    low.depth_pos = [n + k for k in range(depth)]
    low.block, low.memo = Block(low.counter), {}
    shape = [low.size(x) for x in target.shape]
    looped = {key.name: p for p, (key, keyed) in enumerate(zip(sc.keys, sc.keyed))
              if not keyed}
    axes = {}
    for p, r in enumerate(loops):
        lo, hi = low.size(r.lo), low.size(r.hi)
        ext = low.block.let(f"max({hi} - {lo}, 0)")
        if r.name in looped:
            q = looped[r.name]
            axes[r.name] = Axis(p, lo, hi, ext, lhs=True, lo_expr=r.lo, hi_expr=r.hi,
                                dim_expr=target.shape[q])
        else:
            axes[r.name] = Axis(p, lo, hi, ext, lo_expr=r.lo, hi_expr=r.hi)
    low.lhs_axes = {name: axes[name] for name in looped}
    env = Env(axes)
    acc = kind(low.op, sc.reduce, low.dtype)
    acc = "int" if acc == "bool" else acc
    value = low.coerce(low.ev(sc.value, env), acc)
    grid = {ax.pos: ax.extent for ax in axes.values()}
    if not value.scalar:
        value = low.expand(value, grid)
    keys = []
    for key, keyed in zip(sc.keys, sc.keyed):
        v = low.axis_values(axes[key.name]) if not keyed else \
            low.coerce(low.ev(key, env), "int")
        keys.append(v.code if not v.scalar else low.lift(v).code)
    sizes = [grid[p] for p in range(n)] + ["1"] * depth
    code = (f"rt.scatter_add(({', '.join(shape)},), ({', '.join(keys)},), "
            f"{tuple(sc.keyed)!r}, {value.code}, ({', '.join(sizes)},), {low.dt[acc]})")
    result = Val(low.block.let(code), acc, frozenset(range(len(shape))))
    pre = low.store(st, target, result, shape, 0)
    return [f"# {st.target}: a sum over an indicator as a scatter-add"] + pre + \
        low.block.finish()
