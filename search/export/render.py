"""An exported module's text: the kernel, then the op's facts as constants and small
functions, then the shared runtime (``templates.py``), then the torch op and ``run``.

The op is ``torch.ops.kdsl.<op>_<hash of the kernel>``, a ``torch.library.custom_op``
with a fake implementation (output shapes and dtypes from the spec's shape rules), so
``torch.compile(fullgraph=True)`` sees one opaque node. Its backward is torch autograd
through the spec's baseline expression, when that expression is plain torch; otherwise
asking for a gradient raises "kdsl export: no backward for OP".
"""
from __future__ import annotations

import hashlib
import textwrap
from dataclasses import dataclass

from kdsl import dtypes, ir
from kdsl.show import format_expr

from . import dims as dims_mod
from .templates import C_LOADER, RUNTIME

NAMESPACE = "kdsl"


@dataclass(frozen=True)
class Kernel:
    """What an export needs: the op, the kernel's source and where it was judged."""
    op: ir.Op
    source: str
    language: str          # 'c' or 'python'
    backend: str
    device: str            # 'cpu' or 'cuda': the tensors the kernel takes
    note: str = ""         # where it came from, for the module's docstring
    bench: dict | None = None  # the bench point's sizes (defaults of ModelNew's sizes)


def op_name(kernel: Kernel) -> str:
    digest = hashlib.sha256(kernel.source.encode()).hexdigest()[:10]
    return f"{kernel.op.name}_{digest}"


def module_text(kernel: Kernel, kernelbench: bool = False) -> str:
    op = kernel.op
    plan = dims_mod.plan(op)
    body = f"C_SOURCE = {_c_text(kernel.source)}\n" + C_LOADER if kernel.language == "c" \
        else kernel.source
    parts = [_docstring(kernel, plan), body,
             "\n\n# ---- the op's facts, from its spec ----\n", _facts(kernel, plan),
             RUNTIME, _registration(kernel, plan)]
    if kernelbench:
        parts.append(_model_new(kernel, plan))
    return "".join(parts)


def _c_text(source: str) -> str:
    """The C source as a readable raw string literal where it can be one, else repr."""
    if "'''" in source or source.endswith(("\\", "'")) or "\r" in source:
        return repr(source)
    return "r'''" + source + "'''"


def _docstring(k: Kernel, plan: dims_mod.DimPlan) -> str:
    op = k.op
    args = ", ".join([t.name for t in op.inputs] + [f"{d}=..." for d in plan.passed])
    outs = ", ".join(t.name for t in op.outputs)
    takes = " | ".join(dtypes.TORCH[d] for d in op.dtype_choices)
    about = (f"runs it as the torch op torch.ops.{NAMESPACE}.{op_name(k)} ({k.device} tensors, "
             f"{takes}); it works under torch.compile(fullgraph=True). Inputs are checked "
             "(dtype, device, shapes) with errors naming the input; non-contiguous inputs are "
             "copied. Gradients go through torch autograd on the spec's baseline expression "
             "where it is plain torch; elsewhere backward raises \"kdsl export: no backward\".")
    return (f'"""{op.name}: a kernel exported by kdsl ({k.note}).\n\n'
            f"    {outs} = run({args})\n\n" + textwrap.fill(about, 88) + '\n"""\n')


def _facts(k: Kernel, plan: dims_mod.DimPlan) -> str:
    op = k.op
    chooser = op.type_variable_input()
    table = {dt: {t.name: dtypes.TORCH[op.dtype_of(t.name, dt)]
                  for t in op.inputs + op.outputs} for dt in op.dtype_choices}
    shapes = {t.name: [format_expr(e) for e in t.shape] for t in op.inputs + op.outputs}
    floats = lambda t: any(dtypes.kind(op.dtype_of(t.name, dt)) == "float"  # noqa: E731
                           for dt in op.dtype_choices)
    baseline, why_not = _baseline(op)
    grad_inputs = [t.name for t in op.inputs if floats(t)]
    bench_passed = {d: v for d, v in (k.bench or {}).items() if d in plan.passed}
    lines = ["import math as _math", "", "import torch as _torch",
             "import torch.nn.functional as _F", "", f"OP = {op.name!r}", f"NAMESPACE = {NAMESPACE!r}", f"NAME = {op_name(k)!r}",
             f"DEVICE = {k.device!r}",
             f"INPUTS = {[t.name for t in op.inputs]!r}",
             f"OUTPUTS = {[t.name for t in op.outputs]!r}",
             f"DIMS = {list(op.dims)!r}   # the order the kernel takes them",
             f"PASSED = {list(plan.passed)!r}   # dims no input's shape gives: the caller's",
             f"BENCH_SIZES = {bench_passed!r}   # ModelNew's defaults for PASSED",
             f"TYPE_VAR = {chooser!r}   # the input whose dtype picks the kernel's",
             f"DTYPES = {table!r}", f"SHAPES = {shapes!r}",
             f"GRAD_INPUTS = {grad_inputs!r}",
             f"GRAD_OUTPUTS = {[t.name for t in op.outputs if floats(t)]!r}",
             f"NO_BACKWARD = {why_not!r}", "", "",
             "def _read_dims(t, s):",
             '    """The dims: read off the inputs\' shapes, solved from the spec\'s '
             'conditions, or given."""']
    for r in plan.rules:
        lines.append(f"    s[{r.dim!r}] = {r.code}   # {r.why}")
    lines += ["    return s", "", "", "def _shapes(s):",
              '    """Every input\'s and output\'s shape for these dims."""',
              "    return {" + ", ".join(f"{n!r}: {_tuple(op.tensor(n).shape)}"
                                         for n in shapes) + "}", "", "",
              "CONDITIONS = ["]
    for text, code in plan.conditions:
        lines.append(f"    ({text!r}, lambda s: {code}),")
    lines += ["]", "", "", "def _check_values(t, s):",
              '    """What the spec promises about input values that a kernel relies on."""']
    checks = _value_checks(op)
    lines += [f"    {c}" for c in checks] or ["    return None"]
    lines += ["", ""] + baseline
    return "\n".join(lines) + "\n"


