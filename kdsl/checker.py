"""Semantic checks of an assembled op, and its resolution into complete IR.

Resolution infers what a spec leaves implicit: the shape of each intermediate
tensor and the range of every index. The checked op has every ``IndexRange``
filled in and intermediate tensors declared with role ``tmp``, so later
stages (reference, backends) never infer anything.
"""
from __future__ import annotations

import ast
import dataclasses
import warnings
from dataclasses import dataclass

from . import dtypes, ir
from .builtins import CASTS, CONSTANTS, ELEMENTWISE, INDEX_BUILTINS
from .domains import domain_errors, empty_domain_errors
from .assemble import arithmetic_too_large
from .errors import Diagnostic
from .extents import (Why as _Why, affine_extent, from_readers, is_size, names_in,
                      window_extent)
from .intervals import MAX_INT_BITS, IntervalEval, too_large
from .parser import COLLECTIVES, CONSTANT_AT, REDUCTIONS, SCANS
from .show import format_expr
from .sizes import NotASize, corners, evaluate, ranges, valid

BASELINE_NAMES = {"torch", "F", "kt", "math"}
# Python's builtins a baseline may name, as users write them (``float("-inf")``): none that
# builds a sequence or a number of unbounded size (``range``, ``pow``)
BASELINE_BUILTINS = {"float", "int", "bool", "abs", "min", "max", "round", "len", "tuple",
                     "slice"}
MAX_TEST_ELEMENTS = 1 << 27  # inputs and outputs of one test case: 1 GiB in float64
# The largest end of a test range (the library's largest is 1,000,000): drawing sizes
# looks for primes near each end by trial division, which costs ~sqrt(end) a number.
MAX_TEST_SIZE = 1 << 22
INT64 = (-(1 << 63), (1 << 63) - 1)
ZERO = ir.Num(0)


class _Stop(Exception):
    """Raised after recording a diagnostic that makes further checks meaningless."""


@dataclass
class _Index:
    lo: ir.Expr
    hi: ir.Expr
    origin: str  # how the range was learnt, for messages
    explicit: bool  # an explicit ``i in lo .. hi``: bounds-checked, not extent-matched


