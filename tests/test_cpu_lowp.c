/* test_cpu_lowp.c — the CPU's 16-bit fast paths give the same bits as the
 * code they replaced:
 *  - bf16 runs (loom_cpu_load_f32 / loom_cpu_store_f32, AVX2) against
 *    half.h's scalar conversion, every bf16 pattern and the rounding
 *    boundaries of f32 -> bf16 (ties, NaNs, overflow), odd run lengths;
 *  - loom_cpu_sgemm_widen (16-bit A and/or B widened while packed) against
 *    loom_cpu_sgemm on widened copies: every transpose pair, padded leading
 *    dimensions, tile edges, several K slices, 1 and 2 threads; and its
 *    16-bit output (loom_cpu_sgemm_widen_to16) against the f32 C rounded;
 *  - the Linear layer with f16/bf16 operands (widened by the GEMM's packing,
 *    loom_cpu_sgemm_widen) against the path it replaced: the f32 layer on
 *    widened copies, results rounded once — forward and backward, with and
 *    without ReLU, dy owned or not, shapes with tile edges and several K
 *    slices, at every instruction set this CPU runs;
 *  - the AVX2 AdamW / SGD updates (with the f16/bf16 copy written in the same
 *    pass) and the AVX2 unscale against the portable loops
 *    (LOOM_CPU_ISA=scalar), on odd sizes, with values that overflow f16 and
 *    gradients that are inf or NaN for the unscale. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "loom/loom.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/gemm.h"
#include "ops/op.h"
#include "amp/unscale_kernels.h"
#include "optim/optim_kernels.h"
#include "support/testkit.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 32);
}
static float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- bf16 runs ----------------------------------------------------------- */

Test(cpu_lowp, bf16_runs_match_half_h) {
  /* Every bf16 pattern widened, in runs of odd length (the vector body and
     the scalar tail). */
  enum { NP = 65536 };
  uint16_t *h = malloc(NP * sizeof *h), *back = malloc(NP * sizeof *back);
  float *f = malloc(NP * sizeof *f);
  cr_assert(h && back && f);
  for (uint32_t b = 0; b < NP; b++) h[b] = (uint16_t)b;
  for (int64_t j0 = 0; j0 < NP; j0 += 1021) {
    int64_t n = NP - j0 < 1021 ? NP - j0 : 1021;
    loom_cpu_load_f32(h + j0, LOOM_BF16, 1, n, f + j0);
  }
  for (uint32_t b = 0; b < NP; b++) {
    uint32_t u;
    memcpy(&u, &f[b], 4);
    cr_assert_eq(u, b << 16, "bf16 0x%04x widened to 0x%08x", b, u);
  }
  /* Narrowing: each bf16 value, the ties above it, their neighbours, both
     signs, NaNs with many payloads, infinities, random bits. */
  float *src = malloc(8 * NP * sizeof *src);
  uint16_t *got = malloc(8 * NP * sizeof *got);
  cr_assert(src && got);
  int64_t n = 0;
  for (uint32_t b = 0; b < 0x8000u; b++) {
    uint32_t base = b << 16;
    uint32_t pts[4] = {base, base + 0x7fffu, base + 0x8000u, base + 0x8001u};
    for (int i = 0; i < 4; i++) {
      src[n++] = bitsf(pts[i]);
      src[n++] = bitsf(pts[i] | 0x80000000u);
    }
  }
  for (; n < 8 * NP; n++) src[n] = bitsf(rnd32());
  src[5] = INFINITY, src[6] = -INFINITY, src[7] = NAN;
  loom_cpu_store_f32(got, LOOM_BF16, 1, n - 3, src); /* odd length: a tail */
  loom_cpu_store_f32(got + n - 3, LOOM_BF16, 1, 3, src + n - 3);
  for (int64_t j = 0; j < n; j++) {
    uint32_t u;
    memcpy(&u, &src[j], 4);
    cr_assert_eq(got[j], loom_bfloat_from_f32(src[j]), "f32 0x%08x: run 0x%04x, half.h 0x%04x", u, got[j],
                 loom_bfloat_from_f32(src[j]));
  }
  free(h), free(back), free(f), free(src), free(got);
}

/* ---- the GEMM with 16-bit operands ---------------------------------------- */

