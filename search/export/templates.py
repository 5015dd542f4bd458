"""The parts of an exported module that are the same for every op, as source text.

They read the imports (``_torch``, ``_F``, ``_math``), the constants and small functions ``render.py`` writes for the op
(``OP``, ``INPUTS``, ``DTYPES``, ``_read_dims``, ``_shapes``, ...). The module they
end up in needs torch (and triton for a Triton kernel), never kdsl.
"""

# A C kernel is compiled on first use, once per machine (cached by the source's hash).
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
                try:
                    done = _subprocess.run(["cc", *_CFLAGS, src, "-o", _os.path.join(tmp, "k.so"),
                                            "-lm"], capture_output=True, text=True)
                except OSError as e:
                    raise RuntimeError(f"{OP}: this kernel is C and needs a C compiler (cc) "
                                       f"with OpenMP: {e}") from None
                if done.returncode != 0:
                    raise RuntimeError(f"{OP}: cc failed to build the kernel: "
                                       f"{done.stderr.strip()[:2000]}")
                _os.replace(_os.path.join(tmp, "k.so"), so)
        _LIB = _ctypes.CDLL(so)
    return _LIB


def _empty_buffer(t):
    """Zeros standing in for a zero-element tensor (which may have no storage): a clamped
    read still touches one row of it, each empty axis counted as one."""
    n = t.element_size()
    for size in t.shape:
        n *= max(int(size), 1)
    return _torch.zeros(max(n, 64), dtype=_torch.uint8)


def kernel(inputs, outputs, sizes):
    fn = getattr(_lib(), "kdsl_" + _pick_dtype(inputs))
    fn.argtypes, fn.restype = [_ctypes.c_void_p, _ctypes.c_void_p], None
    keep = [inputs[n].contiguous() for n in INPUTS] + [outputs[n] for n in OUTPUTS]
    keep = [t if t.numel() else _empty_buffer(t) for t in keep]
    ptrs = (_ctypes.c_void_p * len(keep))(*[t.data_ptr() for t in keep])
    dims = (_ctypes.c_int64 * max(len(DIMS), 1))(*[int(sizes[d]) for d in DIMS])
    fn(ptrs, dims)
'''

RUNTIME = '''
# ---- checks, the torch op, its fake (shapes only) and its backward ----
# index ranges and jagged offsets are checked on the data before the kernel runs (one
# pass over each such input: a bad index would read out of bounds); False skips that
CHECK_VALUES = True

_TORCH_TO_DT = {row[TYPE_VAR]: dt for dt, row in DTYPES.items()} if TYPE_VAR else {}


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _pick_dtype(t):
    """The op's dtype (its one type variable), read from the input that carries it."""
    if TYPE_VAR is None:
        return next(iter(DTYPES))
    got = _dtype_name(t[TYPE_VAR].dtype)
    if got not in _TORCH_TO_DT:
        takes = " or ".join(row[TYPE_VAR] for row in DTYPES.values())
        raise TypeError(f"{OP}: input '{TYPE_VAR}' is {got}; this kernel takes {takes}")
    return _TORCH_TO_DT[got]


def _check(t, given):
    """(the op's dtype, its dims) for these inputs, or a TypeError / ValueError naming
    the input at fault. Shapes only: it runs on fake tensors under torch.compile too."""
    for name in INPUTS:
        if not isinstance(t[name], _torch.Tensor):
            raise TypeError(f"{OP}: input '{name}' must be a torch.Tensor, "
                            f"got {type(t[name]).__name__}")
    dt = _pick_dtype(t)
    for name in INPUTS:
        v, want = t[name], DTYPES[dt][name]
        if _dtype_name(v.dtype) != want:
            like = f" (like '{TYPE_VAR}')" if TYPE_VAR and DTYPES[dt][TYPE_VAR] == want \\
                and name != TYPE_VAR else ""
            hint = " (.long() converts it)" if want == "int64" and v.dtype == _torch.int32 else ""
            raise TypeError(f"{OP}: input '{name}' must be {want}{like}, "
                            f"got {_dtype_name(v.dtype)}{hint}")
        if v.device.type != DEVICE:
            raise ValueError(f"{OP}: input '{name}' is on {v.device}; this kernel runs on "
                             f"{DEVICE} tensors")
        if v.device != t[INPUTS[0]].device:
            raise ValueError(f"{OP}: input '{name}' is on {v.device}, '{INPUTS[0]}' on "
                             f"{t[INPUTS[0]].device}; give them on one device")
        if v.dim() != len(SHAPES[name]):
            raise ValueError(f"{OP}: input '{name}' must have {len(SHAPES[name])} dims "
                             f"[{', '.join(SHAPES[name])}], got shape {tuple(v.shape)}")
    s = _read_dims(t, dict(given))
    want = _shapes(s)
    for name in INPUTS:
        if tuple(t[name].shape) != tuple(want[name]):
            known = ", ".join(f"{d}={s[d]}" for d in DIMS)
            raise ValueError(f"{OP}: input '{name}' has shape {tuple(t[name].shape)}, but "
                             f"[{', '.join(SHAPES[name])}] is {tuple(want[name])} "
                             f"with {known}")
    for text, holds in CONDITIONS:
        if not holds(s):
            known = ", ".join(f"{d}={s[d]}" for d in DIMS)
            raise ValueError(f"{OP}: the sizes ({known}) break the op's condition {text}")
    for name in OUTPUTS:
        if any(n < 0 for n in want[name]):
            raise ValueError(f"{OP}: output '{name}' would have shape {tuple(want[name])}")
    return dt, s


