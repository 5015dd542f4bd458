"""A sum over a one-hot indicator (``lower.scatter``) as a C scatter-add.

``T[.., e, ..] += value`` for each tuple of the loops, where every key is inside its
range, into an accumulator of the sum's kind (the ``acc`` gene's float type, or
``uint64_t``: integer sums wrap as the loop nest's do); then ``T`` is written from it,
or the accumulator is ``T`` itself when their types agree. The loops are emitted once
(their invariants hoisted as in any nest) and run one of four ways, picked at run time:

- serial, when the work is under ``PARALLEL_MIN_WORK`` or there is one thread;
- ``outer``: the first loop is an output index of ``T`` other than the keyed ones, with
  enough iterations for every thread: threads write disjoint slices, no synchronisation;
- ``private``: when ``T`` x threads fits (``PRIVATE_AT_MOST`` elements, and no more than
  the work), each thread adds into a private copy, and the copies are summed element by
  element in thread order (deterministic for a given thread count);
- ``atomic``: otherwise, ``#pragma omp atomic`` adds into the shared accumulator.

The loops are never vectorised (two lanes may hit one element). A float sum adds in
another order than the dense loop; integer counts are exact.
"""
from __future__ import annotations

from kdsl import dtypes

from kdsl.backends.c.code import Block, Loop, Style, render_lines
from kdsl.backends.c.emit import CTYPE, STORE, TMP_CTYPE, C, Var, as_float, as_int, kind_of
from kdsl.backends.lower.scatter import Scatter

PRIVATE_AT_MOST = 1 << 24  # elements of all threads' private copies together
OUTER_PER_THREAD = 4       # iterations of an outer loop per thread, at least, to split it
MARK = "/*@scatter-add@*/"


class Scatters:
    """Mixed into the kernel writer: ``scatter_group`` renders one scatter statement."""

    def scatter_group(self, g, sc: Scatter) -> list[str]:
        from kdsl.backends.c.render import PARALLEL_MIN_WORK
        em = self.em
        name = sc.target
        t = self.op.tensor(name)
        self.pre, self.allocs, self.group_p = Block(), [], 0
        sum_kind = kind_of(self.op, self.dtype, sc.reduce, set())
        acc = self.opt.acc if sum_kind == "f" else "uint64_t"
        dt = self.dtype_of(name)
        ctype = TMP_CTYPE[dtypes.kind(t.dtypes[0])] if t.role == "tmp" else CTYPE[dt]
        in_place = (sum_kind == "f" and acc == ctype) or \
            (sum_kind != "f" and ctype == "int64_t")
        p = em.fresh("sc") + "_"
        A, S, W, NT = f"{p}acc", f"{p}size", f"{p}work", f"{p}nt"

        # the loops, emitted once
        scope: dict = {}
        stack = [self.pre]
        loops = []
        for r in sc.loops:
            lo = em.emit(r.lo, scope, stack, True)
            hi = em.emit(r.hi, scope, stack, True)
            loop = Loop(em.fresh("s"), as_int(lo), as_int(hi), vector=False)
            (stack[-1].main if loops else []).append(loop)
            loops.append(loop)
            scope[r.name] = Var(loop.var, len(stack))
            stack.append(loop.body)
        body: Block = stack[-1]
        shape = self.shape_c(name)
        subs, tests = [], []
        for q, (key, keyed) in enumerate(zip(sc.keys, sc.keyed)):
            if not keyed:
                subs.append(scope[key.name].text)
                continue
            k = em.fresh("key")
            body.main.append(f"const int64_t {k} = {as_int(em.emit(key, scope, stack, True))};")
            subs.append(k)
            tests.append(f"(uint64_t)({k}) < (uint64_t)({shape[q]})")
        v = em.emit(sc.value, scope, stack)
        val = f"({acc})({as_float(v) if sum_kind == 'f' else v.text})"
        off = self.offset(name, subs, 0)
        at = len(body.main)
        body.main.append(MARK)

        def nest(target: str, head: list[str], atomic: bool = False) -> list:
            add = f"  {target}[{off}] += {val};"
            if atomic:
                add = "  #pragma omp atomic\n" + add
            body.main[at] = f"if ({' && '.join(tests)}) {{\n{add}\n}}"
            loops[0].head = head
            return render_lines([loops[0]], style, 0)

        style = Style(True, self.opt.simdlen, self.opt.unroll)
        threads = "omp_get_max_threads()" if self.opt.threads == "all" else str(self.opt.threads)
        size = " * ".join(shape) or "1"
        zero = f"memset({A}, 0, sizeof({acc}) * (size_t){S});"
        region = f"#pragma omp parallel num_threads({NT})"
        sched = "#pragma omp for schedule(static)"
        L = [f"/* {name}: a sum over an indicator as a scatter-add */",
             f"const int64_t {S} = {size};",
             f"const int64_t {W} = {self.work(g)};",
             f"const int {NT} = {threads};",
             f"{acc} *restrict {A} = " + (f"({acc} *){self.ptr(name)};" if in_place else
                                          f"({acc} *)malloc(sizeof({acc}) * "
                                          f"(size_t)kd_max64({S}, 1));")]
        L += render_lines(self.pre.pre, style, 0)
        L += [f"if ({W} < {PARALLEL_MIN_WORK} || {NT} <= 1) {{", "  " + zero]
        L += _indent(nest(A, []))
        if sc.outer:
            L += [f"}} else if ({loops[0].hi} - ({loops[0].lo}) >= "
                  f"{OUTER_PER_THREAD} * (int64_t){NT}) {{", "  " + zero, "  " + region, "  {"]
            L += _indent(nest(A, [sched]), 2) + ["  }"]
        P, M, e, tt, s = f"{p}priv", f"{p}mine", f"{p}e", f"{p}t", f"{p}s"
        L += [f"}} else if ({S} * (int64_t){NT} <= kd_min64({W}, {PRIVATE_AT_MOST})) {{",
              f"  {acc} *restrict {P} = ({acc} *)calloc((size_t)kd_max64({S} * {NT}, 1), "
              f"sizeof({acc}));",
              "  " + region, "  {",
              f"    {acc} *restrict {M} = {P} + (size_t)omp_get_thread_num() * (size_t){S};"]
        L += _indent(nest(M, [sched]), 2)
        L += ["    " + sched,
              f"    for (int64_t {e} = 0; {e} < {S}; ++{e}) {{",
              f"      {acc} {s} = 0;",
              f"      for (int {tt} = 0; {tt} < {NT}; ++{tt}) {s} += "
              f"{P}[(size_t){tt} * (size_t){S} + {e}];",
              f"      {A}[{e}] = {s};", "    }", "  }", f"  free({P});",
              "} else {", "  " + zero, "  " + region, "  {"]
        L += _indent(nest(A, [sched], atomic=True), 2) + ["  }", "}"]
        if not in_place:  # as the loop nest finishes and stores a sum
            got = C(f"{A}[{e}]", "f") if sum_kind == "f" else C(f"((int64_t)({A}[{e}]))", "i")
            text = as_float(got) if dtypes.kind(dt) == "float" else as_int(got)
            store = STORE[dt].format(text)
            L += [f"#pragma omp parallel for schedule(static) num_threads({NT}) "
                  f"if({S} >= {PARALLEL_MIN_WORK})",
                  f"for (int64_t {e} = 0; {e} < {S}; ++{e}) {self.ptr(name)}[{e}] = {store};",
                  f"free({A});"]
        return ["  {"] + _indent(L, 2) + ["  }"]


def _indent(lines: list[str], n: int = 1) -> list[str]:
    return ["  " * n + line for line in lines]
