"""``kdsl export``: a run's best kernel as a standalone module a user can import.

``module``: the kernel, plus ``run(*inputs, **dims)`` that allocates the outputs
and calls it (C kernels are compiled with the system compiler on first use).
``kernelbench``: the same wrapped as a KernelBench ``ModelNew``. The module
needs torch (and triton for Triton kernels), never kdsl.
"""
from __future__ import annotations

from pathlib import Path

from kdsl import dtypes, ir
from kdsl import spec as spec_mod
from kdsl.errors import UsageError
from kdsl.show import format_expr

from . import lineage
from .files import atomic_write, check_out

C_LOADER = '''
import ctypes as _ctypes
import hashlib as _hashlib
import os as _os
import subprocess as _subprocess
import tempfile as _tempfile

_CFLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-fno-math-errno",
           "-fno-trapping-math"]
_LIB = None


def _lib():
    """Compile the C source once per machine (cached by its hash) and load it."""
    global _LIB
    if _LIB is None:
        import torch  # noqa: F401  (load torch's OpenMP runtime first; the kernel shares it)
        key = _hashlib.sha256(C_SOURCE.encode()).hexdigest()[:20]
        cache = _os.path.join(_os.path.expanduser("~"), ".cache", "kdsl-export")
        _os.makedirs(cache, exist_ok=True)
        so = _os.path.join(cache, key + ".so")
        if not _os.path.exists(so):
            with _tempfile.TemporaryDirectory(dir=cache) as tmp:
                src = _os.path.join(tmp, "k.c")
                with open(src, "w") as fh:
                    fh.write(C_SOURCE)
                _subprocess.run(["cc", *_CFLAGS, src, "-o", _os.path.join(tmp, "k.so"), "-lm"],
                                check=True)
                _os.replace(_os.path.join(tmp, "k.so"), so)
        _LIB = _ctypes.CDLL(so)
    return _LIB


def kernel(inputs, outputs, sizes):
    dt = _TYPE_OF(inputs)
    fn = getattr(_lib(), "kdsl_" + dt)
    fn.argtypes, fn.restype = [_ctypes.c_void_p, _ctypes.c_void_p], None
    keep = [inputs[n].contiguous() for n in INPUTS] + [outputs[n] for n in OUTPUTS]
    ptrs = (_ctypes.c_void_p * len(keep))(*[t.data_ptr() for t in keep])
    dims = (_ctypes.c_int64 * max(len(DIMS), 1))(*[int(sizes[d]) for d in DIMS])
    fn(ptrs, dims)
'''


def _dim_rules(op: ir.Op) -> tuple[dict[str, str], list[str]]:
    """How each dim is read off the inputs' shapes; the dims that must be passed."""
    rules: dict[str, str] = {}
    for t in op.inputs:
        for axis, e in enumerate(t.shape):
            if isinstance(e, ir.Name) and e.name not in rules:
                rules[e.name] = f"{t.name}.shape[{axis}]"
            elif (isinstance(e, ir.Binary) and e.op in "+-" and isinstance(e.left, ir.Name)
                  and isinstance(e.right, ir.Num) and e.left.name not in rules):
                sign = "-" if e.op == "+" else "+"
                rules[e.left.name] = f"{t.name}.shape[{axis}] {sign} {e.right.value}"
    return rules, [d for d in op.dims if d not in rules]