static float frand(void) { return (float)((double)(rnd32() >> 8) / 16777216.0 * 2.0 - 1.0); }

/* rows x cols (leading dim ld) of random values in dt (16-bit: the bits),
   and the same values widened into w (same layout). */
static void *rand_mat(loom_dtype dt, int64_t rows, int64_t ld, float *w) {
  void *p = malloc((size_t)(rows * ld + 1) * 4);
  cr_assert(p);
  for (int64_t i = 0; i < rows * ld; i++) w[i] = frand();
  if (dt == LOOM_F32) {
    memcpy(p, w, (size_t)(rows * ld) * 4);
  } else {
    loom_cpu_store_f32(p, dt, 1, rows * ld, w);
    loom_cpu_load_f32(p, dt, 1, rows * ld, w);
  }
  return p;
}

Test(cpu_lowp, gemm_widen_matches_sgemm_on_widened_copies) {
  const int64_t shapes[][3] = {{37, 45, 70}, {130, 70, 300}, {13, 33, 1}, {128, 1024, 10}};
  const loom_dtype dts[][2] = {{LOOM_F16, LOOM_F16}, {LOOM_BF16, LOOM_BF16}, {LOOM_F32, LOOM_F16}, {LOOM_BF16, LOOM_F32}};
  const char *isas[] = {"scalar", "avx2", "avx512"};
  for (int l = 0; l < 3; l++) {
    if (!loom_cpu_isa_runs((loom_cpu_isa_level)l)) continue;
    cr_assert_eq(loom_set_cpu_isa(isas[l]), LOOM_OK);
    for (int th = 1; th <= 2; th++) {
      loom_cpu_gemm_set_threads(th);
      for (int si = 0; si < 4; si++)
        for (int d = 0; d < 4; d++)
          for (int tr = 0; tr < 4; tr++) {
            const bool ta = tr & 1, tb = tr & 2;
            const int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
            const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
            const int64_t arows = ta ? K : M, brows = tb ? N : K;
            float *wa = malloc((size_t)(arows * lda + 1) * 4), *wb = malloc((size_t)(brows * ldb + 1) * 4);
            float *c0 = malloc((size_t)(M * ldc) * 4), *c1 = malloc((size_t)(M * ldc) * 4);
            cr_assert(wa && wb && c0 && c1);
            void *a = rand_mat(dts[d][0], arows, lda, wa), *b = rand_mat(dts[d][1], brows, ldb, wb);
            for (int64_t i = 0; i < M * ldc; i++) c0[i] = c1[i] = frand();
            loom_cpu_sgemm(ta, tb, M, N, K, 0.5f, wa, lda, wb, ldb, 0.25f, c0, ldc);
            loom_cpu_sgemm_widen(ta, tb, M, N, K, 0.5f, a, dts[d][0], lda, b, dts[d][1], ldb, 0.25f, c1, ldc);
            cr_assert(!memcmp(c0, c1, (size_t)(M * ldc) * 4),
                      "%s, %d threads: %lldx%lldx%lld ta %d tb %d dtypes %d/%d differ from the widened copies", isas[l],
                      th, (long long)M, (long long)N, (long long)K, ta, tb, dts[d][0], dts[d][1]);
            /* A 16-bit C rounded tile by tile = the f32 C rounded (K within
               one 256-deep slice; beyond it the call declines). */
            const loom_dtype cdt = dts[d][1] == LOOM_F32 ? LOOM_BF16 : dts[d][1];
            uint16_t *h = malloc((size_t)(M * ldc) * 2), *want = malloc((size_t)(M * ldc) * 2);
            cr_assert(h && want);
            memset(h, 0xab, (size_t)(M * ldc) * 2), memset(want, 0xab, (size_t)(M * ldc) * 2);
            loom_cpu_sgemm(ta, tb, M, N, K, 0.5f, wa, lda, wb, ldb, 0.0f, c0, ldc);
            for (int64_t i = 0; i < M; i++) loom_cpu_store_f32(want + i * ldc, cdt, 1, N, c0 + i * ldc);
            bool done = loom_cpu_sgemm_widen_to16(ta, tb, M, N, K, 0.5f, a, dts[d][0], lda, b, dts[d][1], ldb, h, cdt,
                                                  ldc);
            cr_assert_eq(done, K <= 256, "%lldx%lldx%lld: widen_to16 returned %d", (long long)M, (long long)N,
                         (long long)K, done);
            if (done)
              cr_assert(!memcmp(h, want, (size_t)(M * ldc) * 2),
                        "%s, %d threads: %lldx%lldx%lld ta %d tb %d: the 16-bit C differs from the rounded f32 C",
                        isas[l], th, (long long)M, (long long)N, (long long)K, ta, tb);
            free(h), free(want);
            free(wa), free(wb), free(c0), free(c1), free(a), free(b);
          }
    }
  }
  loom_cpu_gemm_set_threads(0);
  loom_set_cpu_isa(NULL);
}

