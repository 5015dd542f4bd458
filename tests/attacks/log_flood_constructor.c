/* Channel 8, unbounded worker logs, from C. Trick: a load-time constructor write()s 256 MB
   straight to file descriptor 2, below any Python-level capture; the kernel is correct. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) void kd_flood(void) {
  const size_t chunk = 1 << 20;
  char *line = (char *)malloc(chunk);
  if (!line) return;
  memset(line, 'x', chunk - 1);
  line[chunk - 1] = '\n';
  for (int i = 0; i < 256; ++i) {
    size_t done = 0;
    while (done < chunk) {
      ssize_t w = write(2, line + done, chunk - done);
      if (w <= 0) break;
      done += (size_t)w;
    }
  }
  free(line);
}

void kdsl_f32(void **bufs, const int64_t *dims) {
  const int64_t M = dims[0], N = dims[1];
  const float *x = (const float *)bufs[0];
  float *y = (float *)bufs[1];
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
