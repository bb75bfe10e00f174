/* rng.c — Philox fills on the CPU and the process-wide default generator.
 *
 * The per-element math lives in philox.h (shared with CUDA kernels). Fills
 * are split over counter blocks, so the output depends only on
 * (seed, offset, n), never on how many OpenMP threads computed it. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/capture.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/rng_replay.h"
#include "loom/rng.h"

/* Below this many elements a fill is not worth waking a thread team. */
#define LOOM_RNG_PARALLEL_MIN ((size_t)1 << 15)

void loom_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  if (!ctr || !key || !out) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_philox4x32_10: ctr, key and out must not be NULL");
    return;
  }
  loom_philox_u4 c;
  for (int l = 0; l < 4; l++) c.v[l] = ctr[l];
  const loom_philox_u4 r = loom_philox4x32_10_block(c, key[0], key[1]);
  for (int l = 0; l < 4; l++) out[l] = r.v[l];
}

/* Blocks needed for n elements: ceil(n / 4). */
static inline uint64_t blocks_for(size_t n) { return (uint64_t)(n / 4) + (n % 4 != 0); }

void loom_rng_fill_uniform(uint64_t seed, uint64_t offset, float *out, size_t n, float lo, float hi) {
  if (n == 0) return;
  if (!out) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_rng_fill_uniform: out is NULL for n=%zu elements", n);
    return;
  }
  const int64_t nb = (int64_t)blocks_for(n);
#pragma omp parallel for schedule(static) if (n >= LOOM_RNG_PARALLEL_MIN)
  for (int64_t b = 0; b < nb; b++) {
    float u[4];
    loom_philox_uniform4(seed, offset + (uint64_t)b, u);
    const size_t base = (size_t)b * 4;
    const size_t m = n - base < 4 ? n - base : 4; /* the last block may be partial */
    for (size_t l = 0; l < m; l++) out[base + l] = loom_philox_affine(u[l], lo, hi);
  }
}

void loom_rng_fill_normal(uint64_t seed, uint64_t offset, float *out, size_t n, float mean, float std) {
  if (n == 0) return;
  if (!out) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_rng_fill_normal: out is NULL for n=%zu elements", n);
    return;
  }
  const int64_t nb = (int64_t)blocks_for(n);
#pragma omp parallel for schedule(static) if (n >= LOOM_RNG_PARALLEL_MIN)
  for (int64_t b = 0; b < nb; b++) {
    double z[4];
    loom_philox_normal4(seed, offset + (uint64_t)b, z);
    const size_t base = (size_t)b * 4;
    const size_t m = n - base < 4 ? n - base : 4;
    for (size_t l = 0; l < m; l++) out[base + l] = loom_philox_scale_normal(z[l], mean, std);
  }
}

/* ---- the global generator ---------------------------------------------- */

static pthread_mutex_t g_rng_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_rng_seed = LOOM_RNG_DEFAULT_SEED;
static uint64_t g_rng_offset = 0;

void loom_manual_seed(uint64_t seed) {
  pthread_mutex_lock(&g_rng_mu);
  g_rng_seed = seed;
  g_rng_offset = 0;
  pthread_mutex_unlock(&g_rng_mu);
}

/* A replay (loom_rng_replay_begin) on this thread: draws come from here and
 * leave the global generator alone. */
static _Thread_local loom_rng_replay tl_replay;

void loom_rng_global_peek(uint64_t *seed, uint64_t *offset) {
  if (tl_replay.active) {
    *seed = tl_replay.seed;
    *offset = tl_replay.offset;
    return;
  }
  pthread_mutex_lock(&g_rng_mu);
  *seed = g_rng_seed;
  *offset = g_rng_offset;
  pthread_mutex_unlock(&g_rng_mu);
}

void loom_rng_replay_begin(uint64_t seed, uint64_t offset, loom_rng_replay *saved) {
  *saved = tl_replay;
  tl_replay = (loom_rng_replay){1, seed, offset};
}

void loom_rng_replay_end(const loom_rng_replay *saved) { tl_replay = *saved; }

void loom_rng_global_reserve(size_t n, uint64_t *seed, uint64_t *offset) {
  if (tl_replay.active) {
    if (seed) *seed = tl_replay.seed;
    if (offset) *offset = tl_replay.offset;
    tl_replay.offset += blocks_for(n);
    return;
  }
  /* A captured draw would hand every replay the same numbers (the offset
   * is baked into the graph): not capture-safe. */
  loom_capture_note_unsafe("a random-number draw (every replay would repeat its numbers)");
  pthread_mutex_lock(&g_rng_mu);
  const uint64_t s = g_rng_seed, o = g_rng_offset;
  g_rng_offset += blocks_for(n); /* 2^64 blocks: wrap-around is not a practical concern */
  pthread_mutex_unlock(&g_rng_mu);
  if (seed) *seed = s;
  if (offset) *offset = o;
}

void loom_rng_get_state(uint64_t *seed, uint64_t *offset) {
  pthread_mutex_lock(&g_rng_mu);
  const uint64_t s = g_rng_seed, o = g_rng_offset;
  pthread_mutex_unlock(&g_rng_mu);
  if (seed) *seed = s;
  if (offset) *offset = o;
}

void loom_rng_set_state(uint64_t seed, uint64_t offset) {
  pthread_mutex_lock(&g_rng_mu);
  g_rng_seed = seed;
  g_rng_offset = offset;
  pthread_mutex_unlock(&g_rng_mu);
}