def _in_range(name, v, lo, hi):
    if v.numel() and (int(v.min()) < lo or int(v.max()) >= hi):
        raise ValueError(f"{OP}: input '{name}' holds values outside {lo} .. {hi - 1} "
                         f"(min {int(v.min())}, max {int(v.max())})")


def _offsets(name, v, total):
    if v.numel() == 0 or int(v[0]) != 0 or int(v[-1]) != total:
        raise ValueError(f"{OP}: input '{name}' must be offsets from 0 to {total}")
    if v.numel() > 1 and bool((v[1:] < v[:-1]).any()):
        raise ValueError(f"{OP}: input '{name}' must not decrease (offsets of a jagged tensor)")


def _empty(dt, s, device):
    shapes = _shapes(s)
    return {n: _torch.empty(tuple(shapes[n]), dtype=getattr(_torch, DTYPES[dt][n]),
                            device=device) for n in OUTPUTS}


def _compute(t, given):
    dt, s = _check(t, given)
    if CHECK_VALUES:
        _check_values(t, s)
    # the kernel reads dense row-major buffers: other layouts are copied first
    t = {n: v.contiguous() for n, v in t.items()}
    device = t[INPUTS[0]].device
    outs = _empty(dt, s, device)
    sizes = {d: int(s[d]) for d in DIMS}
    if device.type == "cuda":  # a Triton launch goes to the current device: make it theirs
        with _torch.cuda.device(device):
            kernel(t, outs, sizes)
    else:
        kernel(t, outs, sizes)
    return outs


def _fake(t, given):
    dt, s = _check(t, given)
    return _empty(dt, s, t[INPUTS[0]].device)


def _vjp(grads, t, given):
    """Gradients of the float inputs (None for the rest): torch.func.vjp of the spec's
    baseline (the expression kdsl check verified agrees with the op), recomputed from the
    inputs. Written with torch.func, so torch.compile traces it into the backward graph."""
    if _baseline is None:
        raise NotImplementedError(f"kdsl export: no backward for {OP}: {NO_BACKWARD}")
    _, s = _check(t, given)
    wrt = [n for n in GRAD_INPUTS if t[n].is_floating_point()]
    rest = {n: v for n, v in t.items() if n not in wrt}
    sizes = {d: s[d] for d in DIMS}

    def float_outputs(*leaves):
        out = _baseline(**dict(zip(wrt, leaves)), **rest, **sizes)
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return tuple(out[OUTPUTS.index(n)] for n in GRAD_OUTPUTS)

    _, pull = _torch.func.vjp(float_outputs, *[t[n] for n in wrt])
    got = dict(zip(wrt, pull(tuple(grads))))
    return [got.get(n) for n in INPUTS]


def _setup_context(ctx, inputs, output):
    tensors = inputs[:len(INPUTS)]
    outs = output if isinstance(output, (tuple, list)) else (output,)
    ctx.given = dict(zip(PASSED, inputs[len(INPUTS):]))
    ctx.save_for_backward(*tensors, *outs)


def _backward(ctx, *grads):
    saved = ctx.saved_tensors
    t = dict(zip(INPUTS, saved[:len(INPUTS)]))
    outs = dict(zip(OUTPUTS, saved[len(INPUTS):]))
    by_name = dict(zip(OUTPUTS, grads))
    float_grads = [by_name[n] if by_name[n] is not None else _torch.zeros_like(outs[n])
                   for n in GRAD_OUTPUTS]
    return tuple(_vjp(float_grads, t, ctx.given)) + (None,) * len(PASSED)


def _define(name, impl, fake, schema):
    """The op ``kdsl::name``; an op this process already registered (the same kernel:
    the name carries its hash) is reused."""
    try:
        return getattr(getattr(_torch.ops, NAMESPACE), name), False
    except AttributeError:
        pass
    op = _torch.library.custom_op(f"{NAMESPACE}::{name}", impl, mutates_args=(), schema=schema)
    op.register_fake(fake)
    return op, True
'''
