"""Static compilation of a rendered Triton module, on any machine (no GPU needed).

``compile_for(source, target)`` runs the module's ``kernel()`` on meta tensors
of its example sizes (``EXAMPLES``) with every ``@triton.jit`` kernel swapped for a recorder,
so the launches the module would make (kernel, constexprs, warps, stages) are
known; each is then compiled with ``triton.compile(ASTSource(...), target)``.
Register and spill counts come from the binary, as the driver would report
them: ``cuobjdump -res-usage`` on the cubin (spills = local bytes / 4, as
Triton's ``n_spills``), the AMDGPU metadata in the assembly for HIP.

Run it in a process without ``TRITON_INTERPRET=1`` (interpreted kernels cannot
be compiled).
"""
from __future__ import annotations

import hashlib
import linecache
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from kdsl.backends.frozen import freeze_module

CUDA_H100 = ("cuda", 90, 32)
HIP_MI300 = ("hip", "gfx942", 64)
TORCH_TO_TRITON = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
                   "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8",
                   "uint8": "u8", "bool": "i1"}


def target(backend: str, arch, warp_size: int):
    from triton.backends.compiler import GPUTarget
    return GPUTarget(backend, arch, warp_size)


def example_for(op, dtype: str | None = None) -> dict:
    """Sizes, dtype and tensor shapes of an op's first GPU bench point (``dtype`` overrides)."""
    # the point the timing stage picks: the one declared for cuda, else the one for every
    # device (else the first, for the static reports of a CPU-only spec)
    p = next((p for want in ("cuda", None) for p in op.bench if p.device == want), op.bench[0])
    return example_at(op, p.size_dict(), dtype or p.dtype or op.dtype_choices[0])


def example_at(op, sizes: dict, dtype: str) -> dict:
    """The launch example of ``op`` at ``sizes`` in ``dtype``: sizes and tensor shapes."""
    from kdsl import dtypes
    from kdsl.sizes import shape_of
    return {"sizes": dict(sizes), "dtype": dtype,
            "tensors": {t.name: {"role": t.role, "shape": list(shape_of(op, t.name, sizes)),
                                 "dtype": dtypes.TORCH[op.dtype_of(t.name, dtype)]}
                        for t in op.tensors if t.role in ("in", "out")}}


