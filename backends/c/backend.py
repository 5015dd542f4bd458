"""The C backend: OpenMP + SIMD-friendly loop nests, compiled by the system compiler.

Generated from the IR alone (``c_plan`` groups statements, ``c_render`` writes
the loops); the genome only changes the schedule, so every genome computes the
same values. Kernels run on the buffers of CPU torch tensors through ctypes.

Genes (only those that matter for an op are in its space):

- ``threads``: OpenMP threads, ``all`` or a fixed count.
- ``schedule``: static blocks of the parallel loop, or dynamic chunks (uneven rows).
- ``order``: the order of a group's parallel loops (they are collapsed into one).
- ``fuse``: run statements that share leading indices in one parallel loop,
  keeping intermediates in scalars / row buffers, instead of one loop each.
- ``inline_tmps``: substitute elementwise intermediates into their readers.
- ``reduce_order``: ``inner`` keeps reductions innermost (a scalar accumulator);
  ``outer`` moves them outside the innermost output loop, with a tile of vector
  accumulators; ``auto`` does so where the innermost index is contiguous in a read the
  reduction streams. A group with no loop besides reductions down the slow axis (a
  column's max) runs its last parallel loop over such tiles, unless ``inner``.
- ``tile``: accumulators per tile for ``outer`` reductions.
- ``prefetch``: gathered rows prefetched this many reduction steps ahead (0: off).
- ``reduce_vec``: ``simd`` reductions (vector partial accumulators, reassociated) or
  ``scalar`` (sequential order).
- ``acc``: accumulator precision of float reductions and scans.
- ``vec``: preferred vector width in bits; ``simdlen``: omp simd length hint (0: none);
  ``unroll``: ``#pragma GCC unroll`` of innermost loops (0: compiler's choice).
- ``fast_div``: division by a loop-invariant value becomes a multiply by its reciprocal.
- ``scatter``: a sum over an equality indicator (``h[c] = sum(i) (idx[i] == c)``) as a
  scatter-add (``lower.scatter``, module ``scatter``) or as the dense loop nest; only
  in the space of an op that has one.
- ``gemm``: a contraction (``contraction.recognise``) as a ``packed`` GEMM (module ``gemm``), or
  as the loop nest of any other statement (``loops``, its operands copied by
  ``lower.layouts`` first); ``mr`` x ``nr`` the micro-kernel's register tile, ``kc``,
  ``mc``, ``nc`` the K, M and N blocks, ``split_k`` whether K is split across threads
  when a contraction has too few blocks for them.
"""
from __future__ import annotations

import functools
import itertools
import shutil

from kdsl import ir

from kdsl.backends.c import build as c_build
from kdsl.backends.c import plan as c_plan
from kdsl.backends.c.contraction import contractions
from kdsl.backends.c.conv import convolutions
from kdsl.backends.lower.layouts import contiguous_operands
from kdsl.backends.lower.scans import ranges_as_scans
from kdsl.backends.lower.select import selections_as_reads
from kdsl.backends.lower.numerics import stable_exponentials
from kdsl.backends.lower.common import common_reductions
from kdsl.backends.lower.factor import factored_sums
from kdsl.backends.lower.nested import nested_contractions
from kdsl.backends.lower.scatter import scatter_form, scatters
from kdsl.backends.lower.stages import hoist_outer_invariant
from kdsl.backends.base import Built, BuildError, Gene, Genome, Space, Unsupported  # noqa: F401
from kdsl.backends.c.emit import CTYPE, SUPPORTED_CALLS
from kdsl.backends.c.render import Options, dims_text

THREADS = ("all", 1, 2)