/* ---- Linear with 16-bit operands ------------------------------------------ */

static loom_tensor *rand16(int ndim, const int64_t *shape, loom_dtype dt) {
  loom_tensor *t = loom_cast(loom_randn(ndim, shape, LOOM_F32, loom_cpu()), dt);
  cr_assert(t, "%s", loom_last_error());
  return t;
}

static void same_bits(loom_tensor *a, loom_tensor *b, const char *what) {
  cr_assert_eq(loom_tensor_dtype(a), loom_tensor_dtype(b), "%s", what);
  int64_t n = loom_tensor_numel(a);
  cr_assert_eq(n, loom_tensor_numel(b), "%s", what);
  const uint16_t *p = loom_tensor_data(a), *q = loom_tensor_data(b);
  for (int64_t i = 0; i < n; i++)
    cr_assert_eq(p[i], q[i], "%s: element %lld is 0x%04x, the widening path gives 0x%04x", what, (long long)i, p[i],
                 q[i]);
}

/* Forward and backward of one [M,K] x [N,K] layer in dtype dt, against the
 * f32 layer on widened copies with its results rounded to dt. */
static void linear_case(loom_dtype dt, int64_t M, int64_t N, int64_t K, int act, bool overwrite) {
  loom_scope_begin();
  int64_t sx[2] = {M, K}, sw[2] = {N, K}, sb[1] = {N}, sy[2] = {M, N};
  loom_tensor *x = rand16(2, sx, dt), *w = rand16(2, sw, dt), *b = rand16(1, sb, dt), *gy = rand16(2, sy, dt);
  loom_tensor *x32 = loom_cast(x, LOOM_F32), *w32 = loom_cast(w, LOOM_F32), *b32 = loom_cast(b, LOOM_F32);

  loom_tensor *y = loom_empty(2, sy, dt, loom_cpu()), *y32 = loom_empty(2, sy, LOOM_F32, loom_cpu());
  loom_op_args f = {.in = {x, w, b}, .n_in = 3, .out = {y}, .n_out = 1, .i = {act}};
  cr_assert_eq(loom_cpu_linear(&f), LOOM_OK, "%s", loom_last_error());
  loom_op_args f32 = {.in = {x32, w32, b32}, .n_in = 3, .out = {y32}, .n_out = 1, .i = {act}};
  cr_assert_eq(loom_cpu_linear(&f32), LOOM_OK, "%s", loom_last_error());
  same_bits(y, loom_cast(y32, dt), "y");

  loom_tensor *gy32 = loom_cast(gy, LOOM_F32), *yw32 = loom_cast(y, LOOM_F32);
  loom_tensor *dx = loom_empty(2, sx, dt, loom_cpu()), *dw = loom_empty(2, sw, dt, loom_cpu());
  loom_tensor *db = loom_empty(1, sb, dt, loom_cpu());
  loom_tensor *dx32 = loom_empty(2, sx, LOOM_F32, loom_cpu()), *dw32 = loom_empty(2, sw, LOOM_F32, loom_cpu());
  loom_tensor *db32 = loom_empty(1, sb, LOOM_F32, loom_cpu());
  loom_op_args bw = {.in = {gy, x, w, y}, .n_in = 4, .out = {dx, dw, db}, .n_out = 3, .i = {act, 0, 0, 0, overwrite}};
  cr_assert_eq(loom_cpu_linear_backward(&bw), LOOM_OK, "%s", loom_last_error());
  loom_op_args bw32 = {.in = {gy32, x32, w32, yw32}, .n_in = 4, .out = {dx32, dw32, db32}, .n_out = 3,
                       .i = {act, 0, 0, 0, overwrite}};
  cr_assert_eq(loom_cpu_linear_backward(&bw32), LOOM_OK, "%s", loom_last_error());
  same_bits(dx, loom_cast(dx32, dt), "dX");
  same_bits(dw, loom_cast(dw32, dt), "dW");
  same_bits(db, loom_cast(db32, dt), "db");
  loom_scope_end();
}

