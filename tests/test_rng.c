/* test_rng.c — Philox4x32-10 known answers, fill determinism, distribution
 * moments, thread-count independence and the global generator. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/philox.h"
#include "loom/rng.h"
#include "loom/status.h"

/* Random123 kat_vectors, philox4x32 with 10 rounds. */
static const struct {
  uint32_t ctr[4], key[2], out[4];
} kat[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

Test(philox, known_answer_vectors) {
  for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
    uint32_t out[4] = {0};
    loom_philox4x32_10(kat[i].ctr, kat[i].key, out);
    for (int l = 0; l < 4; l++)
      cr_assert_eq(out[l], kat[i].out[l], "vector %zu lane %d: 0x%08x, expected 0x%08x", i, l, out[l], kat[i].out[l]);
  }
}

Test(philox, fill_uses_documented_counter_key_and_lanes) {
  /* Element i of a uniform fill at (seed, offset) is built from lane i%4 of
   * philox(ctr = offset + i/4 as (lo, hi, 0, 0), key = (seed lo, seed hi)). */
  const uint64_t seed = 0x0123456789abcdefull, offset = 0xfffffffeull; /* crosses 2^32 */
  enum { N = 4 * 5 };
  float got[N];
  loom_rng_fill_uniform(seed, offset, got, N, 0.0f, 1.0f);
  for (int i = 0; i < N; i++) {
    uint64_t blk = offset + (uint64_t)(i / 4);
    uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    loom_philox4x32_10(ctr, key, out);
    double want = ((double)(out[i % 4] >> 9) + 0.5) * 0x1p-23;
    cr_assert_eq((double)got[i], want, "element %d: %a, expected %a", i, (double)got[i], want);
  }
}

Test(philox, uniform_mapping_extremes) {
  cr_assert_eq(loom_philox_uniform01(0), 0x1p-24f);
  cr_assert_eq(loom_philox_uniform01(0xffffffffu), 1.0f - 0x1p-24f);
  cr_assert_lt(loom_philox_uniform01(0xffffffffu), 1.0f);
  cr_assert_gt(loom_philox_uniform01(0), 0.0f);
}

Test(philox, normal_is_box_muller_of_the_block) {
  const uint64_t seed = 7, offset = 1000;
  float z[8];
  loom_rng_fill_normal(seed, offset, z, 8, 0.0f, 1.0f);
  for (int b = 0; b < 2; b++) {
    uint32_t ctr[4] = {(uint32_t)(offset + b), 0, 0, 0}, key[2] = {7, 0}, x[4];
    loom_philox4x32_10(ctr, key, x);
    for (int p = 0; p < 4; p += 2) {
      double ua = ((double)(x[p] >> 9) + 0.5) * 0x1p-23, ub = ((double)(x[p + 1] >> 9) + 0.5) * 0x1p-23;
      double r = sqrt(-2.0 * log(ua));
      double za = r * cos(2 * M_PI * ub), zb = r * sin(2 * M_PI * ub);
      cr_assert_float_eq(z[4 * b + p], za, 1e-6, "block %d lane %d", b, p);
      cr_assert_float_eq(z[4 * b + p + 1], zb, 1e-6, "block %d lane %d", b, p + 1);
    }
  }
}

Test(rng, deterministic_and_offset_is_a_shift) {
  enum { N = 1003, K = 37 }; /* N not a multiple of 4: a partial last block */
  float *a = malloc(sizeof(float) * (N + 4 * K));
  float *b = malloc(sizeof(float) * N);
  float *c = malloc(sizeof(float) * N);
  cr_assert(a && b && c);
  for (int kind = 0; kind < 2; kind++) {
    if (kind == 0) {
      loom_rng_fill_uniform(99, 0, a, N + 4 * K, -2.0f, 3.0f);
      loom_rng_fill_uniform(99, K, b, N, -2.0f, 3.0f);
      loom_rng_fill_uniform(99, K, c, N, -2.0f, 3.0f);
    } else {
      loom_rng_fill_normal(99, 0, a, N + 4 * K, 1.0f, 2.0f);
      loom_rng_fill_normal(99, K, b, N, 1.0f, 2.0f);
      loom_rng_fill_normal(99, K, c, N, 1.0f, 2.0f);
    }
    cr_assert_arr_eq(b, c, sizeof(float) * N, "same (seed, offset) gave different numbers");
    cr_assert_arr_eq(b, a + 4 * K, sizeof(float) * N, "fill at offset %d is not the tail of a fill at 0", K);
    /* A prefix of a fill is the shorter fill. */
    loom_rng_fill_uniform(99, K, c, 5, -2.0f, 3.0f);
    if (kind == 1) loom_rng_fill_normal(99, K, c, 5, 1.0f, 2.0f);
    cr_assert_arr_eq(c, b, sizeof(float) * 5);
  }
  /* Different seeds or offsets give different streams. */
  loom_rng_fill_uniform(100, 0, b, N, -2.0f, 3.0f);
  cr_assert(memcmp(a, b, sizeof(float) * N) != 0);
  loom_rng_fill_uniform(99, 1, b, N, -2.0f, 3.0f);
  cr_assert(memcmp(a, b, sizeof(float) * N) != 0);
  free(a);
  free(b);
  free(c);
}