def load_module(source: str, tag: str = "kernel"):
    """``source`` as a module whose functions Triton can read back through ``inspect``.

    The code is compiled from ``source`` in memory, and ``inspect`` reads the same text
    from ``linecache``: never from a file or a cached bytecode file that another candidate
    process, writing to the same folder, could have replaced. The file is still written
    (under the name the code carries) for tools that open it."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "kdsl-triton"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"kdsl_triton_{re.sub(r'[^0-9A-Za-z_]', '_', tag)}_{digest}"
    path = folder / f"{name}.py"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(source)
    os.replace(tmp, path)
    linecache.cache[str(path)] = (len(source), None, source.splitlines(True), str(path))
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod  # (inspect finds a function's module by name)
    exec(compile(source, str(path), "exec"), vars(mod))  # noqa: S102 - guarded source
    return freeze_module(mod)


class _Recorder:
    def __init__(self, fn, calls: list):
        self.fn, self.calls = fn, calls

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((self.fn, grid, args, kwargs))
        return launch


FALLBACK_KNOBS = ("ONEPASS_MAX", "UNROLL_MAX")  # module-level limits past which a launcher
# takes its looped fallback kernel


def launches(source: str, examples: list[dict] | None = None, namespace: dict | None = None,
             fallbacks: bool = True) -> list[tuple]:
    """(jit function, grid, args, kwargs) of each launch ``kernel()`` makes on the examples
    (the module's ``EXAMPLES`` by default), in ``namespace`` (a loaded module's, whose jit
    functions are then the ones recorded) or a fresh load of ``source``. With
    ``fallbacks``, a module with ``ONEPASS_MAX`` or ``UNROLL_MAX`` knobs is run again with
    them at 0, so its fallback kernels are launched too."""
    import torch
    from triton.runtime.jit import JITFunction
    ns = namespace if namespace is not None else vars(load_module(source))
    examples = examples or ns.get("EXAMPLES")
    if not examples or any("tensors" not in e for e in examples):
        raise ValueError("no example sizes: pass examples=[example_for(op)]")
    jitted = {k: v for k, v in ns.items() if isinstance(v, JITFunction)}
    if not jitted and any(type(v).__name__ == "InterpretedFunction" for v in ns.values()):
        raise RuntimeError("TRITON_INTERPRET=1 is set: kernels are interpreted, not compiled")
    calls: list = []
    off = {k: 0 for k in FALLBACK_KNOBS if k in ns}
    knobs = [{}] + ([off] if fallbacks and off else [])
    saved = {k: ns[k] for knob in knobs for k in knob}
    ns.update({k: _Recorder(v, calls) for k, v in jitted.items()})
    try:
        for example in examples:
            for knob in knobs:
                ns.update(saved)
                ns.update(knob)
                inputs, outputs = {}, {}
                for name, t in example["tensors"].items():
                    tensor = torch.empty(t["shape"], dtype=getattr(torch, t["dtype"]),
                                         device="meta")
                    (inputs if t["role"] == "in" else outputs)[name] = tensor
                ns["kernel"](inputs, outputs, dict(example["sizes"]))
    finally:
        ns.update(jitted)  # kernels resolve their helpers through these globals
        ns.update(saved)
    return calls


def _signature(fn, args, kwargs):
    import torch
    bound = dict(zip(fn.arg_names, args))
    bound.update({k: v for k, v in kwargs.items() if k in fn.arg_names})
    options = {k: v for k, v in kwargs.items() if k not in fn.arg_names}
    signature, constexprs, attrs = {}, {}, {}
    for i, (name, param) in enumerate(zip(fn.arg_names, fn.params)):
        value = bound[name]
        if param.is_constexpr:
            signature[name], constexprs[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + TORCH_TO_TRITON[str(value.dtype).removeprefix("torch.")]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif type(value).__name__ == "TensorDescriptor":
            dt = TORCH_TO_TRITON[str(value.base.dtype).removeprefix("torch.")]
            signature[name] = f"tensordesc<{dt}{list(value.block_shape)}>"
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            if value == 1:  # the JIT specializes ints equal to 1 as constants
                signature[name], constexprs[name] = "constexpr", 1
                continue
            signature[name] = "i32" if -2**31 <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        elif value is None:
            signature[name], constexprs[name] = "constexpr", None
        else:
            raise TypeError(f"argument {name}: cannot type {type(value).__name__}")
    return signature, constexprs, attrs, options


def compile_for(source: str, tgt, examples: list[dict] | None = None,
                asm: tuple[str, ...] = ()) -> dict:
    """{kernel name: {n_regs, n_spills, shared, num_warps, num_stages, constexprs}} on ``tgt``.

    ``tgt`` is a GPUTarget or a tuple such as ``CUDA_H100`` / ``HIP_MI300``; ``asm`` names
    compiler stages ('ttgir', 'ptx', ...) whose text each kernel's entry keeps under 'asm'.
    """
    import triton
    from triton.compiler import ASTSource
    if isinstance(tgt, tuple):
        tgt = target(*tgt)
    out = {}
    ns = vars(load_module(source))
    if "COPY_ENGINE" in ns:  # a contraction's TMA loads, on NVIDIA from sm_90 on
        ns["COPY_ENGINE"] = tgt.backend == "cuda" and int(tgt.arch) >= 90
    for fn, _grid, args, kwargs in launches(source, examples, namespace=ns):
        if fn.__name__ in out:
            continue
        signature, constexprs, attrs, options = _signature(fn, args, kwargs)
        if "_KD_PTX" in fn.__globals__:  # helpers' inline PTX is for NVIDIA targets only
            import triton.language as tl
            fn.__globals__["_KD_PTX"] = tl.constexpr(tgt.backend == "cuda")
        kept = ("num_warps", "num_stages") + (("maxnreg",) if tgt.backend == "cuda" else ())
        options = {k: v for k, v in options.items() if k in kept}
        options["enable_fp_fusion"] = True  # the JIT's default, said out loud
        compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=tgt,
                                  options=options)
        regs, spills = _resources(compiled, tgt.backend)
        out[fn.__name__] = _meta(tgt, regs, spills, compiled, constexprs, options)
        if asm:
            out[fn.__name__]["asm"] = {k: compiled.asm[k] for k in asm}
    return out


def _meta(tgt, regs: int, spills: int, compiled, constexprs: dict, options: dict) -> dict:
    """One kernel's entry in a build's report."""
    return {"target": f"{tgt.backend}:{tgt.arch}", "n_regs": regs, "n_spills": spills,
            "shared": int(compiled.metadata.shared), "num_warps": options.get("num_warps", 4),
            "num_stages": options.get("num_stages", 3),
            "constexprs": {k: v for k, v in constexprs.items() if isinstance(v, (int, str))}}


def _resources(compiled, backend: str) -> tuple[int, int]:
    """(registers, spills); -1 where neither the binary nor a driver could tell."""
    if backend == "cuda":
        try:
            return _cubin_resources(compiled.asm["cubin"], compiled.metadata.name)
        except (OSError, subprocess.SubprocessError):
            try:  # no cuobjdump here: ask the driver, when this machine has a GPU
                compiled._init_handles()
                return int(compiled.n_regs), int(compiled.n_spills)
            except Exception:
                return -1, -1
    text = compiled.asm["amdgcn"]
    regs = _meta_int(text, ".vgpr_count")
    spills = _meta_int(text, ".vgpr_spill_count") + _meta_int(text, ".sgpr_spill_count")
    return regs, spills


def _meta_int(text: str, key: str) -> int:
    m = re.search(re.escape(key) + r":\s*(\d+)", text)
    return int(m.group(1)) if m else 0


def _cubin_resources(cubin: bytes, name: str) -> tuple[int, int]:
    import triton.backends.nvidia as nvidia
    tool = os.path.join(os.path.dirname(nvidia.__file__), "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True,
                              check=True).stdout
    return _usage(text, name)


def _usage(text: str, name: str) -> tuple[int, int]:
    """(registers, spilled words) from cuobjdump's resource usage: ptxas puts spills on
    the per-thread STACK (LOCAL stays 0 for them); the driver's n_spills counts both."""
    block = text.split(f"Function {name}:", 1)[-1]
    regs = re.search(r"REG:(\d+)", block)
    local = [int(m.group(1)) for key in ("STACK", "LOCAL")
             if (m := re.search(key + r":(\d+)", block))]
    return (int(regs.group(1)) if regs else -1, sum(local) // 4 if local else -1)


def warm(namespace: dict, examples: list[dict], threads: int | None = None,
         fallbacks: bool = False, report: bool = True) -> dict:
    """Compile, through the JIT of this process, every kernel the loaded module
    ``namespace`` launches on ``examples``, all at once on ``threads`` CPU threads (on the
    development VM two static compiles of top-k networks took 2.5 s on two threads against
    4.6 s one after another), so the runs that follow find them compiled. With ``report``,
    returns {kernel name: meta} as ``compile_for`` does for the first example's launches,
    registers and spills as the driver reports them (a kernel it cannot report gets
    ``{"error": ...}``). Needs a GPU: the JIT compiles for the current device."""
    from concurrent.futures import ThreadPoolExecutor
    if not examples:
        return {}
    calls = launches("", examples[:1], namespace, fallbacks)
    first = len(calls)  # the first example's launches: the ones reported
    if len(examples) > 1:
        calls += launches("", examples[1:], namespace, fallbacks)
    with ThreadPoolExecutor(max(1, threads or min(8, os.cpu_count() or 1))) as pool:
        kernels = _compile_all(calls, pool)
    out: dict = {}
    for (fn, _grid, args, kwargs), k in list(zip(calls, kernels))[:first] if report else ():
        if fn.__name__ in out:
            continue
        try:
            k = k.result() if hasattr(k, "result") else k
            k._init_handles()
            _, constexprs, _, options = _signature(fn, args, kwargs)
            out[fn.__name__] = _meta(k.metadata.target, int(k.n_regs), int(k.n_spills), k,
                                     constexprs, options)
        except Exception as e:  # e.g. out of shared memory: the kernel's own run says so
            out[fn.__name__] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    return out


def _compile_all(calls: list[tuple], pool) -> list:
    """The compiled kernel of each launch, compiled concurrently on ``pool`` where this
    triton can (``AsyncCompileMode``), else one after another."""
    try:
        from triton.runtime import _async_compile
    except ImportError:
        return [fn.warmup(*a, grid=g, **kw) for fn, g, a, kw in calls]
    mode = _async_compile.AsyncCompileMode(pool)
    try:
        with mode:
            return [fn.warmup(*a, grid=g, **kw) for fn, g, a, kw in calls]
    finally:
        # some triton versions (3.6) leave the mode active when a compile raised: every
        # later compile in this process would then go to this pool, shut down by then
        if _async_compile.active_mode.get() is mode:
            _async_compile.active_mode.set(None)