class Checker:
    def __init__(self, op: ir.Op, path: str):
        self.op, self.path = op, path
        self.diagnostics: list[Diagnostic] = []
        self.tensors: dict[str, ir.Tensor] = {t.name: t for t in op.tensors}
        self.defined: set[str] = {t.name for t in op.inputs}
        self.samples: list[dict[str, int]] = []

    # ---- reporting ----
    def error(self, loc: ir.Loc, message: str) -> None:
        loc = loc if loc.line else self.op.loc
        self.diagnostics.append(Diagnostic(self.path, loc.line, loc.column, message))

    def fatal(self, loc: ir.Loc, message: str):
        self.error(loc, message)
        raise _Stop()

    # ---- top level ----
    def run(self) -> ir.Op | None:
        try:
            self.check_magnitudes()
            if self.diagnostics:
                return None
            self.check_dims_and_sizes()
            if self.diagnostics:
                return None
            self.check_dtypes()
            statements = [self.check_statement(s) for s in self.op.statements]
            for t in self.op.outputs:
                if t.name not in self.defined:
                    self.error(t.loc, f"output '{t.name}' is never assigned")
            self.check_baseline()
        except _Stop:
            return None
        if self.diagnostics:
            return None
        tensors = tuple(self.tensors.values())
        return dataclasses.replace(self.op, tensors=tensors, statements=tuple(statements))

    def check_magnitudes(self) -> None:
        """Refuse integer arithmetic that could grow without bound, before evaluating any."""
        op = self.op
        exprs = [e for t in op.tensors for e in t.shape]
        for t in op.tensors:
            if isinstance(t.domain, ir.ValueRange):
                exprs += [t.domain.lo, t.domain.hi]
            elif isinstance(t.domain, ir.Offsets):
                exprs.append(t.domain.total)
        if op.test is not None:
            exprs += [x for r in op.test.ranges for x in (r.lo, r.hi)]
            exprs += list(op.test.conditions)
        for st in op.statements:  # the integers in a statement: subscripts and ranges
            exprs += [x for r in st.ranges if r is not None for x in (r.lo, r.hi)]
            for node in ir.walk(st.value):
                if isinstance(node, ir.Access):
                    exprs += node.subscripts
                elif isinstance(node, (ir.Reduce, ir.Collective)):
                    ranges_ = node.indices if isinstance(node, ir.Reduce) else (node.index,)
                    exprs += [x for r in ranges_ if r.lo is not None for x in (r.lo, r.hi)]
                    if isinstance(node, ir.Collective) and node.k is not None:
                        exprs.append(node.k)
        for e in exprs:
            big = too_large(e)
            if big is not None:
                self.error(_start(big), arithmetic_too_large(big))

    def check_dims_and_sizes(self) -> None:
        op, dims = self.op, set(self.op.dims)
        for t in op.tensors:
            for e in t.shape:
                unknown = [n for n in ir.walk(e) if isinstance(n, ir.Name) and n.name not in dims]
                for node in unknown:
                    self.error(node.loc, f"unknown dim '{node.name}' in the shape of "
                                         f"'{t.name}'; declare it with 'dims'")
                try:
                    if not unknown:
                        evaluate(e, {d: 1 for d in dims})
                except NotASize as err:
                    self.error(getattr(err.node, "loc", t.loc), err.why)
        for loc, message in domain_errors(op):
            self.error(loc, message)
        if op.test is None or op.tolerance is None or not op.bench:
            return
        tested = set()
        for r in op.test.ranges:
            if r.dim not in dims:
                self.error(r.loc, f"test range for unknown dim '{r.dim}'")
            elif r.dim in tested:
                self.error(r.loc, f"a second test range for dim '{r.dim}'")
            tested.add(r.dim)
            try:
                lo, hi = evaluate(r.lo, {}), evaluate(r.hi, {})
                if hi > MAX_TEST_SIZE:
                    self.error(_start(r.hi), f"test range of {r.dim} ends at {_big(hi)}; test "
                                             f"sizes are at most {MAX_TEST_SIZE:,} (bench "
                                             f"sizes may be larger)")
                elif lo > hi or lo < 0:
                    self.error(r.loc, f"test range {r.dim} in {lo}..{hi} is empty or negative")
            except NotASize as err:
                self.error(getattr(err.node, "loc", r.loc), f"test range of {r.dim}: {err.why}")
        for d in op.dims:
            if d not in tested:
                self.error(op.test.ranges[0].loc if op.test.ranges else op.loc,
                           f"dim '{d}' has no test range")
        for point in op.bench:
            given = dict(point.sizes)
            for d in given:
                if d not in dims:
                    self.error(point.loc, f"bench names unknown dim '{d}'")
                elif len(given) < len(point.sizes) and [k for k, _ in point.sizes].count(d) > 1:
                    self.error(point.loc, f"bench gives dim '{d}' twice")
            missing = [d for d in op.dims if d not in given]
            if missing:
                self.error(point.loc, f"bench size missing for dim {', '.join(missing)}")
            if point.dtype is not None and point.dtype not in op.dtype_choices:
                self.error(point.loc, f"bench dtype {point.dtype} is not one of this op's "
                                      f"dtypes ({' | '.join(op.dtype_choices)})")
        if self.diagnostics:
            return
        for cond in op.test.conditions:
            try:
                evaluate(cond, {d: 1 for d in dims})
            except NotASize as err:
                self.error(getattr(err.node, "loc", cond.loc), f"test condition: {err.why}")
        if self.diagnostics:
            return
        for point in op.bench:
            if not valid(op, point.size_dict()):
                self.error(point.loc, "bench sizes break a test condition or give a tensor "
                                      "a negative size")
        self.samples = corners(op)
        if not self.samples:
            self.error(op.test.ranges[0].loc if op.test.ranges else op.loc,
                       "no sizes in the test ranges satisfy the conditions")
        for loc, message in self._domain_magnitudes():
            self.error(loc, message)
        if self.diagnostics:
            return
        for loc, message in empty_domain_errors(op, self.samples):
            self.error(loc, message)
        for sizes in self.samples:  # the reference checks every case in float64 memory
            n = sum(_elements(t, sizes) for t in op.tensors)
            if n > MAX_TEST_ELEMENTS:
                where = ", ".join(f"{k}={v}" for k, v in sizes.items())
                self.error(op.test.ranges[0].loc, f"test sizes too large: {where} gives "
                                                  f"{n:,} elements; keep cases under "
                                                  f"{MAX_TEST_ELEMENTS:,} (bench sizes may be big)")
                break
        self.samples += [p.size_dict() for p in op.bench
                         if p.size_dict() not in self.samples and valid(op, p.size_dict())]

    def _domain_magnitudes(self):
        """Domain bounds within 64-bit integers at every drawn size: inputs are drawn
        between them."""
        for t in self.op.inputs:
            d = t.domain
            bounds = (d.lo, d.hi) if isinstance(d, ir.ValueRange) else \
                (d.total,) if isinstance(d, ir.Offsets) else ()
            for e in bounds:
                for sizes in self.samples:
                    v = evaluate_or_none(e, sizes)
                    if v is not None and not INT64[0] <= v <= INT64[1]:
                        where = ", ".join(f"{k}={v}" for k, v in sizes.items())
                        yield (_start(e), f"domain of '{t.name}' reaches {_big(v)} at {where}; "
                                          f"domain bounds fit 64 bits")
                        break

    def check_dtypes(self) -> None:
        sets = [t for t in self.op.tensors if t.like is None and len(t.dtypes) > 1]
        for t in sets[1:]:
            if set(t.dtypes) != set(sets[0].dtypes):
                self.error(t.loc, f"dtype conflict: '{t.name}' is {' | '.join(t.dtypes)} but "
                                  f"'{sets[0].name}' is {' | '.join(sets[0].dtypes)}; an op has "
                                  f"one dtype variable (write 'like {sets[0].name}')")
        tol = self.op.tolerance
        if tol is not None and not tol.exact:
            # an output is judged by the tolerance of the op's dtype, else by its own
            # dtype's (compare.tolerance): a bf16 op with an f32 output needs bf16 alone
            covered = {name for name, _, _ in tol.table}
            needed: dict[str, str] = {}
            for d in self.op.dtype_choices:
                if d in dtypes.FLOAT and d not in covered:
                    needed.setdefault(d, "a dtype the op takes")
                for t in self.op.tensors:
                    own = self.op.dtype_of(t.name, d)
                    if t.role == "out" and own in dtypes.FLOAT and d not in covered and \
                            own not in covered:
                        needed.setdefault(own, f"the dtype of output '{t.name}'")
            for dt in sorted(needed):
                self.error(self.op.loc, f"no tolerance for dtype {dt} ({needed[dt]}); add "
                                        f"{dt}(rtol=..., atol=...) to the tolerance line")

    # ---- statements ----
    def check_statement(self, st: ir.Statement) -> ir.Statement:
        target = self.tensors.get(st.target)
        scope: dict[str, _Index] = {}
        if target is not None and target.role == "in":
            self.fatal(st.loc, f"'{st.target}' is an input and cannot be assigned")
        if st.target in self.defined:
            self.fatal(st.loc, f"'{st.target}' is assigned twice")
        for node in ir.walk(st.value):  # before inferring ranges from the tensors read
            if isinstance(node, ir.Access):
                self._readable(node, st)
        before = len(self.diagnostics)
        declared = {r.name: r for r in st.ranges if r is not None}
        if target is not None:
            if len(target.shape) != len(st.indices):
                self.fatal(st.loc, f"'{st.target}' has rank {len(target.shape)} but is "
                                   f"assigned with {len(st.indices)} indices")
            for p, (name, dim) in enumerate(zip(st.indices, target.shape)):
                if name in declared:
                    hi = self._declared(declared[name], st)
                    if not self._same_extent(hi, dim) and name.startswith(CONSTANT_AT):
                        self.fatal(declared[name].loc, f"the left side writes dim {p} of "
                                   f"'{st.target}' at 0 alone, but it has size "
                                   f"{format_expr(dim)}: only an axis of size 1 may be written "
                                   f"at a constant")
                    if not self._same_extent(hi, dim):
                        self.fatal(_start(declared[name].hi), f"'{name}' is declared in 0 .. "
                                   f"{format_expr(hi)} but dim {p} of '{st.target}' has size "
                                   f"{format_expr(dim)}")
                scope[name] = _Index(ZERO, dim, f"dim of {st.target}", False)
        else:
            for name in declared:  # first: the others' inference may read them
                scope[name] = _Index(ZERO, self._declared(declared[name], st),
                                     "its declared range", False)
            for p, name in enumerate(st.indices):
                if name in declared:
                    continue
                ext = self._infer_extent(name, st.value, scope)
                if not isinstance(ext, tuple):
                    ext = _chosen(st, name) or from_readers(self, st, p) or \
                        window_extent(self, name, st.value, scope) or ext
                if isinstance(ext, _Why):
                    self.fatal(ext.loc, f"cannot infer the range of index '{name}' from "
                                        f"{ext.what}; declare it on the left side, like "
                                        f"{st.target}[.., {name} in 0 .. N]")
                if ext is None:
                    self.fatal(st.loc, f"cannot infer the range of index '{name}': it never "
                                       f"indexes a tensor directly; declare it on the left "
                                       f"side, like {st.target}[.., {name} in 0 .. N]")
                scope[name] = _Index(ZERO, ext[0], ext[1], False)
        value = self._resolve(st.value, scope, st, top=True)
        kind = self.kind(value, set(scope))
        if target is None:
            dt = {"float": self.op.scratch_float, "int": "i64", "bool": "bool"}[kind]
            self.tensors[st.target] = ir.Tensor(st.target, "tmp", (dt,), None,
                                                tuple(scope[n].hi for n in st.indices),
                                                None, st.loc)
        else:
            want = {dtypes.kind(self.op.dtype_of(st.target, d)) for d in self.op.dtype_choices}
            if kind == "float" and "float" not in want:
                self.error(st.loc, f"dtype conflict: the right side is a float but "
                                   f"'{st.target}' is an integer tensor; cast with i64(...)")
            elif kind == "bool" and "bool" not in want:
                self.error(st.loc, f"dtype conflict: the right side is a bool but "
                                   f"'{st.target}' is not; use where(cond, 1, 0)")
        if len(self.diagnostics) == before:  # bounds of a wrong statement only add noise
            self.check_bounds(value, scope)
        self.defined.add(st.target)
        return dataclasses.replace(st, value=value)

    def _declared(self, r: ir.IndexRange, st: ir.Statement) -> ir.Expr:
        """The extent a left-side ``i in 0 .. HI`` declares: HI, a size at every sampled size."""
        for bound, what in ((r.lo, "start"), (r.hi, "end")):
            for sizes in self.samples:
                try:
                    value = evaluate(bound, sizes)
                except NotASize as err:
                    self.fatal(getattr(err.node, "loc", r.loc),
                               f"the {what} of '{r.name}' on the left side: {err.why}")
                where = ", ".join(f"{k}={v}" for k, v in sizes.items())
                if what == "start" and value != 0:
                    self.fatal(_start(bound), f"a left-side range starts at 0 ('{r.name}' runs "
                                              f"over a dim of '{st.target}'), but this one "
                                              f"starts at {value} at {where}")
                if value < 0:
                    self.fatal(_start(bound), f"the range of '{r.name}' ends at {value}, below "
                                              f"0, at {where}")
        return r.hi

    def _infer_extent(self, name: str, expr: ir.Expr, scope: dict[str, _Index],
                      around: tuple[ir.IndexRange, ...] = ()):
        """The range of an index from its first plain use as a subscript, else from a
        subscript affine in it (``_affine_extent``): (extent, origin), a ``_Why`` the
        affine use failed, or None. An index that only reads offsets (``offsets[b]``,
        ``offsets[b + 1]``) counts segments: one fewer than the offsets' entries for each
        step it reads ahead. ``around``: explicit ranges bound beside it (``sum(g, k in ..)``)."""
        segment = None
        for node in ir.walk(expr):
            if not (isinstance(node, ir.Access) and node.tensor in self.tensors):
                continue
            t = self.tensors[node.tensor]
            for p, sub in enumerate(node.subscripts):
                if p >= len(t.shape):
                    continue
                ahead = _steps_ahead(sub, name)
                if ahead is None:
                    continue
                if not isinstance(t.domain, ir.Offsets):
                    if ahead == 0:
                        return t.shape[p], f"dim {p} of {t.name}"
                    continue
                if segment is None or ahead > segment[2]:
                    segment = (t.shape[p], t.name, ahead)
        if segment is None:
            return affine_extent(self, name, expr, scope, around)
        dim, tensor, ahead = segment
        return _minus(dim, ahead), f"the segments of {tensor}"

    def _same_extent(self, a: ir.Expr, b: ir.Expr) -> bool:
        return all(evaluate(a, s) == evaluate(b, s) for s in self.samples)

    def _fits(self, a: ir.Expr, b: ir.Expr) -> bool:
        return all(evaluate(a, s) <= evaluate(b, s) for s in self.samples)

    def _resolve(self, e: ir.Expr, scope: dict[str, _Index], st: ir.Statement,
                 top: bool = False) -> ir.Expr:
        """Check names, ranks and extents; return ``e`` with every index range filled."""
        rec = lambda x: self._resolve(x, scope, st)  # noqa: E731
        if isinstance(e, ir.Num):
            return e
        if isinstance(e, ir.Name):
            if e.name not in scope and e.name not in self.op.dims and e.name not in CONSTANTS:
                t = self.tensors.get(e.name)
                if t is not None and not t.shape:
                    # a scalar read by its bare name, as a user writes it: ``s`` is ``s[]``
                    return self._resolve_access(ir.Access(e.name, (), loc=e.loc), scope, st)
                if t is not None:
                    self.fatal(e.loc, f"'{e.name}' is a tensor of {len(t.shape)} dim{'s' * (len(t.shape) > 1)}: read "
                                      f"it with subscripts, {e.name}[...]")
                self.fatal(e.loc, f"unknown name '{e.name}'")
            return e
        if isinstance(e, ir.Access):
            return self._resolve_access(e, scope, st)
        if isinstance(e, ir.Unary):
            return dataclasses.replace(e, operand=rec(e.operand))
        if isinstance(e, ir.Binary):
            return dataclasses.replace(e, left=rec(e.left), right=rec(e.right))
        if isinstance(e, ir.Call):
            return self._resolve_call(e, scope, st)
        if isinstance(e, ir.Reduce):
            if e.op in ("argmax", "argmin") and len(e.indices) > 1:
                # (which of the tuples wins, and as what single number, is not defined)
                self.fatal(e.loc, f"'{e.op}' over {len(e.indices)} indices: it takes one "
                                  f"index (read the axes flattened as one, or take the "
                                  f"{e.op} along one axis)")
            inner = dict(scope)
            ranges_ = tuple(self._bind(r, e.body, inner, st, e.op, e.indices) for r in e.indices)
            return dataclasses.replace(e, indices=ranges_,
                                       body=self._resolve(e.body, inner, st))
        if isinstance(e, ir.Scan):
            if e.index not in st.indices:
                self.fatal(e.loc, f"'{e.op}({e.index})' scans an output index, but "
                                  f"'{e.index}' is not on the left side")
            return dataclasses.replace(e, body=rec(e.body))
        if isinstance(e, ir.Collective):
            return self._resolve_collective(e, scope, st, top)
        raise AssertionError(e)

    def _bind(self, r: ir.IndexRange, body: ir.Expr, scope: dict[str, _Index],
              st: ir.Statement, what: str, siblings=()) -> ir.IndexRange:
        # A bound index shadows an outer one of the same name inside the body, as in
        # y[i, j] = e[i, j] / sum(j) e[i, j].
        if r.lo is not None:
            lo, hi = self._resolve(r.lo, scope, st), self._resolve(r.hi, scope, st)
            for bound in (lo, hi):
                if self.kind(bound, set(scope)) != "int":
                    self.fatal(bound.loc if hasattr(bound, "loc") else r.loc,
                               f"the range of '{r.name}' must be integer")
            scope[r.name] = _Index(lo, hi, "its range", True)
            return dataclasses.replace(r, lo=lo, hi=hi)
        later = siblings[[x is r for x in siblings].index(True) + 1:] if siblings else ()
        sized = tuple(x for x in later if x.lo is not None  # (those before it are in scope)
                      and is_size(x.lo, self.op.dims) and is_size(x.hi, self.op.dims))
        ext = self._infer_extent(r.name, body, scope, sized)
        if isinstance(ext, _Why):
            self.fatal(ext.loc, f"cannot infer the range of index '{r.name}' from "
                                f"{ext.what}; write {what}({r.name} in 0..N)")
        if ext is None:
            self.fatal(r.loc, f"cannot infer the range of index '{r.name}'; "
                              f"write {what}({r.name} in 0..N)")
        scope[r.name] = _Index(ZERO, ext[0], ext[1], False)
        return dataclasses.replace(r, lo=ZERO, hi=ext[0])

    def _readable(self, e: ir.Access, st: ir.Statement) -> ir.Tensor:
        t = self.tensors.get(e.tensor)
        if t is None or e.tensor not in self.defined:
            if e.tensor == st.target:
                self.fatal(e.loc, f"'{e.tensor}' is used on its own right side")
            if t is None and all(s.target != e.tensor for s in self.op.statements):
                self.fatal(e.loc, f"unknown tensor '{e.tensor}'")
            self.fatal(e.loc, f"'{e.tensor}' is read before it is assigned")
        return t

    def _resolve_access(self, e: ir.Access, scope, st) -> ir.Access:
        t = self._readable(e, st)
        if len(e.subscripts) != len(t.shape):
            self.fatal(e.loc, f"rank mismatch: '{e.tensor}' has rank {len(t.shape)} but is "
                              f"indexed with {len(e.subscripts)} subscripts")
        subs = []
        for p, sub in enumerate(e.subscripts):
            if isinstance(sub, ir.Name) and sub.name not in scope and sub.name not in self.op.dims:
                self.fatal(sub.loc, f"index '{sub.name}' is free: reduce over it "
                                    f"(sum({sub.name}) ...) or put it on the left side")
            sub = self._resolve(sub, scope, st)
            if isinstance(sub, ir.Name) and sub.name in scope:
                idx = scope[sub.name]
                # an index may read a prefix of an input's dim: one that runs past it is an
                # error. (A row's differences, y[i, j] = x[i, j + 1] - x[i, j] with y of
                # N - 1 columns, and a GLU's halves, x[i, j] and x[i, j + N] of x's 2 * N,
                # read part of an axis; they were refused as shape mismatches.) Offsets of
                # B segments have B+1 entries: a segment index reads a prefix too. An
                # intermediate's extent is the op's own to choose: read only in part, it
                # says its range was declared wrong
                fits = self._fits if isinstance(t.domain, ir.Offsets) or t.role == "in" \
                    else self._same_extent
                # (a padded read may run past the dim: its pad stands for what is not there)
                if not idx.explicit and not fits(idx.hi, t.shape[p]) and \
                        not (e.pad is not None and self._fits(t.shape[p], idx.hi)):
                    self.error(sub.loc, f"shape mismatch: index '{sub.name}' ranges over "
                                        f"{_show(idx.hi)} ({idx.origin}) but indexes dim {p} "
                                        f"of '{t.name}', of size {_show(t.shape[p])}")
            if self.kind(sub, set(scope)) != "int":
                self.error(getattr(sub, "loc", e.loc), f"subscript {p} of '{e.tensor}' is "
                                                       "not an integer")
            subs.append(sub)
        pad = None if e.pad is None else self._resolve(e.pad, scope, st)
        if pad is not None:
            pk, tk = self.kind(pad, set(scope)), dtypes.kind(t.dtypes[0] if t.dtypes else
                                                             self.op.dtype_of(t.name, self.op.dtype_choices[0]))
            if pk == "float" and tk != "float":
                self.error(getattr(pad, "loc", e.loc), f"pad value is a float but "
                                                       f"'{t.name}' holds integers")
        return dataclasses.replace(e, subscripts=tuple(subs), pad=pad)

    def _resolve_call(self, e: ir.Call, scope, st) -> ir.Call:
        if e.fn == "segment_of":
            if len(e.args) != 2 or not isinstance(e.args[0], ir.Name) \
                    or e.args[0].name not in self.tensors:
                self.fatal(e.loc, "segment_of takes an offsets tensor and an index: "
                                  "segment_of(offsets, i)")
            off = self.tensors[e.args[0].name]
            if len(off.shape) != 1 or not isinstance(off.domain, ir.Offsets):
                self.fatal(e.args[0].loc, f"'{off.name}' must be a 1-D input declared "
                                          "with an offsets(N) domain")
            return dataclasses.replace(e, args=(e.args[0], self._resolve(e.args[1], scope, st)))
        if e.fn in ELEMENTWISE:
            arity = ELEMENTWISE[e.fn].arity
        elif e.fn in CASTS:
            arity = 1
        elif e.fn in ("triu_row", "triu_col"):
            arity = 2
        else:
            hint = (f"; '{e.fn}(...)' reduces only when a body follows it"
                    if e.fn in REDUCTIONS + SCANS + COLLECTIVES else "")
            self.fatal(e.loc, f"unknown function '{e.fn}'{hint}")
        if len(e.args) != arity:
            self.fatal(e.loc, f"'{e.fn}' takes {arity} argument{'s' * (arity != 1)}, "
                              f"got {len(e.args)}")
        return dataclasses.replace(e, args=tuple(self._resolve(a, scope, st) for a in e.args))

    def _resolve_collective(self, e: ir.Collective, scope, st, top: bool) -> ir.Collective:
        if not top:
            self.fatal(e.loc, f"'{e.op}' must be the whole right side of a statement")
        free_lhs = [n for n in st.indices if n not in names_in(e.body)]
        k = None
        inner = {n: v for n, v in scope.items()}
        if e.op in ("sort", "argsort"):
            if e.index.name not in st.indices or e.index.lo is not None:
                self.fatal(e.loc, f"'{e.op}({e.index.name})' sorts along an output index: "
                                  f"'{e.index.name}' must be on the left side")
            index = dataclasses.replace(e.index, lo=ZERO, hi=scope[e.index.name].hi)
        else:
            k = self._resolve(e.k, scope, st)
            if len(free_lhs) != 1:
                self.fatal(e.loc, f"'{e.op}' fills one output index that its body does not "
                                  f"use; found {len(free_lhs) or 'none'}")
            out_axis = scope[free_lhs[0]]
            try:
                same = all(evaluate(k, s) == evaluate(out_axis.hi, s) for s in self.samples)
            except NotASize as err:
                self.fatal(getattr(e.k, "loc", e.loc), f"k of {e.op}: {err.why}")
            if not same:
                self.fatal(e.loc, f"'{e.op}' keeps {_show(k)} values but index "
                                  f"'{free_lhs[0]}' ranges over {_show(out_axis.hi)}")
            del inner[free_lhs[0]]
            index = self._bind(e.index, e.body, inner, st, e.op)
        body = self._resolve(e.body, inner if e.op not in ("sort", "argsort") else scope, st)
        return dataclasses.replace(e, index=index, k=k, body=body)

    # ---- types ----
    def kind(self, e: ir.Expr, indices: set[str]) -> str:
        k = lambda x: self.kind(x, indices)  # noqa: E731
        if isinstance(e, ir.Num):
            return "int" if isinstance(e.value, int) else "float"
        if isinstance(e, ir.Name):
            return "float" if e.name in CONSTANTS and e.name not in indices else "int"
        if isinstance(e, ir.Access):
            t = self.tensors[e.tensor]
            kinds = {dtypes.kind(self.op.dtype_of(t.name, d)) if t.role != "tmp"
                     else dtypes.kind(t.dtypes[0]) for d in self.op.dtype_choices}
            return "float" if "float" in kinds else kinds.pop()
        if isinstance(e, ir.Unary):
            return "bool" if e.op == "not" else k(e.operand)
        if isinstance(e, ir.Binary):
            if e.op in ("<", "<=", ">", ">=", "==", "!=", "and", "or"):
                return "bool"
            a, b = k(e.left), k(e.right)
            if e.op in ("/", "**") and not (e.op == "**" and a == b == "int"):
                return "float"
            return "float" if "float" in (a, b) else "int"
        if isinstance(e, ir.Call):
            if e.fn in CASTS:
                return CASTS[e.fn]
            if e.fn in INDEX_BUILTINS:
                return "int"
            b = ELEMENTWISE[e.fn]
            if b.result != "same":
                return b.result
            args = e.args[1:] if e.fn == "where" else e.args
            kinds = {k(a) for a in args}
            return "float" if "float" in kinds else ("int" if "int" in kinds else "bool")
        if isinstance(e, ir.Reduce):
            body = self.kind(e.body, indices | {r.name for r in e.indices})
            if e.op in ("argmax", "argmin"):
                return "int"
            if e.op == "mean":
                return "float"
            return "int" if body == "bool" else body
        if isinstance(e, ir.Scan):
            return k(e.body)
        if isinstance(e, ir.Collective):
            return "int" if e.op.startswith("arg") else \
                self.kind(e.body, indices | {e.index.name})
        raise AssertionError(e)

    # ---- bounds ----
    def check_bounds(self, value: ir.Expr, scope: dict[str, _Index]) -> None:
        """Every read is in bounds at every sampled size, or padded."""
        accesses = [n for n in ir.walk(value) if isinstance(n, ir.Access) and n.pad is None]
        if not accesses:
            return
        for sizes in self.samples:
            ev = IntervalEval(sizes, {}, lambda name: self._value_interval(name, sizes),
                              lambda name: evaluate(self.tensors[name].shape[0], sizes))
            for name, idx in scope.items():
                ev.index[name] = (0, evaluate(idx.hi, sizes) - 1)
            self._check_reads(value, ev, sizes)

    def _check_reads(self, e: ir.Expr, ev: IntervalEval, sizes) -> None:
        if isinstance(e, ir.Access) and e.pad is None:
            t = self.tensors[e.tensor]
            for p, sub in enumerate(e.subscripts):
                size = evaluate(t.shape[p], sizes)
                iv = ev.of(sub)
                where = ", ".join(f"{k}={v}" for k, v in sizes.items())
                if iv is None:
                    self.fatal(getattr(sub, "loc", e.loc),
                               f"subscript {p} of '{t.name}' may take any value: declare a "
                               f"domain for the tensor it comes from (in 0..N) or add pad(...)")
                if size > 0 and (iv[0] < 0 or iv[1] > size - 1):
                    self.fatal(getattr(sub, "loc", e.loc),
                               f"index out of range: subscript {p} of '{t.name}' reaches "
                               f"{int(iv[0])}..{int(iv[1])} but the dim has size {size} "
                               f"(at {where}); add pad(...) if that is meant")
        for child in ir.operands(e):
            if isinstance(e, (ir.Reduce, ir.Collective)) and child is _body(e):
                ranges_ = e.indices if isinstance(e, ir.Reduce) else (e.index,)
                self._with_ranges(ranges_, ev, lambda: self._check_reads(child, ev, sizes),
                                  lambda r: self._check_bound_reads(r, ev, sizes))
            else:
                self._check_reads(child, ev, sizes)

    def _check_bound_reads(self, r: ir.IndexRange, ev: IntervalEval, sizes) -> None:
        """A range's bounds are read too (``i in offsets[b] .. offsets[b + 1]``)."""
        for bound in (r.lo, r.hi):
            if bound is not None:
                self._check_reads(bound, ev, sizes)

    def _with_ranges(self, ranges_, ev: IntervalEval, fn, before=None) -> None:
        """``fn`` with ``ranges_`` bound in turn; ``before(r)`` as each is bound (a range's
        bounds see the ranges bound before it)."""
        if not ranges_:
            return fn()
        if before is not None:
            before(ranges_[0])
        ev._bound(ranges_[0], lambda: self._with_ranges(ranges_[1:], ev, fn, before))

    def _value_interval(self, name: str, sizes):
        t = self.tensors[name]
        if isinstance(t.domain, ir.ValueRange):
            lo, hi = evaluate_or_none(t.domain.lo, sizes), evaluate_or_none(t.domain.hi, sizes)
            if lo is not None and hi is not None:
                return (lo, hi - 1)
        if isinstance(t.domain, ir.Offsets):
            return (0, evaluate(t.domain.total, sizes))
        return None  # intermediates are not tracked: reads through them need pad(...)

    # ---- baseline ----
    def check_baseline(self) -> None:
        b = self.op.baseline
        if b is None:
            return
        try:
            with warnings.catch_warnings():  # "invalid decimal literal" and the like
                warnings.simplefilter("ignore", SyntaxWarning)
                tree = ast.parse(b.source, mode="eval")
        except SyntaxError as err:
            col = b.loc.column + max((err.offset or 1) - 1, 0)
            self.error(ir.Loc(b.loc.line, col), f"baseline does not parse: {err.msg}")
            return
        except (RecursionError, MemoryError):  # Python's own parser gives up
            self.error(b.loc, "baseline nested too deeply for Python to parse")
            return
        known = BASELINE_NAMES | BASELINE_BUILTINS | {t.name for t in self.op.inputs} | \
            set(self.op.dims)
        # a value read twice may be bound once (``(t := ...)``) and read by name after: never
        # over a name the baseline is given (an input, a dim, torch)
        for node in ast.walk(tree):
            if isinstance(node, ast.NamedExpr):
                if node.target.id in known:
                    self.error(ir.Loc(b.loc.line, b.loc.column + node.col_offset),
                               f"baseline binds '{node.target.id}', a name it is given")
                    return
        known = known | {n.target.id for n in ast.walk(tree) if isinstance(n, ast.NamedExpr)}
        # and the parameters of its lambdas and the targets of its comprehensions, in their
        # own scopes
        for node in ast.walk(tree):
            if isinstance(node, ast.Lambda):
                a = node.args
                known = known | {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs} | \
                    {p.arg for p in (a.vararg, a.kwarg) if p is not None}
            elif isinstance(node, ast.comprehension):
                known = known | {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        big = _baseline_too_large(tree.body, set(self.op.dims))
        if big is not None:
            self.error(ir.Loc(b.loc.line, b.loc.column + big.col_offset),
                       f"baseline arithmetic too large: {ast.unparse(big)[:60]} can pass "
                       f"{MAX_INT_BITS} bits, or 2**{MAX_REPEAT_BITS} items repeated")
            return
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id not in known:
                self.error(ir.Loc(b.loc.line, b.loc.column + node.col_offset),
                           f"baseline uses unknown name '{node.id}' (it sees the inputs, the "
                           f"dims, torch, F = torch.nn.functional, math, kt = kdsl.torch_ops "
                           f"and Python's {', '.join(sorted(BASELINE_BUILTINS))})")


def _chosen(st: ir.Statement, name: str) -> tuple[ir.Expr, str] | None:
    """(K, why) for the index of the K values a topk or argtopk on the right side chooses
    (``v[t, r] = topk(e, K) x[t, e]``: r runs over 0 .. K), where nothing else ranges it."""
    e = st.value
    if not isinstance(e, ir.Collective) or e.op not in ("topk", "argtopk") or e.k is None:
        return None
    if name == e.index.name or any(isinstance(n, ir.Name) and n.name == name
                                   for n in ir.walk(e.body)):
        return None
    return e.k, f"the {e.op}'s K"


MAX_REPEAT_BITS = 24  # a sequence repeated in a baseline: at most 2**24 items
_SEQUENCES = (ast.List, ast.Tuple)


def _baseline_bits(node: ast.AST, dims: set[str]) -> int | None:
    """Like ``intervals.int_bits`` for the baseline's Python: an upper bound on the bits of
    the integers it computes from literals and dims (64-bit), None where a value is not a
    Python integer (a tensor, a call's result). A sequence repeated counts its length."""
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, (str, bytes)):
            return max(len(v), 1).bit_length()
        return max(v.bit_length(), 1) if isinstance(v, int) else None
    if isinstance(node, ast.Name):
        return 64 if node.id in dims else None
    if isinstance(node, (ast.List, ast.Tuple)):
        return max(len(node.elts), 1).bit_length()
    if isinstance(node, ast.UnaryOp):
        return _baseline_bits(node.operand, dims)
    if not isinstance(node, ast.BinOp):
        return None
    a, b = _baseline_bits(node.left, dims), _baseline_bits(node.right, dims)
    if a is None or b is None:
        return None
    if isinstance(node.op, (ast.Add, ast.Sub)):
        return max(a, b) + 1
    if isinstance(node.op, ast.Mult):
        return a + b
    if isinstance(node.op, ast.Pow):
        return a * (1 << min(b, 64))
    if isinstance(node.op, ast.LShift):
        return a + (1 << min(b, 64))
    return max(a, b)