static void linear_all(loom_dtype dt) {
  const char *isas[] = {"scalar", "avx2", "avx512"};
  for (int l = 0; l < 3; l++) {
    if (!loom_cpu_isa_runs((loom_cpu_isa_level)l)) continue;
    /* avx512, not avx512bf16: bf16 must take the widening path here. */
    cr_assert_eq(loom_set_cpu_isa(isas[l]), LOOM_OK, "%s", loom_last_error());
    loom_manual_seed(11);
    linear_case(dt, 37, 45, 70, LOOM_ACT_RELU, false);   /* tile edges everywhere */
    linear_case(dt, 130, 70, 300, LOOM_ACT_RELU, true);  /* two K slices, dy owned */
    linear_case(dt, 64, 33, 19, LOOM_ACT_NONE, false);
    linear_case(dt, 128, 100, 1000, LOOM_ACT_NONE, true);
  }
  loom_set_cpu_isa(NULL);
  tk_leak_check();
}

Test(cpu_lowp, linear_f16_matches_widening_path) { linear_all(LOOM_F16); }
Test(cpu_lowp, linear_bf16_matches_widening_path) { linear_all(LOOM_BF16); }

/* ---- optimizer updates and the unscale: AVX2 against the portable loops -- */

enum { NPAR = 4 };
static const int64_t PSIZE[NPAR] = {1, 29, 4096 + 13, 70001}; /* tails, several blocks, threads */

typedef struct opt_state {
  float *p[NPAR], *m[NPAR], *v[NPAR], *g[NPAR];
  uint16_t *lowp[NPAR];
} opt_state;

static void opt_init(opt_state *s, uint64_t seed) {
  rng = seed;
  for (int i = 0; i < NPAR; i++) {
    int64_t n = PSIZE[i];
    s->p[i] = malloc(n * 4), s->m[i] = malloc(n * 4), s->v[i] = malloc(n * 4), s->g[i] = malloc(n * 4);
    s->lowp[i] = calloc((size_t)n, 2);
    cr_assert(s->p[i] && s->m[i] && s->v[i] && s->g[i] && s->lowp[i]);
    for (int64_t j = 0; j < n; j++) {
      /* Some parameters beyond f16's range (their copy becomes inf). */
      s->p[i][j] = frand() * (j % 17 == 0 ? 1e5f : 1.0f);
      s->m[i][j] = frand() * 0.1f, s->v[i][j] = fabsf(frand()) * 0.01f, s->g[i][j] = frand();
    }
    /* A NaN parameter in the vector body and in the tail: it stays NaN and
       its copy is the canonical NaN (a lone NaN operand: the same payload
       on every path). */
    if (n > 40) s->p[i][n / 2] = NAN, s->p[i][n - 1] = NAN;
  }
}
static void opt_free(opt_state *s) {
  for (int i = 0; i < NPAR; i++) free(s->p[i]), free(s->m[i]), free(s->v[i]), free(s->g[i]), free(s->lowp[i]);
}
/* Whether f32 values x and y have the same bits or are both NaN: which NaN
 * a NaN + NaN returns is left open by IEEE 754, and compilers order the
 * operands of a commutative + as they see fit (clang differently in two
 * inlined copies of one loop), so only the NaN-ness is compared there. */
