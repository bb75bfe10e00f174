/* test_conv_bf16.c — conv2d on bf16 operands with the AVX512_BF16 GEMM
 * (lib/ops/cpu/conv_bf16.c): forward, backward-data, backward-filter and
 * the bias gradient against a float64 reference, at ResNet-20's conv shapes
 * (16/32/64 channels, 32/16/8 pixels square, stride-2 downsampling, the
 * 3-channel stem; batch slices) and odd ones (non-square kernels, strides,
 * dilation, padding, channel counts off the GEMM's 12 x 32 tile).
 *
 * The tolerance (conv_bf16.c): every bf16 x bf16 product is exact in f32,
 * so each result is an f32 sum of the exact products — within
 * K * 2^-24 * sum|products| of the float64 sum of the same bf16 values (K
 * the number of terms) — then rounded once to bf16 (2^-8 relative):
 *   |got - ref| <= 2^-8 |ref| + K * 2^-24 * sum|products|.
 * The same bound holds on the widening path (LOOM_CPU_ISA=avx512), which the
 * last test checks too, along with the results not depending on the thread
 * count. Skipped visibly on CPUs without AVX512_BF16. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/loom.h"
#include "ops/cpu/cpu_isa.h"

static bool have_bf16(void) {
  if (loom_cpu_isa_best() >= LOOM_CPU_ISA_AVX512BF16) return true;
  fprintf(stderr, "conv_bf16 skipped: this CPU has no AVX512_BF16\n");
  return false;
}

typedef struct ccase {
  const char *name;
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw;
  bool bias, relu;
} ccase;

/* Element (n, c, h, w) of a 4-D tensor (any strides, bf16 or f32). */
static double at4(const loom_tensor *t, int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t *s = loom_tensor_strides(t);
  int64_t off = n * s[0] + c * s[1] + h * s[2] + w * s[3];
  if (loom_tensor_dtype(t) == LOOM_F32) return ((const float *)loom_tensor_data(t))[off];
  uint32_t u = (uint32_t)((const uint16_t *)loom_tensor_data(t))[off] << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static double at1(const loom_tensor *t, int64_t i) { return at4(t, i, 0, 0, 0); }
static double bf16_of(double v) {
  uint32_t u = (uint32_t)loom_f32_to_bf16((float)v) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

typedef struct result {
  loom_tensor *y, *dx, *dw, *db; /* loom's results */
  loom_tensor *x, *w, *b, *r;    /* inputs and the upstream f32 weights of the loss */
} result;

/* y = conv2d(x, w, b) on bf16 NHWC operands, loss = sum(f32(y) * r), backward. */
static result run_case(const ccase *t) {
  loom_manual_seed(11);
  int64_t sx[4] = {t->N, t->C, t->H, t->W}, sw[4] = {t->O, t->C, t->KH, t->KW}, sb[1] = {t->O};
  result R = {0};
  R.x = loom_to_memory_format(loom_cast(loom_randn(4, sx, LOOM_F32, loom_cpu()), LOOM_BF16), LOOM_FORMAT_NHWC);
  R.w = loom_cast(loom_mul_scalar(loom_randn(4, sw, LOOM_F32, loom_cpu()), 0.2), LOOM_BF16);
  R.b = t->bias ? loom_cast(loom_randn(1, sb, LOOM_F32, loom_cpu()), LOOM_BF16) : NULL;
  cr_assert(R.x && R.w && (!t->bias || R.b), "%s", loom_last_error());
  loom_set_requires_grad(R.x, true), loom_set_requires_grad(R.w, true);
  if (R.b) loom_set_requires_grad(R.b, true);
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  o.stride[0] = t->sh, o.stride[1] = t->sw, o.padding[0] = t->ph, o.padding[1] = t->pw;
  o.dilation[0] = t->dh, o.dilation[1] = t->dw;
  o.act = t->relu ? LOOM_ACT_RELU : LOOM_ACT_NONE;
  R.y = loom_conv2d(R.x, R.w, R.b, &o);
  cr_assert(R.y, "%s: %s", t->name, loom_last_error());
  cr_assert(loom_tensor_is_channels_last(R.y));
  R.r = loom_randn(4, loom_tensor_shape(R.y), LOOM_F32, loom_cpu());
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul(loom_cast(R.y, LOOM_F32), R.r))), LOOM_OK, "%s", loom_last_error());
  R.dx = loom_grad(R.x), R.dw = loom_grad(R.w), R.db = R.b ? loom_grad(R.b) : NULL;
  cr_assert(R.dx && R.dw && (!R.b || R.db));
  cr_assert_eq(loom_tensor_dtype(R.y), LOOM_BF16);
  cr_assert_eq(loom_tensor_dtype(R.dx), LOOM_BF16);
  cr_assert_eq(loom_tensor_dtype(R.dw), LOOM_BF16);
  return R;
}

