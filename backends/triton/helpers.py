"""Source of the ``@triton.jit`` helpers that generated kernels call, by name.

A rendered module includes only the helpers its kernels use. They follow the
reference's integer semantics (numpy's floor division and modulo, wrapping
uint64 arithmetic for the hash) and stay portable: the interpreter has no
libdevice, so a helper that uses it keeps a plain fallback.
"""
from __future__ import annotations

HELPERS = {
    "hash64": '''
@triton.jit
def _kd_hash64(x):
    # splitmix64 finalizer on the 64-bit pattern, wrapping uint64 arithmetic
    z = x.to(tl.uint64, bitcast=True)
    z = z + 0x9E3779B97F4A7C15
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    z = z ^ (z >> 31)
    return z.to(tl.int64, bitcast=True)
''',
    "mod": '''
@triton.jit
def _kd_mod(a, b):
    # the remainder takes the divisor's sign (numpy's mod); Triton's % truncates
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
''',
    "floordiv": '''
@triton.jit
def _kd_floordiv(a, b):
    q = a // b
    return tl.where(((a % b) != 0) & ((a < 0) != (b < 0)), q - 1, q)
''',
    "gpu": '''
import os  # noqa: E402

from triton.language.extra import libdevice  # noqa: E402

import torch  # noqa: E402

# the interpreter has no libdevice and no inline assembly; it runs when TRITON_INTERPRET=1
# (read as triton does)
_KD_LIBDEVICE = tl.constexpr(os.environ.get("TRITON_INTERPRET", "").lower()
                             not in ("1", "true", "on", "yes"))
# inline PTX only where kernels compile for NVIDIA GPUs (a static compile for another
# target sets this for that target)
_KD_PTX = tl.constexpr(bool(_KD_LIBDEVICE) and torch.version.hip is None)
''',
    "tanh": '''
@triton.jit
def _kd_tanh(x):
    # libdevice on a GPU; the interpreter has no libdevice: a portable form, with a
    # series near 0 where 1 - exp(-2|x|) would cancel
    if _KD_LIBDEVICE:
        r = libdevice.tanh(x)
    else:
        a = tl.abs(x)
        e = tl.exp(-2.0 * a)
        t = (1.0 - e) / (1.0 + e)
        x2 = x * x
        s = x * (1.0 + x2 * (-0.3333333333333333 + x2 * (0.13333333333333333
                                                         + x2 * -0.05396825396825397)))
        r = tl.where(a < 0.05, s, tl.where(x < 0, -t, t))
    return r
''',
    "log1p": '''
@triton.jit
def _kd_log1p(x):
    # libdevice on a GPU; the interpreter has no libdevice: log(u) * x / (u - 1), u = 1 + x
    # (the rounding of 1 + x cancels: Goldberg 1991, theorem 4), x itself where u is 1
    if _KD_LIBDEVICE:
        r = libdevice.log1p(x)
    else:
        u = 1.0 + x
        d = u - 1.0
        r = tl.where(d == 0.0, x, tl.log(u) * (x / tl.where(d == 0.0, 1.0, d)))
        r = tl.where(u == float("inf"), u, r)
    return r
''',
    "expm1": '''
@triton.jit
def _kd_expm1(x):
    # libdevice on a GPU; the interpreter has no libdevice: (u - 1) * x / log(u), u = exp(x)
    # (Kahan's form: the rounding of exp(x) cancels), x where u is 1, -1 where u - 1 is
    if _KD_LIBDEVICE:
        r = libdevice.expm1(x)
    else:
        u = tl.exp(x)
        d = u - 1.0
        lu = tl.log(u)
        r = d * (x / tl.where(lu == 0.0, 1.0, lu))
        r = tl.where(d == 0.0, x, tl.where(d == -1.0, -1.0, r))
        r = tl.where(u == float("inf"), u, r)
    return r
''',
    "tanh_fast": '''
@triton.jit
def _kd_tanh_fast(x):
    # (e - 1) / (e + 1), e = exp(2x), with a fast division; a series near 0 where e - 1 cancels
    e = tl.exp(2.0 * tl.minimum(tl.maximum(x, -10.0), 10.0))
    t = tl.fdiv(e - 1.0, e + 1.0)
    x2 = x * x
    s = x * (1.0 + x2 * (-0.3333333333333333 + x2 * (0.13333333333333333
                                                     + x2 * -0.05396825396825397)))
    return tl.where(tl.abs(x) < 0.05, s, t)
''',
    "tanh_approx": '''
@triton.jit
def _kd_tanh_approx(x, APPROX: tl.constexpr):
    # APPROX (16-bit outputs): the hardware's tanh.approx.f32 (sm_75+), one special-function
    # op with a relative error near 2^-11, below a 16-bit output's rounding; otherwise, and
    # in the interpreter and off NVIDIA GPUs (no PTX there), _kd_tanh
    if APPROX and _KD_PTX:
        r = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32,
                                      is_pure=True, pack=1)
    else:
        r = _kd_tanh(x)
    return r
''',
    "exp_ftz": '''
@triton.jit
def _kd_exp_ftz(x):
    # f32 on a GPU: the hardware's ex2.approx.ftz.f32 of x * log2(e), two instructions;
    # triton's exp adds three to keep subnormal inputs and results (below 2^-126, under
    # the specs' tolerances). Other dtypes, the interpreter and other GPUs: tl.exp
    if _KD_PTX and x.dtype == tl.float32:
        r = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f",
                                      [x * 1.4426950408889634], dtype=tl.float32,
                                      is_pure=True, pack=1)
    else:
        r = tl.exp(x)
    return r
''',
    "pow": '''
@triton.jit
def _kd_pow(a, b):
    # numpy's power: a negative base needs an integer exponent; 0 ** 0 is 1
    mag = tl.exp2(b * tl.log2(tl.abs(a)))
    whole = tl.floor(b) == b
    odd = whole & ((b - 2.0 * tl.floor(b * 0.5)) != 0)
    r = tl.where(a < 0, tl.where(whole, tl.where(odd, -mag, mag), float('nan')), mag)
    return tl.where(b == 0, 1.0, r)
''',
    "trunc": '''
@triton.jit
def _kd_trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))
''',
    # the nearest whole number, halves to the even one (torch.round, C's nearbyint)
    "round_even": '''
@triton.jit
def _kd_round_even(x):
    f = tl.floor(x)
    d = x - f
    odd = (f - 2.0 * tl.floor(f * 0.5)) != 0
    return tl.where((d > 0.5) | ((d == 0.5) & odd), f + 1.0, f)
''',
    "mul": '''
@triton.jit
def _kd_mul(a, b):
    return a * b
''',
    # the combines of a running maximum and minimum (``tl.associative_scan``)
    "max": '''
@triton.jit
def _kd_max(a, b):
    return tl.maximum(a, b)
''',
    "min": '''
@triton.jit
def _kd_min(a, b):
    return tl.minimum(a, b)
''',
    # the combine of a running log-sum-exp: log(exp(a) + exp(b)) without leaving the log
    # domain; two -inf (empty sums) give -inf, not the NaN of -inf - -inf
    # the combine of a decayed scan's pairs: (a, b) is y -> a * y + b, the later applied
    # after the earlier
    "decay": '''
@triton.jit
def _kd_decay(a1, b1, a2, b2):
    return a1 * a2, b1 * a2 + b2
''',
    "logaddexp": '''
@triton.jit
def _kd_logaddexp(a, b):
    # a NaN carried along (maximum's default returns the other operand); two equal
    # infinities are one, not inf - inf
    mx = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    d = tl.where(a == b, 0.0, tl.abs(a - b))
    r = mx + tl.log(1.0 + tl.exp(-d))
    return tl.where(mx == float('-inf'), mx, r)
''',
}

# helpers a helper calls or reads (included with it)
NEEDS = {"tanh": {"gpu"}, "tanh_approx": {"tanh"}, "exp_ftz": {"gpu"}, "log1p": {"gpu"},
         "expm1": {"gpu"}}


def with_needs(names: set[str]) -> list[str]:
    """``names`` and what they need, in the order a module is to define them (the
    ``gpu`` block first: other helpers read its constants)."""
    out, todo = set(), list(names)
    while todo:
        n = todo.pop()
        if n not in out:
            out.add(n)
            todo += NEEDS.get(n, ())
    return sorted(out, key=lambda n: (n != "gpu", n))
