"""A parsed Python candidate, for the guards: aliases, module names, and which names are tensors.

The tensor analysis is a small, flow-insensitive taint: the kernel's
``inputs``/``outputs`` dicts (and names bound from them, or passed on to local
helpers) hold torch tensors. ``.numpy()`` results are not tensors, so numpy
code is never mistaken for torch doing the work. Bodies of ``@triton.jit``
functions are Triton-language code and are left out.
"""
from __future__ import annotations

import ast
from typing import Iterator

JIT_DECORATORS = ("triton.jit", "triton.autotune", "triton.heuristics")
TENSOR_DICTS = {"inputs", "outputs", "ins", "outs"}
# Tensor methods whose result is not a tensor (a numpy array, a number, a pointer).
NOT_TENSOR_RESULT = {"numpy", "tolist", "item", "data_ptr", "stride", "size", "numel", "dim",
                     "element_size", "is_contiguous", "storage_offset", "nelement", "keys",
                     "get_device", "is_floating_point", "__len__"}
TENSOR_ATTRS = {"T", "mT", "H", "mH", "data", "real", "imag"}
TENSOR_FACTORIES = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones",
                    "ones_like", "full", "full_like", "arange", "tensor", "as_tensor",
                    "from_numpy", "from_dlpack"}


class PyModule:
    """A parsed candidate: import aliases, functions, module-level names, tensor taint."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.aliases: dict[str, str] = {}
        self.star_imports: list[tuple[int, str]] = []
        self._collect_aliases()
        self.functions = [n for n in ast.walk(tree)
                          if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        self.module_names = bound_names(tree.body)
        self.tainted: dict[ast.AST, set[str]] = {}
        self._taint()

    # ---- imports ----
    def _collect_aliases(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        root = a.name.split(".")[0]
                        self.aliases[root] = root
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name == "*":
                        self.star_imports.append((node.lineno, node.module))
                    else:
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        # `T = torch`, `sm = torch.softmax`: follow plain re-bindings to a fixpoint.
        for _ in range(4):
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                        and isinstance(node.targets[0], ast.Name):
                    path = self.resolve(node.value)
                    if path:
                        self.aliases.setdefault(node.targets[0].id, path)

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted path an expression names: ``F.softmax`` is ``torch.nn.functional.softmax``."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def _parameter_names(self) -> set[int]:
        """ids of Name nodes that are a parameter of an enclosing function (not an import)."""
        out = set()
        for f in ast.walk(self.tree):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = f.args
                params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
                params |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
                if params & set(self.aliases):
                    body = f.body if isinstance(f.body, list) else [f.body]
                    out |= {id(n) for b in body for n in ast.walk(b)
                            if isinstance(n, ast.Name) and n.id in params}
        return out

    def references(self) -> Iterator[tuple[ast.AST, str]]:
        """Every maximal dotted reference to an imported name, with its resolved path."""
        shadowed, inner = self._parameter_names(), set()
        for node in ast.walk(self.tree):  # parents come before children in ast.walk
            if isinstance(node, (ast.Attribute, ast.Name)) and id(node) not in inner:
                path = self.resolve(node)
                if not path or (isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)):
                    continue
                v = node
                while isinstance(v, ast.Attribute):
                    v = v.value
                    inner.add(id(v))
                if id(v) not in shadowed:
                    yield node, path

    def is_jit(self, fn: ast.AST) -> bool:
        for d in getattr(fn, "decorator_list", ()):
            target = d.func if isinstance(d, ast.Call) else d
            path = self.resolve(target) or ""
            if path.startswith(JIT_DECORATORS):
                return True
        return False

    # ---- tensors ----
    def _taint(self) -> None:
        """Which names in which function hold torch tensors (or dicts of them)."""
        scopes = [f for f in self.functions if not self.is_jit(f)]
        for f in scopes:
            args = f.args.posonlyargs + f.args.args
            names = {a.arg for a in args if a.arg in TENSOR_DICTS}
            if len(args) >= 3 and "size" in args[2].arg:
                names |= {args[0].arg, args[1].arg}  # kernel(inputs, outputs, sizes)
            self.tainted[f] = names
        local_fns = {f.name: f for f in scopes}
        for _ in range(6):
            changed = False
            for f in scopes:
                changed |= self._propagate(f, local_fns)
            if not changed:
                break

    def _propagate(self, f, local_fns) -> bool:
        names = self.tainted[f]
        before = (len(names), sum(len(v) for v in self.tainted.values()))
        for node in own_nodes(f):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    self._bind(names, t, node.value, f)
            elif isinstance(node, (ast.For, ast.comprehension)):
                it = node.iter
                if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) \
                        and self.tensor(it.func.value, f):
                    if it.func.attr == "values":
                        names |= names_in(node.target)
                    elif it.func.attr == "items" and isinstance(node.target, ast.Tuple) \
                            and len(node.target.elts) == 2:
                        names |= names_in(node.target.elts[1])
                elif self.tensor(it, f) and not isinstance(it, ast.Name):
                    names |= names_in(node.target)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in local_fns:
                callee = local_fns[node.func.id]
                params = callee.args.posonlyargs + callee.args.args
                for i, a in enumerate(node.args):
                    if i < len(params) and self.tensor(a, f):
                        self.tainted[callee].add(params[i].arg)
                for kw in node.keywords:
                    if kw.arg and self.tensor(kw.value, f):
                        self.tainted[callee].add(kw.arg)
        return (len(names), sum(len(v) for v in self.tainted.values())) != before

    def _bind(self, names: set[str], target, value, f) -> None:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts):
                self._bind(names, t, v, f)
        elif self.tensor(value, f):
            names |= names_in(target)

    def tensor(self, node: ast.AST, f) -> bool:
        """Whether ``node`` (inside function ``f``) may evaluate to a torch tensor."""
        names = self.tainted.get(f, set())
        if isinstance(node, ast.Name):
            return node.id in names
        if isinstance(node, ast.Subscript):
            return self.tensor(node.value, f)
        if isinstance(node, ast.Attribute):
            return node.attr in TENSOR_ATTRS and self.tensor(node.value, f)
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Attribute) and self.tensor(fn.value, f):
                return fn.attr not in NOT_TENSOR_RESULT
            path = self.resolve(fn) or ""
            return path.startswith("torch.") and path.split(".")[-1] in TENSOR_FACTORIES
        if isinstance(node, ast.BinOp):
            return self.tensor(node.left, f) or self.tensor(node.right, f)
        if isinstance(node, ast.UnaryOp):
            return self.tensor(node.operand, f)
        if isinstance(node, ast.IfExp):
            return self.tensor(node.body, f) or self.tensor(node.orelse, f)
        if isinstance(node, ast.Starred):
            return self.tensor(node.value, f)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(self.tensor(e, f) for e in node.elts)
        if isinstance(node, ast.Dict):
            return any(self.tensor(v, f) for v in node.values)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.tensor(node.elt, f)
        if isinstance(node, ast.DictComp):
            return self.tensor(node.value, f)
        return False


def own_nodes(f) -> Iterator[ast.AST]:
    """Nodes of function ``f``'s body, not descending into nested functions or classes."""
    stack = list(f.body)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                      ast.Lambda)):
                stack.append(child)


