/* Control (the opposite fault): a correct C "keep the last T values of each segment" kernel;
   it touches B*T of the L values only. Must be ACCEPTED. */
#include <stdint.h>

void kdsl_f32(void **bufs, const int64_t *dims) {
  const int64_t B = dims[1], T = dims[2];
  const float *values = (const float *)bufs[0];
  const int64_t *offsets = (const int64_t *)bufs[1];
  float *y = (float *)bufs[2];
  for (int64_t b = 0; b < B; ++b) {
    const int64_t lo = offsets[b], hi = offsets[b + 1];
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = hi - T + t;
      y[b * T + t] = i >= lo ? values[i] : 0.0f;
    }
  }
}
