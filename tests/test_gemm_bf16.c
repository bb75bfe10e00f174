/* test_gemm_bf16.c — the AVX512_BF16 GEMM (lib/ops/cpu/gemm_bf16.c) against
 * a float64 reference, and the bf16 linear layer that runs on it.
 *
 * The tolerance (gemm_bf16.h): bf16 x bf16 products are exact in f32, so the
 * kernel's sum differs from the exact sum of the bf16 products by at most
 * K * 2^-24 * sum|a_k b_k| (f32 accumulation), plus half a bf16 ulp
 * (2^-8 relative) when the result is rounded to bf16. Against the exact
 * product of the f32 values before they were rounded to bf16, each input
 * adds up to 2^-8 relative: (2^-7 + 2^-16 + K * 2^-24) * sum|a_k b_k|.
 * Shapes: the MNIST MLP's (784 -> 1024 -> 1024 -> 10, batch 128, forward
 * and both backward GEMMs) and odd ones (edges of the 12 x 32 and 32 x 32
 * tiles, odd K, several K slices, padded leading dimensions), on the
 * AVX512_BF16 kernel, on the AMX path with a plain-C model of its tiles, and
 * on the AMX tiles where the CPU has them. Skipped visibly on CPUs without
 * AVX512_BF16 (the AMX tile test also without AMX). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/loom.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/gemm_bf16.h"
#include "support/testkit.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float bf(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static bool have_bf16(void) {
  if (loom_cpu_isa_best() >= LOOM_CPU_ISA_AVX512BF16) return true;
  fprintf(stderr, "gemm_bf16 skipped: this CPU has no AVX512_BF16\n");
  return false;
}

typedef struct gcase {
  bool ta, tb;
  int64_t M, N, K, pad; /* pad: extra leading-dimension elements on A, B and the outputs */
  bool bias, relu;
  int64_t kc;           /* 0: the default blocking */
} gcase;

/* Runs one case; returns the worst error / bound ratio seen (<= 1 passes) and
 * fails the test with the element's coordinates otherwise. */
static double run(const gcase *t) {
  const int64_t M = t->M, N = t->N, K = t->K;
  const int64_t ar = t->ta ? K : M, ac = t->ta ? M : K, br = t->tb ? N : K, bc = t->tb ? K : N;
  const int64_t lda = ac + t->pad, ldb = bc + t->pad, ldc = N + t->pad;
  float *af = malloc(sizeof(float) * (size_t)(ar * lda)), *bf32 = malloc(sizeof(float) * (size_t)(br * ldb));
  uint16_t *a = malloc(2 * (size_t)(ar * lda)), *b = malloc(2 * (size_t)(br * ldb));
  float *c = malloc(sizeof(float) * (size_t)(M * ldc)), *bias = malloc(sizeof(float) * (size_t)N);
  uint16_t *y = malloc(2 * (size_t)(M * ldc));
  cr_assert(af && bf32 && a && b && c && bias && y);
  for (int64_t i = 0; i < ar * lda; i++) af[i] = frand(), a[i] = loom_f32_to_bf16(af[i]);
  for (int64_t i = 0; i < br * ldb; i++) bf32[i] = frand(), b[i] = loom_f32_to_bf16(bf32[i]);
  for (int64_t j = 0; j < N; j++) bias[j] = frand();
  for (int64_t i = 0; i < M * ldc; i++) c[i] = 7777.0f, y[i] = 0x1234;
  loom_gemm_bf16_out o = {c, ldc, y, ldc, t->bias ? bias : NULL, t->relu};
  loom_cpu_gemm_bf16_set_kc(t->kc);
  cr_assert_eq(loom_cpu_gemm_bf16(t->ta, t->tb, M, N, K, a, lda, b, ldb, &o), LOOM_OK, "%s", loom_last_error());
  loom_cpu_gemm_bf16_set_kc(0);

  double worst = 0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0, s32 = 0, mag = 0, mag32 = 0;
      for (int64_t k = 0; k < K; k++) {
        const int64_t ia = t->ta ? k * lda + i : i * lda + k, ib = t->tb ? j * ldb + k : k * ldb + j;
        const double p = (double)bf(a[ia]) * bf(b[ib]), p32 = (double)af[ia] * bf32[ib];
        s += p, mag += fabs(p), s32 += p32, mag32 += fabs(p32);
      }
      const double bj = t->bias ? bias[j] : 0.0;
      double ref = s + bj, ref32 = s32 + bj;
      if (t->relu) ref = ref > 0 ? ref : 0, ref32 = ref32 > 0 ? ref32 : 0;
      /* ReLU and the bias add (one f32 rounding) keep the bound's form. */
      const double tol = (double)K * ldexp(1, -24) * mag + ldexp(1, -24) * (fabs(bj) + fabs(s)) + 1e-30;
      const double tol32 = (ldexp(1, -7) + ldexp(1, -16) + (double)K * ldexp(1, -24)) * mag32 +
                           ldexp(1, -24) * (fabs(bj) + fabs(s32)) + 1e-30;
      const double got = c[i * ldc + j], goty = bf(y[i * ldc + j]);
      const double e = fabs(got - ref), e32 = fabs(got - ref32);
      const double ey = fabs(goty - ref), toly = tol + ldexp(1, -8) * fabs(ref);
      cr_assert(e <= tol && e32 <= tol32 && ey <= toly,
                "ta=%d tb=%d %lldx%lldx%lld kc=%lld C[%lld][%lld] = %.9g (bf16 out %.9g): vs the bf16 inputs' "
                "%.12g (err %.3g, bound %.3g), vs the f32 inputs' %.12g (err %.3g, bound %.3g)",
                t->ta, t->tb, (long long)M, (long long)N, (long long)K, (long long)t->kc, (long long)i, (long long)j,
                got, goty, ref, e, tol, ref32, e32, tol32);
      if (e / tol > worst) worst = e / tol;
    }
  /* Padding columns are never written. */
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = N; j < ldc; j++)
      cr_assert(c[i * ldc + j] == 7777.0f && y[i * ldc + j] == 0x1234, "padding at [%lld][%lld] written", (long long)i,
                (long long)j);
  free(af), free(bf32), free(a), free(b), free(c), free(bias), free(y);
  return worst;
}

