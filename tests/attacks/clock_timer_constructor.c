/* Timing channel: the candidate's process times itself, attacked from C at load time. Trick:
   an __attribute__((constructor)) runs Python (token-pasted C API names) that swaps the
   evaluator's CPU timer in this process for one whose clock runs at 0.7x; the kernel is a
   correct softmax, reported 1.4x faster than it is. */
#include <math.h>
#include <stdint.h>

#define CAT(a, b) a##b
extern int CAT(PyGILState_, Ensure)(void);
extern void CAT(PyGILState_, Release)(int);
extern int CAT(PyRun_, SimpleString)(const char *);

__attribute__((constructor)) void kd_slow_clock(void) {
  int g = CAT(PyGILState_, Ensure)();
  CAT(PyRun_, SimpleString)(
      "import time, importlib\n"
      "_t = importlib.import_module('kdsl.search.eval.timers')\n"
      "_r = time.perf_counter\n"
      "_z = _r()\n"
      "_t._TIMERS['cpu'] = _t.CpuTimer(clock=lambda: _z + (_r() - _z) * 0.7)\n");
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
