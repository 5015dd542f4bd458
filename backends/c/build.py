"""Compiling C kernels into shared objects, caching them, calling them on tensors.

The cache key hashes the compiler's identity, the flags and the source, so a
cached object is reused only for the exact same build. Objects are written under
a temporary name and renamed into place, so concurrent builds of one source in
several workers never see a half-written file.

Torch is imported before any kernel is loaded: its bundled ``libgomp.so.1`` then
satisfies the kernel's OpenMP dependency by soname, so the kernel and torch share
one OpenMP runtime (and one thread pool) instead of spinning against each other.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
import time
from pathlib import Path

from kdsl import dtypes, ir

from kdsl.backends.base import BuildError, Built

COMPILER = "cc"
# -fno-tree-pre: GCC 12's partial-redundancy elimination rewrites a chain of the prelude's
# exp and log (softplus' log(1 + exp(x))) into a form its vectorizer refuses ("no vectype"),
# leaving the loop scalar; without it the chain vectorizes like exp or log alone
CFLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
          "-fno-math-errno", "-fno-trapping-math", "-fno-tree-pre")


def cache_dir() -> Path:
    root = os.environ.get("KDSL_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "kdsl"
    return base / "c"


@functools.lru_cache(maxsize=1)
def compiler_identity() -> str:
    try:
        out = subprocess.run([COMPILER, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.splitlines()[0] if out.stdout else COMPILER
    except (OSError, subprocess.SubprocessError) as e:
        return f"{COMPILER}: unavailable ({e})"


@functools.lru_cache(maxsize=1)
def native_macros() -> frozenset[str]:
    """The macros the compiler defines for this machine (``-march=native``): its ISA
    extensions (``__AVX512F__``), for defaults that depend on the vector registers."""
    try:
        out = subprocess.run([COMPILER, "-march=native", "-dM", "-E", "-x", "c", os.devnull],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(line.split()[1] for line in out.stdout.splitlines()
                     if line.startswith("#define ") and len(line.split()) > 1)


def build_key(source: str, flags: tuple[str, ...] = CFLAGS) -> str:
    blob = "\0".join([compiler_identity(), *flags, source])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


# None: the cache folder is trusted (tools, tests). In a candidate's process the judge sets
# it to {build key: sha256} of the shared objects it linked itself; any other file in the
# folder may have been put there by another candidate (the same user writes it), so it is
# neither loaded nor written, and the build compiles into a folder of this process's own.
CACHE_TRUST: dict[str, str] | None = None


def private_dir(pid: int | None = None) -> Path:
    """The folder a candidate's process builds in (removed by the judge with the process)."""
    return Path(tempfile.gettempdir()) / f"kdsl-candidate-{pid or os.getpid()}"


def compile_source(source: str, flags: tuple[str, ...] = CFLAGS) -> tuple[Path, dict]:
    """The shared object for ``source`` (cached), and what the build did."""
    key = build_key(source, flags)
    trusted = CACHE_TRUST is None
    out_dir = cache_dir() if trusted else private_dir()
    so = cache_dir() / f"{key}.so"
    meta = {"cflags": [COMPILER, *flags], "compiler": compiler_identity(), "key": key,
            "path": str(so)}
    if trusted and so.exists():
        return so, {**meta, "cached": True, "compile_s": 0.0}
    if not trusted and CACHE_TRUST.get(key):
        copy = _verified_copy(so, CACHE_TRUST[key], out_dir / f"{key}.so")
        if copy is not None:
            return copy, {**meta, "path": str(copy), "cached": True, "compile_s": 0.0}
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
        src = Path(tmp) / f"{key}.c"
        src.write_text(source)
        obj = Path(tmp) / f"{key}.so"
        start = time.perf_counter()
        try:
            proc = subprocess.run([COMPILER, *flags, str(src), "-o", str(obj), "-lm"],
                                  capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as e:
            raise BuildError(f"could not run {COMPILER}: {e}", str(e)) from None
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            log = proc.stderr + proc.stdout
            first = next((ln for ln in log.splitlines() if "error" in ln), log[:200])
            raise BuildError(f"{COMPILER} failed: {first.strip()}", log)
        (out_dir / f"{key}.c").write_text(source)
        so = out_dir / f"{key}.so"
        os.replace(obj, so)
    return so, {**meta, "path": str(so), "cached": False, "compile_s": round(elapsed, 3),
                "log": proc.stderr}


def _verified_copy(so: Path, sha256: str, to: Path) -> Path | None:
    """A private copy of ``so`` if its bytes have the digest the judge recorded, else None;
    the copy is what gets loaded, so the shared file changing afterwards changes nothing."""
    try:
        data = so.read_bytes()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != sha256:
        return None
    to.parent.mkdir(parents=True, exist_ok=True)
    to.write_bytes(data)
    return to


_TORCH_NAMES = {v: k for k, v in dtypes.TORCH.items()}
_EMPTY: dict[int, object] = {}


def _empty_buffer(nbytes: int):
    """A zeroed buffer standing in for an empty tensor (clamped reads may touch it)."""
    import torch
    if nbytes not in _EMPTY:
        _EMPTY[nbytes] = torch.zeros(max(nbytes, 64), dtype=torch.uint8)
    return _EMPTY[nbytes]


def load(op: ir.Op, path: Path, meta: dict) -> Built:
    import torch  # noqa: F401  (shares its OpenMP runtime; see the module docstring)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise BuildError(f"cannot load {path}: {e}", str(e)) from None
    fns = {}
    for dt in op.dtype_choices:
        fn = getattr(lib, f"kdsl_{dt}")
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p], None
        fns[dt] = fn
    chooser = op.type_variable_input()
    tensors = [(t.name, "in") for t in op.inputs] + [(t.name, "out") for t in op.outputs]
    dims = op.dims

    def kernel(inputs: dict, outputs: dict, sizes: dict) -> None:
        if chooser is None:
            dt = op.dtype_choices[0]
        else:
            dt = _TORCH_NAMES.get(str(inputs[chooser].dtype).replace("torch.", ""), "?")
        fn = fns.get(dt)
        if fn is None:
            raise TypeError(f"{op.name}: no kernel for dtype {dt}")
        keep = []
        ptrs = (ctypes.c_void_p * len(tensors))()
        for n, (name, role) in enumerate(tensors):
            t = (inputs if role == "in" else outputs)[name]
            want = dtypes.TORCH[op.dtype_of(name, dt)]
            if t.device.type != "cpu" or str(t.dtype) != f"torch.{want}":
                raise TypeError(f"{op.name}: '{name}' must be a CPU {want} tensor, "
                                f"got {t.dtype} on {t.device}")
            if not t.is_contiguous():
                if role == "out":
                    raise ValueError(f"{op.name}: output '{name}' must be contiguous")
                t = t.contiguous()
            if t.numel() == 0:
                rows = 1
                for s in t.shape:
                    rows *= max(int(s), 1)
                t = _empty_buffer(rows * t.element_size())
            keep.append(t)
            ptrs[n] = t.data_ptr()
        values = (ctypes.c_int64 * max(len(dims), 1))(*[int(sizes[d]) for d in dims])
        fn(ptrs, values)

    return Built(kernel, meta.get("log", ""), meta)