def names_in(target) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(names_in(t) for t in target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return names_in(target.value)
    return set()


def bound_names(body) -> set[str]:
    """Names bound at module level (assignments, imports, defs, classes)."""
    out = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                out |= names_in(t)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            out |= names_in(node.target)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for field_name in ("body", "orelse", "finalbody", "handlers"):
                out |= bound_names(getattr(node, field_name, []) or [])
        elif isinstance(node, ast.ExceptHandler):
            out |= bound_names(node.body)
    return out


def enclosing_functions(mod: "PyModule") -> Iterator[tuple[ast.AST, ast.AST]]:
    """(function, node) for every node inside a non-jit function body."""
    for f in mod.functions:
        if mod.is_jit(f):
            continue
        for node in own_nodes(f):
            yield f, node




def root_name(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def locals_of(f) -> set[str]:
    args = f.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    for node in own_nodes(f):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                names |= names_in(t)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            names |= names_in(node.target)
        elif isinstance(node, (ast.For, ast.comprehension)):
            names |= names_in(node.target)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            names |= names_in(node.optional_vars)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def under(path: str, roots) -> bool:
    """Whether dotted ``path`` is one of ``roots`` or inside one (``torch.nn`` is in ``torch``)."""
    return any(path == r or path.startswith(r + ".") for r in roots)


def imported(mod: "PyModule") -> list[tuple[int, str]]:
    """(line, dotted name) of everything imported: modules, and names from modules."""
    out = []
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out += [(node.lineno, node.module)]
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names if a.name != "*"]
    return out
