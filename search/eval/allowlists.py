"""What a Python candidate may import and name, per backend: allow-lists, as data.

A profile maps each importable module to the dotted names a candidate may use
from it. Names come from three places: short lists written here (Triton's launch
helpers, torch's allocation and device queries), the libraries' own vocabularies
read once in the judge (``triton.language``'s functions, numpy's ufuncs and dtypes,
torch's tensor functions for the torch backend, never their submodules), and the
public functions of the kdsl runtime modules the generators import (read from
their source with ``ast``). Everything else is refused.

torch names in a non-torch profile are judged by the ``no_torch_compute`` guard
(its plumbing list is here: ``TORCH_PLUMBING``), so one finding says it once.
"""
from __future__ import annotations

import ast
import builtins
import enum
import functools
import importlib
import importlib.util
import threading
import types
from dataclasses import dataclass

# ---- builtins ---------------------------------------------------------------

BUILTINS = frozenset({
    "abs", "all", "any", "bool", "callable", "chr", "dict", "divmod", "enumerate", "filter",
    "float", "format", "frozenset", "int", "isinstance", "iter", "len", "list", "map", "max",
    "min", "next", "ord", "pow", "range", "repr", "reversed", "round", "set", "slice", "sorted",
    "str", "sum", "tuple", "zip", "Ellipsis", "NotImplemented",
    "ArithmeticError", "AssertionError", "Exception", "IndexError", "KeyError",
    "NotImplementedError", "OverflowError", "RuntimeError", "StopIteration", "TypeError",
    "ValueError", "ZeroDivisionError",
})
# getattr/hasattr only with a literal attribute name: the same as writing ``x.name``
LITERAL_ATTR_BUILTINS = frozenset({"getattr", "hasattr"})
ALL_BUILTINS = frozenset(n for n in dir(builtins) if not n.startswith("__"))

# Attributes that reach frames, code, globals or raw memory (any name starting with
# '_' is refused as well, dunders included).
INTROSPECTION_ATTRS = frozenset({
    "tb_frame", "tb_next", "tb_lasti", "tb_lineno", "f_back", "f_builtins", "f_code",
    "f_globals", "f_locals", "f_lasti", "f_lineno", "f_trace", "f_trace_lines",
    "f_trace_opcodes", "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "gi_suspended",
    "cr_frame", "cr_code", "cr_await", "cr_origin", "ag_frame", "ag_code", "ag_await",
    "co_code", "co_consts", "co_names", "co_varnames", "func_globals", "func_code",
    "func_closure", "cell_contents", "ctypes", "tofile", "dump", "dumps",
})

# Decorators a function may carry (the Triton compiler's own).
DECORATORS = ("triton.jit", "triton.autotune", "triton.heuristics")
# Calls a module-level constant may make: constructors of compile-time values.
CONSTANT_CALLS = ("triton.language.constexpr", "triton.Config", "os.environ.get",
                  "torch.compile", "torch.device")
CONSTANT_BUILTINS = frozenset({"bool", "int", "float", "str", "tuple", "frozenset", "len",
                               "min", "max", "abs", "range", "sorted", "dict", "list"})
STR_METHODS = frozenset({"lower", "upper", "strip", "format", "join", "split"})

# ---- modules ----------------------------------------------------------------

MATH = frozenset(n for n in dir(__import__("math")) if not n.startswith("_"))
OS = frozenset({"environ.get"})  # reading a variable (Triton's interpreter switch); no writes

TORCH_PLUMBING = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "tensor", "as_tensor", "from_numpy", "device", "dtype", "Size",
    "Tensor", "finfo", "iinfo", "is_tensor", "is_floating_point", "get_default_dtype",
    "no_grad", "inference_mode", "numel", "from_dlpack", "float32", "float", "float16", "half",
    "bfloat16", "float64", "double", "int8", "uint8", "int16", "short", "int32", "int", "int64",
    "long", "bool", "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64",
    "version.hip", "version.cuda", "version.git_version", "utils.dlpack.from_dlpack",
    "utils.dlpack.to_dlpack", "cuda.is_available", "cuda.device_count", "cuda.current_device",
    "cuda.current_stream", "cuda.get_device_properties", "cuda.get_device_capability",
    "cuda.get_device_name", "cuda.synchronize", "cuda.device",
})
TORCH_MODULES = ("torch.nn.functional", "torch.linalg", "torch.special", "torch.fft")
TORCH_REFUSED = frozenset({"from_file", "frombuffer", "set_num_threads", "load", "save"})

