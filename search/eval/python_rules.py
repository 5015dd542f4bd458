"""The allow-list rules for Python candidates: imports, names, and what module level holds.

Each rule reads the parsed module (``PyModule``) and a backend's ``Profile``
and returns ``(line, message)`` findings; nothing here imports or runs the
candidate. torch names in a profile other than the torch backend's are left to
the ``no_torch_compute`` guard, so that one finding says it once.
"""
from __future__ import annotations

import ast
from typing import Iterator

from . import allowlists as allow
from .python_source import PyModule, names_in, under

Finding = tuple[int, str]
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def torch_judged(path: str, prof: allow.Profile) -> bool:
    return not prof.torch_computes and under(path, ("torch",) + allow.KDSL_TORCH)


def _not_allowed(path: str, prof: allow.Profile) -> str:
    return (f"{path}, which is not on the {prof.name} allow-list "
            f"(importable: {', '.join(prof.importable())})")


# ---- imports ------------------------------------------------------------------

def imports(mod: PyModule, prof: allow.Profile) -> list[Finding]:
    out = []
    for node in ast.walk(mod.tree):
        paths = []
        if isinstance(node, ast.Import):
            paths = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                out.append((node.lineno, "relative import"))
                continue
            if node.module == "__future__":
                out += [(node.lineno, f"from __future__ import {a.name}: only annotations")
                        for a in node.names if a.name != "annotations"]
                continue
            for a in node.names:
                if a.name == "*":
                    if not torch_judged(node.module, prof):
                        out.append((node.lineno, f"star import from {node.module}"))
                else:
                    paths.append(f"{node.module}.{a.name}")
        for path in paths:
            if not (torch_judged(path, prof) or path in prof.modules or prof.allowed(path)):
                out.append((node.lineno, f"imports {_not_allowed(path, prof)}"))
    return out


# ---- names ----------------------------------------------------------------------

def names(mod: PyModule, prof: allow.Profile) -> list[Finding]:
    """Dotted names from the allow-list only; allowed builtins; no dunder or private names,
    no introspection attributes, no modules passed around as values, no classes."""
    out = []
    parents = {child: node for node in ast.walk(mod.tree) for child in ast.iter_child_nodes(node)}
    for node, path in mod.references():
        if path in prof.modules or path in allow.KDSL_TORCH:
            parent = parents.get(node)
            if not (isinstance(parent, ast.Attribute) and parent.value is node):
                out.append((node.lineno, f"uses the module {path} as a value "
                                         f"(name what you need from it instead)"))
        elif not torch_judged(path, prof) and not prof.allowed(path):
            out.append((node.lineno, f"uses {_not_allowed(path, prof)}"))
    for node in ast.walk(mod.tree):
        out += _dunder_and_attributes(node)
    for node in free_names(mod.tree):
        out += _builtin(node, parents.get(node))
    return out


def attribute_problem(attr: str) -> str | None:
    if attr.startswith("__"):
        return f"dunder attribute .{attr}"
    if attr.startswith("_"):
        return f"private attribute .{attr}"
    if attr in allow.INTROSPECTION_ATTRS:
        return f"introspection attribute .{attr} (frames, code, globals or raw memory)"
    return None


def _dunder_and_attributes(node) -> list[Finding]:
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.Attribute):
        problem = attribute_problem(node.attr)
        return [(line, problem)] if problem else []
    if isinstance(node, ast.ClassDef):
        return [(line, f"defines class {node.name} (a kernel needs functions only)")]
    named = (node.id if isinstance(node, ast.Name) else node.arg if isinstance(node, ast.arg)
             else node.name if isinstance(node, FUNCTIONS) else None)
    if named and named.startswith("__"):
        return [(line, f"dunder name {named}")]
    if isinstance(node, ast.alias) and (node.asname or "").startswith("__"):
        return [(line, f"dunder name {node.asname}")]
    return []


def _builtin(node: ast.Name, parent) -> list[Finding]:
    name = node.id
    if name in allow.BUILTINS or name.startswith("__"):  # dunders: reported as such
        return []
    if name in allow.LITERAL_ATTR_BUILTINS:
        if isinstance(parent, ast.Call) and parent.func is node and len(parent.args) in (2, 3) \
                and isinstance(parent.args[1], ast.Constant) \
                and isinstance(parent.args[1].value, str):
            problem = attribute_problem(parent.args[1].value)
            return [(node.lineno, f"{name}(..., {parent.args[1].value!r}): {problem}")] \
                if problem else []
        return [(node.lineno, f"{name}() with a computed name (write x.name, or "
                              f"{name}(x, 'name', default) with a literal name)")]
    if name in allow.ALL_BUILTINS:
        return [(node.lineno, f"uses builtin {name}, which is not on the allow-list")]
    return []


