/* test_gemm.c — correctness of the CPU SGEMM (lib/ops/cpu/gemm.c) against a
 * naive double-precision reference: the OpenBLAS path when it is linked and
 * every built-in micro-kernel this CPU can run (plus the unpacked fallback),
 * over all transpose combinations, odd sizes, K = 0, alpha/beta combinations,
 * beta = 0 with NaN-filled C, padded leading dimensions, and thread counts. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/gemm.h"

/* Value written to C's padding columns: the GEMM must never touch them. */
#define SENTINEL 12345.0f

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct gemm_case {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  int64_t pad_a, pad_b, pad_c; /* extra leading-dimension elements */
  bool nan_c;                  /* fill C with NaN (only meaningful for beta == 0) */
} gemm_case;

/* Runs one case with the currently selected implementation; returns false and
   fills msg on the first wrong element (verify = false skips the reference,
   for callers that only compare runs). Optionally hands back C (caller frees). */
static bool run_case(const gemm_case *t, bool verify, char *msg, size_t msglen, float **c_out)
{
  const int64_t M = t->M, N = t->N, K = t->K;
  const int64_t arows = t->ta ? K : M, acols = t->ta ? M : K;
  const int64_t brows = t->tb ? N : K, bcols = t->tb ? K : N;
  const int64_t lda = acols + t->pad_a, ldb = bcols + t->pad_b, ldc = N + t->pad_c;
  /* +1 so zero-sized operands still get a valid pointer. */
  float *A = malloc(sizeof(float) * (size_t)(arows * lda + 1));
  float *B = malloc(sizeof(float) * (size_t)(brows * ldb + 1));
  float *C = malloc(sizeof(float) * (size_t)(M * ldc + 1));
  float *C0 = malloc(sizeof(float) * (size_t)(M * ldc + 1));
  cr_assert(A && B && C && C0);
  for (int64_t i = 0; i < arows * lda; i++) A[i] = frand();
  for (int64_t i = 0; i < brows * ldb; i++) B[i] = frand();
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < ldc; j++) C[i * ldc + j] = j >= N ? SENTINEL : t->nan_c ? NAN : frand();
  memcpy(C0, C, sizeof(float) * (size_t)(M * ldc));

  loom_cpu_sgemm(t->ta, t->tb, M, N, K, t->alpha, A, lda, B, ldb, t->beta, C, ldc);

  bool ok = true;
  for (int64_t i = 0; i < M && ok && verify; i++) {
    for (int64_t j = 0; j < ldc && ok; j++) {
      const float got = C[i * ldc + j];
      if (j >= N) {
        if (got != SENTINEL) {
          snprintf(msg, msglen, "padding C[%lld,%lld] overwritten (%g)", (long long)i, (long long)j, got);
          ok = false;
        }
        continue;
      }
      double ref = 0.0, mag = 0.0;
      for (int64_t k = 0; k < K; k++) {
        const double a = t->ta ? A[k * lda + i] : A[i * lda + k];
        const double b = t->tb ? B[j * ldb + k] : B[k * ldb + j];
        ref += a * b;
        mag += fabs(a * b);
      }
      ref *= t->alpha;
      mag *= fabs(t->alpha);
      if (t->beta != 0.0f) {
        ref += (double)t->beta * C0[i * ldc + j];
        mag += fabs((double)t->beta * C0[i * ldc + j]);
      }
      /* float accumulation error grows ~linearly with K; 1e-6*K ~ 16x eps*K. */
      const double tol = 1e-6 * (double)(K + 4) * mag + 1e-30;
      if (!(fabs(got - ref) <= tol)) {
        snprintf(msg, msglen, "C[%lld,%lld] = %.9g, expected %.9g (tol %.3g)", (long long)i, (long long)j, got, ref,
                 tol);
        ok = false;
      }
    }
  }
  free(A);
  free(B);
  free(C0);
  if (c_out)
    *c_out = C;
  else
    free(C);
  return ok;
}

static void check(const gemm_case *t)
{
  char msg[256] = "";
  if (!run_case(t, true, msg, sizeof msg, NULL))
    cr_assert_fail("%s: ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g pads=%lld/%lld/%lld nan_c=%d: %s",
                   loom_cpu_gemm_impl(), t->ta, t->tb, (long long)t->M, (long long)t->N, (long long)t->K,
                   t->alpha, t->beta, (long long)t->pad_a, (long long)t->pad_b, (long long)t->pad_c, t->nan_c, msg);
}

/* The implementations one test should cover: index 0 is the default path
   (OpenBLAS when linked), then each built-in kernel this CPU supports. */
static const char *const builtin_names[] = {"avx512", "avx2", "generic", "unpacked"};
enum { N_IMPLS = 5 };

/* Selects implementation #idx; false if this build/CPU does not have it. */
static bool select_impl(int idx)
{
  if (idx == 0) {
    loom_cpu_gemm_force_builtin(false);
    loom_cpu_gemm_select_builtin(NULL);
    return strcmp(loom_cpu_gemm_impl(), "openblas") == 0;
  }
  loom_cpu_gemm_force_builtin(true);
  return loom_cpu_gemm_select_builtin(builtin_names[idx - 1]);
}

static const int64_t sizes[] = {1, 3, 7, 17, 33, 65, 129, 257};
enum { N_SIZES = sizeof sizes / sizeof sizes[0] };

