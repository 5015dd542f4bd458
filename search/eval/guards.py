"""Static integrity guards: named checks a candidate's source must pass before it runs.

Each guard is one small function from a ``Source`` to a list of ``(line, message)``
findings, registered in ``GUARDS`` under its name; it never imports or runs the
candidate. The rules are allow-lists (``allowlists``, ``python_rules``,
``c_object``): a Python candidate may import and name only what its backend's
profile lists, with no dunder or introspection access and nothing but imports,
definitions and constants at module level; a C candidate is read after the
preprocessor, and its compiled object may reference only allowed symbols and
hold no writable data. ``check`` runs every guard that applies to a backend:
the torch backend is exempt from ``no_torch_compute`` (it IS torch), never from
the others.

Python guards see which names hold torch tensors (``python_source``):
arithmetic or compute methods on those are torch doing the work, while numpy
arrays (``.numpy()`` results) are free for the numpy backend to compute with.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from . import allowlists as allow
from . import c_object as cobj
from . import c_source as csrc
from . import python_rules as rules
from . import python_source as pysrc
from .python_source import PyModule, under

Finding = tuple[int, str]


@dataclass(frozen=True)
class Violation:
    guard: str
    line: int
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{self.guard}: {where}{self.message}"


@dataclass
class Source:
    text: str
    language: str  # 'python' | 'c'
    backend: str = ""

    @cached_property
    def module(self) -> "PyModule | None":
        if self.language != "python":
            return None
        return PyModule(allow.parse(self.text))

    @cached_property
    def profile(self) -> allow.Profile:
        return allow.profile(self.backend)

    @cached_property
    def c_object(self) -> "cobj.Analysis":
        """The compiler's view: the preprocessed text and the compiled object."""
        return cobj.analyse(self.text)

    @cached_property
    def c_code(self) -> str:
        """The candidate's own lines after the preprocessor, comments and literals blanked."""
        return csrc.strip_c(cobj.preprocessed_text(self.c_object, self.text))


@dataclass(frozen=True)
class Guard:
    name: str
    check: Callable[[Source], list[Finding]]
    exempt: tuple[str, ...] = ()
    doc: str = ""


GUARDS: dict[str, Guard] = {}


def guard(name: str, exempt: tuple[str, ...] = ()):
    def register(fn):
        GUARDS[name] = Guard(name, fn, exempt, (fn.__doc__ or "").strip().splitlines()[0])
        return fn
    return register


def applicable(backend: str) -> list[Guard]:
    return [g for g in GUARDS.values() if backend not in g.exempt]


def check(source: str, language: str, backend: str) -> list[Violation]:
    """Every violation of every guard that applies to ``backend``."""
    src = Source(source, language, backend)
    if language == "python":
        try:
            src.module  # noqa: B018 - parse once, up front
        except SyntaxError as e:
            return [Violation("parse", e.lineno or 0, f"source does not parse: {e.msg}")]
    elif language == "c" and src.c_object.preprocess_error:
        return [Violation("parse", 0, f"the preprocessor failed: "
                                      f"{src.c_object.preprocess_error}")]
    out = []
    for g in applicable(backend):
        out += [Violation(g.name, line, msg) for line, msg in g.check(src)]
    return out


# ---- the allow-lists ---------------------------------------------------------

@guard("allowed_imports")
def allowed_imports(src: Source) -> list[Finding]:
    """Imports only from the backend's allow-list (C: only the allowed headers)."""
    if src.language == "c":
        return cobj.header_findings(src.c_object)
    return sorted(set(rules.imports(src.module, src.profile)))


@guard("allowed_names")
def allowed_names(src: Source) -> list[Finding]:
    """Names, builtins and (C) linked symbols only from the allow-lists; no dunder access."""
    if src.language == "c":
        return cobj.symbol_findings(src.c_object)
    return sorted(set(rules.names(src.module, src.profile)))


@guard("module_level")
def module_level(src: Source) -> list[Finding]:
    """Nothing runs at load: module level holds imports, definitions and constants only."""
    if src.language == "c":
        return cobj.load_time_findings(src.c_object)
    return sorted(set(rules.module_level(src.module, src.profile)))


# ---- guard: no torch compute -----------------------------------------------

