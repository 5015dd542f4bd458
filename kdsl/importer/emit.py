"""Walking the exported graph: each ATen node through the mapping table to a value, and
the values that must exist as tensors into statements.

Statements: every reduction, contraction, scan and window is one; an elementwise value
becomes one when several nodes read it (or it grows long), else it inlines into its
reader; views only re-index. A module of several ops thus becomes one spec of several
statements, and fusing them is the search's job.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass

import sympy

from . import symbolic, table
from .errors import ImportFailure, Unmapped
from .naming import Names
from .values import COMPUTE, ELEMENTWISE, Value, constant, number, stored

INLINE_LIMIT = 400  # characters of an elementwise expression inlined into its reader
POSITIVE_ARGS = {"aten.log.default", "aten.sqrt.default", "aten.rsqrt.default",
                 "aten.log1p.default"}


@dataclass
class InputTensor:
    name: str
    node: str           # placeholder name in the graph
    kind: str           # USER_INPUT | PARAMETER | BUFFER | CONSTANT_TENSOR
    target: str | None  # the module's attribute (parameters, buffers, constants)
    shape: tuple
    dtype: str          # 'f' | 'i' | 'b'
    domain: str = ""


@dataclass
class Statement:
    target: str
    shape: tuple
    text: str
    output: bool


@dataclass
class Emitted:
    inputs: list
    outputs: list          # (name, shape, dtype)
    statements: list
    dims: dict             # sympy Symbol -> dim name
    reachable: list        # fx nodes the outputs depend on, in graph order
    node_names: dict       # placeholder name -> spec input name
    contraction: bool = False
    scan: bool = False


def kind_of(dtype) -> str:
    if dtype.is_floating_point:
        return "f"
    return "b" if str(dtype) == "torch.bool" else "i"


class Builder:
    def __init__(self, program, dims: dict, names: Names):
        self.program = program
        self.printer = symbolic.Printer(dims)
        self.names = names
        self.statements: list[Statement] = []
        self.counter = 0
        self.domains: dict[str, str] = {}

    # ---- services for the table ----
    def shape(self, node) -> tuple:
        val = node.meta["val"]
        val = val[0] if isinstance(val, (tuple, list)) else val  # a tuple's first result
        return tuple(symbolic.expr_of(s) for s in val.shape)

    def dtype(self, node) -> str:
        val = node.meta["val"]
        val = val[0] if isinstance(val, (tuple, list)) else val
        return kind_of(val.dtype)

    def size(self, e) -> str:
        if isinstance(e, str):
            return e
        return self.printer(e)

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def store(self, value: Value, name: str | None = None, output: bool = False) -> Value:
        name = name or self.names.claim("t")
        idx = tuple(f"i{d}" for d in range(value.rank))
        text = _strip(value.at(idx))
        if not output:
            lhs = ", ".join(f"{i} in 0 .. {self.size(s)}" for i, s in zip(idx, value.shape))
        else:
            lhs = ", ".join(idx)
        self.statements.append(Statement(name, value.shape, f"{name}[{lhs}] = {text}", output))
        return stored(name, value.shape, value.dtype)

    def padded_reader(self, v: Value):
        if v.padded is None:
            v = self.store(v)
        return lambda idx, pad: v.padded(tuple(idx), number(pad))

    def positive(self, v):
        if isinstance(v, Value) and v.origin:
            self.domains[v.origin] = "positive"

    def index_domain(self, v, size, inputs):
        """Integer inputs an index reads are drawn in ``0 .. size`` (a gather's classes)."""
        if not isinstance(v, Value):
            return
        text = v.at(tuple(f"i{d}" for d in range(v.rank)))
        for t in inputs:
            if t.dtype == "i" and re.search(rf"\b{re.escape(t.name)}\[", text):
                self.domains[t.name] = f"in 0 .. {self.size(size)}"


def _strip(text: str) -> str:
    """Drop one pair of parentheses around a whole statement body."""
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for k, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and k < len(text) - 1:
                return text
        return text[1:-1]
    return text


def emit(program, dims: dict, names: Names) -> Emitted:
    graph = program.graph
    sig = program.graph_signature
    output_node = next(n for n in graph.nodes if n.op == "output")
    n_user = len(sig.user_outputs)
    user_outputs = list(output_node.args[0])[-n_user:] if n_user else []
    reachable = _reachable(user_outputs)
    b = Builder(program, dims, names)
    b.inputs = []
    specs = {s.arg.name: s for s in sig.input_specs}

    env, node_names = {}, {}
    out_names = _output_names(user_outputs, names)
    users = {n: sum(1 for u in n.users if u in reachable) for n in reachable}
    for node in graph.nodes:
        if node not in reachable:
            continue
        if node.op == "placeholder":
            spec = specs[node.name]
            kind = spec.kind.name
            val = node.meta.get("val")
            if not hasattr(val, "shape"):
                raise ImportFailure(f"input {node.name} is not a tensor")
            target = getattr(spec, "target", None)
            if kind == "CONSTANT_TENSOR" and program.constants[target].device.type == "meta":
                raise ImportFailure(f"forward makes a tensor constant on its input's device "
                                    f"({target}): its value is unknown to a meta-device trace")
            if kind == "CONSTANT_TENSOR" and _scalar_constant(program, target) is not None:
                # torch.tensor(0.5) inside forward: a number in the statements
                env[node] = constant(b.shape(node), kind_of(val.dtype),
                                     _scalar_constant(program, target))
                continue
            name = names.claim(target if kind != "USER_INPUT" else node.name)
            node_names[node.name] = name
            shape = b.shape(node)
            b.inputs.append(InputTensor(name, node.name, kind, target, shape, kind_of(val.dtype)))
            env[node] = stored(name, shape, kind_of(val.dtype), origin=name)
            continue
        if node.op != "call_function":
            continue
        val = node.meta.get("val")
        if isinstance(val, (int, float, sympy.Basic)) or type(val).__name__ in ("SymInt", "SymFloat"):
            env[node] = symbolic.expr_of(val) if not isinstance(val, (int, float)) else sympy.sympify(val)
            continue
        if node.target is operator.getitem:
            value = env[node.args[0]][node.args[1]]
        else:
            name = str(node.target)
            fn = table.lookup(name)
            args = _convert(node.args, env)
            kwargs = {k: _convert(v, env) for k, v in node.kwargs.items()
                      if k not in ("device", "layout", "pin_memory", "memory_format")}
            if name in POSITIVE_ARGS:
                b.positive(args[0])
            try:
                value = fn(b, node, *args, **kwargs)
            except (ImportFailure, Unmapped):
                raise
            except (TypeError, ValueError, IndexError, KeyError) as e:
                raise Unmapped(name, f"argument form not handled: {type(e).__name__}: {e}") from None
            if isinstance(value, tuple):
                env[node] = value
                continue
        env[node] = _settle(b, node, value, users.get(node, 0), out_names)
    outputs = []
    for node in user_outputs:
        v, name = env[node], out_names[node]
        if not any(s.target == name for s in b.statements):
            b.store(v, name, output=True)
        outputs.append((name, v.shape, v.dtype))
    inputs = b.inputs
    for i in inputs:
        i.domain = b.domains.get(i.name, "")
    text = " ".join(s.text for s in b.statements)
    return Emitted(inputs, outputs, b.statements, dims, [n for n in graph.nodes if n in reachable],
                   node_names, contraction=bool(re.search(r"sum\([ck]\d", text)),
                   scan="cumsum(" in text or "cumprod(" in text)


def _settle(b: Builder, node, value: Value, n_users: int, out_names: dict) -> Value:
    """Make ``value`` a statement if it is an output, a reduction, or a shared or long
    elementwise value; leave it to inline otherwise."""
    if node in out_names:
        return b.store(value, out_names[node], output=True)
    if value.kind == COMPUTE:
        return b.store(value)
    if value.kind == ELEMENTWISE and n_users > 1:
        return b.store(value)
    if value.kind == ELEMENTWISE and len(value.at(tuple(f"i{d}" for d in range(value.rank)))) > INLINE_LIMIT:
        return b.store(value)
    return value


def _scalar_constant(program, target):
    t = program.constants.get(target)
    if t is None or t.device.type == "meta" or t.numel() != 1:
        return None
    return t.item()


def _convert(a, env):
    import torch.fx
    if isinstance(a, torch.fx.Node):
        if a not in env:
            raise ImportFailure(f"node {a.name} used before it is defined")
        return env[a]
    if isinstance(a, (list, tuple)):
        return type(a)(_convert(x, env) for x in a)
    return a


def _reachable(outputs) -> set:
    import torch.fx
    seen, stack = set(), [o for o in outputs if isinstance(o, torch.fx.Node)]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return seen


def _output_names(user_outputs, names: Names) -> dict:
    out = {}
    for k, node in enumerate(user_outputs):
        if node in out or node.op == "placeholder":
            raise ImportFailure("an output that repeats another output or an input is not supported")
        out[node] = names.claim("y" if len(user_outputs) == 1 else f"y{k}")
    return out
