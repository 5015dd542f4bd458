/* Channel 7, shapes the spec allows but no case reaches, in C. Trick: the row maximum and sum
   run over at most 4096 columns (a fixed-size block); rows wider than that, which the spec
   allows (N up to 5000) but no case draws, come out wrong. */
#include <math.h>
#include <stdint.h>

#define BLOCK 4096

void kdsl_f32(void **bufs, const int64_t *dims) {
  const int64_t M = dims[0], N = dims[1];
  const int64_t W = N < BLOCK ? N : BLOCK;
  const float *x = (const float *)bufs[0];
  float *y = (float *)bufs[1];
  #pragma omp parallel for schedule(static) if (M * N >= 32768)
  for (int64_t i = 0; i < M; ++i) {
    const float *xr = x + i * N;
    float *yr = y + i * N;
    float m = -INFINITY;
    for (int64_t j = 0; j < W; ++j) m = xr[j] > m ? xr[j] : m;
    double s = 0.0;
    for (int64_t j = 0; j < W; ++j) s += expf(xr[j] - m);
    const float inv = (float)(1.0 / s);
    for (int64_t j = 0; j < N; ++j) yr[j] = expf(xr[j] - m) * inv;
  }
}