/* Sums (value, magnitude, term count) of one result element. */
typedef struct acc {
  double s, mag;
} acc;

static double check_one(const char *what, const char *name, int64_t idx, double got, acc a, double k) {
  const double bound = ldexp(fabs(a.s), -8) + k * ldexp(a.mag, -24) + 1e-30;
  const double err = fabs(got - a.s);
  cr_assert(err <= bound, "%s %s[%lld]: got %.9g, float64 reference %.9g (error %.3g > bound %.3g)", name, what,
            (long long)idx, got, a.s, err, bound);
  return err / bound;
}

/* Every result of R against the float64 reference; returns the worst
 * error / bound ratio. */
static double check_case(const ccase *t, const result *R) {
  const int64_t N = t->N, C = t->C, H = t->H, W = t->W, O = t->O, KH = t->KH, KW = t->KW;
  const int64_t *ys = loom_tensor_shape(R->y);
  const int64_t OH = ys[2], OW = ys[3];
  acc *y = calloc((size_t)(N * O * OH * OW), sizeof(acc)), *dx = calloc((size_t)(N * C * H * W), sizeof(acc));
  acc *dw = calloc((size_t)(O * C * KH * KW), sizeof(acc)), *db = calloc((size_t)O, sizeof(acc));
  double *dz = malloc(sizeof(double) * (size_t)(N * O * OH * OW));
  cr_assert(y && dx && dw && db && dz);
  /* dz = bf16(r) (the cast's backward) where loom's y > 0 under the ReLU. */
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t p = 0; p < OH * OW; p++) {
        const int64_t oh = p / OW, ow = p % OW;
        const bool live = !t->relu || at4(R->y, n, o, oh, ow) > 0;
        dz[(n * O + o) * OH * OW + p] = live ? bf16_of(at4(R->r, n, o, oh, ow)) : 0.0;
      }
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          acc *yo = &y[((n * O + o) * OH + oh) * OW + ow];
          const double d = dz[((n * O + o) * OH + oh) * OW + ow];
          for (int64_t c = 0; c < C; c++)
            for (int64_t kh = 0; kh < KH; kh++) {
              const int64_t ih = oh * t->sh - t->ph + kh * t->dh;
              if (ih < 0 || ih >= H) continue;
              for (int64_t kw = 0; kw < KW; kw++) {
                const int64_t iw = ow * t->sw - t->pw + kw * t->dw;
                if (iw < 0 || iw >= W) continue;
                const double xv = at4(R->x, n, c, ih, iw), wv = at4(R->w, o, c, kh, kw);
                yo->s += xv * wv, yo->mag += fabs(xv * wv);
                acc *a = &dx[((n * C + c) * H + ih) * W + iw];
                a->s += d * wv, a->mag += fabs(d * wv);
                acc *b = &dw[((o * C + c) * KH + kh) * KW + kw];
                b->s += d * xv, b->mag += fabs(d * xv);
              }
            }
          db[o].s += d, db[o].mag += fabs(d);
        }
  double worst = 0, r;
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          const int64_t i = ((n * O + o) * OH + oh) * OW + ow;
          acc a = y[i];
          if (t->bias) a.s += at1(R->b, o), a.mag += fabs(at1(R->b, o));
          if (t->relu && a.s < 0) a.s = 0;
          r = check_one("y", t->name, i, at4(R->y, n, o, oh, ow), a, (double)(C * KH * KW + 1));
          worst = r > worst ? r : worst;
        }
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t ih = 0; ih < H; ih++)
        for (int64_t iw = 0; iw < W; iw++) {
          const int64_t i = ((n * C + c) * H + ih) * W + iw;
          r = check_one("dx", t->name, i, at4(R->dx, n, c, ih, iw), dx[i], (double)(O * KH * KW + KH * KW));
          worst = r > worst ? r : worst;
        }
  for (int64_t i = 0; i < O * C * KH * KW; i++) {
    const int64_t kw = i % KW, kh = i / KW % KH, c = i / (KW * KH) % C, o = i / (KW * KH * C);
    r = check_one("dw", t->name, i, at4(R->dw, o, c, kh, kw), dw[i], (double)(N * OH * OW + 8));
    worst = r > worst ? r : worst;
  }
  if (t->bias)
    for (int64_t o = 0; o < O; o++) {
      r = check_one("db", t->name, o, at1(R->db, o), db[o], (double)(N * OH * OW));
      worst = r > worst ? r : worst;
    }
  free(y), free(dx), free(dw), free(db), free(dz);
  return worst;
}