Test(rng, uniform_range_and_moments) {
  enum { N = 1000000 };
  float *x = malloc(sizeof(float) * N);
  cr_assert(x);
  loom_rng_fill_uniform(12345, 0, x, N, 0.0f, 1.0f);
  double s = 0, s2 = 0;
  int bins[10] = {0};
  for (int i = 0; i < N; i++) {
    cr_assert(x[i] > 0.0f && x[i] < 1.0f, "element %d = %a outside (0,1)", i, (double)x[i]);
    s += x[i];
    s2 += (double)x[i] * x[i];
    bins[(int)(x[i] * 10)]++;
  }
  double mean = s / N, var = s2 / N - mean * mean;
  /* sd of the mean: sqrt(1/12/N) = 2.9e-4; of the variance ~ 8.9e-5/sqrt(N)*... use ~5 sigma */
  cr_assert_float_eq(mean, 0.5, 1.5e-3, "mean %f", mean);
  cr_assert_float_eq(var, 1.0 / 12, 5e-4, "variance %f", var);
  for (int b = 0; b < 10; b++) /* each bin: 100000 +- 300 (1 sd); allow ~5 sd */
    cr_assert(abs(bins[b] - N / 10) < 1500, "bin %d has %d", b, bins[b]);

  /* A shifted, scaled range. */
  loom_rng_fill_uniform(12345, 0, x, N, -3.0f, 5.0f);
  s = 0;
  for (int i = 0; i < N; i++) {
    cr_assert(x[i] >= -3.0f && x[i] <= 5.0f, "element %d = %f", i, (double)x[i]);
    s += x[i];
  }
  cr_assert_float_eq(s / N, 1.0, 0.012, "mean %f", s / N);
  free(x);
}

Test(rng, normal_moments) {
  enum { N = 1000000 };
  float *x = malloc(sizeof(float) * N);
  cr_assert(x);
  loom_rng_fill_normal(2024, 17, x, N, 0.0f, 1.0f);
  double s = 0, s2 = 0, s3 = 0, s4 = 0;
  int within1 = 0;
  for (int i = 0; i < N; i++) {
    double v = x[i];
    cr_assert(isfinite(v), "element %d not finite", i);
    s += v;
    s2 += v * v;
    s3 += v * v * v;
    s4 += v * v * v * v;
    within1 += fabs(v) < 1.0;
  }
  double mean = s / N, var = s2 / N - mean * mean;
  cr_assert_float_eq(mean, 0.0, 5e-3, "mean %f", mean);       /* sd 1e-3 */
  cr_assert_float_eq(sqrt(var), 1.0, 5e-3, "std %f", sqrt(var)); /* sd ~7e-4 */
  cr_assert_float_eq(s3 / N, 0.0, 0.02, "skewness %f", s3 / N);   /* sd ~2.4e-3 */
  cr_assert_float_eq(s4 / N, 3.0, 0.05, "kurtosis %f", s4 / N);   /* sd ~1e-2 */
  cr_assert_float_eq((double)within1 / N, 0.682689, 3e-3, "P(|z|<1) = %f", (double)within1 / N);

  /* mean/std are applied. */
  loom_rng_fill_normal(2024, 17, x, N, 10.0f, 0.5f);
  s = s2 = 0;
  for (int i = 0; i < N; i++) {
    s += x[i];
    s2 += (double)x[i] * x[i];
  }
  mean = s / N;
  cr_assert_float_eq(mean, 10.0, 5e-3, "mean %f", mean);
  cr_assert_float_eq(sqrt(s2 / N - mean * mean), 0.5, 5e-3);
  free(x);
}