# Tensor methods that move, view, cast or describe data; any other method computes.
PLUMBING_METHODS = {
    "contiguous", "view", "view_as", "reshape", "flatten", "unsqueeze", "squeeze", "permute",
    "transpose", "t", "expand", "expand_as", "narrow", "select", "as_strided", "unbind",
    "split", "chunk", "to", "float", "half", "bfloat16", "double", "int", "long", "bool",
    "cpu", "cuda", "copy_", "zero_", "fill_", "detach", "clone", "new_empty", "new_zeros",
    "new_full", "new_ones", "get", "items", "values", "keys", "numpy", "tolist", "item",
    "data_ptr", "stride", "size", "numel", "dim", "element_size", "is_contiguous",
    "storage_offset", "untyped_storage", "nelement", "get_device", "is_floating_point",
    "pin_memory",
}


def torch_path_allowed(path: str) -> bool:
    """torch names a non-torch kernel may use: allocation, dtypes, device queries (streams
    are judged by ``no_side_streams``)."""
    if path == "torch" or under(path, STREAM_PATHS):
        return True
    return under(path, ("torch",)) and allow.PROFILES["numpy"].allowed(path)


@guard("no_torch_compute", exempt=("torch",))
def no_torch_compute(src: Source) -> list[Finding]:
    """The candidate may not have torch (the baseline library) do the computation."""
    if src.language == "c":
        return csrc.calls_into_python(src.c_code)
    mod = src.module
    out = [(line, f"star import from {m}") for line, m in mod.star_imports
           if m.split(".")[0] == "torch"]
    for line, path in pysrc.imported(mod):
        if "." in path and ((under(path, ("torch",)) and not torch_path_allowed(path)) or
                            under(path, allow.KDSL_TORCH)):
            out.append((line, f"imports {path}"))
    for node, path in mod.references():
        if (under(path, ("torch",)) and not torch_path_allowed(path)) or \
                under(path, allow.KDSL_TORCH):
            out.append((node.lineno, f"uses {path}"))
    for f, node in pysrc.enclosing_functions(mod):
        out += _tensor_compute(mod, f, node)
    return sorted(set(out))


def _tensor_compute(mod: PyModule, f, node) -> list[Finding]:
    t = lambda e: mod.tensor(e, f)  # noqa: E731
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and t(node.func.value):
        if node.func.attr not in PLUMBING_METHODS:
            return [(node.lineno, f"calls tensor method .{node.func.attr}() (torch computes it)")]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id == "getattr" and node.args and t(node.args[0]):
        return [(node.lineno, "getattr on a tensor (a torch method looked up by name)")]
    if isinstance(node, ast.BinOp) and (t(node.left) or t(node.right)):
        what = "@ (matmul)" if isinstance(node.op, ast.MatMult) else type(node.op).__name__
        return [(node.lineno, f"tensor arithmetic {what} in the wrapper (torch computes it)")]
    if isinstance(node, ast.AugAssign) and (t(node.target) or t(node.value)):
        return [(node.lineno, "in-place tensor arithmetic in the wrapper (torch computes it)")]
    if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not) and t(node.operand):
        return [(node.lineno, "tensor arithmetic in the wrapper (torch computes it)")]
    if isinstance(node, ast.Compare) and \
            not all(isinstance(o, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for o in node.ops) and \
            any(t(e) for e in [node.left, *node.comparators]):
        return [(node.lineno, "tensor comparison in the wrapper (torch computes it)")]
    return []


# ---- guard: no side streams ------------------------------------------------

STREAM_PATHS = ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.StreamContext",
                "torch.cuda.ExternalStream", "torch.cuda.set_stream", "torch.cuda.default_stream",
                "torch.cuda.streams", "torch.cuda.graph", "torch.cuda.CUDAGraph",
                "torch.cuda.graphs", "torch.cuda.make_graphed_callables", "torch.Stream",
                "torch.cuda.set_per_process_memory_fraction")
OTHER_GPU_MODULES = ("cupy", "cuda", "pycuda", "numba")
STREAM_WORDS = re.compile(r"stream|graph", re.I)


@guard("no_side_streams")
def no_side_streams(src: Source) -> list[Finding]:
    """The candidate must run on the caller's current stream (timing and checks wait on it)."""
    if src.language == "c":
        return csrc.matches(src.c_code, r"\b(cudaStreamCreate\w*|cuStreamCreate\w*|"
                            r"hipStreamCreate\w*|cudaGraph\w*|cuGraph\w*)\b",
                            "creates a side stream or graph: {}")
    mod = src.module
    out = []
    for node, path in mod.references():
        if under(path, STREAM_PATHS) or \
                (under(path, OTHER_GPU_MODULES) and STREAM_WORDS.search(path)):
            out.append((node.lineno, f"uses {path}"))
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "stream" and not _is_current_stream(mod, kw.value):
                    out.append((node.lineno, "launches with an explicit stream= argument"))
    return sorted(set(out))