def wrapper(op: ir.Op, bench: dict[str, int] | None) -> str:
    rules, passed = _dim_rules(op)
    names = [t.name for t in op.inputs]
    chooser = next((t.name for t in op.inputs if t.like is None and len(t.dtypes) > 1),
                   next((t.name for t in op.inputs if t.like is not None), None))
    torch_to_dt = {v: k for k, v in dtypes.TORCH.items()}
    lines = [f"INPUTS = {names!r}", f"OUTPUTS = {[t.name for t in op.outputs]!r}",
             f"DIMS = {list(op.dims)!r}", f"_TORCH_TO_DT = {torch_to_dt!r}", "", "",
             "def _TYPE_OF(inputs):"]
    if chooser is None:
        lines.append(f"    return {op.dtype_choices[0]!r}")
    else:
        lines.append(f"    return _TORCH_TO_DT[str(inputs[{chooser!r}].dtype)"
                     ".replace('torch.', '')]")
    kw = ", ".join(f"{d}={bench[d]}" if bench else d for d in passed)
    sig = ", ".join(names + ([("*, " if not bench else "") + kw] if passed else []))
    lines += ["", "", f"def run({sig}):",
              f'    """{op.name}: the outputs ({", ".join(t.name for t in op.outputs)}) '
              'for these inputs."""',
              "    import torch",
              "    inputs = {" + ", ".join(f"{n!r}: {n}" for n in names) + "}",
              "    dt = _TYPE_OF(inputs)"]
    for d in op.dims:
        lines.append(f"    {d} = int({rules[d]})" if d in rules else f"    {d} = int({d})")
    lines.append("    sizes = {" + ", ".join(f"{d!r}: {d}" for d in op.dims) + "}")
    lines.append(f"    device = {names[0]}.device")
    for t in op.outputs:
        shape = ", ".join(format_expr(e) for e in t.shape)
        out_dt = {d: dtypes.TORCH[op.dtype_of(t.name, d)] for d in op.dtype_choices}
        lines.append(f"    {t.name} = torch.empty(({shape}{',' if len(t.shape) == 1 else ''}), "
                     f"dtype=getattr(torch, {out_dt!r}[dt]), device=device)")
    lines.append("    kernel(inputs, {" + ", ".join(f"{t.name!r}: {t.name}" for t in op.outputs)
                 + "}, sizes)")
    outs = ", ".join(t.name for t in op.outputs)
    lines.append(f"    return {outs}")
    return "\n".join(lines) + "\n"


def kernelbench(op: ir.Op) -> str:
    names = ", ".join(t.name for t in op.inputs)
    return ("\n\nimport torch.nn as _nn\n\n\nclass ModelNew(_nn.Module):\n"
            f'    """KernelBench entry for {op.name}: forward({names})."""\n\n'
            "    def __init__(self, *args, **kwargs):\n        super().__init__()\n\n"
            f"    def forward(self, {names}):\n        return run({names})\n")


def export(args) -> int:
    from .runs import open_run
    out = check_out(args.out, "--out", kind="file")
    store, settings = open_run(args.run)
    best = lineage.best(store.nodes)
    if best is None or not best.get("source_path"):
        raise UsageError(f"{args.run} has no correct kernel to export yet")
    if not isinstance(best.get("candidate"), dict) or not best["candidate"].get("backend"):
        raise UsageError(f"{args.run}: the best node's record (node {best['id']}) names no "
                         "backend; the run is damaged")
    kernel_file = Path(args.run) / best["source_path"]
    try:
        source = kernel_file.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{args.run}: cannot read the best kernel {kernel_file} "
                         f"({getattr(e, 'strerror', None) or e})") from None
    if best.get("source_hash") and lineage.source_hash(source) != best["source_hash"]:
        raise UsageError(f"{kernel_file} is damaged (its content does not match node "
                         f"{best['id']}'s hash); 'kdsl resume {args.run}' rewrites it")
    spec_path = Path(args.run) / "spec.kspec"
    if not spec_path.is_file():
        raise UsageError(f"{args.run}: the run's copy of its spec (spec.kspec) is missing")
    try:
        op = spec_mod.find_op(spec_mod.load(spec_path), settings.op)
    except KeyError as e:
        raise UsageError(f"{spec_path}: {e.args[0]}") from None
    backend = best["candidate"]["backend"]
    res = best["result"]
    head = (f'"""{op.name}: exported by kdsl from {args.run} (node {best["id"]}, backend '
            f'{backend}, {res["speedup"]:.3f}x over {res.get("baseline_name")} on '
            f'{settings.device}).\n\nCall run(...) with the inputs; it returns the outputs.\n"""\n')
    if best["source_path"].endswith(".c"):
        body = f"C_SOURCE = {source!r}\n" + C_LOADER
    else:
        body = source
    point = next((p for p in op.bench if p.device == settings.device),
                 next((p for p in op.bench if p.device is None), None))
    bench = point.size_dict() if (args.format == "kernelbench" and point) else None
    text = head + body + "\n\n# ---- the wrapper: shapes in, outputs allocated, kernel called ----\n" \
        + wrapper(op, bench) + (kernelbench(op) if args.format == "kernelbench" else "")
    if "import kdsl" in text or "from kdsl" in text:
        print("kdsl: warning: this kernel imports kdsl; the module needs kdsl installed")
    atomic_write(out, text)
    print(f"wrote {args.out} ({args.format}: node {best['id']}, {backend}, "
          f"{res['speedup']:.3f}x)")
    return 0