static bool same_f32(const float *x, const float *y, size_t n) {
  for (size_t j = 0; j < n; j++)
    if (memcmp(&x[j], &y[j], 4) && !(isnan(x[j]) && isnan(y[j]))) return false;
  return true;
}
static bool same_16(const uint16_t *x, const uint16_t *y, size_t n, loom_dtype dt) {
  const uint16_t inf = dt == LOOM_F16 ? 0x7c00 : 0x7f80; /* NaN: |bits| above the infinity's */
  for (size_t j = 0; j < n; j++)
    if (x[j] != y[j] && !((x[j] & 0x7fff) > inf && (y[j] & 0x7fff) > inf)) return false;
  return true;
}
static void opt_same(const opt_state *a, const opt_state *b, loom_dtype lowp_dt, const char *what) {
  for (int i = 0; i < NPAR; i++) {
    size_t n = (size_t)PSIZE[i];
    cr_assert(same_f32(a->p[i], b->p[i], n), "%s: param %d differs", what, i);
    cr_assert(same_f32(a->m[i], b->m[i], n), "%s: first buffer %d differs", what, i);
    cr_assert(same_f32(a->v[i], b->v[i], n), "%s: second buffer %d differs", what, i);
    cr_assert(same_16(a->lowp[i], b->lowp[i], n, lowp_dt), "%s: low-precision copy %d differs", what, i);
  }
}

/* Three steps of AdamW then SGD (momentum, nesterov, first step) on s. */
static void opt_run16(opt_state *s, loom_dtype lowp_dt, bool with_lowp, const uint16_t **g16, loom_dtype g16_dt) {
  int64_t numel[NPAR];
  for (int i = 0; i < NPAR; i++) numel[i] = PSIZE[i];
  loom_param_group g = {NPAR,    s->p,  (const float **)s->g, s->m, s->v, with_lowp ? s->lowp : NULL, lowp_dt,
                        numel,   g16,   g16_dt};
  for (int t = 1; t <= 3; t++) {
    loom_adamw_hparams h = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.05f, 1.0f - powf(0.9f, (float)t),
                            1.0f - powf(0.999f, (float)t)};
    cr_assert_eq(loom_cpu_adamw_step(&g, &h), LOOM_OK);
  }
  for (int t = 0; t < 3; t++) {
    loom_sgd_hparams h = {0.05f, 0.9f, 0.1f, 1e-3f, t == 2, t == 0};
    cr_assert_eq(loom_cpu_sgd_step(&g, &h), LOOM_OK);
  }
  g.buf1 = NULL; /* SGD without momentum */
  loom_sgd_hparams h = {0.05f, 0.0f, 0.0f, 1e-3f, 0, 0};
  cr_assert_eq(loom_cpu_sgd_step(&g, &h), LOOM_OK);
}
static void opt_run(opt_state *s, loom_dtype lowp_dt, bool with_lowp) { opt_run16(s, lowp_dt, with_lowp, NULL, LOOM_F32); }

Test(cpu_lowp, optimizer_avx2_matches_scalar) {
  if (!loom_cpu_isa_runs(LOOM_CPU_ISA_AVX2)) cr_skip_test("no AVX2: nothing to compare");
  const loom_dtype dts[3] = {LOOM_F16, LOOM_BF16, LOOM_F32};
  for (int d = 0; d < 3; d++) {
    opt_state a, b;
    opt_init(&a, 99 + d), opt_init(&b, 99 + d);
    cr_assert_eq(loom_set_cpu_isa("scalar"), LOOM_OK);
    opt_run(&a, dts[d] == LOOM_F32 ? LOOM_F16 : dts[d], dts[d] != LOOM_F32);
    cr_assert_eq(loom_set_cpu_isa("avx2"), LOOM_OK);
    opt_run(&b, dts[d] == LOOM_F32 ? LOOM_F16 : dts[d], dts[d] != LOOM_F32);
    loom_set_cpu_isa(NULL);
    opt_same(&a, &b, dts[d] == LOOM_F32 ? LOOM_F16 : dts[d], d == 0 ? "f16 copy" : d == 1 ? "bf16 copy" : "no copy");
    opt_free(&a), opt_free(&b);
  }
}

/* The mixed-precision step's deferred gradients (optim_kernels.h grad16):
 * each update block widens its part of the 16-bit gradient into the f32
 * one first (the AVX2 runs widen it in registers and store it as they go).
 * Against the gradients widened beforehand by the unscale pass
 * at scale 1 (what the step did before): the same gradients, parameters,
 * moments and copies, bit for bit — non-finite gradients included (a
 * signalling NaN comes out quieted, as the pass's multiply makes it; the
 * gradients are compared strictly, the rest as opt_same does, where a NaN
 * gradient meeting a NaN parameter may leave either NaN). */
