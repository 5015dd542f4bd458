/* Control: a plain, correct C softmax (OpenMP over rows). Must be ACCEPTED. */
#include <math.h>
#include <stdint.h>

void kdsl_f32(void **bufs, const int64_t *dims) {
  const int64_t M = dims[0], N = dims[1];
  const float *x = (const float *)bufs[0];
  float *y = (float *)bufs[1];
  #pragma omp parallel for schedule(static) if (M * N >= 32768)
  for (int64_t i = 0; i < M; ++i) {
    const float *xr = x + i * N;
    float *yr = y + i * N;
    float m = -INFINITY;
    for (int64_t j = 0; j < N; ++j) m = xr[j] > m ? xr[j] : m;
    double s = 0.0;
    for (int64_t j = 0; j < N; ++j) { float e = expf(xr[j] - m); yr[j] = e; s += e; }
    const float inv = (float)(1.0 / s);
    for (int64_t j = 0; j < N; ++j) yr[j] *= inv;
  }
}
