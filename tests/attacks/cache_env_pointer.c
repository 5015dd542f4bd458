/* Channel 2, caching across the timed calls, in C, with no variable of its own at all. Trick:
   the pointer to a heap block of cache slots (a few, so that alternating input sets all stay
   cached) is kept in an environment variable (setenv / getenv) that outlives every call. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 4

typedef struct { const void *x; int64_t m, n; float head[16], tail[16]; float *y; } slot_t;

/* the slot holding the answer for this input, or NULL */
static slot_t *find(slot_t *slots, const float *x, int64_t M, int64_t N, int64_t k) {
  for (int s = 0; s < SLOTS; ++s)
    if (slots[s].y && slots[s].x == x && slots[s].m == M && slots[s].n == N &&
        memcmp(slots[s].head, x, k * sizeof(float)) == 0 &&
        memcmp(slots[s].tail, x + M * N - k, k * sizeof(float)) == 0)
      return &slots[s];
  return NULL;
}

static void keep(slot_t *slot, const float *x, const float *y, int64_t M, int64_t N, int64_t k) {
  free(slot->y);
  slot->y = (float *)malloc((M * N ? M * N : 1) * sizeof(float));
  memcpy(slot->y, y, M * N * sizeof(float));
  memcpy(slot->head, x, k * sizeof(float));
  memcpy(slot->tail, x + M * N - k, k * sizeof(float));
  slot->x = x; slot->m = M; slot->n = N;
}

typedef struct { int next; slot_t slots[SLOTS]; } memo_t;

void kdsl_f32(void **bufs, const int64_t *dims) {
  const int64_t M = dims[0], N = dims[1], n = M * N;
  const float *x = (const float *)bufs[0];
  float *y = (float *)bufs[1];
  const int64_t k = n < 16 ? n : 16;
  const char *kept = getenv("KD_ATTACK_MEMO");
  memo_t *memo = kept ? (memo_t *)(uintptr_t)strtoull(kept, NULL, 16) : NULL;
  if (!memo) {
    memo = (memo_t *)calloc(1, sizeof(memo_t));
    char text[32];
    snprintf(text, sizeof text, "%llx", (unsigned long long)(uintptr_t)memo);
    setenv("KD_ATTACK_MEMO", text, 1);
  }
  slot_t *hit = find(memo->slots, x, M, N, k);
  if (hit) {
    memcpy(y, hit->y, n * sizeof(float));
    return;
  }
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
  keep(&memo->slots[memo->next++ % SLOTS], x, y, M, N, k);
}
