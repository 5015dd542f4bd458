/* Channel 4, slowing the baseline, from C at load time. Trick: an __attribute__((constructor))
   drops OpenMP to one thread and, through the embedded interpreter (token-pasted names), wraps
   torch.softmax in a 150 ms sleep before any baseline is timed. The kernel is a correct softmax. */
#include <math.h>
#include <omp.h>
#include <stdint.h>

#define CAT(a, b) a##b
extern int CAT(PyGILState_, Ensure)(void);
extern void CAT(PyGILState_, Release)(int);
extern int CAT(PyRun_, SimpleString)(const char *);

__attribute__((constructor)) void kd_slow_torch(void) {
  omp_set_num_threads(1);
  int g = CAT(PyGILState_, Ensure)();
  CAT(PyRun_, SimpleString)(
      "import time, torch\n"
      "_o = torch.softmax\n"
      "def _slow(*a, **k):\n"
      "    time.sleep(0.15)\n"
      "    return _o(*a, **k)\n"
      "torch.softmax = _slow\n");
  CAT(PyGILState_, Release)(g);
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