TRITON = frozenset({"jit", "autotune", "heuristics", "Config", "cdiv", "next_power_of_2"})
NUMPY_FUNCTIONS = frozenset({
    "errstate", "empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "linspace", "array", "asarray", "ascontiguousarray", "copy", "copyto",
    "reshape", "ravel", "transpose", "swapaxes", "moveaxis", "expand_dims", "squeeze",
    "broadcast_to", "broadcast_arrays", "broadcast_shapes", "concatenate", "stack", "hstack",
    "vstack", "split", "array_split", "take", "take_along_axis", "put_along_axis", "where",
    "clip", "sort", "argsort", "partition", "argpartition", "lexsort", "cumsum", "cumprod",
    "sum", "prod", "mean", "var", "std", "max", "min", "amax", "amin", "argmax", "argmin",
    "dot", "matmul", "einsum", "tensordot", "inner", "outer", "searchsorted", "bincount",
    "unique", "diff", "pad", "tril", "triu", "tril_indices", "triu_indices", "flip", "roll",
    "repeat", "tile", "indices", "ix_", "meshgrid", "nonzero", "flatnonzero", "count_nonzero",
    "any", "all", "nan_to_num", "nansum", "nanmax", "nanmin", "finfo", "iinfo", "dtype",
    "ndarray", "result_type", "promote_types", "can_cast", "shape", "ndim", "size", "round",
    "around", "select", "interp", "digitize", "average", "median", "quantile", "percentile",
    "convolve", "correlate", "inf", "nan", "pi", "e", "newaxis", "euler_gamma",
})

# kdsl's own torch compositions: the baseline's building blocks, torch by another name
KDSL_TORCH = ("kdsl.torch_ops", "kdsl.backends.array.torch_runtime",
              "kdsl.backends.array.torch_backend")


def _public(module) -> frozenset[str]:
    """A library module's public names that are not modules (no way out through them)."""
    return frozenset(n for n in dir(module) if not n.startswith("_")
                     and not isinstance(getattr(module, n, None), types.ModuleType))


# CPython 3.11's ast.parse is not safe in two threads at once (its AST state counts
# recursion depth across threads: "AST constructor recursion depth mismatch" when the
# guards of many sources were checked on a thread pool), so every parse here takes this lock
PARSE_LOCK = threading.Lock()


def parse(text: str) -> ast.Module:
    with PARSE_LOCK:
        return ast.parse(text)


@functools.cache
def runtime_names(module: str) -> frozenset[str]:
    """Public functions a kdsl runtime module defines or re-exports, read from its source."""
    spec = importlib.util.find_spec(module)
    tree = parse(open(spec.origin).read())
    out = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            out |= {a.asname or a.name for a in node.names}
    return frozenset(n for n in out if not n.startswith("_"))


@functools.cache
def triton_language() -> frozenset[str]:
    import triton.language as tl
    from triton.language.extra import libdevice
    names = set(_public(tl)) | {f"math.{n}" for n in _public(tl.math)}
    names |= {f"extra.libdevice.{n}" for n in _public(libdevice)}
    return frozenset(names | {"PropagateNan.ALL", "PropagateNan.NONE"})


@functools.cache
def numpy_names() -> frozenset[str]:
    import numpy as np
    out = set(NUMPY_FUNCTIONS)
    for n in dir(np):
        v = getattr(np, n, None)
        if n.startswith("_"):
            continue
        if isinstance(v, np.ufunc) or (isinstance(v, type) and issubclass(v, np.generic)):
            out.add(n)
    return frozenset(out)


