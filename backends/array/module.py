"""What the numpy and torch generators share beyond the IR walk: genes, modules, loading."""
from __future__ import annotations

import hashlib
import linecache
import traceback
import types

from kdsl import ir

from kdsl.backends.array import analysis as aa
from kdsl.backends.array.dialect import Dialect
from kdsl.backends.array.lowering import Lowering
from kdsl.backends.base import BuildError, Gene
from kdsl.backends.frozen import freeze_module


def array_genes(op: ir.Op, segment_methods: tuple[str, ...]) -> list[Gene]:
    """Genes of the array lowering that matter for ``op`` (both generators read them).

    ``segment_methods``: how this dialect reduces segments over the flat axis (the
    value is passed on to ``rt.segment_reduce``); 'mask' is added as the last choice."""
    f = aa.features(op)
    genes = []
    if f.contraction:
        genes.append(Gene("contract", ("einsum", "contract_first", "broadcast"),
                          doc="a sum of products as one einsum; the same with gathered "
                              "factors contracted before the gather; or multiply then sum"))
    if f.intermediates:
        genes.append(Gene("fusion", aa.FUSION,
                          doc="substitute intermediates into their readers: none, those "
                              "without reductions, or also reductions read at plain indices"))
    if f.bound_axes:
        genes.append(Gene("reduce_axes", ("middle", "inner"),
                          doc="grid position of bound indices: before the last output index "
                              "(keeps the contiguous axis innermost), or after every one"))
    if f.segments:
        genes.append(Gene("segment", segment_methods + ("mask",),
                          doc="segment reductions over the flat jagged axis (by the named "
                              "method), or padded to the longest segment and masked"))
    if f.stencils:
        genes.append(Gene("stencil", ("window", "gather"),
                          doc="reads at affine index forms as strided views of a padded "
                              "copy, or as gathers"))
    if f.topk:
        genes.append(Gene("select", ("sort", "partition"),
                          doc="top-k by a full stable sort, or by partial selection"))
    return genes


def compute_source(op: ir.Op, genome: dict, dialect: Dialect, where: str) -> list[str]:
    """``_compute(inputs, outs, sizes)``: one function per variant of the op's type variable,
    dispatched on the dtype of the tensor that carries it (``where``: 'inputs' or 'outs')."""
    variants = aa.kind_variants(op)
    lines: list[str] = []
    if len(variants) == 1:
        (kind, dts), = variants.items()
        return Lowering(op, dts[0], genome, dialect).function("_compute")
    table = []
    for kind, dts in variants.items():
        lines += Lowering(op, dts[0], genome, dialect).function(f"_compute_{kind}") + ["", ""]
        table.append(f"{kind!r}: _compute_{kind}")
    tv = aa.type_var_tensor(op)
    source = "inputs" if tv.role == "in" else where
    lines += [f"_BY_KIND = {{{', '.join(table)}}}", "", "",
              "def _compute(inputs, outs, sizes):",
              f"    _BY_KIND[rt.variant({source}[{tv.name!r}])](inputs, outs, sizes)"]
    return lines


def load_module(source: str, label: str) -> types.ModuleType:
    """Execute rendered ``source`` as a fresh module; its lines show in tracebacks."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    filename = f"<kdsl-{label}-{digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(f"kdsl_{label}_{digest}")
    module.__file__ = filename
    try:
        exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102 - our own render
    except Exception as e:  # a rendered (or LLM-written) module that does not load
        raise BuildError(f"{type(e).__name__}: {e}", traceback.format_exc()) from None
    if not callable(getattr(module, "kernel", None)):
        raise BuildError("the source defines no kernel(inputs, outputs, sizes)")
    return freeze_module(module)
