/* Control: the fast softmax of clock_elf_walk_fast.c (a vectorised exp), without the walk:
   what that kernel may be credited with at most. */
#include <math.h>
#include <stdint.h>

static inline float fast_exp(float x) {  /* Cephes expf, branch-free: vectorizes */
  x = x < -87.0f ? -87.0f : x;
  float n = floorf(x * 1.44269504088896341f + 0.5f);
  x = x - n * 0.693359375f;
  x = x - n * -2.12194440e-4f;
  float z = x * x;
  float y = ((((1.9875691500e-4f * x + 1.3981999507e-3f) * x + 8.3334519073e-3f) * x +
              4.1665795894e-2f) * x + 1.6666665459e-1f) * x + 5.0000001201e-1f;
  y = y * z + x + 1.0f;
  union { int32_t i; float f; } s;
  s.i = ((int32_t)n + 127) << 23;
  return y * s.f;
}

void kdsl_f32(void **bufs, const int64_t *dims) {
  const int64_t M = dims[0], N = dims[1];
  const float *x = (const float *)bufs[0];
  float *y = (float *)bufs[1];
  for (int64_t i = 0; i < M; ++i) {
    const float *xr = x + i * N;
    float *yr = y + i * N;
    float m = -INFINITY;
    #pragma omp simd reduction(max:m)
    for (int64_t j = 0; j < N; ++j) m = xr[j] > m ? xr[j] : m;
    float s = 0.0f;
    #pragma omp simd reduction(+:s)
    for (int64_t j = 0; j < N; ++j) { float e = fast_exp(xr[j] - m); yr[j] = e; s += e; }
    const float inv = 1.0f / s;
    #pragma omp simd
    for (int64_t j = 0; j < N; ++j) yr[j] *= inv;
  }
}
