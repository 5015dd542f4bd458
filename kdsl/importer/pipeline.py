"""The import's stages in order; each failure is an ``ImportFailure`` with one line."""
from __future__ import annotations

from ..checker import MAX_TEST_ELEMENTS
from . import agreement, baseline_text, loading, spec_text, symbolic, tracing
from .emit import emit
from .errors import ImportFailure
from .naming import Names


def build(path: str, check: bool):
    from . import Imported
    problem = loading.load(path)
    traced = tracing.trace(problem)
    program = traced.program
    names = Names()
    user_nodes, bench = _user_inputs(program, traced.example)
    dims = {}
    for node, shape in user_nodes:
        for axis, e in enumerate(shape):
            for s in sorted(e.free_symbols, key=str):
                if s not in dims:
                    dims[s] = names.claim(f"{node[:1].upper()}{axis}")
    emitted = emit(program, dims, names)
    _check_static_size(problem.name, emitted)
    printer = symbolic.Printer(dims)
    input_names = {(t.node if t.kind == "USER_INPUT" else t.target): t.name for t in emitted.inputs}
    mutated = set(program.graph_signature.buffers_to_mutate.values())
    base = baseline_text.baseline(traced.eager, input_names, printer, mutated)
    lower = {s: int(vr.lower) for s, vr in program.range_constraints.items()
             if s in dims and vr.lower.is_finite}
    shapes = [tuple(symbolic.expr_of(x) for x in n.meta["val"].shape) for n in emitted.reachable
              if hasattr(n.meta.get("val"), "shape")]
    ranges = spec_text.test_ranges(shapes, lower, {s: bench[s] for s in dims})
    text = spec_text.render(problem.name, path, emitted, printer, ranges,
                            {s: bench[s] for s in dims}, base, spec_text.tolerance(emitted))
    op = _parse(text, problem.name)
    if check:
        sizes = {dims[s]: hi for s, (lo, hi) in ranges.items()}
        values = {s: hi for s, (lo, hi) in ranges.items()}
        bad = agreement.check(problem, op, emitted, traced.example, sizes, user_nodes, values,
                              dict(program.constants))
        if bad is not None:
            raise agreement.Disagreement(f"{problem.name}: {bad}", text)
    return Imported(problem.name, text, check)


# Elements of fixed-size inputs (parameters) past which the language rejects every test case
# (the checker's bound on one case's inputs and outputs, 1 GiB in float64).
MAX_STATIC_ELEMENTS = MAX_TEST_ELEMENTS


def _check_static_size(name, emitted):
    total = 0
    for t in emitted.inputs:
        if all(not getattr(s, "free_symbols", None) for s in t.shape):
            n = 1
            for s in t.shape:
                n *= int(s)
            total += n
    if total > MAX_STATIC_ELEMENTS:
        raise ImportFailure(f"{name}: its fixed-size inputs (parameters) hold {total:,} elements, "
                            f"past the {MAX_STATIC_ELEMENTS:,} a test case may hold (they cannot shrink: "
                            "parameter sizes are fixed by the module)")


def _user_inputs(program, example):
    """(placeholder name, sympy shape) of the module's tensor arguments, and each dim
    symbol's bench value (from get_inputs()'s shapes)."""
    import torch
    specs = [s for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    tensors = [x for x in example if isinstance(x, torch.Tensor)]
    placeholders = [nodes[s.arg.name] for s in specs
                    if hasattr(nodes[s.arg.name].meta.get("val"), "shape")]
    bench, out = {}, []
    for node, x in zip(placeholders, tensors):
        shape = tuple(symbolic.expr_of(d) for d in node.meta["val"].shape)
        out.append((node.name, shape))
        for e, v in zip(shape, x.shape):
            if e.is_Symbol:
                bench.setdefault(e, int(v))
    for node, shape in out:
        for e in shape:
            for s in e.free_symbols:
                if s not in bench:
                    raise ImportFailure(f"input dim {s} is an expression of others; not supported")
    return out, bench


def _parse(text: str, name: str):
    from ..errors import SpecError
    from ..spec import parse_text
    try:
        return parse_text(text, f"{name}.kspec").ops[0]
    except SpecError as e:
        first = e.diagnostics[0]
        line = text.splitlines()[first.line - 1].strip() if 0 < first.line <= len(text.splitlines()) else ""
        raise ImportFailure(f"{name}: the generated spec is rejected: {first.message} "
                            f"(line {first.line}: {line[:160]})") from None
