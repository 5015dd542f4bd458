"""The C prelude's math functions against float64 references, over dense sweeps of f32
inputs: large magnitudes, subnormals, signed zeros, infinities and nan included.

They are compiled with the kernels' own flags inside ``#pragma omp simd`` loops, so the
code measured is the vectorized code a kernel runs (fused multiply-adds and all)."""
from __future__ import annotations

import ctypes
import math
import shutil
import subprocess

import numpy as np
import pytest

from kdsl.backends.c import build
from kdsl.backends.c.prelude import PRELUDE

pytestmark = pytest.mark.skipif(shutil.which(build.COMPILER) is None, reason="no C compiler")

UNARY = ("exp", "log", "log1p", "expm1", "tanh", "erf")
BINARY = ("fmod", "mod_f", "pow")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmath")
    wrappers = [f"void ev_{f}(const float *x, float *y, int64_t n) {{\n"
                f"  #pragma omp simd\n  for (int64_t i = 0; i < n; i++) y[i] = kd_{f}(x[i]);\n}}"
                for f in UNARY]
    wrappers += [f"void ev_{f}(const float *a, const float *b, float *y, int64_t n) {{\n"
                 f"  #pragma omp simd\n"
                 f"  for (int64_t i = 0; i < n; i++) y[i] = kd_{f}(a[i], b[i]);\n}}"
                 for f in BINARY]
    src = d / "m.c"
    src.write_text(PRELUDE + "\n".join(wrappers) + "\n")
    out = subprocess.run([build.COMPILER, *build.CFLAGS, "-o", str(d / "m.so"), str(src), "-lm"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return ctypes.CDLL(str(d / "m.so"))


def call(lib, name: str, *args: np.ndarray) -> np.ndarray:
    args = [np.ascontiguousarray(a, dtype=np.float32) for a in args]
    y = np.empty_like(args[0])
    ptrs = [a.ctypes.data_as(ctypes.c_void_p) for a in (*args, y)]
    getattr(lib, f"ev_{name}")(*ptrs, ctypes.c_int64(y.size))
    return y


def sweep(lo: float, hi: float, n: int = 1 << 17) -> np.ndarray:
    """``n`` f32 values evenly spaced in bit pattern over [lo, hi] (lo, hi >= 0), both signs,
    with the special values."""
    a, b = np.array([lo, hi], dtype=np.float32).view(np.uint32).astype(np.int64)
    pos = np.unique(np.linspace(a, b, n).astype(np.uint32)).view(np.float32)
    special = np.array([0.0, np.inf, np.nan, 1e-45, 1.1754944e-38, 3.4028235e38], np.float32)
    return np.concatenate([pos, -pos, special, -special])


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the last place of ``want`` rounded to f32 (subnormal ulp floor)."""
    with np.errstate(over="ignore", invalid="ignore"):
        w32 = np.abs(want).astype(np.float32)
        ulp = np.spacing(np.maximum(w32, np.finfo(np.float32).tiny)).astype(np.float64)
        return np.abs(got.astype(np.float64) - want) / ulp


def check(got: np.ndarray, want: np.ndarray, x, max_ulp: float, flushed: float = 0.0):
    """Same nan and infinity pattern, finite values within ``max_ulp`` (or, where the f32
    result is below ``flushed``, within ``flushed`` absolutely: exp's underflow to 0)."""
    with np.errstate(over="ignore"):
        want32 = want.astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want32)), x[np.isnan(got) != np.isnan(want32)][:8]
    inf = np.isinf(want32)
    assert np.array_equal(got[inf], want32[inf]), x[inf][got[inf] != want32[inf]][:8]
    fin = np.isfinite(want32)
    err = ulps(got[fin], want[fin])
    ok = (err <= max_ulp) | (np.abs(want[fin]) < flushed)
    assert ok.all(), (x[fin][~ok][:8], got[fin][~ok][:8], want[fin][~ok][:8], err.max())


def test_erf_within_1_2_ulp_and_its_special_values(lib):
    x = sweep(0.0, 12.0, 1 << 18)
    want = np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float64)
    got = call(lib, "erf", x)
    check(got, want, x, 1.2)
    z = call(lib, "erf", np.array([0.0, -0.0, np.inf, -np.inf], np.float32))
    assert list(z) == [0.0, 0.0, 1.0, -1.0] and np.signbit(z[1]) and not np.signbit(z[0])
    # near 0 erf(x) ~ 2x/sqrt(pi): relative accuracy where GELU's erf(x / sqrt 2) reads it
    tiny = np.array([1e-30, 1e-12, 3e-8], np.float32)
    assert np.allclose(call(lib, "erf", tiny), 2 / math.sqrt(math.pi) * tiny, rtol=1e-7, atol=0)


