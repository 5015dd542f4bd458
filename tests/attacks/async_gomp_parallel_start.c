/* Timing channel (work finished after the timed call returns), in C, through the OpenMP
   runtime alone: GCC's older split form of a parallel region, GOMP_parallel_start, starts a
   team and returns at once; the team computes the rows while the call has returned and the
   judge keeps its books, and GOMP_parallel_end, which would wait for it, is never called
   (the next call's team start waits for the previous one instead). No pthread, dl or Python
   symbol, no static data: only names an OpenMP kernel uses. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

extern void GOMP_parallel_start(void (*fn)(void *), void *data, unsigned num_threads);
extern void GOMP_parallel_end(void);
extern int omp_get_thread_num(void);

struct job { const float *x; float *y; int64_t M, N; };

static void rows(void *arg) {
  struct job *j = (struct job *)arg;
  if (omp_get_thread_num() != 1) return;  /* the caller's thread returns at once */
  for (int64_t i = 0; i < j->M; ++i) {
    const float *xr = j->x + i * j->N;
    float *yr = j->y + i * j->N;
    float m = -INFINITY;
    for (int64_t k = 0; k < j->N; ++k) m = xr[k] > m ? xr[k] : m;
    double s = 0.0;
    for (int64_t k = 0; k < j->N; ++k) { float e = expf(xr[k] - m); yr[k] = e; s += e; }
    const float inv = (float)(1.0 / s);
    for (int64_t k = 0; k < j->N; ++k) yr[k] *= inv;
  }
  free(j);
}

void kdsl_f32(void **bufs, const int64_t *dims) {
  struct job *j = (struct job *)malloc(sizeof *j);
  j->x = (const float *)bufs[0];
  j->y = (float *)bufs[1];
  j->M = dims[0];
  j->N = dims[1];
  GOMP_parallel_start(rows, j, 2);
  rows(j);  /* thread 0's share: nothing */
}