Test(rng, independent_of_thread_count) {
#ifndef _OPENMP
  cr_skip_test("built without OpenMP: nothing to compare");
#else
  enum { N = (1 << 20) + 3 }; /* well above the parallel threshold */
  float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
  cr_assert(a && b);
  for (int kind = 0; kind < 2; kind++) {
    omp_set_num_threads(1);
    if (kind == 0) loom_rng_fill_uniform(5, 3, a, N, 0.0f, 1.0f);
    else loom_rng_fill_normal(5, 3, a, N, 0.0f, 1.0f);
    omp_set_num_threads(2);
    memset(b, 0, sizeof(float) * N);
    if (kind == 0) loom_rng_fill_uniform(5, 3, b, N, 0.0f, 1.0f);
    else loom_rng_fill_normal(5, 3, b, N, 0.0f, 1.0f);
    cr_assert_arr_eq(a, b, sizeof(float) * N, "1 and 2 threads disagree (kind %d)", kind);
    /* And the parallel fill equals element-wise small fills (serial path). */
    float c[4];
    for (size_t i = 0; i < N; i += 99991) {
      size_t blk = i / 4;
      if (kind == 0) loom_rng_fill_uniform(5, 3 + blk, c, 4, 0.0f, 1.0f);
      else loom_rng_fill_normal(5, 3 + blk, c, 4, 0.0f, 1.0f);
      cr_assert(memcmp(&c[i % 4], &b[i], sizeof(float)) == 0, "element %zu (kind %d)", i, kind);
    }
  }
  free(a);
  free(b);
#endif
}

Test(rng, global_generator_reserves_blocks) {
  uint64_t s0, o0, s1, o1, s2, o2;
  /* A fresh process starts at the documented default. */
  loom_rng_global_reserve(10, &s0, &o0);
  cr_assert_eq(s0, LOOM_RNG_DEFAULT_SEED);
  cr_assert_eq(o0, 0);
  loom_rng_global_reserve(1, &s1, &o1); /* 10 elements took ceil(10/4) = 3 blocks */
  cr_assert_eq(o1, 3);
  loom_rng_global_reserve(0, &s1, &o1); /* 1 element: 1 block; 0: none */
  cr_assert_eq(o1, 4);
  loom_rng_global_reserve(8, &s1, &o1);
  cr_assert_eq(o1, 4);
  loom_rng_global_reserve(1, NULL, NULL); /* NULL outputs are allowed */
  loom_rng_global_reserve(1, &s1, &o1);
  cr_assert_eq(o1, 7);

  loom_manual_seed(0xabcdef0123ull);
  loom_rng_global_reserve(5, &s2, &o2);
  cr_assert_eq(s2, 0xabcdef0123ull);
  cr_assert_eq(o2, 0);
  loom_rng_global_reserve(5, &s2, &o2);
  cr_assert_eq(o2, 2);
}

#define THREADS 4
#define PER_THREAD 2000
static uint64_t reserved[THREADS][PER_THREAD];
static void *reserve_worker(void *arg) {
  uint64_t *mine = arg;
  for (int i = 0; i < PER_THREAD; i++) loom_rng_global_reserve(4, NULL, &mine[i]);
  return NULL;
}
static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

Test(rng, global_reserve_is_thread_safe) {
  loom_manual_seed(1);
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) cr_assert_eq(pthread_create(&th[t], NULL, reserve_worker, reserved[t]), 0);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  /* Every reservation got its own block: offsets are exactly 0..N-1. */
  qsort(reserved, THREADS * PER_THREAD, sizeof(uint64_t), cmp_u64);
  for (int i = 0; i < THREADS * PER_THREAD; i++) cr_assert_eq(((uint64_t *)reserved)[i], (uint64_t)i);
}

Test(rng, null_output_is_an_error_not_a_crash) {
  loom_clear_error();
  loom_rng_fill_uniform(1, 0, NULL, 0, 0.0f, 1.0f); /* n == 0: nothing to do */
  cr_assert_eq(loom_last_status(), LOOM_OK);
  loom_rng_fill_uniform(1, 0, NULL, 16, 0.0f, 1.0f);
  cr_assert_eq(loom_last_status(), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "out is NULL") != NULL, "message: %s", loom_last_error());
  loom_clear_error();
  loom_rng_fill_normal(1, 0, NULL, 16, 0.0f, 1.0f);
  cr_assert_eq(loom_last_status(), LOOM_ERR_INVALID_ARG);
  loom_clear_error();
  uint32_t out[4];
  loom_philox4x32_10(NULL, NULL, out);
  cr_assert_eq(loom_last_status(), LOOM_ERR_INVALID_ARG);
}
