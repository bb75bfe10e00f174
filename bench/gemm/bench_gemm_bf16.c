/* bench_gemm_bf16.c — GFLOP/s of the AVX512_BF16 (or AMX) GEMM (lib/ops/cpu/
 * gemm_bf16.c) against loom's f32 GEMM on the GEMMs of the MNIST MLP's
 * training step (784 -> 1024 -> 1024 -> 10, batch 128: forward Y = X·Wᵀ,
 * backward dX = dZ·W and dW = dZᵀ·X), both producing f32 results.
 *
 * Usage: bench_gemm_bf16 [threads=2] [rounds=9] [out=f32|bf16]
 *   out=bf16: the bf16 side rounds its result to bf16 (what linear does).
 * The two sides alternate round by round (ABAB: the machine may be shared);
 * each round times a batch of >= ~40 ms per side. Prints per shape:
 *   bench=gemm_bf16 shape=MxNxK ta= tb= f32_gflops=<median> bf16_gflops=<median> ratio=<median of round ratios>
 * and the same over the whole step (each shape weighted by its FLOPs).
 * On CPUs without AVX512_BF16 (or under LOOM_CPU_ISA below avx512bf16) the
 * bf16 side is what linear runs there instead: loom_cpu_sgemm_widen, the f32
 * GEMM widening the bf16 operands as it packs them (out=bf16: the dW shapes
 * round tile by tile, loom_cpu_sgemm_widen_to16, as linear_cpu.c does; the
 * others round the f32 result afterwards, on one thread, where linear
 * rounds its rows on all threads: an upper bound on that cost). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/loom.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/gemm_bf16.h"

typedef struct shape {
  const char *what;
  bool ta, tb;
  int64_t M, N, K;
} shape;

static const shape shapes[] = {
    {"fc1 fwd", false, true, 128, 1024, 784},  {"fc1 dW", true, false, 1024, 784, 128},
    {"fc2 fwd", false, true, 128, 1024, 1024}, {"fc2 dX", false, false, 128, 1024, 1024},
    {"fc2 dW", true, false, 1024, 1024, 128},  {"fc3 fwd", false, true, 128, 10, 1024},
    {"fc3 dX", false, false, 128, 1024, 10},   {"fc3 dW", true, false, 10, 1024, 128},
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0], MAX_ROUNDS = 64 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct bufs {
  float *af, *bfl, *c;
  uint16_t *a, *b, *y;
} bufs;

/* Seconds for iters calls of one side. */
static double run_side(const shape *s, const bufs *u, bool bf16, bool native, bool out_bf16, int iters) {
  const int64_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
  loom_gemm_bf16_out o = {out_bf16 ? NULL : u->c, s->N, out_bf16 ? u->y : NULL, s->N, NULL, false};
  const double t0 = now_s();
  for (int i = 0; i < iters; i++) {
    if (bf16 && native) {
      loom_cpu_gemm_bf16(s->ta, s->tb, s->M, s->N, s->K, u->a, lda, u->b, ldb, &o);
    } else if (bf16) {
      /* A bf16 dW (ta) is rounded tile by tile where the GEMM can. */
      if (out_bf16 && s->ta &&
          loom_cpu_sgemm_widen_to16(s->ta, s->tb, s->M, s->N, s->K, 1.0f, u->a, LOOM_BF16, lda, u->b, LOOM_BF16, ldb,
                                    u->y, LOOM_BF16, s->N))
        continue;
      loom_cpu_sgemm_widen(s->ta, s->tb, s->M, s->N, s->K, 1.0f, u->a, LOOM_BF16, lda, u->b, LOOM_BF16, ldb, 0.0f,
                           u->c, s->N);
      if (out_bf16) loom_cpu_store_f32(u->y, LOOM_BF16, 1, s->M * s->N, u->c);
    } else {
      loom_cpu_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, u->af, lda, u->bfl, ldb, 0.0f, u->c, s->N);
    }
  }
  return now_s() - t0;
}