class CBackend:
    name = "c"
    devices = ("cpu",)
    language = "c"

    def available(self) -> bool:
        return shutil.which(c_build.COMPILER) is not None

    # ---- capability ----
    def supports(self, op: ir.Op, device: str) -> str | None:
        op = canonical(op)
        if device != "cpu":
            return f"the c backend runs on the CPU, not on '{device}'"
        for t in op.tensors:
            for dt in t.dtypes or (op.dtype_of(t.name, d) for d in op.dtype_choices):
                if dt not in CTYPE:
                    return f"dtype {dt} of '{t.name}' has no C type here"
            try:
                for e in t.shape:
                    dims_text(e)
            except ValueError as e:
                return f"shape of '{t.name}': {e}"
        for st in op.statements:
            why = _statement_problem(st)
            if why:
                return why
        return None

    # ---- search space ----
    def space(self, op: ir.Op, device: str) -> Space:
        scattered = scatters(canonical(op, False, True))
        op = canonical(op)
        facts = _facts(op)
        wide = "__AVX512F__" in c_build.native_macros()
        genes = [Gene("threads", THREADS, doc="OpenMP threads"),
                 Gene("vec", (512, 256, 128) if wide else (256, 128), ordered=True,
                      doc="preferred vector width, bits"),
                 Gene("simdlen", (0, 4, 8, 16), ordered=True, doc="omp simd simdlen (0: none)"),
                 Gene("unroll", (0, 2, 4, 8), ordered=True, doc="GCC unroll of inner loops")]
        if facts["parallel"]:
            genes.append(Gene("schedule", ("static", "dynamic"), doc="omp for schedule"))
        if facts["max_p"] >= 2:
            perms = tuple(",".join(map(str, p))
                          for p in itertools.permutations(range(min(facts["max_p"], 3))))
            genes.append(Gene("order", perms, doc="order of the parallel loops"))
        if len(op.statements) >= 2:
            genes.append(Gene("fuse", (True, False), doc="fuse statements into row loops"))
        if c_plan.inlinable(op):
            genes.append(Gene("inline_tmps", (False, True), doc="inline elementwise tmps"))
        if facts["interchange"]:
            genes.append(Gene("reduce_order", ("auto", "inner", "outer"),
                              doc="reduction loop inside or outside the innermost loop"))
            genes.append(Gene("tile", (128, 16, 32, 64, 256), ordered=True,
                              doc="accumulator tile of outer reductions"))
            if facts["gather"]:
                genes.append(Gene("prefetch", (8, 0, 4, 16), ordered=True,
                                  doc="prefetch distance of gathered rows"))
        if facts["reduce"]:
            genes.append(Gene("reduce_vec", ("simd", "scalar"), doc="vector reductions"))
        if facts["float_acc"]:
            genes.append(Gene("acc", ("float", "double"), doc="float accumulator precision"))
        if facts["division"] and not (op.tolerance and op.tolerance.exact):
            genes.append(Gene("fast_div", (True, False), doc="reciprocal of invariant divisors"))
        defaults: tuple = vec_default(facts) if wide else ()
        if scattered:
            genes.append(Gene("scatter", (True, False), level=0,
                              doc="sums over an indicator as scatter-adds or dense loops"))
        if facts["contraction"]:
            genes += GEMM_GENES
            defaults += gemm_defaults()
        if facts["conv"]:
            genes += CONV_GENES
            defaults += conv_defaults(facts["conv"])
        return Space(tuple(genes), defaults) if defaults else Space(tuple(genes))

    def options(self, op: ir.Op, genome: Genome, device: str = "cpu") -> Options:
        g = self.space(op, device).complete(genome)
        order = tuple(int(x) for x in str(g.get("order", "")).split(",") if x != "")
        return Options(threads=g["threads"], schedule=g.get("schedule", "static"), order=order,
                       fuse=g.get("fuse", True), inline_tmps=g.get("inline_tmps", False),
                       reduce_order=g.get("reduce_order", "auto"), tile=g.get("tile", 128),
                       unroll=g["unroll"] or None, simdlen=g["simdlen"] or None, vec=g["vec"],
                       reduce_vec=g.get("reduce_vec", "simd"), acc=g.get("acc", "float"),
                       fast_div=g.get("fast_div", True), prefetch=g.get("prefetch", 0),
                       gemm=g.get("gemm", "loops"), mr=g.get("mr", 8), nr=g.get("nr", 32),
                       kc=g.get("kc", 256), mc=g.get("mc", 256), nc=g.get("nc", 512),
                       split_k=g.get("split_k", "auto"), conv=g.get("conv", "loops"),
                       conv_cob=g.get("conv_cob", 8), conv_nv=g.get("conv_nv", 2),
                       scatter=g.get("scatter", True))

    # ---- code ----
    def render(self, op: ir.Op, genome: Genome, device: str) -> str:
        from kdsl.backends.c.render import render
        why = self.supports(op, device)
        if why:
            raise Unsupported(why)
        g = self.space(op, device).complete(genome)
        opt = self.options(op, genome, device)
        op = canonical(op, opt.gemm == "packed", opt.scatter)
        header = f"kdsl c kernel: op {op.name} ({op.hash}), genome " + \
                 ", ".join(f"{k}={v}" for k, v in sorted(g.items()))
        try:
            return render(op, opt, header)
        except (KeyError, ValueError, NotImplementedError) as e:
            raise Unsupported(f"{type(e).__name__}: {e}") from e

    def build(self, op: ir.Op, source: str, device: str) -> Built:
        path, meta = c_build.compile_source(source)
        return c_build.load(op, path, meta)