def _is_current_stream(mod: PyModule, node) -> bool:
    if isinstance(node, ast.Constant) and node.value is None:
        return True
    if isinstance(node, ast.Call):
        return (mod.resolve(node.func) or "") == "torch.cuda.current_stream"
    return False


# ---- C only: threads, dynamic code ------------------------------------------
# (a Python candidate cannot import threading, importlib or ctypes: the allow-list)

@guard("no_threads")
def no_threads(src: Source) -> list[Finding]:
    """The work must be finished when the kernel returns: no threads or processes left running."""
    if src.language != "c":
        return []
    return csrc.matches(src.c_code, r"\b(pthread_create|thrd_create|fork|vfork|std::thread|"
                        r"std::async|popen|system|clone)\s*\(", "starts a thread or process: {}")


@guard("no_dynamic_code")
def no_dynamic_code(src: Source) -> list[Finding]:
    """No code loaded at run time, no inline assembly, no reaching into the call stack."""
    if src.language != "c":
        return []
    code = src.c_code
    out = csrc.matches(code, r"\b(dlopen|dlsym|dlmopen|dlvsym)\s*\(", "loads code at run time: {}")
    out += csrc.matches(code, r"\b(asm|__asm__|__asm)\b",
                        "inline assembly ({}): a system call needs no symbol")
    out += csrc.matches(code, r"\b(__builtin_(?:frame_address|return_address|"
                        r"extract_return_addr|apply\w*|return|longjmp|setjmp|eh_return\w*|"
                        r"dwarf_cfa|unwind_init))\b", "reaches into the call stack: {}")
    return sorted(set(out))


# ---- guard: no state between calls -----------------------------------------

MUTATING_METHODS = {"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update",
                    "setdefault", "add", "discard", "copy_", "fill_", "zero_",
                    "put_", "index_put_", "appendleft", "put"}
MUTABLE_CALLS = ("list", "dict", "set", "bytearray")


@guard("no_state")
def no_state(src: Source) -> list[Finding]:
    """The kernel may not keep state between calls (an answer cached by shape or pointer)."""
    if src.language == "c":
        return sorted(set(csrc.mutable_state(src.c_code))) + cobj.state_findings(src.c_object)
    mod = src.module
    out = []
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Global):
            out.append((node.lineno, f"declares global {', '.join(node.names)}"))
        elif isinstance(node, ast.Nonlocal):
            out.append((node.lineno, f"declares nonlocal {', '.join(node.names)}"))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.append((node.lineno, f"assigns attribute {rules._show(node)} (an attribute "
                                     f"outlives the call; write into tensors only)"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for d in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                if isinstance(d, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp)) or \
                        (isinstance(d, ast.Call) and isinstance(d.func, ast.Name)
                         and d.func.id in MUTABLE_CALLS):
                    out.append((node.lineno, "a mutable default argument (state between calls)"))
    local: dict[int, set[str]] = {}
    for f, node in pysrc.enclosing_functions(mod):
        if id(f) not in local:
            local[id(f)] = pysrc.locals_of(f)
        out += _mutates_module_state(mod, local[id(f)], node)
    return sorted(set(out))


def _mutates_module_state(mod: PyModule, local: set[str], node) -> list[Finding]:
    """Inside a function: stores into, or mutating calls on, something bound at module level."""

    def module_level(expr) -> str | None:
        root = pysrc.root_name(expr)
        return root if root and root in mod.module_names and root not in local else None

    targets = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Delete):
        targets = node.targets
    for t in targets:
        for sub in ast.walk(t):
            if isinstance(sub, (ast.Attribute, ast.Subscript)) and module_level(sub):
                return [(node.lineno, f"writes into module-level '{module_level(sub)}' "
                                      f"(state kept between calls)")]
    if isinstance(node, ast.Call):
        fn = node.func
        if isinstance(fn, ast.Attribute) and fn.attr in MUTATING_METHODS and module_level(fn.value):
            return [(node.lineno, f"mutates module-level '{module_level(fn.value)}' with "
                                  f".{fn.attr}() (state kept between calls)")]
        if isinstance(fn, ast.Name) and fn.id in ("setattr", "delattr") and node.args \
                and module_level(node.args[0]):
            return [(node.lineno, f"{fn.id} on module-level '{module_level(node.args[0])}'")]
        for kw in node.keywords:
            if kw.arg == "out" and module_level(kw.value):
                return [(node.lineno, f"writes into module-level '{module_level(kw.value)}' "
                                      f"through out=")]
    return []