static void grad16_case(const char *isa) {
  const loom_dtype dts[2] = {LOOM_F16, LOOM_BF16};
  for (int d = 0; d < 2; d++) {
    opt_state a, b;
    opt_init(&a, 7 + d), opt_init(&b, 7 + d);
    uint16_t *g16[NPAR];
    for (int i = 0; i < NPAR; i++) {
      const int64_t n = PSIZE[i];
      g16[i] = malloc((size_t)n * 2);
      cr_assert(g16[i]);
      loom_cpu_store_f32(g16[i], dts[d], 1, n, a.g[i]);
      if (n > 40) {
        g16[i][n / 3] = dts[d] == LOOM_BF16 ? 0x7f81 : 0x7c01; /* signalling NaN, vector body */
        g16[i][n - 2] = dts[d] == LOOM_BF16 ? 0xff80 : 0xfc00; /* -inf, tail */
        g16[i][n - 1] = dts[d] == LOOM_BF16 ? 0xff81 : 0xfc01; /* signalling NaN, tail */
      }
      const loom_amp_unscale_item it = {g16[i], a.g[i], n, (int32_t)dts[d], 0};
      cr_assert_eq(loom_cpu_amp_unscale(&it, 1, 1.0f, NULL), LOOM_OK);
      for (int64_t j = 0; j < n; j++) b.g[i][j] = -12345.0f; /* must be overwritten */
    }
    cr_assert_eq(loom_set_cpu_isa(isa), LOOM_OK);
    opt_run(&a, dts[d], true);
    opt_run16(&b, dts[d], true, (const uint16_t **)g16, dts[d]);
    loom_set_cpu_isa(NULL);
    opt_same(&a, &b, dts[d], dts[d] == LOOM_F16 ? "f16 gradients" : "bf16 gradients");
    for (int i = 0; i < NPAR; i++) {
      cr_assert(!memcmp(a.g[i], b.g[i], (size_t)PSIZE[i] * 4), "%s: gradient %d differs", isa, i);
      free(g16[i]);
    }
    opt_free(&a), opt_free(&b);
  }
}
Test(cpu_lowp, optimizer_deferred_grad16_matches_unscaled) {
  grad16_case("scalar");
  if (loom_cpu_isa_runs(LOOM_CPU_ISA_AVX2)) grad16_case("avx2");
}