def _scope_bindings(node) -> set[str]:
    """Names bound directly in the scope ``node`` opens (a module, function or lambda)."""
    out: set[str] = set()
    if isinstance(node, (*FUNCTIONS, ast.Lambda)):
        a = node.args
        out |= {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        out |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    body = node.body if isinstance(node.body, list) else [node.body]
    stack = list(body)
    while stack:
        n = stack.pop()
        if isinstance(n, (*FUNCTIONS, ast.ClassDef)):
            out.add(n.name)
            continue
        if isinstance(n, ast.Lambda):
            continue
        if isinstance(n, ast.comprehension):  # its target is the comprehension's own
            stack += [n.iter, *n.ifs]
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names if a.name != "*"}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
        stack += list(ast.iter_child_nodes(n))
    return out


def free_names(tree: ast.Module) -> Iterator[ast.Name]:
    """Name loads no enclosing scope binds: at run time these are builtins."""
    def visit(node, scopes):
        if isinstance(node, (*FUNCTIONS, ast.Lambda)):
            outer = [node.args] + list(getattr(node, "decorator_list", []))
            outer += [node.returns] if getattr(node, "returns", None) else []
            for child in outer:
                yield from visit(child, scopes)
            inner = scopes + [_scope_bindings(node)]
            for child in (node.body if isinstance(node.body, list) else [node.body]):
                yield from visit(child, inner)
            return
        if isinstance(node, COMPREHENSIONS):
            targets = set().union(*(names_in(g.target) for g in node.generators))
            scopes = scopes + [targets]
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                and not any(node.id in s for s in scopes):
            yield node
        for child in ast.iter_child_nodes(node):
            yield from visit(child, scopes)
    yield from visit(tree, [_scope_bindings(tree)])


# ---- module level ---------------------------------------------------------------

def module_level(mod: PyModule, prof: allow.Profile) -> list[Finding]:
    """Module level holds imports, function definitions and constants: nothing runs at import."""
    out = []
    for node in mod.tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        if isinstance(node, FUNCTIONS):
            out += _definition_time(mod, node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if not all(isinstance(t, ast.Name) or (isinstance(t, ast.Tuple) and all(
                    isinstance(e, ast.Name) for e in t.elts)) for t in targets):
                out.append((node.lineno, "module-level assignment into an element or "
                                         "attribute (only plain names may be bound)"))
            for expr in [node.value] + ([node.annotation] if isinstance(node, ast.AnnAssign)
                                        else []):
                bad = non_constant(mod, expr)
                if bad is not None:
                    out.append((node.lineno, f"module-level value computes at import: "
                                             f"{_show(bad)} (constants only)"))
        else:
            out.append((node.lineno, f"module-level {type(node).__name__} statement (only "
                                     f"imports, function definitions and constants)"))
    for node in ast.walk(mod.tree):
        if isinstance(node, FUNCTIONS) and node not in mod.tree.body:
            out += _decorators(mod, node)
    return out


def _definition_time(mod: PyModule, fn) -> list[Finding]:
    """What runs when ``def`` runs: decorators, defaults, annotations."""
    out = _decorators(mod, fn)
    a = fn.args
    evaluated = a.defaults + [d for d in a.kw_defaults if d is not None]
    evaluated += [x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs
                  if x.annotation is not None]
    evaluated += [fn.returns] if fn.returns is not None else []
    for expr in evaluated:
        bad = non_constant(mod, expr)
        if bad is not None:
            out.append((expr.lineno, f"default or annotation of {fn.name} computes at import: "
                                     f"{_show(bad)} (constants only)"))
    return out


def _decorators(mod: PyModule, fn) -> list[Finding]:
    out = []
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        path = mod.resolve(target) or _show(target)
        if path not in allow.DECORATORS:
            out.append((d.lineno, f"decorator {path} on {fn.name} (allowed: "
                                  f"{', '.join(allow.DECORATORS)})"))
        elif isinstance(d, ast.Call):
            for arg in d.args + [k.value for k in d.keywords]:
                bad = non_constant(mod, arg, lambdas=True)
                if bad is not None:
                    out.append((d.lineno, f"decorator argument computes at import: {_show(bad)}"))
    return out


def non_constant(mod: PyModule, expr, lambdas: bool = False):
    """The first part of ``expr`` that is more than a constant, or None.

    Constants: literals and containers of them, module-level names, allowed dotted
    names, arithmetic, comparisons and conditionals of those, and calls that build
    compile-time values (``tl.constexpr``, ``triton.Config``, ``bool``, ``min``...).
    """
    bound = mod.module_names
    comp = {n for node in ast.walk(expr) if isinstance(node, ast.comprehension)
            for n in names_in(node.target)}
    stack = [expr]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Lambda):
            if not lambdas:
                return n
            continue  # its body runs later, under the same rules as any function
        if isinstance(n, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return n
        if isinstance(n, ast.Call) and not _constant_call(mod, n.func, bound):
            return n
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and not (
                n.id in bound or n.id in comp or n.id in allow.CONSTANT_BUILTINS):
            return n
        stack += list(ast.iter_child_nodes(n))
    return None


def _constant_call(mod: PyModule, fn, bound) -> bool:
    if isinstance(fn, ast.Name) and fn.id in allow.CONSTANT_BUILTINS and fn.id not in bound:
        return True
    path = mod.resolve(fn)
    if path is not None:
        return path in allow.CONSTANT_CALLS
    return isinstance(fn, ast.Attribute) and fn.attr in allow.STR_METHODS


def _show(node) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."
