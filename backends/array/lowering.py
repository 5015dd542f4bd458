"""Lowering checked IR to array code: one generator for numpy and torch.

A statement is evaluated over a grid of axes, as in ``kdsl.reference``: one
per output index and one per open bound index. Positions are fixed for the
whole statement (output indices first, then one per nesting depth of bound
indices; the ``reduce_axes`` gene moves the bound ones before the last output
index), every array has exactly that many dimensions, and reductions keep
their axes with size 1, so broadcasting lines everything up. Each value knows
statically which positions it varies along (``deps``): that is what turns a
contraction into an einsum, a plain read into a slice, and tells which reads
may run past a data-dependent range (and must be clipped).

The spelling of each primitive comes from a ``Dialect`` (``numpy_backend``,
``torch_backend``); helpers with one name and signature in both live in
``numpy_runtime`` / ``torch_runtime`` (imported by the rendered module as ``rt``).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace

from kdsl import dtypes, ir
from kdsl.builtins import CASTS, ELEMENTWISE
from kdsl.show import format_expr

from kdsl.backends.array import analysis as aa
from kdsl.backends.array.dialect import DTYPE, Dialect, Val, atom, fold_subscript, subscript
from kdsl.backends.array.gather import render_access
from kdsl.backends.base import Unsupported
from kdsl.backends.lower.scatter import match as scatter_match
from kdsl.backends.lower.scatter import scatter_form
from kdsl.backends.lower.select import selections_as_reads
from kdsl.backends.lower.numerics import stable_exponentials
from kdsl.backends.lower.common import common_reductions
from kdsl.backends.lower.scans import ranges_as_scans
from kdsl.backends.lower.factor import factored_sums

IMIN, IMAX = -(1 << 63), (1 << 63) - 1
_axis_ids = itertools.count()


@dataclass
class Axis:
    """One open index of a statement's grid."""
    pos: int
    lo: str | None          # static axes: Python int code of the range; None when dynamic
    hi: str | None
    extent: str
    lhs: bool = False
    lo_expr: ir.Expr | None = None   # the IR range, to prove a slice in bounds
    hi_expr: ir.Expr | None = None
    dim_expr: ir.Expr | None = None  # a left-side axis: the target's dim it runs over
    mask: Val | None = None          # dynamic axes: lanes inside their own range
    values: Val | None = None
    ident: int = field(default_factory=lambda: next(_axis_ids))

    @property
    def dynamic(self) -> bool:
        return self.mask is not None


class Env:
    """The indices bound where an expression is evaluated.

    ``unchecked``: reads here were not proven in range by the checker (it skips the
    bounds of index ranges), so they are clipped as the reference clips them."""

    def __init__(self, axes: dict[str, Axis], depth: int = 0, masked: frozenset = frozenset(),
                 unchecked: bool = False):
        self.axes, self.depth, self.masked = dict(axes), depth, masked
        self.unchecked = unchecked

    def bind(self, name: str, axis: Axis) -> "Env":
        masked = self.masked | {axis.pos} if axis.dynamic else self.masked
        env = Env(self.axes, self.depth + 1, masked, self.unchecked)
        env.axes[name] = axis
        return env

    def bounds(self) -> "Env":
        return Env(self.axes, self.depth, self.masked, True)


class Block:
    """The lines of one statement; single-use temporaries are folded into their reader."""

    def __init__(self, counter):
        self.counter = counter
        self.entries: list[tuple[str | None, str]] = []
        self.defs: dict[str, str] = {}

    def let(self, code: str) -> str:
        var = f"v{next(self.counter)}"
        self.entries.append((var, code))
        self.defs[var] = code
        return var

    def index(self, code: str, items: list[str]) -> str:
        """``code[items]``, folded into the subscript that made ``code`` where possible
        (``x[:, None][:, 0]`` is ``x``)."""
        folded = fold_subscript(self.defs.get(code, code), items)
        return folded if folded is not None else subscript(code, items)

    def line(self, text: str) -> None:
        self.entries.append((None, text))

    def finish(self) -> list[str]:
        entries = _live(self.entries)
        out: list[tuple[str | None, str]] = []
        for i, (var, code) in enumerate(entries):
            if var is not None:
                pattern = re.compile(rf"\b{var}\b")
                users = [j for j in range(i + 1, len(entries)) if pattern.search(entries[j][1])]
                if len(users) == 1 and len(pattern.findall(entries[users[0]][1])) == 1:
                    j = users[0]
                    folded = pattern.sub(lambda _m: atom(code), entries[j][1])
                    entries[j] = (entries[j][0], folded)
                    continue
            out.append((var, code))
        lines = [f"{var} = {code}" if var else code for var, code in out]
        kept = [var for var, _ in out if var]
        if kept:
            lines.append(f"del {', '.join(kept)}")
        return lines