/* 784 -> 1024 -> 1024 -> 10, batch 128: Y = X·Wᵀ (+bias, ReLU), dX = dZ·W, dW = dZᵀ·X. */
static void mlp_cases(const char *what) {
  static const gcase cs[] = {
      {false, true, 128, 1024, 784, 0, true, true, 0},   {false, false, 128, 784, 1024, 0, false, false, 0},
      {true, false, 1024, 784, 128, 0, false, false, 0},  {false, true, 128, 1024, 1024, 0, true, true, 0},
      {false, false, 128, 1024, 1024, 0, false, false, 0}, {true, false, 1024, 1024, 128, 0, false, false, 0},
      {false, true, 128, 10, 1024, 0, true, false, 0},    {false, false, 128, 1024, 10, 0, false, false, 0},
      {true, false, 10, 1024, 128, 0, false, false, 0},
  };
  double worst = 0;
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    double w = run(&cs[i]);
    if (w > worst) worst = w;
  }
  fprintf(stderr, "gemm_bf16 mlp shapes (%s): worst error is %.3f of the f32-accumulation bound\n", what, worst);
}

/* Edges of the 12 x 32 and 32 x 32 tiles, odd K, K slices of 6 (32 on AMX). */
static void odd_cases(void) {
  static const int64_t dims[][3] = {{1, 1, 1},     {1, 33, 7},    {13, 1, 3},  {12, 32, 2},
                                    {25, 65, 31},  {37, 40, 129}, {7, 97, 64}, {33, 31, 65}};
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
    for (int tr = 0; tr < 4; tr++)
      for (int kcs = 0; kcs < 2; kcs++) {
        gcase t = {tr & 1, (tr >> 1) & 1, dims[d][0], dims[d][1], dims[d][2], (int64_t)(d % 3), d % 2 == 0, d % 3 == 1,
                   kcs ? 6 : 0};
        run(&t);
      }
}

/* A larger problem with several K slices and a split over both threads. */
static void deep_cases(void) {
  gcase t = {false, true, 150, 200, 2500, 1, true, true, 0};
  run(&t);
  gcase u = {true, false, 100, 70, 1001, 0, false, true, 256};
  run(&u);
}

Test(gemm_bf16, mlp_shapes_within_f32_accumulation_bound) {
  if (!have_bf16()) return;
  cr_assert_eq(loom_set_cpu_isa("avx512bf16"), LOOM_OK);
  cr_assert(loom_cpu_gemm_bf16_runs());
  mlp_cases("avx512bf16");
}

Test(gemm_bf16, odd_shapes_transposes_and_k_slices) {
  if (!have_bf16()) return;
  cr_assert_eq(loom_set_cpu_isa("avx512bf16"), LOOM_OK);
  odd_cases();
}

Test(gemm_bf16, deep_k_accumulates_slices) {
  if (!have_bf16()) return;
  cr_assert_eq(loom_set_cpu_isa("avx512bf16"), LOOM_OK);
  deep_cases();
}

/* The AMX path's blocking and packing (32-row A blocks packed in rows, B
 * slivers padded to whole tiles of k) with the plain-C model of its tile
 * kernel: runs wherever AVX512_BF16 does, AMX or not. */