int main(int argc, char **argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? atoi(argv[2]) : 9;
  const bool out_bf16 = argc > 3 && !strcmp(argv[3], "bf16");
  if (rounds < 1 || rounds > MAX_ROUNDS || (argc > 3 && strcmp(argv[3], "bf16") && strcmp(argv[3], "f32"))) {
    fprintf(stderr, "usage: %s [threads] [rounds 1..%d] [f32|bf16]\n", argv[0], MAX_ROUNDS);
    return 2;
  }
  loom_set_num_threads(threads);
  if (loom_set_cpu_gemm("builtin") != LOOM_OK) {
    printf("bench=gemm_bf16 skipped reason=\"%s\"\n", loom_last_error());
    return 0;
  }
  const bool native = loom_cpu_gemm_bf16_runs();
  printf("# f32=%s bf16=%s threads=%d rounds=%d bf16_out=%s isa=%s (ABAB rounds, medians)\n", loom_cpu_gemm_name(),
         native ? (strcmp(loom_cpu_isa(), "amxbf16") ? "avx512bf16" : "amx-tiles") : "widening", threads, rounds,
         out_bf16 ? "bf16" : "f32", loom_cpu_isa());
  double tot[2][MAX_ROUNDS] = {{0}}, flops_all = 0;
  for (int i = 0; i < N_SHAPES; i++) {
    const shape *s = &shapes[i];
    const int64_t na = s->M * s->K, nb = s->K * s->N, nc = s->M * s->N;
    bufs u = {malloc(4 * (size_t)na), malloc(4 * (size_t)nb), malloc(4 * (size_t)nc),
              malloc(2 * (size_t)na), malloc(2 * (size_t)nb), malloc(2 * (size_t)nc)};
    if (!u.af || !u.bfl || !u.c || !u.a || !u.b || !u.y) return 1;
    for (int64_t k = 0; k < na; k++) u.af[k] = (float)((k * 2654435761u) % 1000) / 1000.0f - 0.5f, u.a[k] = loom_f32_to_bf16(u.af[k]);
    for (int64_t k = 0; k < nb; k++) u.bfl[k] = (float)((k * 40503u) % 997) / 997.0f - 0.5f, u.b[k] = loom_f32_to_bf16(u.bfl[k]);
    const double flop = 2.0 * (double)s->M * (double)s->N * (double)s->K;
    int iters[2];
    for (int side = 0; side < 2; side++) {
      run_side(s, &u, side, native, out_bf16, 2); /* warm-up */
      const double t = run_side(s, &u, side, native, out_bf16, 3) / 3;
      iters[side] = t > 0 ? (int)(0.04 / t) + 1 : 1000;
    }
    double g[2][MAX_ROUNDS], ratio[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
      for (int side = 0; side < 2; side++) {
        const double t = run_side(s, &u, side, native, out_bf16, iters[side]) / iters[side];
        g[side][r] = flop / t / 1e9;
        tot[side][r] += t;
      }
      ratio[r] = g[1][r] / g[0][r];
    }
    flops_all += flop;
    const double mr = median(ratio, rounds), m0 = median(g[0], rounds), m1 = median(g[1], rounds);
    printf("bench=gemm_bf16 shape=%lldx%lldx%lld ta=%d tb=%d f32_gflops=%.1f bf16_gflops=%.1f ratio=%.2f  # %s\n",
           (long long)s->M, (long long)s->N, (long long)s->K, s->ta, s->tb, m0, m1, mr, s->what);
    free(u.af), free(u.bfl), free(u.c), free(u.a), free(u.b), free(u.y);
  }
  /* The step's GEMMs (these 8; fc1 dX is not computed in training). Round r
     of each side sums that round's per-call time over the shapes. */
  double g0[MAX_ROUNDS], g1[MAX_ROUNDS], ratio[MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) g0[r] = flops_all / tot[0][r] / 1e9, g1[r] = flops_all / tot[1][r] / 1e9, ratio[r] = tot[0][r] / tot[1][r];
  const double mr = median(ratio, rounds), m0 = median(g0, rounds), m1 = median(g1, rounds);
  printf("bench=gemm_bf16 shape=mlp_step f32_gflops=%.1f bf16_gflops=%.1f ratio=%.2f\n", m0, m1, mr);
  return 0;
}
