"""The C source of one op under one genome: a kernel function per dtype.

Each function is ``void kdsl_<dtype>(void **bufs, const int64_t *dims)`` with the
op's inputs then outputs in ``bufs`` and its dims in declaration order. Groups of
statements (see ``c_plan``) run one after another; a group is an OpenMP parallel
loop over its leading indices whose body holds each statement's inner loops.
Intermediates live in scalars, per-thread row buffers or malloc'd globals.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdsl import dtypes, ir

from kdsl.backends.c import plan as c_plan
from kdsl.backends.c.code import Block, Loop, Style, render_lines
from kdsl.backends.c.conv import Direct, convolutions
from kdsl.backends.c.emit import CTYPE, KIND, LOAD, STORE, TMP_CTYPE, C, Emitter, Var, as_float
from kdsl.backends.c.gemm import Packed
from kdsl.backends.c.nest import Nests
from kdsl.backends.c.prelude import PRELUDE, WIDE_PRELUDE, segment_helper, sort_helpers, \
    wide_function
from kdsl.backends.c.scatter import Scatters

TMP_DTYPE = {"float": "f32", "int": "i64", "bool": "bool"}
PARALLEL_MIN_WORK = 32768  # elements; below this a parallel region costs more than it saves


@dataclass(frozen=True)
class Options:
    """The genome, decoded (see ``c.C_BACKEND.space`` for what each gene means)."""
    threads: object = "all"
    schedule: str = "static"
    order: tuple = ()
    fuse: bool = True
    inline_tmps: bool = False
    reduce_order: str = "auto"
    tile: int = 128
    unroll: int | None = None
    simdlen: int | None = None
    vec: int = 256
    reduce_vec: str = "simd"
    acc: str = "float"
    fast_div: bool = True
    prefetch: int = 0
    gemm: str = "packed"      # contractions: "packed" GEMM or "loops" (the loop nest)
    mr: int = 8               # micro-kernel rows
    nr: int = 32              # micro-kernel columns (a multiple of the vector width)
    kc: int = 256             # K block
    mc: int = 256             # M block of a task
    nc: int = 512             # N block of a task
    split_k: str = "auto"     # split K across threads when there are too few tasks
    conv: str = "direct"      # convolutions: the "direct" kernel (module ``conv``) or "loops"
    conv_cob: int = 8         # output channels a micro-kernel keeps in registers
    conv_nv: int = 2          # vectors of output positions a micro-kernel keeps
    scatter: bool = True      # sums over an indicator as scatter-adds (module ``scatter``)


def dims_text(e: ir.Expr) -> str:
    """A dim expression (dims, integers, + - * // %) as C."""
    if isinstance(e, ir.Num):
        return f"INT64_C({int(e.value)})"
    if isinstance(e, ir.Name):
        return f"D_{e.name}"
    if isinstance(e, ir.Unary) and e.op == "neg":
        return f"(-{dims_text(e.operand)})"
    if isinstance(e, ir.Binary) and e.op in ("+", "-", "*"):
        return f"({dims_text(e.left)} {e.op} {dims_text(e.right)})"
    if isinstance(e, ir.Binary) and e.op in ("//", "%"):
        fn = "kd_floordiv" if e.op == "//" else "kd_mod"
        return f"{fn}({dims_text(e.left)}, {dims_text(e.right)})"
    raise ValueError(f"not a size expression: {e}")


class KernelWriter(Nests, Packed, Direct, Scatters):
    def __init__(self, op: ir.Op, dtype: str, opt: Options, helpers: dict):
        self.op, self.dtype, self.opt, self.helpers = op, dtype, opt, helpers
        # an f64 instance: its function is rendered as any other and compiled with float
        # meaning double (``render``); the GEMM and convolution micro-kernels, written for
        # float vector lanes, leave its contractions to the loop nests
        self.wide = op.wide(dtype)
        self.plan = c_plan.plan(op, opt.fuse, opt.inline_tmps,
                                opt.gemm == "packed" and not self.wide,
                                opt.conv == "direct" and not self.wide, opt.scatter)
        self.op = self.plan.op
        self.em = Emitter(self)
        self.overrides: dict = {}
        self.loop_of: dict = {}
        self.fast_div = opt.fast_div and not (op.tolerance and op.tolerance.exact)
        self.group_p = 0
        self.convs = convolutions(self.op) if opt.conv == "direct" and not self.wide else {}

    # ---- tensors ----
    def dtype_of(self, name: str) -> str:
        t = self.op.tensor(name)
        return TMP_DTYPE[dtypes.kind(t.dtypes[0])] if t.role == "tmp" else \
            self.op.dtype_of(name, self.dtype)

    def kind_of_tensor(self, name: str) -> str:
        return KIND[dtypes.kind(self.dtype_of(name))]

    def itemsize(self, name: str) -> int:
        return dtypes.ITEMSIZE[self.dtype_of(name)]

    def shape_c(self, name: str) -> list[str]:
        return [f"n_{name}_{q}" for q in range(len(self.op.tensor(name).shape))]

    def ptr(self, name: str) -> str:
        return ("r_" if self.plan.storage[name] == "row" else "t_") + name

    def scalar_name(self, name: str) -> str:
        return "s_" + name

    def offset(self, name: str, subs: list[str], first: int) -> str:
        rank = len(self.op.tensor(name).shape)
        terms = [f"({s}) * st_{name}_{q}" if q < rank - 1 else f"({s})"
                 for q, s in zip(range(first, rank), subs)]
        return " + ".join(terms) or "0"

    def load(self, name: str, off: str) -> str:
        return LOAD[self.dtype_of(name)].format(f"{self.ptr(name)}[{off}]")

    def store(self, st: ir.Statement, scope: dict, v: C) -> str:
        name = st.target
        storage = self.plan.storage[name]
        dt = self.dtype_of(name)
        text = as_float(v) if dtypes.kind(dt) == "float" else v.text
        if storage == "scalar":
            return f"{self.scalar_name(name)} = {text};"
        first = self.group_p if storage == "row" else 0
        subs = [scope[n].text for n in st.indices]
        off = self.offset(name, subs[first:], first)
        return f"{self.ptr(name)}[{off}] = {STORE[dt].format(text)};"

    def extent(self, st: ir.Statement, index: str) -> str:
        return self.shape_c(st.target)[st.indices.index(index)]

    def dims_c(self, e: ir.Expr) -> str:
        return dims_text(e)

    # ---- helpers the kernel needs ----
    def need_sort(self, tag: str, ctype: str) -> None:
        self.helpers.setdefault(f"sort_{tag}", sort_helpers(ctype, tag))

    def need_segment(self, name: str) -> None:
        ctype = CTYPE[self.dtype_of(name)]
        load = LOAD[self.dtype_of(name)].replace("{}", "{0}")
        self.helpers.setdefault(f"seg_{name}_{ctype}", segment_helper(name, ctype, load))

    def thread_buffer(self, ctype: str, size: str) -> str:
        name = self.em.fresh("buf")
        self.allocs.append((name, ctype, size))
        return name

    # ---- statements ----
    def statement(self, sp: c_plan.StmtPlan, pvars: list[str], seg: Block,
                  tiled: str | None = None) -> None:
        st = sp.st
        self.cur = sp
        scope = {st.indices[q]: Var(pvars[q], 1) for q in range(sp.p)}
        stack = [self.pre, seg]
        if tiled:  # the last parallel loop steps over tiles: the statement is a tile's work
            del scope[tiled]
            t0 = pvars[sp.p - 1]
            tn = f"kd_min64({self.opt.tile}, {self.extent(st, tiled)} - {t0})"
            self.tile(sp, c_plan.interchangeable(sp, tiled), scope, stack, t0, tn, tiled)
            return
        reds = self.interchange_set(sp)
        names = sp.inner[:-1] if reds else sp.inner
        for name in names:
            loop = Loop(self.em.fresh("j"), "0", self.extent(st, name))
            stack[-1].main.append(loop)
            scope[name] = Var(loop.var, len(stack))
            stack.append(loop.body)
            self.loop_of[id(loop.body)] = loop
        if reds:
            self.interchange(sp, reds, scope, stack)
        else:
            v = self.em.emit(st.value, scope, stack)
            stack[-1].main.append(self.store(st, scope, v))

    def interchange_set(self, sp: c_plan.StmtPlan) -> list:
        mode = self.opt.reduce_order
        if mode == "inner":
            return []
        reds = c_plan.interchangeable(sp)
        if mode == "auto" and not any(c_plan.prefers_outer(sp, r) for r in reds):
            return []
        return reds

    def group(self, g: c_plan.GroupPlan) -> list[str]:
        target = g.stmts[0].st.target
        sc = self.plan.scatters.get(target)
        if sc is not None:
            return self.scatter_group(g, sc)
        con = self.plan.contractions.get(target)
        if con is not None:
            return self.packed_group(g, con)
        conv = self.convs.get(target)
        if conv is not None and len(g.stmts) == 1 and \
                self.plan.storage[target] in ("output", "global"):
            return self.conv_group(g, conv)
        return self.loop_group(g)

    def loop_group(self, g: c_plan.GroupPlan) -> list[str]:
        self.pre, self.allocs, self.group_p = Block(), [], g.p
        pvars = [self.em.fresh("p") for _ in range(g.p)]
        tiled = c_plan.tiled_index(self.plan, g) if self.opt.reduce_order != "inner" else None
        memo: dict = {}
        segs = []
        for sp in g.stmts:
            seg = Block(memo=memo)
            segs.append(seg)
            self.statement(sp, pvars, seg, tiled)
        body = Block()
        for sp in g.stmts:
            if self.plan.storage[sp.st.target] == "scalar":
                kind = self.kind_of_tensor(sp.st.target)
                ctype = self.opt.acc if kind == "f" else {"i": "int64_t", "b": "int"}[kind]
                body.main.append(f"{ctype} {self.scalar_name(sp.st.target)};")
        for seg in segs:
            body.main += seg.items()
        for sp in g.stmts:
            name = sp.st.target
            if self.plan.storage[name] == "row":
                t = self.op.tensor(name)
                size = " * ".join(f"n_{name}_{q}" for q in range(g.p, len(t.shape)))
                self.allocs.append(("r_" + name, TMP_CTYPE[dtypes.kind(t.dtypes[0])], size))
        style = Style(True, self.opt.simdlen, self.opt.unroll)
        alloc = [f"{c} *restrict {n} = ({c} *)malloc(sizeof({c}) * (size_t)kd_max64({s}, 1));"
                 for n, c, s in self.allocs]
        free = [f"free({n});" for n, _, _ in self.allocs]
        out = render_lines(self.pre.items(), style, 1)
        if g.p == 0:
            return out + ["  {"] + render_lines(alloc + body.items() + free, style, 2) + ["  }"]
        order = [q for q in self.opt.order if q < g.p] or list(range(g.p))
        order += [q for q in range(g.p) if q not in order]
        step = {g.p - 1: str(self.opt.tile)} if tiled else {}
        loops = [Loop(pvars[q], "0", dims_text(g.extents[q]), step=step.get(q, "1"),
                      vector=False) for q in order]
        for outer, nested in zip(loops, loops[1:]):
            outer.body.main.append(nested)
        loops[-1].body = body
        sched = "static"
        if self.opt.schedule == "dynamic":
            total = " * ".join(f"({dims_text(x)})" for x in g.extents)
            chunk = self.em.fresh("chunk")
            out.append(f"  const int64_t {chunk} = kd_max64(1, ({total}) / 256);")
            sched = f"dynamic, {chunk}"
        simd = " simd" if not body.has_loop() else ""
        collapse = f" collapse({g.p})" if g.p > 1 else ""
        loops[0].head = [f"#pragma omp for{simd} schedule({sched}){collapse}"]
        threads = "" if self.opt.threads == "all" else f" num_threads({self.opt.threads})"
        out.append(f"  #pragma omp parallel{threads} if({self.work(g)} >= {PARALLEL_MIN_WORK})")
        out.append("  {")
        out += render_lines(alloc + [loops[0]] + free, style, 2)
        out.append("  }")
        return out

    def work(self, g: c_plan.GroupPlan) -> str:
        """A rough element count of a group: every tensor its statements touch."""
        names = []
        for sp in g.stmts:
            for name in [sp.st.target] + sorted(c_plan.reads(sp.st.value)):
                if name not in names:
                    names.append(name)
        sizes = [" * ".join(self.shape_c(n)) or "1" for n in names]
        return "(" + " + ".join(f"({s})" for s in sizes) + ")"

    # ---- the function ----
    def function(self) -> str:
        op = self.op
        lines = [f"void kdsl_{self.dtype}(void **bufs, const int64_t *dims) {{"]
        for q, d in enumerate(op.dims):
            lines.append(f"  const int64_t D_{d} = dims[{q}];")
        for t in op.tensors:
            for q, e in enumerate(t.shape):
                lines.append(f"  const int64_t n_{t.name}_{q} = {dims_text(e)};")
            for q in range(len(t.shape) - 1):
                rest = " * ".join(f"n_{t.name}_{r}" for r in range(q + 1, len(t.shape)))
                lines.append(f"  const int64_t st_{t.name}_{q} = {rest};")
        for n, t in enumerate(op.inputs + op.outputs):
            c = CTYPE[self.dtype_of(t.name)]
            const = "const " if t.role == "in" else ""
            lines.append(f"  {const}{c} *restrict t_{t.name} = ({const}{c} *)bufs[{n}];")
        globals_ = [t for t in op.tensors if self.plan.storage.get(t.name) == "global"]
        for t in globals_:
            c = TMP_CTYPE[dtypes.kind(t.dtypes[0])]
            size = " * ".join(f"n_{t.name}_{q}" for q in range(len(t.shape))) or "1"
            lines.append(f"  {c} *restrict t_{t.name} = ({c} *)malloc(sizeof({c}) * "
                         f"(size_t)kd_max64({size}, 1));")
        for t in op.tensors:  # keep unused size constants quiet
            lines += [f"  (void)n_{t.name}_{q};" for q in range(len(t.shape))]
            lines += [f"  (void)st_{t.name}_{q};" for q in range(len(t.shape) - 1)]
        for g in self.plan.groups:
            lines += self.group(g)
        lines += [f"  free(t_{t.name});" for t in globals_]
        lines.append("}")
        return "\n".join(lines)


def render(op: ir.Op, opt: Options, header: str = "") -> str:
    helpers: dict = {}
    functions = []
    for dt in op.dtype_choices:
        writer = KernelWriter(op, dt, opt, helpers)
        functions.append(wide_function(writer.function()) if writer.wide else writer.function())
    top = [f"/* {header} */"] if header else []
    if opt.vec:
        top.append(f'#pragma GCC target("prefer-vector-width={opt.vec}")')
    wide = [WIDE_PRELUDE] if any(op.wide(dt) for dt in op.dtype_choices) else []
    return "\n".join(top + [PRELUDE] + wide + list(helpers.values()) + functions) + "\n"