/* Odd sizes mixed across M, N, K for every transpose combination. */
static void odd_sizes_all_transposes(int impl)
{
  if (!select_impl(impl)) return;
  for (int tr = 0; tr < 4; tr++)
    for (int i = 0; i < N_SIZES; i++)
      for (int j = 0; j < N_SIZES; j++) {
        const int64_t K = sizes[(i + j + tr) % N_SIZES];
        /* The unpacked loop is slow: skip its biggest cubes. */
        if (impl == 4 && sizes[i] * sizes[j] * K > 2000000) continue;
        const gemm_case t = {tr & 1, tr >> 1, sizes[i], sizes[j], K, 1.0f, 0.0f, 0, 0, 0, false};
        check(&t);
      }
}

Test(gemm, odd_sizes_default) { odd_sizes_all_transposes(0); }
Test(gemm, odd_sizes_avx512) { odd_sizes_all_transposes(1); }
Test(gemm, odd_sizes_avx2) { odd_sizes_all_transposes(2); }
Test(gemm, odd_sizes_generic) { odd_sizes_all_transposes(3); }
Test(gemm, odd_sizes_unpacked) { odd_sizes_all_transposes(4); }

/* alpha/beta combinations, NaN-filled C with beta == 0, padded leading dims,
   K == 0 and K past the KC block (so k slices accumulate on top of beta*C). */
Test(gemm, alpha_beta_pads_k0)
{
  static const float ab[][2] = {{1, 0}, {1, 1}, {-1.5f, 0.25f}, {2, 0}, {0, 2}, {0, 0}, {1, -1}, {0.5f, 1}};
  static const int64_t shapes[][3] = {{7, 33, 17}, {65, 17, 300}, {33, 129, 0}, {1, 1, 1}, {129, 65, 520}};
  for (int impl = 0; impl < N_IMPLS; impl++) {
    if (!select_impl(impl)) continue;
    for (int tr = 0; tr < 4; tr++)
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t c = 0; c < sizeof ab / sizeof ab[0]; c++)
          for (int pad = 0; pad < 2; pad++) {
            const bool nan_c = ab[c][1] == 0.0f;
            const gemm_case t = {tr & 1,       tr >> 1,           shapes[s][0], shapes[s][1],
                                 shapes[s][2], ab[c][0],          ab[c][1],     pad ? 5 : 0,
                                 pad ? 3 : 0,  pad ? 11 : 0,      nan_c};
            check(&t);
          }
  }
}

/* M or N of zero must not touch anything (C may even be NULL). */
Test(gemm, empty_is_noop)
{
  for (int impl = 0; impl < N_IMPLS; impl++) {
    if (!select_impl(impl)) continue;
    loom_cpu_sgemm(false, false, 0, 5, 5, 1.0f, NULL, 5, NULL, 5, 0.0f, NULL, 5);
    loom_cpu_sgemm(true, true, 5, 0, 5, 1.0f, NULL, 5, NULL, 5, 0.0f, NULL, 1);
  }
}

/* Shapes big enough to engage several threads, several MC blocks, several
   KC slices and (N > NC = 4096) several B panels. The built-in kernel gives
   every C element the same operation order whatever the thread count, so
   results must be correct with 1 thread and bit-identical for 2..4 threads.
   {200, 20000, 32}: five panels, the last one short, one KC slice each, so
   the two B buffers are reused while threads pack privately (the race that
   gemm.c's sliver ranges avoid: it showed in about a third of the runs). */
Test(gemm, threads_bit_identical)
{
  static const int64_t shapes[][3] = {{257, 129, 300}, {7, 4100, 40}, {128, 1024, 784}, {1000, 10, 128},
                                      {200, 20000, 32}};
  const char *names[] = {"avx512", "avx2", "generic"};
  loom_cpu_gemm_force_builtin(true);
  for (int kk = 0; kk < 3; kk++) {
    if (!loom_cpu_gemm_select_builtin(names[kk])) continue;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (int tr = 0; tr < 4; tr++) {
        float *first = NULL;
        for (int nt = 1; nt <= 4; nt++) {
          loom_cpu_gemm_set_threads(nt);
          rng_state = 0x1234567ull + s; /* same inputs for every thread count */
          const gemm_case t = {tr & 1, tr >> 1, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f, 0.5f, 0, 0, 0,
                               false};
          char msg[256] = "";
          float *C = NULL;
          const bool ok = run_case(&t, nt == 1, msg, sizeof msg, &C);
          if (!ok) cr_assert_fail("%s threads=%d shape %zu tr=%d: %s", names[kk], nt, s, tr, msg);
          if (!first) {
            first = C;
          } else {
            const bool same = memcmp(first, C, sizeof(float) * (size_t)(t.M * t.N)) == 0;
            free(C);
            if (!same) cr_assert_fail("%s: %d threads differ from 1 thread (shape %zu tr=%d)", names[kk], nt, s, tr);
          }
        }
        free(first);
      }
  }
  loom_cpu_gemm_set_threads(0);
}

Test(gemm, impl_names)
{
  loom_cpu_gemm_force_builtin(true);
  cr_assert(loom_cpu_gemm_select_builtin(NULL));
  cr_assert_eq(strncmp(loom_cpu_gemm_impl(), "builtin-", 8), 0, "%s", loom_cpu_gemm_impl());
  cr_assert(loom_cpu_gemm_select_builtin("generic"));
  cr_assert_str_eq(loom_cpu_gemm_impl(), "builtin-generic");
  cr_assert_not(loom_cpu_gemm_select_builtin("no-such-kernel"));
  cr_assert_str_eq(loom_cpu_gemm_impl(), "builtin-generic");
}
