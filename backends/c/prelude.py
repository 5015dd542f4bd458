"""The C text every generated kernel starts with: math, conversions, integer semantics.

The math functions are branch-free versions (exp, log, tanh after Cephes; erf, log1p,
expm1, fmod, pow kdsl's own) so that GCC vectorizes loops that call them: libm's expf,
erff, log1pf, fmodf or powf has no vector form without -ffast-math and libmvec, so a call
leaves its loop scalar (GCC: "relevant stmt not supported"), one call an element (exact
GELU through erff ran at 0.26x of torch on 2 CPU cores). Each is within 1.5 ulp of the
float64 value (fmod exact); tests/test_c_math.py sweeps them. Integer division and
remainder follow numpy (floor semantics, 0 on division by zero), as ``kdsl.reference``
defines them. Half types are read and written through their uint16 bit patterns (GCC does
not vectorize ``_Float16`` conversions), rounding to nearest even like torch.
"""
from __future__ import annotations

PRELUDE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>

#define KD_INLINE static inline __attribute__((always_inline))

KD_INLINE float kd_bits2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
KD_INLINE uint32_t kd_f2bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
KD_INLINE int64_t kd_min64(int64_t a, int64_t b) { return a < b ? a : b; }
KD_INLINE int64_t kd_max64(int64_t a, int64_t b) { return a > b ? a : b; }
/* v clamped into 0..n-1 (0 when n is 0), branch-free */
KD_INLINE int64_t kd_clamp(int64_t v, int64_t n) { return kd_max64(kd_min64(v, n - 1), 0); }

