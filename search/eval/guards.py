"""Static integrity guards: named checks a candidate's source must pass before it runs.

Each guard is one small function from a ``Source`` to a list of ``(line, message)``
findings, registered in ``GUARDS`` under its name. A guard reads Python source
through ``ast`` and C source as text (comments and literals stripped); it never
imports or runs the candidate. ``check`` runs every guard that applies to a
backend: the torch backend is exempt from ``no_torch_compute`` (it IS torch),
never from the others.

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

from . import c_source as csrc
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

    @cached_property
    def module(self) -> "PyModule | None":
        if self.language != "python":
            return None
        return PyModule(ast.parse(self.text))

    @cached_property
    def c_code(self) -> str:
        return csrc.strip_c(self.text)


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
    src = Source(source, language)
    if language == "python":
        try:
            src.module  # noqa: B018 - parse once, up front
        except SyntaxError as e:
            return [Violation("parse", e.lineno or 0, f"source does not parse: {e.msg}")]
    out = []
    for g in applicable(backend):
        out += [Violation(g.name, line, msg) for line, msg in g.check(src)]
    return out


def _imported(mod: PyModule) -> list[tuple[int, str]]:
    """(line, dotted name) of everything imported: modules, and names from modules."""
    out = []
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out += [(node.lineno, node.module)]
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names if a.name != "*"]
    return out


def _imports(mod: PyModule, roots) -> list[Finding]:
    return [(line, f"imports {path}") for line, path in _imported(mod) if under(path, roots)]


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
    "__len__", "__dlpack__", "pin_memory",
}

TORCH_ALLOWED = {
    "torch", "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros",
    "torch.zeros_like", "torch.ones", "torch.ones_like", "torch.full", "torch.full_like",
    "torch.arange", "torch.tensor", "torch.as_tensor", "torch.from_numpy", "torch.device",
    "torch.dtype", "torch.Size", "torch.Tensor", "torch.finfo", "torch.iinfo", "torch.is_tensor",
    "torch.is_floating_point", "torch.get_default_dtype", "torch.no_grad", "torch.inference_mode",
    "torch.numel", "torch.cuda", "torch.version", "torch.backends", "torch.utils.dlpack",
    "torch.from_dlpack", "torch.float32", "torch.float", "torch.float16", "torch.half",
    "torch.bfloat16", "torch.float64", "torch.double", "torch.int8", "torch.uint8", "torch.int16",
    "torch.short", "torch.int32", "torch.int", "torch.int64", "torch.long", "torch.bool",
    "torch.float8_e4m3fn", "torch.float8_e5m2", "torch.uint16", "torch.uint32", "torch.uint64",
}
TORCH_ALLOWED_UNDER = ("torch.cuda", "torch.version", "torch.backends", "torch.utils.dlpack")
TORCH_BANNED_UNDER = ("torch.cuda.jiterator", "torch.cuda.comm", "torch.cuda.nccl")
# kdsl's own torch compositions: the baseline's building blocks, torch by another name
KDSL_TORCH = ("kdsl.torch_ops", "kdsl.backends.array.torch_runtime", "kdsl.backends.array.torch_backend")


def torch_path_allowed(path: str) -> bool:
    if under(path, TORCH_BANNED_UNDER):
        return False
    return path in TORCH_ALLOWED or under(path, TORCH_ALLOWED_UNDER)


@guard("no_torch_compute", exempt=("torch",))
def no_torch_compute(src: Source) -> list[Finding]:
    """The candidate may not have torch (the baseline library) do the computation."""
    if src.language == "c":
        return csrc.calls_into_python(src.c_code)
    mod = src.module
    out = [(line, f"star import from {m}") for line, m in mod.star_imports
           if m.split(".")[0] == "torch"]
    for line, path in _imported(mod):
        if "." in path and ((under(path, ("torch",)) and not torch_path_allowed(path)) or
                            under(path, KDSL_TORCH)):
            out.append((line, f"imports {path}"))
    for node, path in mod.references():
        if (under(path, ("torch",)) and not torch_path_allowed(path)) or under(path, KDSL_TORCH):
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


# ---- guard: no threads -----------------------------------------------------

THREAD_MODULES = ("threading", "_thread", "concurrent", "multiprocessing", "asyncio",
                  "subprocess", "signal")
THREAD_CALLS = THREAD_MODULES + ("os.fork", "os.forkpty", "os.spawnv", "os.spawnl", "os.system",
                                 "os.popen", "os.posix_spawn", "os.execv", "os.execl")


@guard("no_threads")
def no_threads(src: Source) -> list[Finding]:
    """The work must be finished when the kernel returns: no threads or processes left running."""
    if src.language == "c":
        return csrc.matches(src.c_code, r"\b(pthread_create|thrd_create|fork|vfork|std::thread|"
                            r"std::async|popen|system|clone)\s*\(",
                            "starts a thread or process: {}")
    mod = src.module
    out = [(node.lineno, f"uses {path}") for node, path in mod.references()
           if under(path, THREAD_CALLS)]
    return sorted(set(out + _imports(mod, THREAD_MODULES)))


# ---- guard: no state between calls -----------------------------------------

MUTATING_METHODS = {"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update",
                    "setdefault", "add", "discard", "__setitem__", "copy_", "fill_", "zero_",
                    "put_", "index_put_", "appendleft", "put"}
CACHES = ("functools.cache", "functools.lru_cache", "functools.cached_property")
MUTABLE_CALLS = ("list", "dict", "set", "bytearray")


@guard("no_state")
def no_state(src: Source) -> list[Finding]:
    """The kernel may not keep state between calls (an answer cached by shape or pointer)."""
    if src.language == "c":
        return csrc.mutable_state(src.c_code)
    mod = src.module
    out = []
    for node, path in mod.references():
        if under(path, CACHES):
            out.append((node.lineno, f"uses {path} (a cache kept between calls)"))
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Global):
            out.append((node.lineno, f"declares global {', '.join(node.names)}"))
        elif isinstance(node, ast.Nonlocal):
            out.append((node.lineno, f"declares nonlocal {', '.join(node.names)}"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for d in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                if isinstance(d, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp)) or \
                        (isinstance(d, ast.Call) and isinstance(d.func, ast.Name)
                         and d.func.id in MUTABLE_CALLS):
                    out.append((node.lineno, "a mutable default argument (state between calls)"))
    for f, node in pysrc.enclosing_functions(mod):
        out += _mutates_module_state(mod, f, node)
    return sorted(set(out))


def _mutates_module_state(mod: PyModule, f, node) -> list[Finding]:
    """Inside a function: stores into, or mutating calls on, something bound at module level."""
    local = pysrc.locals_of(f)

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


# ---- guard: no oracle ------------------------------------------------------

ORACLE = ("kdsl.reference", "kdsl.baseline", "kdsl.agreement", "kdsl.cases", "kdsl.compare",
          "kdsl.search")


@guard("no_oracle")
def no_oracle(src: Source) -> list[Finding]:
    """The candidate may not call the evaluator's own answers: the reference, baseline, cases."""
    if src.language == "c":
        return []
    mod = src.module
    out = [(node.lineno, f"uses {path}") for node, path in mod.references() if under(path, ORACLE)]
    return sorted(set(out + _imports(mod, ORACLE)))


# ---- guard: no dynamic code ------------------------------------------------

DYNAMIC_BUILTINS = {"eval", "exec", "compile", "__import__", "globals", "vars", "locals",
                    "breakpoint"}
DYNAMIC_PATHS = ("importlib", "gc", "inspect", "sys._getframe", "sys.modules", "builtins",
                 "sys.settrace", "sys.setprofile", "torch.utils.cpp_extension", "ctypes.pythonapi",
                 "runpy", "code", "pickle", "marshal")


@guard("no_dynamic_code")
def no_dynamic_code(src: Source) -> list[Finding]:
    """No code built at run time or fetched by introspection, which would hide the other checks."""
    if src.language == "c":
        return csrc.matches(src.c_code, r"\b(dlopen|dlsym|dlmopen)\s*\(",
                            "loads code at run time: {}")
    mod = src.module
    out = []
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in DYNAMIC_BUILTINS and node.func.id not in mod.aliases:
            out.append((node.lineno, f"calls {node.func.id}()"))
    for node, path in mod.references():
        if under(path, DYNAMIC_PATHS):
            out.append((node.lineno, f"uses {path}"))
    return sorted(set(out + _imports(mod, DYNAMIC_PATHS)))


