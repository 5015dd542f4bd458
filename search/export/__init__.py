"""``kdsl export``: a run's best kernel as a standalone module a user can import.

``module``: the kernel registered as a torch op (``torch.library.custom_op`` with a
fake implementation, input checks and a backward where the spec's baseline gives one),
and ``run(*inputs, **dims)`` calling it. ``kernelbench``: the same plus a KernelBench
``ModelNew`` whose sizes come from its inputs. The module needs torch (and triton for
Triton kernels), never kdsl; C kernels are compiled with the system compiler on first use.
"""
from __future__ import annotations

from pathlib import Path

from kdsl import spec as spec_mod
from kdsl.errors import UsageError

from .. import lineage
from ..files import atomic_write, check_out
from .render import Kernel, module_text, op_name

FORMATS = ("module", "kernelbench")

__all__ = ["FORMATS", "Kernel", "export", "kernel_of_run", "module_text", "op_name", "write"]


def kernel_of_run(run_dir: str | Path, force: bool = False) -> Kernel:
    """The best kernel of a run, with its op: the best of its re-measurements where the run
    made them (``confirm.py``), else the search's fastest. UsageError (one line) when there
    is none, and when the confirmed best is slower than the run's start or the baseline,
    unless ``force``."""
    from ..runs import open_run
    store, settings = open_run(run_dir)
    confirmed = store.summary().get("confirmed") or {}
    best = lineage.best(store.nodes)
    if confirmed.get("best_node") is not None:
        best = next((r for r in store.nodes if r["id"] == confirmed["best_node"]), best)
        if confirmed.get("regression") and not force:
            raise UsageError(f"{run_dir}: its confirmed best (node {confirmed['best_node']}) is "
                             f"{confirmed.get('verdict')}; export it anyway with --force")
    if best is None or not best.get("source_path"):
        raise UsageError(f"{run_dir} has no correct kernel to export yet")
    if not isinstance(best.get("candidate"), dict) or not best["candidate"].get("backend"):
        raise UsageError(f"{run_dir}: the best node's record (node {best['id']}) names no "
                         "backend; the run is damaged")
    kernel_file = Path(run_dir) / best["source_path"]
    try:
        source = kernel_file.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{run_dir}: cannot read the best kernel {kernel_file} "
                         f"({getattr(e, 'strerror', None) or e})") from None
    if best.get("source_hash") and lineage.source_hash(source) != best["source_hash"]:
        raise UsageError(f"{kernel_file} is damaged (its content does not match node "
                         f"{best['id']}'s hash); 'kdsl resume {run_dir}' rewrites it")
    spec_path = Path(run_dir) / "spec.kspec"
    if not spec_path.is_file():
        raise UsageError(f"{run_dir}: the run's copy of its spec (spec.kspec) is missing")
    try:
        op = spec_mod.find_op(spec_mod.load(spec_path), settings.op)
    except KeyError as e:
        raise UsageError(f"{spec_path}: {e.args[0]}") from None
    backend = best["candidate"]["backend"]
    res = best["result"]
    point = next((p for p in op.bench if p.device == settings.device),
                 next((p for p in op.bench if p.device is None), None))
    speedup = (confirmed["best"]["median_speedup"] if confirmed.get("best_node") == best["id"]
               else res["speedup"])
    how = " (median of its re-measurements)" if confirmed.get("best_node") == best["id"] else ""
    note = (f"from {run_dir}, node {best['id']}, backend {backend}, {speedup:.3f}x over "
            f"{res.get('baseline_name')} on {settings.device}{how}")
    return Kernel(op, source, "c" if best["source_path"].endswith(".c") else "python",
                  backend, settings.device, note, point.size_dict() if point else None)


def write(kernel: Kernel, out: str | Path, fmt: str = "module") -> Path:
    """Write the module to ``out``, a file in a directory that exists (UsageError, one
    line, otherwise: a mistyped directory is not made behind the user's back)."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: known formats are {', '.join(FORMATS)}")
    out = check_out(out, "--out", kind="file")
    text = module_text(kernel, kernelbench=fmt == "kernelbench")
    if "import kdsl" in text or "from kdsl" in text:
        print("kdsl: warning: this kernel imports kdsl; the module needs kdsl installed")
    atomic_write(out, text)
    return out


def export(args) -> int:
    kernel = kernel_of_run(args.run, force=getattr(args, "force", False))
    write(kernel, args.out, args.format)
    print(f"wrote {args.out} ({args.format}: {kernel.note}; torch.ops.kdsl.{op_name(kernel)})")
    return 0