GEMM_GENES = (
    Gene("gemm", ("packed", "loops"), doc="contractions as a packed GEMM or a loop nest",
         level=0),
    Gene("mr", (4, 6, 8, 12), ordered=True, doc="micro-kernel rows"),
    Gene("nr", (16, 32, 48, 64), ordered=True, doc="micro-kernel columns"),
    Gene("kc", (128, 256, 384, 512), ordered=True, doc="K block of a packed GEMM"),
    Gene("mc", (64, 128, 192, 256), ordered=True, doc="M block of a GEMM task"),
    Gene("nc", (128, 256, 512, 1024), ordered=True, doc="N block of a GEMM task"),
    Gene("split_k", ("auto", "off"), doc="split K across threads when tasks are few"),
)
# measured on 2 Zen 4 cores (AVX-512): 8 x 32 keeps 16 of the 32 zmm registers as
# accumulators; MC x KC of A and the kept B panel stay in the 1 MiB L2; larger MC and NC
# re-pack less. Without AVX-512 (16 ymm registers) 6 x 16 keeps 12.
GEMM_DEFAULTS = (("kc", 256), ("mc", 256), ("nc", 512))


CONV_GENES = (
    Gene("conv", ("direct", "loops"), doc="convolutions as the direct kernel or a loop nest",
         level=0),
    Gene("conv_cob", (8, 4, 6, 12, 16), ordered=True,
         doc="output channels a convolution micro-kernel keeps in registers"),
    Gene("conv_nv", (2, 1, 3, 4, 6), ordered=True,
         doc="vectors of output positions a convolution micro-kernel keeps"),
)


def conv_defaults(kind: str) -> tuple:
    """``kind``: "m" when a convolution blocks output channels in registers, else "dw"
    (a depthwise one: one channel, so more positions)."""
    wide = "__AVX512F__" in c_build.native_macros()
    if kind == "dw":
        return (("conv_nv", 4),)
    return (("conv_cob", 8 if wide else 6), ("conv_nv", 2))


# the prelude's polynomial math (and % and pow): a few dozen vector instructions an element
MATH_CALLS = frozenset(("exp", "log", "log1p", "expm1", "tanh", "erf", "sigmoid", "silu", "pow"))


def vec_default(facts: dict) -> tuple:
    """512-bit vectors where the elementwise math is the work, 256 elsewhere. Measured on
    2 Zen 4 cores, 4096 x 4096 f32, each kernel's default source at 256 and 512 bits,
    best of 15, three rounds alternating (ms): exact GELU 19-24 -> 15.5-16, mish 70-72
    -> 43-48, x % 1.0 37-44 -> 28-32, tanh 24-28 -> 15-16, softplus 45-52 -> 28-31, elu
    16-22 -> 9-15, log_softmax 20-24 -> 16, softmax 24-28 -> 17-25, sigmoid and swish
    within the noise; a column softmax (strided gathers) 248-288 -> 272-281. Loops that
    loads and stores bound keep 256 (relu: within the noise), and so do contractions and
    convolutions, whose micro-kernels pick their own width."""
    heavy = facts["math"] and not facts["contraction"] and not facts["conv"]
    return (("vec", 512 if heavy else 256),)


def gemm_defaults() -> tuple:
    tile = (8, 32) if "__AVX512F__" in c_build.native_macros() else (6, 16)
    return (("mr", tile[0]), ("nr", tile[1])) + GEMM_DEFAULTS