/* ---- half types ---- */
KD_INLINE float kd_ld_bf16(uint16_t h) { return kd_bits2f((uint32_t)h << 16); }
KD_INLINE uint16_t kd_st_bf16(float f) {
  uint32_t u = kd_f2bits(f);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? ((u >> 16) | 0x40u) : r);
}
KD_INLINE float kd_ld_f16(uint16_t h) {
  uint32_t o = ((uint32_t)h & 0x7fffu) << 13;
  uint32_t e = o & (0x7c00u << 13);
  uint32_t n = o + ((127u - 15u) << 23);
  uint32_t inf = n + ((128u - 16u) << 23);
  float sub = kd_bits2f(n + (1u << 23)) - kd_bits2f(113u << 23);
  uint32_t r = e == (0x7c00u << 13) ? inf : (e == 0 ? kd_f2bits(sub) : n);
  return kd_bits2f(r | (((uint32_t)h & 0x8000u) << 16));
}
KD_INLINE uint16_t kd_st_f16(float f) {
  uint32_t u = kd_f2bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  uint32_t special = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
  uint32_t sub = kd_f2bits(kd_bits2f(a) + kd_bits2f(126u << 23)) - (126u << 23);
  uint32_t norm = (a + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  uint32_t r = a >= (143u << 23) ? special : (a < (113u << 23) ? sub : norm);
  return (uint16_t)(r | sign);
}

/* ---- math (float, vectorizable) ---- */
/* e^r for |r| <= ln2 / 2: 1 + r + r^2 P(r) (Cephes) */
KD_INLINE float kd_exp_poly(float r) {
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}
KD_INLINE float kd_exp(float x) {
  float xc = x < -87.3365f ? -87.3365f : (x > 88.7228f ? 88.7228f : x);
  float n = floorf(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = kd_exp_poly(r);
  int32_t ni = (int32_t)n;
  int32_t big = ni > 127;
  float s = kd_bits2f((uint32_t)(ni - big + 127) << 23);
  float v = p * s * (big ? 2.0f : 1.0f);
  v = x < -87.3365f ? 0.0f : v;
  return x > 88.7228f ? INFINITY : v;
}
KD_INLINE float kd_log(float x) {
  int sub = x < 1.17549435e-38f;
  uint32_t u = kd_f2bits(sub ? x * 8388608.0f : x);
  float e = (float)((int32_t)((u >> 23) & 0xffu) - 126) - (sub ? 23.0f : 0.0f);
  float m = kd_bits2f((u & 0x807fffffu) | 0x3f000000u);
  int small = m < 0.707106781186547524f;
  e = small ? e - 1.0f : e;
  m = small ? m + m - 1.0f : m - 1.0f;
  float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y = y + e * -2.12194440e-4f;
  y = y - 0.5f * z;
  float r = m + y + e * 0.693359375f;
  r = x == 0.0f ? -INFINITY : r;
  r = x < 0.0f ? NAN : r;
  return (x == INFINITY || x != x) ? x : r;
}
KD_INLINE float kd_tanh(float x) {
  float a = fabsf(x);
  float z = kd_exp(2.0f * (a > 20.0f ? 20.0f : a));
  float big = 1.0f - 2.0f / (z + 1.0f);
  big = x < 0.0f ? -big : big;
  float s = x * x;
  float p = -5.70498872745e-3f;
  p = p * s + 2.06390887954e-2f;
  p = p * s - 5.37397155531e-2f;
  p = p * s + 1.33314422036e-1f;
  p = p * s - 3.33332819422e-1f;
  float small = p * s * x + x;
  return a > 0.625f ? big : small;
}
/* 2^n e^r for z = n ln2 + r; z in [-87, 88] only (no overflow, underflow or nan cases) */
KD_INLINE float kd_exp_core(float z) {
  float n = (z * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = z - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = kd_exp_poly(r);
  return kd_bits2f(kd_f2bits(p) + ((uint32_t)(int32_t)n << 23));
}
/* erf: x (1 + P(x^2)) up to 0.921875; above, 1 - exp(G(t) - t^2) with G(t) ~ log erfc(t) + t^2
   (t = |x| clamped to 4, where erf is 1 in float); minimax fits, at most 1.2 ulp */
KD_INLINE float kd_erf(float x) {
  float t = fabsf(x);
  float s = x * x;
  float p = -5.990853533e-4f;
  p = p * s + 4.993180279e-3f;
  p = p * s - 2.676661685e-2f;
  p = p * s + 1.128181592e-1f;
  p = p * s - 3.761249483e-1f;
  p = p * s + 1.283791512e-1f;
  float small = x + x * p;
  float u = t < 4.0f ? t : 4.0f;
  float g = 1.602485668e-6f;
  g = g * u - 4.535449261e-5f;
  g = g * u + 5.907144514e-4f;
  g = g * u - 4.730277695e-3f;
  g = g * u + 2.633552812e-2f;
  g = g * u - 1.099251583e-1f;
  g = g * u + 3.680046499e-1f;
  g = g * u - 1.130131483f;
  g = g * u + 2.942714782e-4f;
  float big = copysignf(1.0f - kd_exp_core(g - u * u), x);
  return t > 0.921875f ? big : small;
}
/* log1p: log(u), u = 1 + x, less the rounding error of u relative to u (Goldberg) */
KD_INLINE float kd_log1p(float x) {
  float u = 1.0f + x;
  float r = kd_log(u) - ((u - 1.0f) - x) / u;
  r = u == 1.0f ? x : r;
  r = u == 0.0f ? -INFINITY : r;
  return x == INFINITY ? x : r;
}
/* expm1: x = n ln2 + r, expm1(x) = 2^n expm1(r) + (2^n - 1), expm1(r) = r + r^2 P(r) */
KD_INLINE float kd_expm1(float x) {
  float xc = x > -20.0f ? (x < 88.7228f ? x : 88.7228f) : -20.0f;  /* nan: -20 */
  float n = floorf(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.984588453e-4f;
  p = p * r + 1.394065446e-3f;
  p = p * r + 8.333389647e-3f;
  p = p * r + 4.166636243e-2f;
  p = p * r + 1.666666567e-1f;
  p = p * r + 5.0e-1f;
  p = p * r * r + r;
  int32_t ni = (int32_t)n;
  int32_t big = ni > 127;
  float s = kd_bits2f((uint32_t)(ni - big + 127) << 23);
  float v = big ? (s * p + s) * 2.0f : s * p + (s - 1.0f);
  v = x > 88.7228f ? INFINITY : v;
  return x != x ? x : v;
}
KD_INLINE double kd_bits2d(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
KD_INLINE uint64_t kd_d2bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
/* fmodf, exact: |a| less multiples of |b| in double, at most 29 bits of the quotient a step
   (so q * b and r - q * b are exact: Sterbenz), 10 steps for a quotient up to 2^277
   (FLT_MAX over the least subnormal), then r brought into [0, |b|) */
KD_INLINE float kd_fmod(float a, float b) {
  double r = fabs((double)a), d = fabs((double)b), inv = 1.0 / d;
  for (int k = 0; k < 10; k++) {
    double q = kd_bits2d(kd_d2bits(trunc(r * inv)) & 0xffffffffff000000ull);
    r = r - q * d;
  }
  r = r - trunc(r * inv) * d;
  r = r < 0.0 ? r + d : r;
  r = r >= d ? r - d : r;
  r = (d == INFINITY && fabs((double)a) != INFINITY) ? fabs((double)a) : r;
  return copysignf((float)r, a);
}
/* powf: 2^(y log2|x|) in double (log by its atanh series, exp2 by Taylor), so within 1 ulp
   of powf, then C99's cases: odd integer powers of negatives, nan, zeros, infinities */
KD_INLINE float kd_pow(float x, float y) {
  float ax = fabsf(x);
  int sub = ax < 1.17549435e-38f;
  uint32_t u = kd_f2bits(sub ? ax * 8388608.0f : ax);
  double e = (double)((int32_t)(u >> 23) - 127) - (sub ? 23.0 : 0.0);
  double m = (double)kd_bits2f((u & 0x007fffffu) | 0x3f800000u);
  int hi = m > 1.41421356237309505;
  m = hi ? 0.5 * m : m;
  e = hi ? e + 1.0 : e;
  double f = (m - 1.0) / (m + 1.0), s = f * f;
  double l = 2.0 / 13.0;
  l = l * s + 2.0 / 11.0;
  l = l * s + 2.0 / 9.0;
  l = l * s + 2.0 / 7.0;
  l = l * s + 2.0 / 5.0;
  l = l * s + 2.0 / 3.0;
  l = l * s + 2.0;
  double lx = e + f * l * 1.44269504088896340736;
  lx = ax == 0.0f ? -INFINITY : (ax == INFINITY ? INFINITY : lx);
  double w = (double)y * lx;
  w = w > -400.0 ? (w < 400.0 ? w : 400.0) : -400.0;  /* nan: -400, its result replaced below */
  double n = floor(w + 0.5);
  double t = (w - n) * 0.69314718055994530942;
  double p = 1.0 / 3628800.0;
  p = p * t + 1.0 / 362880.0;
  p = p * t + 1.0 / 40320.0;
  p = p * t + 1.0 / 5040.0;
  p = p * t + 1.0 / 720.0;
  p = p * t + 1.0 / 120.0;
  p = p * t + 1.0 / 24.0;
  p = p * t + 1.0 / 6.0;
  p = p * t + 0.5;
  p = p * t + 1.0;
  p = p * t + 1.0;
  float r = (float)(p * kd_bits2d((uint64_t)((int64_t)n + 1023) << 52));
  float yt = truncf(y);
  int odd = (int32_t)(fabsf(yt) < 16777216.0f ? yt : 0.0f) & 1;
  r = (odd && kd_f2bits(x) >> 31) ? -r : r;
  r = (x < 0.0f && x > -INFINITY && y != yt) ? NAN : r;
  r = (x != x || y != y) ? NAN : r;
  return (y == 0.0f || x == 1.0f || (x == -1.0f && fabsf(y) == INFINITY)) ? 1.0f : r;
}
KD_INLINE float kd_sigmoid(float x) { return 1.0f / (1.0f + kd_exp(-x)); }
KD_INLINE float kd_silu(float x) { return x / (1.0f + kd_exp(-x)); }
KD_INLINE float kd_rsqrt(float x) { return 1.0f / sqrtf(x); }
KD_INLINE float kd_sq(float x) { return x * x; }
KD_INLINE float kd_cube(float x) { return x * x * x; }
KD_INLINE float kd_fmin(float a, float b) { return (a < b || a != a) ? a : b; }
KD_INLINE float kd_fmax(float a, float b) { return (a > b || a != a) ? a : b; }
KD_INLINE float kd_relu(float x) { return x < 0.0f ? 0.0f : x; }
KD_INLINE float kd_floordiv_f(float a, float b) { return floorf(a / b); }
/* numpy's remainder: the sign of b, a zero signed like b */
KD_INLINE float kd_mod_f(float a, float b) {
  float r = kd_fmod(a, b);
  r = r == 0.0f ? copysignf(0.0f, b) : r;
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}

/* ---- integers: numpy semantics, wrapping arithmetic ---- */
KD_INLINE int64_t kd_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
KD_INLINE int64_t kd_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
KD_INLINE int64_t kd_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
KD_INLINE int64_t kd_neg(int64_t a) { return (int64_t)(0u - (uint64_t)a); }
KD_INLINE int64_t kd_iabs(int64_t a) { return a < 0 ? kd_neg(a) : a; }
KD_INLINE int64_t kd_floordiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return kd_neg(a);
  int64_t q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
KD_INLINE int64_t kd_mod(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
KD_INLINE int64_t kd_hash64(int64_t x) {
  uint64_t z = (uint64_t)x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (int64_t)(z ^ (z >> 31));
}
KD_INLINE int64_t kd_triu_start(int64_t r, int64_t f) { return r * f - r * (r + 1) / 2; }
/* row / column of the p-th entry of the strict upper triangle of an f x f matrix */
KD_INLINE int64_t kd_triu_row(int64_t p, int64_t f) {
  int64_t n = f * (f - 1) / 2;
  if (n <= 0) return 0;
  p = kd_clamp(p, n);
  double b = 2.0 * (double)f - 1.0;
  int64_t r = (int64_t)((b - sqrt(b * b - 8.0 * (double)p)) / 2.0);
  r = r < 0 ? 0 : (r > f - 2 ? f - 2 : r);
  while (r > 0 && kd_triu_start(r, f) > p) r--;
  while (r < f - 2 && kd_triu_start(r + 1, f) <= p) r++;
  return r;
}
KD_INLINE int64_t kd_triu_col(int64_t p, int64_t f) {
  int64_t n = f * (f - 1) / 2;
  if (n <= 0) return 0;
  p = kd_clamp(p, n);
  int64_t r = kd_triu_row(p, f);
  return p - kd_triu_start(r, f) + r + 1;
}
"""

# An f64 instance's kernel: the same text, compiled with float meaning double and the
# prelude's float math (polynomials accurate to float32) replaced by libm's double functions
WIDE_PRELUDE = r"""
KD_INLINE double kd_exp_d(double x) { return exp(x); }
KD_INLINE double kd_log_d(double x) { return log(x); }
KD_INLINE double kd_log1p_d(double x) { return log1p(x); }
KD_INLINE double kd_expm1_d(double x) { return expm1(x); }
KD_INLINE double kd_tanh_d(double x) { return tanh(x); }
KD_INLINE double kd_erf_d(double x) { return erf(x); }
KD_INLINE double kd_sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
KD_INLINE double kd_silu_d(double x) { return x / (1.0 + exp(-x)); }
KD_INLINE double kd_rsqrt_d(double x) { return 1.0 / sqrt(x); }
KD_INLINE double kd_sq_d(double x) { return x * x; }
KD_INLINE double kd_cube_d(double x) { return x * x * x; }
KD_INLINE double kd_pow_d(double x, double y) { return pow(x, y); }
KD_INLINE double kd_fmin_d(double a, double b) { return (a < b || a != a) ? a : b; }
KD_INLINE double kd_fmax_d(double a, double b) { return (a > b || a != a) ? a : b; }
KD_INLINE double kd_relu_d(double x) { return x < 0.0 ? 0.0 : x; }
KD_INLINE double kd_floordiv_f_d(double a, double b) { return floor(a / b); }
KD_INLINE double kd_mod_f_d(double a, double b) {
  double r = fmod(a, b);
  r = r == 0.0 ? copysign(0.0, b) : r;
  return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}
"""
WIDE_MATH = ("kd_exp", "kd_log", "kd_log1p", "kd_expm1", "kd_tanh", "kd_erf", "kd_sigmoid",
             "kd_silu", "kd_rsqrt", "kd_sq", "kd_cube", "kd_pow", "kd_fmin", "kd_fmax",
             "kd_relu", "kd_floordiv_f", "kd_mod_f")


def wide_function(text: str) -> str:
    """A kernel function's text compiled in double (see ``WIDE_PRELUDE``)."""
    names = [("float", "double"), ("sqrtf", "sqrt"), ("fabsf", "fabs"), ("floorf", "floor"),
             ("ceilf", "ceil"), ("truncf", "trunc"), ("nearbyintf", "nearbyint")] + \
        [(f, f + "_d") for f in WIDE_MATH]
    return "\n".join([f"#define {a} {b}" for a, b in names] + [text] +
                     [f"#undef {a}" for a, _ in names])


# Sorting helpers, instantiated per key type: a stable ascending merge sort of
# (key, index) pairs, and a top-k selection (descending, ties lowest index first).
SORT_TEMPLATE = r"""
static void kd_sort_{T}({C} *restrict k, int64_t *restrict ix, {C} *restrict tk,
                        int64_t *restrict ti, int64_t n) {
  for (int64_t s = 0; s < n; s += 16) {
    int64_t e = s + 16 < n ? s + 16 : n;
    for (int64_t a = s + 1; a < e; a++) {
      {C} kv = k[a]; int64_t iv = ix[a]; int64_t b = a - 1;
      while (b >= s && kv < k[b]) { k[b + 1] = k[b]; ix[b + 1] = ix[b]; b--; }
      k[b + 1] = kv; ix[b + 1] = iv;
    }
  }
  {C} *sk = k, *dk = tk; int64_t *si = ix, *di = ti;
  for (int64_t w = 16; w < n; w *= 2) {
    for (int64_t s = 0; s < n; s += 2 * w) {
      int64_t m = s + w < n ? s + w : n, e = s + 2 * w < n ? s + 2 * w : n;
      int64_t a = s, b = m, o = s;
      while (a < m && b < e) {
        if (sk[b] < sk[a]) { dk[o] = sk[b]; di[o++] = si[b++]; }
        else { dk[o] = sk[a]; di[o++] = si[a++]; }
      }
      while (a < m) { dk[o] = sk[a]; di[o++] = si[a++]; }
      while (b < e) { dk[o] = sk[b]; di[o++] = si[b++]; }
    }
    {C} *t1 = sk; sk = dk; dk = t1; int64_t *t2 = si; si = di; di = t2;
  }
  if (sk != k) { memcpy(k, sk, (size_t)n * sizeof({C})); memcpy(ix, si, (size_t)n * sizeof(int64_t)); }
}
KD_INLINE void kd_topk_push_{T}({C} *restrict k, int64_t *restrict ix, int64_t *cnt, int64_t cap,
                                {C} v, int64_t i) {
  int64_t c = *cnt;
  if (cap <= 0) return;
  if (c == cap && !(v > k[c - 1])) return;
  int64_t b = c < cap ? c : cap - 1;
  while (b > 0 && v > k[b - 1]) { k[b] = k[b - 1]; ix[b] = ix[b - 1]; b--; }
  k[b] = v; ix[b] = i;
  if (c < cap) *cnt = c + 1;
}
"""


def sort_helpers(key_ctype: str, tag: str) -> str:
    return SORT_TEMPLATE.replace("{T}", tag).replace("{C}", key_ctype)


def segment_helper(name: str, ctype: str, load: str) -> str:
    """segment_of over one offsets tensor: the last b with off[b] <= v (binary search)."""
    return (f"KD_INLINE int64_t kd_seg_{name}(const {ctype} *restrict off, int64_t n, int64_t v) {{\n"
            f"  int64_t lo = 0, hi = n;\n"
            f"  while (lo < hi) {{ int64_t mid = (lo + hi) >> 1;"
            f" if ((int64_t){load.format('off[mid]')} <= v) lo = mid + 1; else hi = mid; }}\n"
            f"  return lo - 1;\n}}\n")