def test_log1p_and_expm1_are_accurate_near_zero_and_everywhere(lib):
    x = sweep(0.0, 3.4e38)
    with np.errstate(all="ignore"):
        check(call(lib, "log1p", x), np.log1p(x.astype(np.float64)), x, 1.5)
        check(call(lib, "expm1", x), np.expm1(x.astype(np.float64)), x, 1.5)
    small = sweep(1e-30, 1.0)
    with np.errstate(all="ignore"):
        check(call(lib, "log1p", small), np.log1p(small.astype(np.float64)), small, 1.5)
        check(call(lib, "expm1", small), np.expm1(small.astype(np.float64)), small, 1.5)
    assert call(lib, "log1p", np.array([-1.0], np.float32))[0] == -np.inf
    assert call(lib, "expm1", np.array([-np.inf], np.float32))[0] == -1.0
    z = call(lib, "log1p", np.array([-0.0], np.float32))
    assert z[0] == 0 and np.signbit(z[0])


def test_exp_log_tanh_within_their_documented_error(lib):
    x = sweep(0.0, 100.0)
    with np.errstate(all="ignore"):
        # exp flushes results below the least normal (x < -87.34) to 0
        check(call(lib, "exp", x), np.exp(x.astype(np.float64)), x, 1.5, flushed=1.2e-38)
        check(call(lib, "tanh", x), np.tanh(x.astype(np.float64)), x, 1.5)
        big = sweep(0.0, 3.4e38)
        check(call(lib, "log", big), np.log(big.astype(np.float64)), big, 1.0)


def pairs(n: int = 1 << 17) -> tuple[np.ndarray, np.ndarray]:
    """Operand pairs: random bit patterns (any magnitude ratio, up to FLT_MAX over the least
    subnormal), moderate values, integer exponents, and every pair of special values."""
    rng = np.random.default_rng(11)
    a = [rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32),
         rng.uniform(-1000, 1000, n).astype(np.float32),
         rng.uniform(0, 10, n).astype(np.float32)]
    b = [rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32),
         rng.uniform(-10, 10, n).astype(np.float32),
         rng.integers(-60, 60, n).astype(np.float32)]
    sp = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 3.0, -3.0, 2.5, 1e-45, 16777217.0,
                   3.4028235e38, np.inf, -np.inf, np.nan], np.float32)
    sa, sb = np.meshgrid(sp, sp)
    return np.concatenate(a + [sa.ravel()]), np.concatenate(b + [sb.ravel()])


def test_fmod_is_exact_and_mod_takes_the_sign_of_the_divisor(lib):
    a, b = pairs()
    with np.errstate(all="ignore"):
        want = np.fmod(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    got = call(lib, "fmod", a, b)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (a[~same][:5], b[~same][:5], got[~same][:5], want[~same][:5])
    with np.errstate(all="ignore"):
        want = np.remainder(a.astype(np.float64), b.astype(np.float64))
    check(call(lib, "mod_f", a, b), want, a, 1.0)


def test_pow_within_1_ulp_with_c99s_special_cases(lib):
    a, b = pairs()
    with np.errstate(all="ignore"):
        want = np.power(a.astype(np.float64), b.astype(np.float64))
    got = call(lib, "pow", a, b)
    sub = np.abs(want) < np.finfo(np.float32).tiny  # double rounding into a subnormal
    check(got[~sub], want[~sub], a[~sub], 1.0)
    assert (ulps(got[sub], want[sub]) <= 1.0).all()
    z = call(lib, "pow", np.array([-0.0, -0.0, -8.0, -1.0], np.float32),
             np.array([3.0, -3.0, 1 / 3, np.inf], np.float32))
    assert np.signbit(z[0]) and z[0] == 0 and z[1] == -np.inf and np.isnan(z[2]) and z[3] == 1