def _live(entries):
    """Entries whose value is used (every ``let`` is pure, so unused ones are dropped)."""
    used: set[str] = set()
    live = []
    for var, code in reversed(entries):
        if var is None or var in used:
            used |= set(re.findall(r"\bv\d+\b", code))
            live.append((var, code))
    return live[::-1]


@dataclass
class TensorInfo:
    var: str
    kind: str
    shape: tuple[ir.Expr, ...]


class Lowering:
    """Renders one compute function for one kind of the op's type variable."""

    def __init__(self, op: ir.Op, dtype: str, genome: dict, dialect: Dialect):
        reason = aa.unsupported_reason(op)
        if reason:
            raise Unsupported(reason)
        self.op = scatter_form(selections_as_reads(
            common_reductions(aa.inline_intermediates(factored_sums(ranges_as_scans(
                stable_exponentials(op))),
                                                      genome.get("fusion", "none")))))
        self.dtype, self.genome, self.d = dtype, genome, dialect
        # each kind's dtype name in the module; an f64 instance computes its floats in W
        # whatever the precision gene says
        self.dt = {**DTYPE, "float": "W"} if op.wide(dtype) else DTYPE
        self.counter = itertools.count()
        self.tensors: dict[str, TensorInfo] = {}
        for t in op.inputs:
            self.tensors[t.name] = TensorInfo(f"in_{t.name}",
                                              dtypes.kind(op.dtype_of(t.name, dtype)), t.shape)

    # ---- the function --------------------------------------------------------
    def function(self, name: str) -> list[str]:
        body = [f"d_{d} = sizes[{d!r}]" for d in self.op.dims]
        body += self.d.prologue()
        for t in self.op.inputs:
            info = self.tensors[t.name]
            body.append(f"{info.var} = rt.load(inputs[{t.name!r}], {self.dt[info.kind]})")
        for t in self.op.outputs:
            body.append(f"o_{t.name} = outs[{t.name!r}]")
        for st in self.op.statements:
            body += self.statement(st)
        return [f"def {name}(inputs, outs, sizes):"] + ["    " + line for line in body]

    def statement(self, st: ir.Statement) -> list[str]:
        sc = scatter_match(self.op, st)
        if sc is not None:
            from kdsl.backends.array import scatter
            if scatter.static(self.op, sc):
                return scatter.statement(self, st, sc)
        target = self.op.tensor(st.target)
        n_out, depth = len(st.indices), aa.bound_depth(st.value)
        middle = self.genome.get("reduce_axes") == "middle" and n_out >= 2
        if middle:
            lhs_pos = list(range(n_out - 1)) + [n_out - 1 + depth]
            self.depth_pos = [n_out - 1 + k for k in range(depth)]
        else:
            lhs_pos = list(range(n_out))
            self.depth_pos = [n_out + k for k in range(depth)]
        self.nd = n_out + depth
        self.block, self.memo = Block(self.counter), {}
        shape = [self.size(x) for x in target.shape]
        chunk = self.genome.get("chunk", 0) if aa.chunkable(st) else 0
        axes = {}
        for k, name in enumerate(st.indices):
            if k == 0 and chunk:
                axes[name] = Axis(lhs_pos[k], "c0", "c1", "(c1 - c0)", lhs=True,
                                  dim_expr=target.shape[k])
            else:
                axes[name] = Axis(lhs_pos[k], "0", shape[k], shape[k], lhs=True,
                                  lo_expr=ir.Num(0), hi_expr=target.shape[k],
                                  dim_expr=target.shape[k])
        self.lhs_axes = axes
        value = self.ev(st.value, Env(axes))
        if not value.scalar and depth:
            idx = [":" if p in lhs_pos else "0" for p in range(self.nd)]
            value = replace(value, code=self.block.let(self.block.index(value.code, idx)))
        pre = self.store(st, target, value, shape, chunk)
        head = f"# {st.target}[{', '.join(st.indices)}] = {format_expr(st.value)}"
        lines = [head] + pre
        if chunk:
            lines += [f"for c0 in range(0, {shape[0]}, {chunk}):",
                      f"    c1 = min(c0 + {chunk}, {shape[0]})"]
            lines += ["    " + line for line in self.block.finish()]
        else:
            lines += self.block.finish()
        return lines

    def store(self, st, target, value: Val, shape: list[str], chunk: int) -> list[str]:
        """Write the statement's value (output indices only) into its buffers."""
        pre, name = [], st.target
        read_later = any(isinstance(n, ir.Access) and n.tensor == name
                         for s in self.op.statements for n in ir.walk(s.value))
        where = "[c0:c1]" if chunk else "[...]"
        shape_code = f"({', '.join(shape)}{',' if len(shape) == 1 else ''})"
        code = value.code
        if target.role == "out" and read_later:
            code = self.block.let(code)
        if target.role == "tmp" or read_later:
            var = f"t_{name}"
            self.tensors[name] = TensorInfo(var, value.kind, target.shape)
            dt = self.dt[value.kind]
            if chunk:
                pre.append(f"{var} = {self.d.empty(shape_code, dt)}")
                self.block.line(f"{var}[c0:c1] = {code}")
            elif value.scalar:
                self.block.line(f"{var} = {self.d.full(shape_code, code, dt)}")
            else:
                self.block.line(f"{var} = rt.settle({code}, {shape_code})")
        if target.role == "out":
            self.block.line(f"o_{name}{where} = {code}")
        return pre

    # ---- values --------------------------------------------------------------
    def size(self, e: ir.Expr) -> str:
        return self.ev(e, Env({})).code

    def ev(self, e: ir.Expr, env: Env) -> Val:
        key = (e, env.unchecked, tuple(sorted((n, env.axes[n].ident) for n in aa.free_names(e)
                                              if n in env.axes)))
        if key not in self.memo:
            self.memo[key] = self._ev(e, env)
        return self.memo[key]

    def _ev(self, e: ir.Expr, env: Env) -> Val:
        if isinstance(e, ir.Num):
            return Val(repr(e.value), "int" if isinstance(e.value, int) else "float", scalar=True)
        if isinstance(e, ir.Name):
            if e.name in env.axes:
                return self.axis_values(env.axes[e.name])
            if e.name in self.op.dims:
                return Val(f"d_{e.name}", "int", scalar=True)
            return Val(f"math.{e.name}", "float", scalar=True)
        if isinstance(e, ir.Access):
            return render_access(self, e, env)
        if isinstance(e, ir.Unary):
            return self.unary(e, env)
        if isinstance(e, ir.Binary):
            return self.binary(e, env)
        if isinstance(e, ir.Call):
            return self.call(e, env)
        from kdsl.backends.array.reduce import collective, reduce, scan
        if isinstance(e, ir.Reduce):
            return reduce(self, e, env)
        if isinstance(e, ir.Scan):
            return scan(self, e, env)
        return collective(self, e, env)

    def let(self, code: str, kind: str, deps) -> Val:
        return Val(self.block.let(code), kind, frozenset(deps))

    def axis_values(self, ax: Axis) -> Val:
        if ax.values is None:
            ax.values = self.let(self.d.axis(ax.lo, ax.hi, ax.pos, self.nd), "int", {ax.pos})
        return ax.values

    def lift(self, v: Val, kind: str | None = None) -> Val:
        """A scalar as an array of the grid's rank (size 1 everywhere)."""
        kind = kind or v.kind
        return self.let(self.d.lift(v.code, self.dt[kind], self.nd), kind, ())

    def coerce(self, v: Val, kind: str) -> Val:
        if v.kind == kind:
            return v
        if kind == "bool":
            code = f"({v.code} != 0)"
            return Val(code, kind, scalar=True) if v.scalar else self.let(code, kind, v.deps)
        if v.scalar:
            return Val(v.code, kind, scalar=True) if v.kind != "float" else \
                Val(f"int({v.code})", kind, scalar=True)
        return self.let(self.d.cast(v.code, self.dt[kind]), kind, v.deps)

    def expand(self, v: Val, positions: dict[int, str]) -> Val:
        """``v`` broadcast to full extent along ``positions`` it does not vary on."""
        missing = {p: n for p, n in positions.items() if p not in v.deps}
        if not missing:
            return v
        if v.scalar:
            v = self.lift(v)
        code = v.code
        for p, n in sorted(missing.items()):
            code = f"rt.expand({code}, {p}, {n})"
        return self.let(code, v.kind, v.deps | set(missing))

    # ---- elementwise ----------------------------------------------------------
    def unary(self, e: ir.Unary, env: Env) -> Val:
        v = self.ev(e.operand, env)
        if e.op == "not":
            v = self.coerce(v, "bool")
            code = f"(not {v.code})" if v.scalar else f"(~{v.code})"
            return Val(code, "bool", scalar=True) if v.scalar else self.let(code, "bool", v.deps)
        v = self.coerce(v, "int") if v.kind == "bool" else v
        return Val(f"(-{v.code})", v.kind, scalar=True) if v.scalar else \
            self.let(f"(-{v.code})", v.kind, v.deps)

    def binary(self, e: ir.Binary, env: Env) -> Val:
        a, b = self.ev(e.left, env), self.ev(e.right, env)
        kind = aa.result_kind(e.op, [a.kind, b.kind])
        scalar = a.scalar and b.scalar
        if e.op in ("and", "or"):
            a, b = self.coerce(a, "bool"), self.coerce(b, "bool")
            op = e.op if scalar else {"and": "&", "or": "|"}[e.op]
        elif e.op in aa.COMPARISONS:
            op = e.op
        else:
            a, b = self.coerce(a, kind), self.coerce(b, kind)
            op = e.op
        code = f"({a.code} {op} {b.code})"
        return Val(code, kind, scalar=True) if scalar else self.let(code, kind, a.deps | b.deps)

    def call(self, e: ir.Call, env: Env) -> Val:
        from kdsl.backends.array.reduce import index_builtin
        if e.fn in ("segment_of", "triu_row", "triu_col"):
            return index_builtin(self, e, env)
        args = [self.ev(a, env) for a in e.args]
        kind = aa.call_kind(e.fn, [a.kind for a in args])
        if e.fn in CASTS:
            return self.coerce(args[0], kind)
        b = ELEMENTWISE[e.fn]
        if e.fn == "where":
            args = [self.coerce(args[0], "bool")] + [self.coerce(a, kind) for a in args[1:]]
        else:
            target = {"float": "float", "int": "int"}.get(b.result, kind)
            args = [self.coerce(a, target) for a in args]
        deps = frozenset().union(*(a.deps for a in args))
        if all(a.scalar for a in args):
            code = _SCALAR.get(e.fn)
            if code is not None:
                return Val(code.format(*(a.code for a in args)), kind, scalar=True)
            args = [self.lift(args[0])] + args[1:]
        if e.fn == "where" and args[0].scalar:
            args = [self.lift(args[0])] + args[1:]
        return self.let(self.d.ufunc(e.fn, args), kind, deps)


# Builtins on Python numbers, where every argument is one (array code would
# make a strongly typed numpy scalar, or fail in torch).
_SCALAR = {"relu": "max({0}, 0)", "abs": "abs({0})", "min": "min({0}, {1})",
           "max": "max({0}, {1})", "where": "({1} if {0} else {2})"}