@functools.cache
def torch_compute() -> frozenset[str]:
    """The torch backend's vocabulary: tensor functions, F.*, linalg/special/fft functions."""
    import torch
    out = {n for n in dir(torch._C._VariableFunctions) if not n.startswith("_")}
    out |= {"compile", "no_grad", "inference_mode", "nn.functional"}
    for m in TORCH_MODULES:
        mod = importlib.import_module(m)
        sub = m[len("torch."):]
        out |= {f"{sub}.{n}" for n in _public(mod)
                if callable(getattr(mod, n)) and not isinstance(getattr(mod, n), type)}
    # the same operators by their ATen names (``torch.ops.aten.mul.Tensor``, what an
    # imported module's baseline replays): each name torch or F exposes, any overload
    out -= TORCH_REFUSED
    out |= {f"ops.aten.{n.rpartition('.')[2]}" for n in out
            if n.rpartition(".")[0] in ("", "nn.functional")}
    return frozenset((out | TORCH_PLUMBING) - TORCH_REFUSED)


# ---- profiles -----------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Profile:
    """A backend's allow-list: importable modules, and the names allowed under each."""
    name: str
    modules: dict  # module path -> a zero-argument function giving its allowed names
    torch_computes: bool = False  # the torch backend: torch names are its own vocabulary

    def names(self, module: str) -> frozenset[str]:
        return _names(self, module)

    def allowed(self, path: str) -> bool:
        """Whether dotted ``path`` (an import or a reference) is on this allow-list."""
        for mod in sorted(self.modules, key=len, reverse=True):
            if path == mod:
                return True
            if path.startswith(mod + "."):
                # past an allowed name, the rest is attribute access on a value; but past a
                # class it is an unbound method (``torch.Tensor.softmax(x, -1)`` is torch
                # computing), so a class ends the path. Longest name first: a constant the
                # list names in full (``PropagateNan.ALL``) is allowed whatever its class
                # is in this Triton (an Enum in one release, a plain class in another)
                parts, names = path[len(mod) + 1:].split("."), self.names(mod)
                for i in range(len(parts), 0, -1):
                    name = ".".join(parts[:i])
                    if name in names:
                        return i == len(parts) or not _is_class(mod, name)
                return False
        return False

    def importable(self) -> list[str]:
        return sorted(self.modules)


@functools.cache
def _is_class(module: str, dotted: str) -> bool:
    """Whether ``module.dotted`` is a class whose attributes are unbound methods (an enum's
    are its constants: ``tl.PropagateNan.ALL``)."""
    try:
        obj = importlib.import_module(module)
        for part in dotted.split("."):
            obj = getattr(obj, part)
    except Exception:  # noqa: BLE001 - not importable here: judged as a value, as before
        return False
    return isinstance(obj, type) and not issubclass(obj, enum.Enum)


@functools.cache
def _names(prof: Profile, module: str) -> frozenset[str]:
    return frozenset(prof.modules[module]())


def _torch_names():
    return TORCH_PLUMBING


_COMMON = {"math": lambda: MATH, "os": lambda: OS, "torch": _torch_names}
_TRITON = {**_COMMON, "triton": lambda: TRITON | {"language"},
           "triton.language": triton_language,
           "triton.language.extra": lambda: frozenset({"libdevice"}),
           "triton.language.extra.libdevice":
               lambda: frozenset(n.split(".", 2)[2] for n in triton_language()
                                 if n.startswith("extra.libdevice.")),
           "triton.tools.tensor_descriptor": lambda: frozenset({"TensorDescriptor"})}
_NUMPY = {**_COMMON, "numpy": numpy_names,
          "kdsl.backends.array.numpy_runtime":
              lambda: runtime_names("kdsl.backends.array.numpy_runtime")}
_TORCH = {**_COMMON, "torch": torch_compute,
          **{m: (lambda m=m: frozenset(n[len(m) - 5:] for n in torch_compute()
                                       if n.startswith(m[len("torch."):] + ".")))
             for m in TORCH_MODULES},
          "kdsl.torch_ops": lambda: runtime_names("kdsl.torch_ops"),
          "kdsl.backends.array.torch_runtime":
              lambda: runtime_names("kdsl.backends.array.torch_runtime")}

PROFILES = {"triton": Profile("triton", _TRITON), "numpy": Profile("numpy", _NUMPY),
            "torch": Profile("torch", _TORCH, torch_computes=True)}


def profile(backend: str) -> Profile:
    """The allow-list for ``backend``: its own, Triton's for triton variants, else numpy's."""
    if backend in PROFILES:
        return PROFILES[backend]
    if backend.startswith("triton"):
        return PROFILES["triton"]
    return PROFILES["numpy"]