static void run_cases(const ccase *cs, int n, const char *isa) {
  cr_assert_eq(loom_set_cpu_isa(isa), LOOM_OK, "%s", loom_last_error());
  for (int i = 0; i < n; i++) {
    loom_scope_begin();
    result R = run_case(&cs[i]);
    double worst = check_case(&cs[i], &R);
    fprintf(stderr, "conv_bf16 [%s] %s: worst error / bound %.3f\n", isa, cs[i].name, worst);
    loom_scope_end();
  }
  loom_set_cpu_isa(NULL);
}

/* ResNet-20's convolutions (3x3, padding 1), batch slices. */
static const ccase resnet[] = {
    {"stem 3->16 32x32", 4, 3, 32, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, false, false},
    {"stage1 16->16 32x32", 4, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, false, false},
    {"down 16->32 32x32 s2", 8, 16, 32, 32, 32, 3, 3, 2, 2, 1, 1, 1, 1, false, false},
    {"stage2 32->32 16x16", 8, 32, 16, 16, 32, 3, 3, 1, 1, 1, 1, 1, 1, false, false},
    {"down 32->64 16x16 s2", 16, 32, 16, 16, 64, 3, 3, 2, 2, 1, 1, 1, 1, false, false},
    {"stage3 64->64 8x8", 32, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1, 1, false, false},
};

/* Odd geometries, with the fused bias + ReLU. */
static const ccase odd[] = {
    {"3x2 kernel, stride 2x1, dilation 1x2", 3, 5, 7, 9, 37, 3, 2, 2, 1, 1, 0, 1, 2, true, true},
    {"1x1 stride 2, 24->20", 2, 24, 9, 11, 20, 1, 1, 2, 2, 0, 0, 1, 1, true, false},
    {"5x5 padding 3, 7->45", 2, 7, 6, 5, 45, 5, 5, 1, 1, 3, 3, 1, 1, false, true},
    {"3x3 on 1x1 input, 1 image, 65->33", 1, 65, 1, 1, 33, 3, 3, 1, 1, 1, 1, 1, 1, true, true},
    {"3x3 dilation 2x3, padding 2x3, 8->20", 2, 8, 10, 12, 20, 3, 3, 1, 1, 2, 3, 2, 3, true, false},
    {"2x4 kernel, stride 2x3, 10->18 (col2im)", 3, 10, 9, 13, 18, 2, 4, 2, 3, 1, 2, 1, 1, false, true},
    {"3x3 stride 3, 64 images of 4x4", 64, 16, 4, 4, 16, 3, 3, 3, 3, 1, 1, 1, 1, true, false},
    /* dW in 16x16 tiles with more than 16 channels, the last block partial */
    {"3x3 24->32 (dW 16x16 tiles, channels 16 + 8)", 3, 24, 10, 10, 32, 3, 3, 1, 1, 1, 1, 1, 1, true, false},
    {"3x3 48->64 (dW 16x16 tiles)", 2, 48, 6, 6, 64, 3, 3, 1, 1, 1, 1, 1, 1, false, true},
};