Test(cpu_lowp, unscale_avx2_matches_scalar) {
  if (!loom_cpu_isa_runs(LOOM_CPU_ISA_AVX2)) cr_skip_test("no AVX2: nothing to compare");
  const int64_t n = 40000 + 5;
  const loom_dtype dts[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
  for (int d = 0; d < 3; d++)
    for (int acc = 0; acc < 2; acc++)
      for (int with_bad = 0; with_bad < 3; with_bad++) {
        float *src = malloc(n * 4), *d0 = malloc(n * 4), *d1 = malloc(n * 4);
        uint16_t *s16 = malloc(n * 2);
        cr_assert(src && d0 && d1 && s16);
        rng = 5 + d;
        for (int64_t j = 0; j < n; j++) src[j] = frand() * 1000.0f, d0[j] = d1[j] = frand();
        if (with_bad == 1) src[777] = NAN;          /* in the vector body */
        if (with_bad == 2) src[n - 2] = -INFINITY;  /* in the tail */
        if (dts[d] != LOOM_F32) loom_cpu_store_f32(s16, dts[d], 1, n, src);
        const void *sp = dts[d] == LOOM_F32 ? (const void *)src : s16;
        loom_amp_unscale_item it0 = {sp, d0, n, dts[d], acc}, it1 = {sp, d1, n, dts[d], acc};
        int bad0 = 0, bad1 = 0;
        cr_assert_eq(loom_set_cpu_isa("scalar"), LOOM_OK);
        cr_assert_eq(loom_cpu_amp_unscale(&it0, 1, 1.0f / 1024.0f, &bad0), LOOM_OK);
        cr_assert_eq(loom_set_cpu_isa("avx2"), LOOM_OK);
        cr_assert_eq(loom_cpu_amp_unscale(&it1, 1, 1.0f / 1024.0f, &bad1), LOOM_OK);
        loom_set_cpu_isa(NULL);
        cr_assert_eq(bad0, with_bad != 0, "dtype %d acc %d: scalar found_inf %d", d, acc, bad0);
        cr_assert_eq(bad1, bad0, "dtype %d acc %d: avx2 found_inf %d, scalar %d", d, acc, bad1, bad0);
        cr_assert(!memcmp(d0, d1, n * 4), "dtype %d acc %d: the unscaled gradients differ", d, acc);
        free(src), free(d0), free(d1), free(s16);
      }
}

/* ---- 16-bit elementwise runs in registers (ew16_x86.h) --------------------- */

/* n random 16-bit patterns: every class (NaN payloads, infinities, zeros,
 * subnormals) turns up, and the add/sub pairs cancel now and then. */
static loom_tensor *rand_bits16(int64_t n, loom_dtype dt) {
  loom_tensor *t = loom_empty(1, &n, dt, loom_cpu());
  cr_assert(t, "%s", loom_last_error());
  uint16_t *p = loom_tensor_data(t);
  for (int64_t i = 0; i < n; i++) p[i] = (uint16_t)rnd32();
  return t;
}

/* The binary ops, add + ReLU and its gradient, and the in-place sum, on
 * AVX2 (one pass in registers) against the portable build of the same op
 * (converted through f32 buffers): the same bits, at lengths with and
 * without a tail, in one run and over the threads' chunks. */
static void ew16_case(loom_dtype dt, int64_t n) {
  loom_tensor *a = rand_bits16(n, dt), *b = rand_bits16(n, dt), *r[2][7];
  for (int v = 0; v < 2; v++) {
    cr_assert_eq(loom_set_cpu_isa(v ? "scalar" : "avx2"), LOOM_OK);
    r[v][0] = loom_add(a, b), r[v][1] = loom_sub(a, b), r[v][2] = loom_mul(a, b), r[v][3] = loom_div(a, b);
    r[v][4] = loom_add_relu(a, b);
    loom_op_args args = {.in = {b, r[v][4]}, .n_in = 2};
    args.i[0] = args.i[1] = 1;
    r[v][5] = loom_op_run(LOOM_OP_ADD_RELU_BACKWARD, &args);
    cr_assert(r[v][5] && args.out[1], "%s", loom_last_error());
    same_bits(r[v][5], args.out[1], "add_relu_backward: the two gradients");
    r[v][6] = loom_clone(a);
    cr_assert_eq(loom_add_inplace(r[v][6], b), LOOM_OK, "%s", loom_last_error());
  }
  loom_set_cpu_isa(NULL);
  static const char *what[7] = {"add", "sub", "mul", "div", "add_relu", "add_relu_backward", "add_inplace"};
  const uint16_t expo = dt == LOOM_F16 ? 0x7c00 : 0x7f80;
  for (int k = 0; k < 7; k++) {
    cr_assert(r[0][k] && r[1][k], "%s: %s", what[k], loom_last_error());
    const uint16_t *p = loom_tensor_data(r[0][k]), *q = loom_tensor_data(r[1][k]);
    const uint16_t *pa = loom_tensor_data(a), *pb = loom_tensor_data(b);
    for (int64_t i = 0; i < n; i++) {
      /* Which NaN a NaN op NaN returns is left open by IEEE 754 and, in the
       * buffered loop, by the compiler's operand order; any NaN will do
       * there (bf16 rounds every NaN to 0x7fff anyway). */
      const bool nan2 = (pa[i] & 0x7fff) > expo && (pb[i] & 0x7fff) > expo;
      if (nan2 && (k < 4 || k == 6) && (p[i] & 0x7fff) > expo && (q[i] & 0x7fff) > expo) continue;
      cr_assert_eq(p[i], q[i], "%s %s n=%lld: element %lld is 0x%04x on avx2, 0x%04x buffered", what[k],
                   loom_dtype_name(dt), (long long)n, (long long)i, p[i], q[i]);
    }
  }
}

Test(cpu_lowp, ew16_runs_match_buffered) {
  if (!loom_cpu_isa_runs(LOOM_CPU_ISA_AVX2)) cr_skip_test("the CPU cannot run avx2");
  const int64_t ns[] = {1, 7, 8, 9, 4096 + 13, 70001};
  const loom_dtype dts[2] = {LOOM_BF16, LOOM_F16};
  loom_scope_begin();
  for (int d = 0; d < 2; d++)
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) ew16_case(dts[d], ns[i]);
  loom_scope_end();
}