def _tuple(shape) -> str:
    items = [dims_mod.py(e) for e in shape]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _value_checks(op: ir.Op) -> list[str]:
    out = []
    for t in op.inputs:
        int_only = all(dtypes.kind(op.dtype_of(t.name, dt)) == "int" for dt in op.dtype_choices)
        try:
            if isinstance(t.domain, ir.ValueRange) and int_only:
                out.append(f"_in_range({t.name!r}, t[{t.name!r}], {dims_mod.py(t.domain.lo)}, "
                           f"{dims_mod.py(t.domain.hi)})")
            elif isinstance(t.domain, ir.Offsets):
                out.append(f"_offsets({t.name!r}, t[{t.name!r}], {dims_mod.py(t.domain.total)})")
        except dims_mod.NotPython:
            continue
    return out


def _baseline(op: ir.Op) -> tuple[list[str], str]:
    """The baseline as a function of the inputs and dims (for the backward), or None and
    why there is no backward."""
    none = ["_baseline = None"]
    if op.baseline is None:
        return none, "its spec declares no torch baseline to differentiate"
    src = op.baseline.source.strip()
    if "kt." in src:
        return none, (f"its baseline ({src}) uses kdsl's own torch helpers, which this "
                      "module does not carry")
    params = [t.name for t in op.inputs] + list(op.dims)
    # the baseline sees torch, F and math, unless a dim of that name shadows one
    params += [f"{n}={v}" for n, v in (("torch", "_torch"), ("F", "_F"), ("math", "_math"))
               if n not in params]
    return (["def _baseline(" + ", ".join(params) + "):",
             '    """The spec\'s torch baseline (kdsl check verified it against the '
             'spec\'s semantics)."""',
             f"    return {src}"], "")


def _registration(k: Kernel, plan: dims_mod.DimPlan) -> str:
    op = k.op
    ins = [t.name for t in op.inputs]
    args = ins + list(plan.passed)
    t_dict = "{" + ", ".join(f"{n!r}: {n}" for n in ins) + "}"
    given = "{" + ", ".join(f"{d!r}: {d}" for d in plan.passed) + "}"
    outs = [t.name for t in op.outputs]
    ret = "Tensor" if len(outs) == 1 else "(" + ", ".join(["Tensor"] * len(outs)) + ")"
    sig = ", ".join([f"Tensor {n}" for n in ins] + [f"SymInt {d}" for d in plan.passed])
    pick = f'o[{outs[0]!r}]' if len(outs) == 1 else ", ".join(f"o[{n!r}]" for n in outs)
    a = ", ".join(args)
    lines = ["", "", f"# ---- the op: torch.ops.{NAMESPACE}.{op_name(k)} ----", "",
             f"def _impl({a}):", f"    o = _compute({t_dict}, {given})", f"    return {pick}",
             "", "", f"def _impl_fake({a}):", f"    o = _fake({t_dict}, {given})",
             f"    return {pick}", "", "",
             f"_OP, _NEW = _define(NAME, _impl, _impl_fake, {f'({sig}) -> {ret}'!r})",
             "_OP = getattr(getattr(_torch.ops, NAMESPACE), NAME)  # the overload packet",
             "if GRAD_INPUTS and _NEW:",
             "    _torch.library.register_autograd(f'{NAMESPACE}::{NAME}', _backward,",
             "                                     setup_context=_setup_context)",
             "", ""]
    kw = ", ".join(ins) + (", *, " + ", ".join(plan.passed) if plan.passed else "")
    lines += [f"def run({kw}):",
              f'    """{op.name}: ({", ".join(outs)}) for these inputs; a TypeError or '
              'ValueError names an input that does not fit."""']
    lines += [f"    for name, v in zip(INPUTS, ({', '.join(ins)},)):",
              "        if not isinstance(v, _torch.Tensor):",
              "            raise TypeError(f\"{OP}: input '{name}' must be a torch.Tensor, \"",
              "                            f\"got {type(v).__name__}\")"]
    for d in plan.passed:
        lines += [f"    if isinstance({d}, bool) or not isinstance({d}, (int, _torch.SymInt)):",
                  f"        raise TypeError(f\"{op.name}: size '{d}' must be an int, got "
                  f"{{type({d}).__name__}}\")"]
    lines.append(f"    return _OP({a})")
    return "\n".join(lines) + "\n"


def _model_new(k: Kernel, plan: dims_mod.DimPlan) -> str:
    ins = ", ".join(t.name for t in k.op.inputs)
    return f'''

import torch.nn as _nn


class ModelNew(_nn.Module):
    """KernelBench entry for {k.op.name}: forward({ins}). Every size is read from the
    inputs; the sizes no input's shape gives ({", ".join(plan.passed) or "none"}) are keyword
    arguments, by default the spec's bench point's. Positional arguments (KernelBench's
    init inputs) are accepted and ignored."""

    def __init__(self, *args, **sizes):
        super().__init__()
        unknown = sorted(set(sizes) - set(PASSED))
        if unknown:
            raise TypeError(f"{{OP}}: ModelNew takes the sizes {{PASSED}}, not {{unknown}}")
        self.sizes = {{**BENCH_SIZES, **sizes}}

    def forward(self, {ins}):
        return run({ins}, **self.sizes)
'''
