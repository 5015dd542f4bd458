"""The Triton backend: kernels generated from the IR, for CUDA (and AMD) GPUs.

Contractions (a reduction of a product over a shared index: matmul, conv) go to
``dot`` when it claims the op; every other op is
planned from its IR (``triton_plan``) and rendered by the generator of its
class: pointwise and row kernels (``triton_rows``), sorts and top-k
(``triton_sort``). No template is chosen by op name.

Devices: 'cuda' runs the kernels for real. 'cpu' runs them in Triton's
interpreter, which only happens when ``TRITON_INTERPRET=1`` was in the
environment before the kernels were defined: ``build(..., 'cpu')`` checks that
the built kernels are interpreted and raises ``BuildError`` otherwise (start the
worker process with the variable set). The interpreter's bf16 arithmetic is
wrong; judge bf16 kernels on a GPU.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import traceback
from functools import lru_cache

from kdsl import extras, ir

from kdsl.backends.base import BuildError, Built, Gene, Genome, Space, Unsupported
from kdsl.backends.triton.kernel import divisor_dims, module
from kdsl.backends.lower.attention import match as match_attention
from kdsl.backends.lower.scans import ranges_as_scans
from kdsl.backends.lower.scatter import Scatter, match as match_scatter, scatter_form, scatters
from kdsl.backends.lower.select import selections_as_reads
from kdsl.backends.lower.numerics import stable_exponentials
from kdsl.backends.lower.factor import factored_sums
from kdsl.backends.lower.stages import Staged, recomputed, split
from kdsl.backends.triton.plan import SEG, Plan, make_plan
from kdsl.backends.triton import attention as triton_attention
from kdsl.backends.triton import staged
from kdsl.backends.triton import rows as triton_rows
from kdsl.backends.triton import scatter as triton_scatter
from kdsl.backends.triton import sort as triton_sort
from kdsl.backends.triton import window_nd
from kdsl.backends.triton.dot import SMS

WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4)
ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# a static window of at most this many taps (a pooling window, 1-3 dims) is read tap by
# tap, each tap one vector load along the row axis, instead of as a [rows, taps] tile
WINDOW_TAPS = 64
COLS = (1, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def _dot():
    """The contraction generator (imported on first use: it pulls in the TMA helpers)."""
    return importlib.import_module("kdsl.backends.triton.dot")


def _np2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _pick(values, target: int):
    """The largest gene value <= target (else the smallest)."""
    fits = [v for v in values if v <= target]
    return max(fits) if fits else min(values)


class TritonBackend:
    name = "triton"
    devices = ("cuda", "cpu")
    language = "python"

    # ---- capability ----
    def available(self, device: str) -> bool:
        if not extras.installed("triton"):
            return False
        if device == "cuda":
            try:
                import torch
                return torch.cuda.is_available()
            except ImportError:
                return False
        return device == "cpu" and interpreting()

    def supports(self, op: ir.Op, device: str) -> str | None:
        if device not in self.devices:
            return f"the triton backend runs on {' and '.join(self.devices)}, not {device}"
        return extras.missing("it", "triton") or _refusal(op, device)

    # ---- search space ----
    def space(self, op: ir.Op, device: str) -> Space:
        lowered = _lowered(op)
        if lowered is CONTRACTION:
            dot = _dot()
            return Space(tuple(dot.genes(op, device)), tuple(dot.defaults(op, device).items()))
        if isinstance(lowered, Staged):
            genes, defaults = staged.genes(lowered, lambda sub: _stage_genes(sub, device))
        else:
            genes, defaults = _genes(_canonical(op), lowered, _bench_sizes(op))
        genes, defaults = _with_attention(op, genes, defaults)
        if device != "cuda":  # a register cap means nothing to the interpreter
            genes = [g for g in genes if g.name.rpartition(".")[2] != "maxnreg"]
            defaults = {k: v for k, v in defaults.items()
                        if k.rpartition(".")[2] != "maxnreg"}
        return Space(tuple(genes), tuple(defaults.items()))

    # ---- source ----
    def render(self, op: ir.Op, genome: Genome, device: str) -> str:
        lowered = _lowered(op)
        if lowered is CONTRACTION:
            return _dot().render(op, genome)
        genome = self.space(op, device).complete(genome)
        if genome.get("ATTENTION") == "fused":
            return triton_attention.render(op, _attention(op), genome)
        shown = ", ".join(f"{k}={v}" for k, v in sorted(genome.items()))
        if isinstance(lowered, Staged):
            kernels, helpers, launcher, heads = staged.render(
                lowered, genome, _render_one,
                lambda sub, g: _dot().render(sub, g) if _stage_kind(sub) == CONTRACTION
                else None)
            doc = (f"kdsl triton kernel for '{op.name}' ({len(lowered.stages)} stages: "
                   f"{', '.join(_stage_kind(s) for s in lowered.stages)}); genome: {shown}")
            return module(op, doc, helpers, kernels, launcher, staged.imports(heads))
        kernels, helpers, launcher = _render_one(_canonical(op), genome, f"_kd_{op.name}")
        doc = f"kdsl triton kernel for '{op.name}' ({lowered.kind}); genome: {shown}"
        return module(op, doc, helpers, kernels, launcher)

    def build(self, op: ir.Op, source: str, device: str) -> Built:
        if device not in self.devices:
            raise BuildError(f"unknown device '{device}'")
        from kdsl.backends.triton.compile import load_module
        try:
            namespace = vars(load_module(source, op.name))
        except Exception as e:
            raise BuildError(f"the rendered module does not load: {e}",
                             traceback.format_exc()) from None
        fn = namespace.get("kernel")
        if not callable(fn):
            raise BuildError("the rendered module defines no kernel(inputs, outputs, sizes)")
        meta: dict = {}
        if device == "cpu":
            if any(type(v).__name__ == "JITFunction" for v in namespace.values()):
                raise BuildError("triton kernels run on the CPU only in the interpreter: set "
                                 "TRITON_INTERPRET=1 in the environment before this process "
                                 "defines them")
            from kdsl.backends.triton.interpreter import repair
            repair()  # (the installed interpreter's known faults, where it has them)
            return Built(fn=fn, log="", meta=meta)
        from kdsl.backends.triton.compile import example_at, example_for, warm
        from triton.compiler.errors import CompilationError
        # the kernels the bench point launches (each dtype variant a compile of its own,
        # seconds for a sorting network), compiled by this process's JIT: the timing runs of
        # the bench dtype reuse them, and their resource report is the driver's (a one-pass
        # module's wide-row fallback is compiled only where a case launches it)
        try:
            meta = warm(namespace, [example_for(op)]) if op.bench else {}
        except CompilationError as e:
            raise BuildError(f"triton compile failed: {e}", traceback.format_exc()) from None
        except Exception as e:  # the ahead-of-time pass could not run; the JIT still will
            meta = {"ahead_compile": f"skipped: {type(e).__name__}: {e}"}

        def prepare(shapes):
            warm(namespace, [example_at(op, sizes, dt) for sizes, dt in shapes], report=False)
        return Built(fn=fn, log="", meta=meta, prepare=prepare)

    def bench_identity(self, op: ir.Op, genome: Genome, device: str,
                       dtype: str | None = None) -> str | None:
        """What a GPU timing of ``genome`` runs: a hash of the jit functions its launcher
        calls at the bench point (in ``dtype``, else the point's), with the helpers they
        call, their grids and arguments. Launchers clamp genes to the sizes (a sort's rows
        a program, a tile to the row), so genomes that differ can run the same kernels
        there; a search evaluates one of them. It asks no GPU: a contraction is taken as
        on a machine with TMA, where the TMA gene always matters. None where it cannot
        tell (the interpreter, a genome that does not render or launch)."""
        if device != "cuda" or not op.bench or interpreting():
            return None
        try:
            from kdsl.backends.triton.compile import example_for, launches, load_module
            from triton.runtime.jit import JITFunction
            source = self.render(op, genome, device)
            ns = vars(load_module(source, op.name))
            if "COPY_ENGINE" in ns:
                ns["COPY_ENGINE"] = True
            calls = launches(source, [example_for(op, dtype)], namespace=ns, fallbacks=False)
        except Exception:  # its evaluation will say why
            return None
        jitted = {k: v for k, v in ns.items() if isinstance(v, JITFunction)}
        used: dict[str, str] = {}

        def add(fn) -> None:  # a kernel and, by name, the helpers its source calls
            if fn.__name__ not in used:
                used[fn.__name__] = fn.src
                for name, helper in jitted.items():
                    if re.search(rf"\b{name}\(", fn.src):
                        add(helper)
        for fn, *_ in calls:
            add(fn)
        # a launched kernel by its place, not its name: a fallback (`_looped`) that is
        # another genome's kernel under a second name runs the same
        alias = {fn.__name__: f"launched{i}" for i, fn in
                 enumerate(dict.fromkeys(fn for fn, *_ in calls))}

        def unnamed(text: str) -> str:
            for name, place in alias.items():
                text = re.sub(rf"\b{name}\b", place, text)
            return text
        blob = json.dumps([sorted((unnamed(k), unnamed(v)) for k, v in used.items())] + [
            [alias[fn.__name__], repr(grid), [_arg(a) for a in args],
             sorted((k, repr(v)) for k, v in kw.items())] for fn, grid, args, kw in calls])
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


@lru_cache(maxsize=256)
def _attention(op: ir.Op):
    return match_attention(op)


def _with_attention(op: ir.Op, genes: list, defaults: dict) -> tuple[list, dict]:
    """The ATTENTION gene where the op is attention (``lower.attention``) with head
    dimensions the fused kernel holds whole at the bench point: 'staged' (the stages'
    kernels, their genes as they are) or 'fused' (one online-softmax kernel, its genes
    under ``fused.``). The default stays 'staged' until a GPU timing says otherwise."""
    att, bench = _attention(op), _bench_sizes(op)
    if not triton_attention.offered(att, bench):
        return genes, defaults
    points = [p for p in op.bench if p.device in (None, "cuda")] or list(op.bench)
    dtype = (points[0].dtype if points else None) or op.dtype_choices[0]
    fused, fused_defaults = triton_attention.genes(att, bench, dtype)
    gene = Gene("ATTENTION", ("staged", "fused"), False,
                "staged: the scores written to a scratch tensor by a GEMM, a softmax "
                "stage, a second GEMM; fused: one flash-attention kernel, an online "
                "softmax over key blocks, the scores never in memory", level=0)
    return [gene] + list(genes) + fused, {**defaults, **fused_defaults,
                                           "ATTENTION": "staged"}


def _arg(a) -> str:
    """A launch argument as timing sees it: a tensor's dtype, shape and strides (meta
    tensors have no data), a descriptor's block too, a scalar's value."""
    if hasattr(a, "stride") and hasattr(a, "dtype"):
        return f"tensor({a.dtype}, {tuple(a.shape)}, {tuple(a.stride())})"
    if type(a).__name__ == "TensorDescriptor":
        return f"desc({_arg(a.base)}, {list(a.shape)}, {list(a.strides)}, {list(a.block_shape)})"
    return repr(a)


@lru_cache(maxsize=256)
def _refusal(op: ir.Op, device: str) -> str | None:
    """Why the backend cannot render ``op`` (None when it can): the lowering, then the
    class generators on the default genome, which may still refuse a detail (a scan of a
    scan). Once per op and device: every evaluation asks before it renders its own."""
    try:
        _lowered(op)
        BACKEND.render(op, BACKEND.space(op, device).default(), device)
    except Unsupported as e:
        return str(e)
    return None


@lru_cache(maxsize=256)
def _plan(op: ir.Op) -> Plan:
    return make_plan(op)  # ops are frozen and hash structurally


@lru_cache(maxsize=256)
def _gemm(op: ir.Op) -> bool:
    """Whether the dot generator should render ``op``: a contraction with rows on one side
    and columns on the other. A dot product of rows (no side with an index of its own,
    a cosine similarity's a[i, d] * b[i, d]) is a row reduction, memory-bound: the row
    generator reads it at the memory's pace, where a GEMM tile would be mostly padding."""
    dot = _dot()
    if not dot.matches(op):
        return False
    plan = dot._plan(op)
    if not plan.pairs and dot._extent(plan.k, dot._bench_sizes(op, "cuda")) < 16:
        # a reduction shorter than tl.dot's least K (a depthwise conv's taps) would be
        # mostly padding: the row generator's window tiles read it at the memory's pace
        return False
    return bool(plan.m or plan.pairs) and bool(plan.n or plan.pairs)


def _stage_kind(op: ir.Op) -> str:
    if _scatter(op) is not None:
        return "scatter"
    return "contraction" if _gemm(op) else _plan(op).kind


@lru_cache(maxsize=256)
def _scatter(op: ir.Op) -> Scatter | None:
    """The scatter-add of a stage whose one statement is a sum over an indicator that
    ``_scattered`` took as one (its keyed extent at the bench point), else None."""
    if len(op.statements) != 1:
        return None
    sc = match_scatter(op, op.statements[0])
    if sc is None or not triton_scatter.flattenable(op, sc) or \
            triton_scatter.keyed_extent(op, sc, _bench_sizes(op)) < triton_scatter.MIN_KEYS:
        return None
    return sc


def _scattered(op: ir.Op) -> Staged | None:
    """``op`` staged with each sum over an indicator that has at least ``MIN_KEYS``
    keyed elements at the bench point a scatter-add stage of its own (``lower.scatter``,
    ``triton.scatter``); None where it has none."""
    form = scatter_form(op)
    bench = _bench_sizes(op)
    whole = frozenset(
        t for t, sc in scatters(form).items() if triton_scatter.flattenable(form, sc)
        and triton_scatter.keyed_extent(form, sc, bench) >= triton_scatter.MIN_KEYS)
    return split(form, bench, MIN_PROGRAMS, whole=whole) if whole else None


def _stage_genes(op: ir.Op, device: str):
    """A stage's genes and defaults: a contraction's from the dot generator."""
    dot = _dot()
    sc = _scatter(op)
    if sc is not None:
        return triton_scatter.genes_and_defaults(op, sc, _bench_sizes(op))
    if _gemm(op):
        return list(dot.genes(op, device)), dict(dot.defaults(op, device))
    return _genes(op, _plan(op), _bench_sizes(op))


def _render_one(op: ir.Op, genome: dict, name: str):
    sc = _scatter(op)
    if sc is not None:
        return triton_scatter.render(op, sc, genome, name)
    plan = _plan(op)
    if plan.kind == "rows" and genome.get("reduce") == window_nd.STRATEGY:
        return window_nd.render_genome(op, plan, genome, name)
    gen = triton_sort if plan.kind == "collective" else triton_rows
    return gen.render(op, plan, genome, name)


CONTRACTION = "contraction"  # _lowered's answer for an op the dot generator renders whole

# a reduction stage with fewer output points than this at the bench sizes is peeled
# (its outer reduced indices become partial results' indices): an H200 has 132 SMs, and
# a few programs an SM keep its memory busy
MIN_PROGRAMS = 1024


@lru_cache(maxsize=256)
def _canonical(op: ir.Op) -> ir.Op:
    """The op as the lowering reads it: exponentials in forms that do not overflow
    (``lower.numerics``), prefix and suffix ranged sums as scans, sums that select one
    term by an equality as that term's read, sums of products summed factor by factor
    (``lower.factor``)."""
    return factored_sums(ranges_as_scans(selections_as_reads(stable_exponentials(op))))


@lru_cache(maxsize=256)
def _lowered(op: ir.Op) -> "Plan | Staged | str":
    """The op's one fused plan, or its stages (``lower.stages``) when the fused plan does
    not exist or would compute a reduction again in programs that differ only along axes
    it does not read, or when its reductions leave too few programs and can be peeled."""
    bench = _bench_sizes(op)
    scattered = _scattered(_canonical(op))
    if scattered is not None:
        return scattered
    if _gemm(op):
        # a contraction is one GEMM, unless its sum is long against its outputs (split-K:
        # partial GEMMs over chunks of the sum, then their sum); never peeled otherwise
        try:
            lowered = split(op, bench, min_programs=0)
        except Unsupported:
            return CONTRACTION
        return lowered if lowered.peeled else CONTRACTION
    op = _canonical(op)
    try:
        plan = _plan(op)
    except Unsupported as why:
        for apart in (False, True):  # the outputs together, else a stage each
            try:
                lowered = split(op, bench, MIN_PROGRAMS, outputs_apart=apart)
                for sub in lowered.stages:
                    if not _gemm(sub):
                        _plan(sub)
                return lowered
            except Unsupported:
                continue
        raise why from None
    if plan.kind == "collective" or not plan.row_values:
        return plan
    axes = dict(plan.scalar_axes)
    if plan.row_axis is not None:
        axes[plan.row_axis[0]] = plan.row_axis[1]
    axes.pop(SEG, None)
    values = [(v.body, v.ranges) for v in plan.row_values]
    if recomputed(values, axes, bench, op.dims):
        return split(op, bench, MIN_PROGRAMS)
    try:
        lowered = split(op, bench, MIN_PROGRAMS)
    except Unsupported:
        return plan
    if lowered.peeled:
        return lowered  # peeled: partials fill the device
    return plan


def _genes(op: ir.Op, plan: Plan, bench: dict[str, int]) -> tuple[list[Gene], dict]:
    """The genes of a plan's class and defaults tuned for an H200 at the bench sizes."""
    genes: list[Gene] = []
    d: dict = {}
    if plan.kind == "collective":
        genes.append(Gene("BLOCK_R", ROWS[:5], True, "rows per program"))
        # one gene for how rows are ordered, so no two genomes render the same kernel
        methods = ("hypercube", "reshape")
        if any(g.family == "topk" for g in plan.groups):
            methods += ("select",)
        elif all(w == "values" for _, w in plan.store_groups):
            methods += ("tl.sort",)
        genes.append(Gene("method", methods, False,
                          "hypercube: bitonic network on a tile reshaped once to [2]*log2, "
                          "partners by xor; reshape: the network with a reshape and sum per "
                          "stage; select: K rounds of row minima; tl.sort: triton's sort "
                          "(values only)"))
        cols = _np2(_extent(plan.column, bench))
        # the hypercube network measured fastest on an H200 (top-k 1.085 ms against 1.805 ms).
        # Warps: 32 keys a thread, one warp for a row of 1024 (H200, same call: topk_rows
        # 0.591 ms against 1.085 on 8 warps, sort_rows 0.802 against 1.729; sm_90 SASS of
        # the top-k: 317K lane-instructions a row against 588K, no barriers, most partners
        # in registers)
        d.update(BLOCK_R=1, num_warps=_pick(WARPS, max(1, cols // 1024)), method="hypercube")
        # a register cap trades spills to L1 for more warps in flight an SM. Timed on the
        # H200 on the one-warp sort (110 registers) and top-k (128): none helped (sort 0.78
        # ms at 128, 0.89 at 96, 0.81 at 80, against 0.79 uncapped; top-k slower at every
        # cap), so the default is no cap. Caps of 80 and 64 are no longer offered: in an
        # H200 top-k search all six evaluations so capped spilled (142-660 registers); the
        # worst compiled for 17-20 s twice over (the bench kernel, then the test shapes)
        # and ran 10.6-13.2 ms against 0.57
        genes.append(Gene("maxnreg", (0, 128, 96), True,
                          "registers a thread at most (0: no cap, then tighter caps; NVIDIA "
                          "only): more warps in flight an SM, some values spilled to local "
                          "memory"))
        d["maxnreg"] = 0
    elif plan.kind == "pointwise":
        if plan.row_axis is not None:
            genes.append(Gene("BLOCK_R", ROWS[:7], True, "rows per program"))
        genes.append(Gene("BLOCK_C", COLS[4:], True, "columns per program"))
        bc = _pick(COLS[4:], min(1024, _np2(_extent(plan.column, bench))))
        br = _pick(ROWS[:7], max(1, 2048 // bc))
        d.update(BLOCK_C=bc, BLOCK_R=br, num_warps=4 if br * bc <= 1024 else 8)
    else:
        strategies = triton_rows.strategies(plan)
        if window_nd.tiles_of(op, plan) is not None:  # pooling of any dimensionality
            strategies += (window_nd.STRATEGY,)
        genes.append(Gene("reduce", strategies, False,
                          "onepass: whole column in registers; looped: a pass per "
                          "reduction level; online: max+sum / mean+var fused; tiles: a "
                          "window reduction (pooling) over a [BLOCK_R, BLOCK_C] tile of "
                          "outputs, taps in nested loops"))
        genes.append(Gene("BLOCK_R", ROWS, True, "row lanes per program"))
        genes.append(Gene("BLOCK_C", COLS, True, "column chunk of looped passes"))
        d.update(window_nd.preferred(op, plan, bench, strategies)
                 or _row_defaults(plan, bench, strategies))
        if plan.row_values and any(st.inner for st in plan.stores):
            # rows written back after their reductions read the column twice: the second
            # read comes from L2 when the first kept it (jagged_softmax: L2 80% busy, hit
            # 52%). Timed on the H200: jagged_softmax 0.2176 -> 0.2102 ms, looped layernorm
            # level (0.255 / 0.256 ms), so the default keeps the hints
            genes.append(Gene("evict", ("none", "reread"), False,
                              "cache hints of looped kernels: reread: the row data the "
                              "reduction passes read stays in cache for the write-back pass "
                              "(evict_last), which streams its reads and writes "
                              "(evict_first); none: no hints"))
            d["evict"] = "reread"
    exprs = [st.value for st in plan.stores] + [v.body for v in plan.row_values]
    if any(isinstance(n, ir.Call) and n.fn == "tanh" for e in exprs for n in ir.walk(e)):
        genes.append(Gene("math", ("libdevice", "fast", "approx"), False,
                          "tanh from libdevice; by exp and a fast division; or the "
                          "hardware's tanh.approx.f32 where the output is 16-bit"))
        # H200, gelu_tanh bf16, 2026-12-03: approx 0.133 ms (1.04x the floor), fast 0.169
        d["math"] = "approx"
    if plan.kind != "collective" and any(
            isinstance(n, ir.Call) and n.fn in ("exp", "sigmoid", "silu")
            for e in exprs for n in ir.walk(e)):
        genes.append(Gene("exp", ("tl", "ftz"), False,
                          "exp (and sigmoid, silu) by triton's exp, which keeps subnormals, "
                          "or by the hardware's ex2.approx.ftz.f32: three instructions an "
                          "element fewer"))
        d["exp"] = "ftz"
    if plan.kind != "collective" and divisor_dims(op):
        genes.append(Gene("constants", ("none", "divisors"), False,
                          "pass the sizes an output divides by as compile-time constants "
                          "(one compile per value)"))
        d["constants"] = "divisors"
    genes.append(Gene("num_warps", WARPS, True))
    if plan.kind == "rows":
        genes.append(Gene("num_stages", STAGES, True, "software pipelining of loops"))
        d.setdefault("num_stages", 2)
    names = {g.name for g in genes}
    return genes, {k: v for k, v in d.items() if k in names}


def interpreting() -> bool:
    """Whether Triton in this process interprets kernels (it reads the variable so)."""
    return os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "on", "yes")


def _bench_sizes(op: ir.Op) -> dict[str, int]:
    points = [p for p in op.bench if p.device in (None, "cuda")] or list(op.bench)
    return points[0].size_dict() if points else {}


def _extent(rng, sizes: dict[str, int]) -> int:
    from kdsl.sizes import NotASize, evaluate
    if rng is None:
        return 1
    try:
        return max(evaluate(rng[1], sizes) - evaluate(rng[0], sizes), 1)
    except (NotASize, KeyError):
        return 64  # a data-dependent range (a segment): a typical jagged length


def _rows_contiguous(plan: Plan) -> bool:
    """Whether the reductions (or, with none, the scans) read their widest tensor with the
    row axis as its last (contiguous) subscript and the reduced indices elsewhere."""
    if plan.row_axis is None:
        return False
    row = plan.row_axis[0]
    found = False
    bodies = [v.body for v in plan.row_values] or [
        n.body for st in plan.stores for n in ir.walk(st.value) if isinstance(n, ir.Scan)]
    for body in bodies:
        reads = [n for n in ir.walk(body) if isinstance(n, ir.Access) and n.subscripts]
        if not reads:
            continue
        widest = max(reads, key=lambda a: len(a.subscripts))
        last = widest.subscripts[-1]
        if not (isinstance(last, ir.Name) and last.name == row):
            return False
        found = True
    return found


def _static_extent(rng, sizes: dict[str, int]) -> int | None:
    from kdsl.sizes import NotASize, evaluate
    try:
        return max(evaluate(rng[1], sizes) - evaluate(rng[0], sizes), 1)
    except (NotASize, KeyError, TypeError):
        return None


def _column_contiguous(plan: Plan) -> bool:
    """Whether every reduction reads its widest tensor with its own (single) index as the
    last subscript and no program axis there: the column, not the row, is contiguous."""
    found = False
    for v in plan.row_values:
        reads = [n for n in ir.walk(v.body) if isinstance(n, ir.Access) and n.subscripts]
        if not reads or len(v.indices) != 1:
            return False
        last = max(reads, key=lambda a: len(a.subscripts)).subscripts[-1]
        if not (isinstance(last, ir.Name) and last.name == v.indices[0]):
            return False
        found = True
    return found


def _window_stride(plan: Plan, bench: dict) -> int:
    """The stride of the plan's strided window at the bench sizes (1 when unknown)."""
    from kdsl.sizes import NotASize, evaluate
    from kdsl.backends.triton.window import window_of
    try:
        return evaluate(window_of(plan).stride, bench)
    except (NotASize, KeyError):
        return 1


def _row_defaults(plan: Plan, bench: dict, strategies) -> dict:
    from kdsl.sizes import NotASize, evaluate
    try:
        rows = evaluate(plan.row_axis[1], bench) if plan.row_axis is not None else 1
    except (NotASize, KeyError):
        rows = 1
    if plan.static_column and plan.row_values:
        cols = 1
        for lo, hi in plan.row_values[0].ranges:
            cols *= max(evaluate(hi, bench) - evaluate(lo, bench), 1)
    else:
        cols = _extent(plan.column, bench)
    d: dict = {}
    # (a written-back column short enough for a one-pass tile of 32 rows keeps it: read
    # once; H200, RMS norm over dim 1 of [112, 64, 512, 512]: 3.93 ms, 1.10x the floor)
    if plan.static_column and cols > 8 and _rows_contiguous(plan) and \
            (plan.inner is None or _np2(cols) > 64):
        # the reduced index is not the fastest-moving one in memory but the row axis is
        # (a sum over dim 1 of [B, D1, D2], a softmax over dim 0): lanes across rows read
        # consecutive addresses, so a program takes many rows and a short column chunk at
        # a time (H200, sums over dim 1 of [128, 4096, 4095] f32: 2.60 ms, 1.28x the floor).
        # A full tile of 2048 lanes on 8 warps: in a search on an H100 (2026-12-06) that
        # sum's [128, 16] tile took 3.11 ms on 8 warps against 3.89 on 4 (compile: 3.52;
        # 2.9 ms the floor), and every other tile and strategy tried lost to it
        br = _pick(ROWS, min(_np2(rows), 128))
        bc = _pick(COLS, min(_np2(cols), max(1, 2048 // br)))
        return {"reduce": "online" if "online" in strategies else "looped",
                "BLOCK_R": br, "BLOCK_C": bc, "num_warps": 8 if br * bc >= 2048 else 4}
    if plan.static_column and plan.inner is None and cols <= WINDOW_TAPS:
        # a short window (pooling): many outputs per program (H200, max_pool1d bf16: 0.21
        # ms against 0.28 ms for a [512, 4] one-pass tile), read by stride phases, one
        # vector load per phase (H200, 2026-12-03: 0.104 ms, 1.09x the floor; tap by tap,
        # unrolled or looped, 0.211 ms) unless the stride is wider than the window, when
        # most of each phase's inputs would be read by no tap
        wide = "phases" in strategies and _window_stride(plan, bench) > max(cols, 2)
        best = next(s for s in ("phases", "unrolled", "looped")
                    if s in strategies and not (s == "phases" and wide))
        return {"reduce": best, "BLOCK_C": 1,
                "BLOCK_R": _pick(ROWS, min(_np2(rows), 1024)), "num_warps": 4}
    if "onepass" in strategies and _np2(cols) <= 8192:
        d["reduce"] = "onepass"
        tile_c = _np2(cols)
        d["BLOCK_R"] = _pick(ROWS, min(_np2(rows), max(1, 2048 // tile_c)))
        d["BLOCK_C"] = 1024
    elif plan.static_column:  # a long static column: one row (or a few) per program
        d["reduce"] = "online" if "online" in strategies else "looped"
        # one warp, 32 elements a thread: a warp's reductions need no barrier (H200,
        # cross_entropy bf16 C=32768, 2026-12-03: 0.138 ms, 1.09x the floor, against 0.144
        # ms for 4096 columns on 4 warps and 0.168 ms on 8)
        tile_c = d["BLOCK_C"] = _pick(COLS, min(_np2(cols), 1024))
        d["BLOCK_R"] = _pick(ROWS, min(_np2(rows), max(1, 1024 // tile_c)))
        d["num_warps"] = 1
        # but a plain sum that writes nothing back along the row (a loss's partial sums)
        # keeps more loads in flight on 4 warps, and a scan on 8. An H100, 2026-12-06, raw
        # CUDA events, one run each, 1 warp against 4: KernelBench 94 2.997 -> 2.702 ms, 98
        # 0.834 -> 0.729, 100 1.500 -> 1.372; 89 (cumsum) on 8: 3.534 -> 2.978. A row
        # written back after its sums (38, L1 norm: 9.02 on 1, 15.2 on 4) and the online
        # moments of a norm's statistics (40: 0.477 on 1, 0.538 on 4) keep one warp
        scans = any(isinstance(n, ir.Scan) for st in plan.stores for n in ir.walk(st.value))
        if d["reduce"] == "looped" and scans:
            d["num_warps"] = 8
        elif d["reduce"] == "looped" and not any(st.inner for st in plan.stores):
            d["num_warps"] = 4
        return d
    elif plan.row_axis is not None and _column_contiguous(plan):
        # a range that moves with the row (chunks of a long reduction, s * C .. s * C + C)
        # read along its contiguous index: a few rows a program, a wide column
        # (a range whose length the bench sizes do not tell is taken as long: a chunk)
        known = _static_extent(plan.column, bench)
        return {"reduce": "online" if "online" in strategies else "looped", "BLOCK_R": 1,
                "BLOCK_C": _pick(COLS, min(_np2(known or 1024), 1024)), "num_warps": 4}
    else:  # segments: the whole row axis per program, chunks along the segment
        d["reduce"] = "online" if "online" in strategies else "looped"
        # One warp across the row axis keeps the reduction along the segment in-thread
        # (H200 embedding_bag_sum: 0.20 ms, 2.5x torch); ops that also write the segment
        # back do better with 32-lane tiles of 32-row chunks on one warp (H200,
        # jagged_softmax D=128 bf16, 2026-12-03: 0.217 ms, against 0.233 ms for 64 x 32
        # on two warps and 0.275 ms at 128 x 16), and with a segment that fits one chunk
        # read once ('cached', 2026-12-04: 0.2089 ms against 0.2153 online; again,
        # alternating, 0.2088 against 0.2150). Larger one-pass tiles, to catch more of the
        # segments (mean length 64), lost: 64 x 16 0.226 ms, 64 x 32 0.303, 128 x 16 0.353,
        # 64-512 rows on 2-16 warps 0.33-1.31 ms (more registers a thread, fewer programs
        # an SM)
        if "cached" in strategies:
            d["reduce"] = "cached"
        wide = plan.inner is None
        d["BLOCK_R"] = _pick(ROWS, min(_np2(rows), 256 if wide else 32))
        others = 1
        for _, extent in plan.scalar_axes:
            others *= _extent((ir.Num(0), extent), bench)
        if others * -(-rows // d["BLOCK_R"]) < SMS:
            # too few programs for the device (a loss's per-row terms summed in 128 chunks
            # of 256 rows): one row a program, not one program of one warp walking them all
            d["BLOCK_R"] = _pick(ROWS, max(1, rows * others // SMS))
        d["BLOCK_C"] = _pick(COLS, max(1, min(_np2(cols), (4096 if wide else 1024)
                                              // d["BLOCK_R"])))
        d["num_warps"] = _pick(WARPS, max(1, d["BLOCK_R"] // 128)) if wide else 1
        return d
    elems = d["BLOCK_R"] * tile_c
    d["num_warps"] = _pick(WARPS, max(1, min(16, elems // 512)))
    return d


BACKEND = TritonBackend()