def _baseline_too_large(tree: ast.AST, dims: set[str]) -> ast.AST | None:
    """The outermost part of the baseline whose integer arithmetic could pass
    ``MAX_INT_BITS`` (``2 ** 64 ** 64`` would run for ever), or None."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            bits = _baseline_bits(node, dims)
            if bits is not None and bits > MAX_INT_BITS:
                return node
            if isinstance(node.op, ast.Mult) and bits is not None and bits > MAX_REPEAT_BITS \
                    and any(_is_sequence(x) for x in (node.left, node.right)):
                return node  # "a" * 10 ** 12: a sequence too long to build
    return None


def _is_sequence(node: ast.AST) -> bool:
    return isinstance(node, _SEQUENCES) or \
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))


def _big(v) -> str:
    if isinstance(v, float):
        return f"{v:,.6g}"
    return f"{v:,}" if abs(v) < 1 << 80 else f"{'-' if v < 0 else ''}2**{abs(v).bit_length() - 1}+"


def _elements(t: ir.Tensor, sizes: dict[str, int]) -> int:
    n = 1
    for e in t.shape:
        n *= max(evaluate(e, sizes), 0)
    return n


def evaluate_or_none(e: ir.Expr, sizes) -> float | None:
    if isinstance(e, ir.Num):
        return e.value
    try:
        return evaluate(e, sizes)
    except NotASize:
        return None


def _body(e):
    return e.body


def _show(e: ir.Expr) -> str:
    return format_expr(e)  # with the parentheses a nested size needs


def _start(e: ir.Expr) -> ir.Loc:
    """Where ``e`` starts in the source (a binary node's own location is its operator's)."""
    while isinstance(e, ir.Binary):
        e = e.left
    return e.loc


def check_op(op: ir.Op, path: str) -> tuple[ir.Op | None, list[Diagnostic]]:
    c = Checker(op, path)
    checked = c.run()
    return checked, c.diagnostics


__all__ = ["check_op", "ranges"]


def _steps_ahead(sub: ir.Expr, name: str) -> int | None:
    """0 for ``name``, c for ``name + c`` (c >= 0), None for anything else."""
    if isinstance(sub, ir.Name) and sub.name == name:
        return 0
    if (isinstance(sub, ir.Binary) and sub.op == "+" and isinstance(sub.left, ir.Name)
            and sub.left.name == name and isinstance(sub.right, ir.Num)
            and isinstance(sub.right.value, int) and sub.right.value >= 0):
        return sub.right.value
    return None


def _minus(dim: ir.Expr, k: int) -> ir.Expr:
    """``dim - k``, simplified when dim is ``X + k``."""
    if k == 0:
        return dim
    if (isinstance(dim, ir.Binary) and dim.op == "+" and isinstance(dim.right, ir.Num)
            and dim.right.value == k):
        return dim.left
    return ir.Binary("-", dim, ir.Num(k))