Test(gemm_bf16, amx_blocking_on_the_tile_model) {
  if (!have_bf16()) return;
  cr_assert_eq(loom_set_cpu_isa("avx512bf16"), LOOM_OK);
  loom_cpu_gemm_bf16_test_amx_model(true);
  mlp_cases("AMX model");
  odd_cases();
  deep_cases();
  loom_cpu_gemm_bf16_test_amx_model(false);
}

/* The tile kernel itself, where the CPU has AMX-BF16 (Intel Sapphire Rapids
 * onward): the same bound on every case. */
Test(gemm_bf16, amx_tiles_within_f32_accumulation_bound) {
  if (!loom_cpu_isa_runs(LOOM_CPU_ISA_AMXBF16)) {
    fprintf(stderr, "gemm_bf16 AMX skipped: this CPU (or its kernel) offers no AMX-BF16\n");
    return;
  }
  cr_assert_eq(loom_set_cpu_isa("amxbf16"), LOOM_OK, "%s", loom_last_error());
  mlp_cases("amxbf16");
  odd_cases();
  deep_cases();
  loom_set_cpu_isa(NULL);
}

/* The bf16 linear layer (forward and backward) on the bf16 GEMM agrees with
 * the widening path (LOOM_CPU_ISA=avx512) within the bf16 bound, on the
 * MLP's hidden layer shape. */
static void linear_pass(const char *isa, float **out, int64_t *n_out) {
  cr_assert_eq(loom_set_cpu_isa(isa), LOOM_OK, "%s", loom_last_error());
  loom_manual_seed(3);
  int64_t sx[2] = {128, 784}, sw[2] = {1024, 784}, sb[1] = {1024};
  loom_scope_begin();
  loom_tensor *x = loom_cast(loom_randn(2, sx, LOOM_F32, loom_cpu()), LOOM_BF16);
  loom_tensor *w = loom_cast(loom_randn(2, sw, LOOM_F32, loom_cpu()), LOOM_BF16);
  loom_tensor *b = loom_cast(loom_randn(1, sb, LOOM_F32, loom_cpu()), LOOM_BF16);
  loom_set_requires_grad(x, true), loom_set_requires_grad(w, true), loom_set_requires_grad(b, true);
  loom_tensor *y = loom_linear(x, w, b, LOOM_ACT_RELU);
  cr_assert(y, "%s", loom_last_error());
  /* Random upstream gradients, so dZ is more than the ReLU mask. */
  int64_t sy[2] = {128, 1024};
  loom_tensor *r = loom_randn(2, sy, LOOM_F32, loom_cpu());
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul(loom_cast(y, LOOM_F32), r))), LOOM_OK, "%s", loom_last_error());
  loom_tensor *ts[4] = {y, loom_grad(x), loom_grad(w), loom_grad(b)};
  int64_t n = 0;
  for (int i = 0; i < 4; i++) n += loom_tensor_numel(ts[i]);
  float *p = malloc(sizeof(float) * (size_t)n), *q = p;
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(loom_tensor_dtype(ts[i]), LOOM_BF16);
    const uint16_t *d = loom_tensor_data(ts[i]);
    for (int64_t j = 0; j < loom_tensor_numel(ts[i]); j++) *q++ = bf(d[j]);
  }
  loom_scope_end();
  *out = p;
  *n_out = n;
}

Test(gemm_bf16, linear_layer_matches_widening_path) {
  if (!have_bf16()) return;
  float *fast, *wide;
  int64_t n1, n2;
  /* On an AMX CPU the widest set runs the tiles; else avx512bf16. */
  linear_pass(loom_cpu_isa_runs(LOOM_CPU_ISA_AMXBF16) ? "amxbf16" : "avx512bf16", &fast, &n1);
  linear_pass("avx512", &wide, &n2);
  cr_assert_eq(n1, n2);
  int64_t differ = 0;
  for (int64_t i = 0; i < n1; i++) {
    /* Both are f32 sums of the same exact products rounded once to bf16:
       they may differ by a bf16 rounding step each, and by the f32 order. */
    const double tol = ldexp(1, -7) * fabs(wide[i]) + 1e-3;
    cr_assert(fabs(fast[i] - wide[i]) <= tol, "element %lld: bf16 kernel %.9g, widening %.9g", (long long)i, fast[i],
              wide[i]);
    differ += fast[i] != wide[i];
  }
  fprintf(stderr, "gemm_bf16 linear: %lld of %lld bf16 results differ from the widening path\n", (long long)differ,
          (long long)n1);
  free(fast), free(wide);
  loom_set_cpu_isa(NULL);
  tk_leak_check();
}