@functools.lru_cache(maxsize=256)
def canonical(op: ir.Op, packed: bool = False, scatter: bool = False) -> ir.Op:
    """The op as the shared lowering reads it: exponentials in forms that do not overflow
    (``lower.numerics``), a reduction written twice in a statement computed once
    (``lower.common``), sums of products summed factor by factor (``lower.factor``), a
    matrix product inside another reduction as an intermediate (``lower.nested``), prefix and suffix ranged sums as scans (a
    suffix sum walked output by output is quadratic), with ``scatter`` a sum over an
    indicator inside a larger right side as an intermediate of its own (``scatter_form``),
    a reduction that skips an outer output index as an intermediate of its own
    (``hoist_outer_invariant``), contraction factors copied into the layout the row
    updates read contiguously, except (``packed``) those of a contraction the packed GEMM
    reads itself, and those of a scatter."""
    op = nested_contractions(factored_sums(common_reductions(ranges_as_scans(
        selections_as_reads(stable_exponentials(op))))))
    if scatter:
        op = scatter_form(op)
    op = hoist_outer_invariant(op)
    convs = convolutions(op)
    scattered = scatters(op) if scatter else {}
    if not packed:
        return contiguous_operands(op, keep=lambda st: st.target in convs or
                                   st.target in scattered)
    found = contractions(op)
    return contiguous_operands(op, keep=lambda st: st.target in found or st.target in convs
                               or st.target in scattered)


def _statement_problem(st: ir.Statement) -> str | None:
    scans = set()
    for n in ir.walk(st.value):
        if isinstance(n, ir.Call) and n.fn not in SUPPORTED_CALLS:
            return f"builtin '{n.fn}' is not known to the c backend"
        if isinstance(n, ir.Reduce) and n.op not in c_plan.SIMPLE_REDUCTIONS:
            return f"reduction '{n.op}' is not known to the c backend"
        if isinstance(n, ir.Scan):
            scans.add(n.index)
        if isinstance(n, (ir.Reduce, ir.Collective)):
            if any(isinstance(m, ir.Scan) for m in ir.walk(n.body)):
                return "a scan inside a reduction or collective body"
        if isinstance(n, ir.Collective):
            try:
                dims_text(n.index.hi if n.op in ("sort", "argsort") else n.k)
            except ValueError:
                return f"'{n.op}' needs a size known from the dims"
            if n.op in ("sort", "argsort") and n.index.lo != ir.Num(0):
                return f"'{n.op}' over a range that does not start at 0"
    if len(scans) > 1:
        return "scans over two different indices in one statement"
    return None


@functools.lru_cache(maxsize=256)
def _facts(op: ir.Op) -> dict:
    nodes = [n for st in op.statements for n in ir.walk(st.value)]
    plans = [c_plan.plan(op, fuse, inline) for fuse in (True, False) for inline in (False, True)]
    floats = any(n.op not in ("argmax", "argmin") for n in nodes if isinstance(n, ir.Reduce)) or \
        any(isinstance(n, ir.Scan) for n in nodes)
    return {
        "parallel": any(g.p for p in plans for g in p.groups),
        "max_p": max(g.p for p in plans for g in p.groups),
        "interchange": any(c_plan.interchangeable(sp) for p in plans for g in p.groups
                           for sp in g.stmts) or
        any(c_plan.tiled_index(p, g) for p in plans for g in p.groups),
        "gather": any(isinstance(n, ir.Access) and any(isinstance(s, ir.Access)
                                                       for s in n.subscripts) for n in nodes),
        "reduce": any(isinstance(n, ir.Reduce) for n in nodes),
        "float_acc": floats,
        "division": any(isinstance(n, ir.Binary) and n.op == "/" for n in nodes),
        "math": any((isinstance(n, ir.Call) and n.fn in MATH_CALLS) or
                    (isinstance(n, ir.Binary) and n.op == "%") or
                    (isinstance(n, ir.Binary) and n.op == "**" and
                     not (isinstance(n.right, ir.Num) and n.right.value in (0, 1, 2, 3)))
                    for n in nodes),
        "contraction": bool(contractions(op) or contractions(c_plan.inline(op))),
        "conv": _conv_kind(op),
    }


def _conv_kind(op: ir.Op) -> str:
    """"m" when a convolution of ``op`` has output channels to block, "dw" when its
    convolutions have none, "" when it has none."""
    convs = convolutions(op).values()
    if not convs:
        return ""
    return "m" if any(c.m is not None for c in convs) else "dw"


BACKEND = CBackend()
