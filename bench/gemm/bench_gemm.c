/* bench_gemm.c — GFLOP/s of loom's built-in CPU SGEMM against OpenBLAS on the
 * GEMMs of an MNIST MLP training step (batch 128; layers 784->1024,
 * 1024->1024, 1024->10: forward Y = X·Wᵀ, backward dX = dY·W and dW = dYᵀ·X)
 * plus square 512 and 1024.
 *
 * Usage: bench_gemm [threads=2] [reps=7] [kernel=best|avx512|avx2|generic] [clock=wall|cpu]
 * clock=cpu times with the process's CPU time instead of the wall clock: at
 * threads=1 on a shared, oversubscribed machine the wall clock mostly
 * measures the wait for a core (meaningless with more threads: spinning
 * OpenMP workers count).
 * Prints one line per shape:
 *   bench=gemm shape=MxNxK ta=0 tb=1 builtin_gflops=... openblas_gflops=... ratio=...
 * ratio = builtin / openblas. Each number is the best of `reps` timed
 * batches (the machine may be shared), the two implementations alternating.
 * Note: OpenBLAS 0.3.21 does not recognize some recent Xeons and falls back to
 * its SSE3 "Prescott" kernels; OPENBLAS_CORETYPE=SkylakeX gives it AVX-512. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ops/cpu/gemm.h"

typedef struct shape {
  const char *what;
  bool ta, tb;
  int64_t M, N, K;
} shape;

static const shape shapes[] = {
  {"fc1 fwd", false, true, 128, 1024, 784},  {"fc1 dX", false, false, 128, 784, 1024},
  {"fc1 dW", true, false, 1024, 784, 128},   {"fc2 fwd", false, true, 128, 1024, 1024},
  {"fc2 dX", false, false, 128, 1024, 1024}, {"fc2 dW", true, false, 1024, 1024, 128},
  {"fc3 fwd", false, true, 128, 10, 1024},   {"fc3 dX", false, false, 128, 1024, 10},
  {"fc3 dW", true, false, 10, 1024, 128},    {"square", false, false, 512, 512, 512},
  {"square", false, false, 1024, 1024, 1024},
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool g_cpu_clock = false;
static double clock_s(void)
{
  if (!g_cpu_clock) return now_s();
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *rand_buf(int64_t n)
{
  float *p = malloc(sizeof(float) * (size_t)n);
  if (!p) return NULL;
  for (int64_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  return p;
}

/* One timed batch of >= ~40 ms; returns GFLOP/s. */
static double time_batch(const shape *s, const float *A, const float *B, float *C, int iters)
{
  const int64_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
  const double t0 = clock_s();
  for (int i = 0; i < iters; i++) loom_cpu_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, 0.0f, C, s->N);
  return 2.0 * (double)s->M * (double)s->N * (double)s->K * iters / (clock_s() - t0) / 1e9;
}

static void use_builtin(bool on)
{
  loom_cpu_gemm_force_builtin(on);
}

/* Best GFLOP/s of each implementation over reps rounds. The two alternate
   round by round so both see the same background load; after OpenBLAS we
   pause so its worker threads stop spinning (they busy-wait ~0.1 s after each
   call) before the built-in kernel is timed. */
static void time_shape(const shape *s, int reps, bool have_blas, double *built, double *blas)
{
  float *A = rand_buf(s->M * s->K), *B = rand_buf(s->K * s->N), *C = rand_buf(s->M * s->N);
  *built = *blas = 0.0;
  if (A && B && C) {
    int iters[2];
    for (int impl = 0; impl < 2; impl++) {
      if (impl == 1 && !have_blas) break;
      use_builtin(impl == 0);
      time_batch(s, A, B, C, 1); /* warm-up */
      const double g = time_batch(s, A, B, C, 1);
      const double one = 2.0 * (double)s->M * (double)s->N * (double)s->K / (g * 1e9);
      iters[impl] = one > 0 ? (int)(0.04 / one) : 1000;
      if (iters[impl] < 1) iters[impl] = 1;
    }
    for (int r = 0; r < reps; r++) {
      nanosleep(&(struct timespec){0, 150 * 1000 * 1000}, NULL);
      use_builtin(true);
      const double gb = time_batch(s, A, B, C, iters[0]);
      if (gb > *built) *built = gb;
      if (have_blas) {
        use_builtin(false);
        const double go = time_batch(s, A, B, C, iters[1]);
        if (go > *blas) *blas = go;
      }
    }
  }
  free(A);
  free(B);
  free(C);
}

int main(int argc, char **argv)
{
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  const int reps = argc > 2 ? atoi(argv[2]) : 7;
  const char *kernel = argc > 3 && strcmp(argv[3], "best") != 0 ? argv[3] : NULL;
  g_cpu_clock = argc > 4 && strcmp(argv[4], "cpu") == 0;
  if (reps < 1 || !loom_cpu_gemm_select_builtin(kernel)) {
    fprintf(stderr, "usage: %s [threads] [reps>=1] [best|avx512|avx2|generic] [wall|cpu]\n", argv[0]);
    return 2;
  }
  loom_cpu_gemm_set_threads(threads);

  double built[N_SHAPES], blas[N_SHAPES];
  loom_cpu_gemm_force_builtin(true);
  const char *builtin_name = loom_cpu_gemm_impl();
  loom_cpu_gemm_force_builtin(false);
  const bool have_blas = strcmp(loom_cpu_gemm_impl(), "openblas") == 0;
  for (int i = 0; i < N_SHAPES; i++) time_shape(&shapes[i], reps, have_blas, &built[i], &blas[i]);

  printf("# builtin=%s threads=%d reps=%d openblas=%s clock=%s\n", builtin_name, threads, reps, have_blas ? "yes" : "no",
         g_cpu_clock ? "cpu" : "wall");
  for (int i = 0; i < N_SHAPES; i++) {
    const shape *s = &shapes[i];
    printf("bench=gemm shape=%lldx%lldx%lld ta=%d tb=%d builtin_gflops=%.1f openblas_gflops=%.1f ratio=%.2f  # %s\n",
           (long long)s->M, (long long)s->N, (long long)s->K, s->ta, s->tb, built[i], blas[i],
           blas[i] > 0 ? built[i] / blas[i] : 0.0, s->what);
  }
  return 0;
}