Test(conv_bf16, resnet20_shapes_within_f32_accumulation_bound) {
  if (!have_bf16()) return;
  run_cases(resnet, (int)(sizeof resnet / sizeof resnet[0]), "avx512bf16");
}

Test(conv_bf16, odd_shapes_within_f32_accumulation_bound) {
  if (!have_bf16()) return;
  run_cases(odd, (int)(sizeof odd / sizeof odd[0]), "avx512bf16");
}

/* All results of one case as f32 bits, in a fixed order. */
static float *results_of(const ccase *t, const char *isa, int threads, int64_t *n_out) {
  cr_assert_eq(loom_set_cpu_isa(isa), LOOM_OK, "%s", loom_last_error());
  const int saved = loom_get_num_threads();
  loom_set_num_threads(threads);
  loom_scope_begin();
  result R = run_case(t);
  loom_tensor *ts[4] = {R.y, R.dx, R.dw, R.db};
  int64_t n = 0;
  for (int i = 0; i < 4; i++) n += ts[i] ? loom_tensor_numel(ts[i]) : 0;
  float *v = malloc(sizeof(float) * (size_t)n), *q = v;
  cr_assert(v);
  for (int i = 0; i < 4; i++) {
    if (!ts[i]) continue;
    loom_tensor *c = loom_contiguous(loom_cast(ts[i], LOOM_F32));
    memcpy(q, loom_tensor_data(c), sizeof(float) * (size_t)loom_tensor_numel(c));
    q += loom_tensor_numel(c);
  }
  loom_scope_end();
  loom_set_num_threads(saved);
  loom_set_cpu_isa(NULL);
  *n_out = n;
  return v;
}

/* The bf16 path runs where selected (its results differ from the widening
 * path's in some last bits), the widening path meets the same bound, and
 * the bf16 path's results do not depend on the thread count. */
Test(conv_bf16, selected_by_isa_and_thread_count_independent) {
  if (!have_bf16()) return;
  const ccase t = {"down 16->32 s2, bias+relu", 8, 16, 16, 16, 32, 3, 3, 2, 2, 1, 1, 1, 1, true, true};
  run_cases(&t, 1, "avx512");
  int64_t n1, n2, n3;
  float *one = results_of(&t, "avx512bf16", 1, &n1), *two = results_of(&t, "avx512bf16", 2, &n2);
  float *wide = results_of(&t, "avx512", 2, &n3);
  cr_assert(n1 == n2 && n2 == n3);
  cr_assert_eq(memcmp(one, two, sizeof(float) * (size_t)n1), 0, "bf16 conv results depend on the thread count");
  int64_t differ = 0;
  for (int64_t i = 0; i < n1; i++) differ += one[i] != wide[i];
  fprintf(stderr, "conv_bf16: %lld of %lld results differ from the widening path\n", (long long)differ, (long long)n1);
  cr_assert_gt(differ, 0, "the bf16 path gave the widening path's bits exactly: was it selected?");
  /* Under amxbf16 convolutions widen (conv_bf16.c says why): the widening
     path's bits exactly. */
  if (loom_cpu_isa_runs(LOOM_CPU_ISA_AMXBF16)) {
    int64_t n4;
    float *amx = results_of(&t, "amxbf16", 2, &n4);
    cr_assert(n4 == n3 && !memcmp(amx, wide, sizeof(float) * (size_t)n3), "amxbf16 convolutions did not widen");
    free(amx);
  }
  free(one), free(two), free(wide);
}