/* ---- batch norm's NHWC row loops on AVX2 (batch_norm_x86.h) --------------- */

/* Training forward (with and without the fused ReLU) and backward (dx,
 * dweight, dbias) on an NHWC tensor, AVX2 against the portable build: the
 * same bits in every output and in the running statistics, for f32 and for
 * 16-bit data. C = 24 runs the AVX2 loops (3 groups of 8), C = 12 the
 * portable ones on both. */
static void bn_nhwc_case(loom_dtype dt, int64_t C, int act) {
  const int64_t shape[4] = {6, C, 5, 7};
  loom_device cpu = loom_cpu();
  loom_tensor *x = loom_to_memory_format(rand16(4, shape, dt), LOOM_FORMAT_NHWC);
  loom_tensor *gy = loom_to_memory_format(rand16(4, shape, dt), LOOM_FORMAT_NHWC);
  loom_tensor *w = loom_randn(1, &C, LOOM_F32, cpu), *b = loom_randn(1, &C, LOOM_F32, cpu);
  cr_assert(x && gy && w && b, "%s", loom_last_error());
  loom_tensor *out[2][7];
  for (int v = 0; v < 2; v++) {
    loom_tensor *rm = loom_zeros(1, &C, LOOM_F32, cpu), *rv = loom_ones(1, &C, LOOM_F32, cpu);
    cr_assert_eq(loom_set_cpu_isa(v ? "scalar" : "avx2"), LOOM_OK);
    loom_op_args f = {.in = {x, w, b, rm, rv}, .n_in = 5};
    f.i[0] = 1;
    f.i[1] = act;
    f.f[0] = 0.1;
    f.f[1] = 1e-5;
    loom_tensor *y = loom_op_run(LOOM_OP_BATCH_NORM, &f);
    cr_assert(y, "%s", loom_last_error());
    loom_op_args g = {.in = {gy, x, w, b, f.out[1]}, .n_in = 5};
    g.i[0] = 1;
    g.i[1] = act;
    g.i[2] = g.i[3] = g.i[4] = 1;
    cr_assert(loom_op_run(LOOM_OP_BATCH_NORM_BACKWARD, &g), "%s", loom_last_error());
    loom_tensor *o[7] = {y, f.out[1], rm, rv, g.out[0], g.out[1], g.out[2]};
    for (int k = 0; k < 7; k++) out[v][k] = o[k];
  }
  loom_set_cpu_isa(NULL);
  static const char *what[7] = {"y", "saved statistics", "running mean", "running var", "dx", "dweight", "dbias"};
  for (int k = 0; k < 7; k++) {
    const loom_tensor *p = out[0][k], *q = out[1][k];
    const size_t bytes = (size_t)loom_tensor_numel(p) * loom_dtype_size(loom_tensor_dtype(p));
    cr_assert_eq(loom_tensor_dtype(p), loom_tensor_dtype(q));
    cr_assert(!memcmp(loom_tensor_data(p), loom_tensor_data(q), bytes), "batch norm %s, C=%lld, act %d: %s differs",
              loom_dtype_name(dt), (long long)C, act, what[k]);
  }
}

Test(cpu_lowp, batch_norm_nhwc_avx2_matches_portable) {
  if (!loom_cpu_isa_runs(LOOM_CPU_ISA_AVX2)) cr_skip_test("the CPU cannot run avx2");
  loom_scope_begin();
  const loom_dtype dts[3] = {LOOM_F32, LOOM_BF16, LOOM_F16};
  for (int d = 0; d < 3; d++)
    for (int act = 0; act < 2; act++) {
      bn_nhwc_case(dts[d], 24, act ? LOOM_ACT_RELU : LOOM_ACT_NONE);
      bn_nhwc_case(dts[d], 12, act ? LOOM_ACT_RELU : LOOM_ACT_NONE);
    }
  loom_scope_end();
}
