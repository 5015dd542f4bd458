"""A staged op (``lower.stages``) as one Triton module: each stage's kernels and launcher,
then ``kernel(inputs, outputs, sizes)`` that allocates the scratch tensors on the
outputs' device and runs the stages in order.

A stage's genes are the genes of its class (from ``backend._genes``) under the prefix
``s<k>.``, so a search tunes every stage, and each stage's defaults are its class's
defaults at the bench sizes.
"""
from __future__ import annotations

import ast
import dataclasses
import re

from kdsl import dtypes
from kdsl.backends.base import Gene, Unsupported
from kdsl.backends.lower.stages import Staged
from kdsl.backends.triton.kernel import py


def prefix(k: int) -> str:
    return f"s{k}."


def genes(staged: Staged, genes_of) -> tuple[list[Gene], dict]:
    """Every stage's genes and defaults, prefixed; ``genes_of(stage_op)`` gives a stage's."""
    out, defaults = [], {}
    for k, sub in enumerate(staged.stages):
        gs, d = genes_of(sub)
        out += [dataclasses.replace(g, name=prefix(k) + g.name) for g in gs]
        defaults.update({prefix(k) + n: v for n, v in d.items()})
    return out, defaults


def stage_genome(genome: dict, k: int) -> dict:
    p = prefix(k)
    return {n[len(p):]: v for n, v in genome.items() if n.startswith(p)}


def render(staged: Staged, genome: dict, render_stage, render_dot=None
           ) -> tuple[list[str], set, list[str], list[str]]:
    """(kernels, helpers, launcher lines, imports); ``render_stage(stage_op, genome, name)``
    gives one stage's (kernels, helpers, launcher lines) as a single op's generator does;
    ``render_dot(stage_op, genome)``, for a contraction stage, its whole module."""
    kernels, helpers, launcher, imports = [], set(), [], []
    for k, sub in enumerate(staged.stages):
        if render_dot is not None:
            text = render_dot(sub, stage_genome(genome, k))
            if text is not None:
                body, heads = _contraction(text, k)
                kernels.append(body)
                imports += [h for h in heads if h not in imports]
                continue
        ks, hs, lines = render_stage(sub, stage_genome(genome, k), f"_kd_{sub.name}")
        kernels += ks
        helpers |= hs
        head = lines.index("def kernel(inputs, outputs, sizes):")
        knobs = [ln for ln in lines[:head] if ln.strip()]
        launcher += [ln for ln in knobs if ln not in launcher]
        launcher += [f"def _stage{k}(inputs, outputs, sizes):"] + lines[head + 1:] + [""]
    launcher += _main(staged)
    return kernels, helpers, launcher, imports


def _contraction(text: str, k: int) -> tuple[str, list[str]]:
    """A contraction module as one stage: its docstring and imports apart (returned, for
    the module's head), its module-level names suffixed so that stages do not collide,
    ``kernel`` renamed ``_stage<k>``."""
    lines = text.splitlines()
    heads, rest, i = [], [], 0
    if lines and lines[0].startswith('"""'):
        i = 1
    for ln in lines[i:]:
        if (ln.startswith("import ") or ln.startswith("from ")) and not rest:
            heads.append(ln)
        else:
            rest.append(ln)
    body = "\n".join(rest)
    names, jitted = _module_names(body)
    lines = body.split("\n")
    for i, ln in enumerate(lines):
        if i in jitted:  # a Triton kernel's own parameters and locals keep their names
            continue
        for name in names:
            new = f"_stage{k}" if name == "kernel" else f"{name}_s{k}"
            # a name, not an attribute, a string key (cfg["scalars"] stays) or a keyword
            # argument (a kernel's parameter); a binding at the top level is renamed
            ln = re.sub(rf"^{re.escape(name)}\b", new, ln)
            ln = re.sub(rf"(?<![\w.'\"]){re.escape(name)}\b(?!\s*=(?!=))", new, ln)
        lines[i] = ln
    return "\n".join(lines).strip("\n") + "\n", heads


def _module_names(body: str) -> tuple[list[str], set[int]]:
    """(every name a contraction module binds at its top level but its Triton kernels, which
    are named per stage already: each is renamed per stage; the lines of those kernels,
    0-based). A list kept by hand missed the aligned rows' ``_row_dims``, the f32 product's
    ``F32_PREC`` and the staging's ``STAGED``: an attention's second GEMM redefined the
    first's, whose launcher then asked for dims it never set."""
    names, jitted, read_by_kernels = [], set(), set()
    for node in ast.parse(body).body:
        found = []
        if isinstance(node, ast.FunctionDef):
            if any("jit" in ast.unparse(d) for d in node.decorator_list):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                jitted |= set(range(first - 1, node.end_lineno))
                params = {a.arg for a in node.args.args + node.args.kwonlyargs}
                read_by_kernels |= {n.id for n in ast.walk(node)
                                    if isinstance(n, ast.Name) and n.id not in params}
            else:
                found = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found = [t.id for t in targets if isinstance(t, ast.Name)]
        names += [n for n in found if n not in names]
    # a global a kernel reads keeps its name (the kernel's own lines are not rewritten); two
    # stages binding it alike is what the modules' test would catch
    return [n for n in names if n not in read_by_kernels], jitted


def _main(staged: Staged) -> list[str]:
    op = staged.op
    if not op.outputs:
        raise Unsupported("a staged op needs an output")
    lines = ["def kernel(inputs, outputs, sizes):"]
    lines += [f"    d_{d} = int(sizes['{d}'])" for d in op.dims]
    anchor = op.outputs[0].name
    lines.append(f"    device = outputs['{anchor}'].device")
    lines.append("    scratch = {}")
    for t in staged.scratch:
        shape = ", ".join(f"max({py(e)}, 0)" for e in t.shape)
        shape = f"({shape},)" if t.shape else "()"
        kind = dtypes.TORCH[t.dtypes[0]]
        lines.append(f"    scratch['{t.name}'] = torch.empty({shape}, device=device, "
                     f"dtype=torch.{kind})")
    # a stage reads the op's inputs, scratch, and outputs an earlier stage wrote
    held = {t.name: ("inputs" if t.role == "in" else "outputs") for t in op.tensors
            if t.role in ("in", "out")}

    def passed(role: str, sub) -> str:
        return ", ".join(f"'{t.name}': {held.get(t.name, 'scratch')}['{t.name}']"
                         for t in sub.tensors if t.role == role)
    for k, sub in enumerate(staged.stages):
        lines.append(f"    _stage{k}({{{passed('in', sub)}}}, {{{passed('out', sub)}}}, sizes)")
    return lines


def imports(extra=()) -> str:
    """The module's imports beyond triton's own: torch (scratch tensors) and what the
    contraction stages import."""
    return "\n".join(["import torch"] + [h for h in extra if h != "import torch"
                                          and not h.startswith("import triton")])
