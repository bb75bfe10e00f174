/* test_conv_widen.c — conv2d on f16/bf16 operands where the CPU computes by
 * widening to f32 (the direct and, for NHWC 3x3 stride-1 layers with
 * channel counts multiples of 16, Winograd kernels, at LOOM_CPU_ISA avx512
 * and avx2: what
 * a CPU without AVX512_BF16 runs): y, dX, dW and db bit for bit what the same
 * convolution gives on f32 copies of the operands, rounded once to the 16-bit
 * dtype — the contract of the widening path, whether it widens whole tensors
 * first or (conv_direct.c) one image at a time inside its packers.
 *
 * Geometries cover what the per-image widening touches: NCHW and NHWC,
 * channel counts that are and are not a multiple of 16 (the padded pitch),
 * the 3-channel stem (the folded weight gradient), stride-2 phases of the
 * backward-data kernel, a 1x1 stride-2 shortcut, groups and dilation, with
 * and without bias and fused ReLU (which widen dY whole). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/loom.h"
#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/cpu_isa.h"
#include "support/testkit.h"

typedef struct wcase {
  int64_t N, C, H, W, O, K, s, p, d, G;
} wcase;

static const wcase CASES[] = {
    {3, 16, 9, 10, 32, 3, 1, 1, 1, 1}, /* ResNet-20's 3x3, C a multiple of 16 (NHWC: Winograd) */
    {2, 64, 8, 8, 64, 3, 1, 1, 1, 1},  /* ResNet-20's third stage (NHWC: Winograd) */
    {3, 3, 8, 8, 16, 3, 1, 1, 1, 1},   /* the stem: C = 3 */
    {2, 20, 7, 9, 24, 3, 2, 1, 1, 1},  /* C off the 16-channel pitch, stride 2 */
    {3, 16, 8, 8, 32, 1, 2, 0, 1, 1},  /* the 1x1 stride-2 shortcut */
    {2, 16, 6, 6, 16, 3, 1, 1, 1, 2},  /* groups */
    {2, 8, 9, 9, 8, 3, 1, 2, 2, 1},    /* dilation */
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

/* The results of one forward + backward: y, dX, dW, db (NULL without bias). */
typedef struct results {
  double *v[4];
  int64_t n[4];
} results;

static void read_into(results *r, int k, loom_tensor *t) {
  r->v[k] = t ? tk_read(t) : NULL;
  r->n[k] = t ? loom_tensor_numel(t) : 0;
}

/* Runs case c with every operand cast to dt (x, w, b from the f16/bf16
 * values xs, ws, bs; the output gradient from gs), channels-last when nhwc. */
static results run(const wcase *c, loom_dtype dt, bool nhwc, bool bias, bool relu, loom_tensor *xs, loom_tensor *ws,
                   loom_tensor *bs, loom_tensor *gs) {
  loom_tensor *x = loom_cast(xs, dt), *w = loom_cast(ws, dt), *b = bias ? loom_cast(bs, dt) : NULL;
  loom_set_requires_grad(x, true), loom_set_requires_grad(w, true);
  if (b) loom_set_requires_grad(b, true);
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  o.stride[0] = o.stride[1] = c->s;
  o.padding[0] = o.padding[1] = c->p;
  o.dilation[0] = o.dilation[1] = c->d;
  o.groups = c->G;
  o.act = relu ? LOOM_ACT_RELU : LOOM_ACT_NONE;
  loom_tensor *y = loom_conv2d(nhwc ? loom_to_memory_format(x, LOOM_FORMAT_NHWC) : x, w, b, &o);
  cr_assert_not_null(y, "%s", loom_last_error());
  loom_tensor *gy = loom_cast(gs, dt);
  if (nhwc) gy = loom_to_memory_format(gy, LOOM_FORMAT_NHWC);
  cr_assert_eq(loom_backward_with(y, gy), LOOM_OK, "%s", loom_last_error());
  results r;
  read_into(&r, 0, y), read_into(&r, 1, loom_grad(x)), read_into(&r, 2, loom_grad(w));
  read_into(&r, 3, b ? loom_grad(b) : NULL);
  return r;
}

static void check(const wcase *c, int ci, loom_dtype dt, bool nhwc, bool bias, bool relu, const char *isa) {
  const int64_t OH = out_dim(c->H, c->K, c->s, c->p, c->d), OW = out_dim(c->W, c->K, c->s, c->p, c->d);
  const int64_t sx[4] = {c->N, c->C, c->H, c->W}, sw[4] = {c->O, c->C / c->G, c->K, c->K}, sy[4] = {c->N, c->O, OH, OW};
  loom_tensor *xs = tk_rand_tensor(4, sx, -1, 1, 0, dt, loom_cpu(), NULL);
  loom_tensor *ws = tk_rand_tensor(4, sw, -1, 1, 0, dt, loom_cpu(), NULL);
  loom_tensor *bs = tk_rand_tensor(1, &c->O, -1, 1, 0, dt, loom_cpu(), NULL);
  loom_tensor *gs = tk_rand_tensor(4, sy, -1, 1, 0, dt, loom_cpu(), NULL);
  results got = run(c, dt, nhwc, bias, relu, xs, ws, bs, gs);
  results ref = run(c, LOOM_F32, nhwc, bias, relu, xs, ws, bs, gs);
  static const char *const NAMES[4] = {"y", "dX", "dW", "db"};
  for (int k = 0; k < 4; k++) {
    cr_assert_eq(got.n[k], ref.n[k]);
    for (int64_t i = 0; i < got.n[k]; i++) {
      const double want = tk_round(ref.v[k][i], dt);
      cr_assert(got.v[k][i] == want && signbit(got.v[k][i]) == signbit(want),
                "[%s] case %d %s %s bias=%d relu=%d: %s[%lld] is %.9g, the f32 convolution rounded to %s gives %.9g",
                isa, ci, loom_dtype_name(dt), nhwc ? "NHWC" : "NCHW", bias, relu, NAMES[k], (long long)i, got.v[k][i],
                loom_dtype_name(dt), want);
    }
    free(got.v[k]), free(ref.v[k]);
  }
}

CPU_TEST(conv_widen, f16_bf16_match_the_f32_convolution_rounded_once) {
  static const char *const ISAS[2] = {"avx512", "avx2"};
  const loom_cpu_isa_level LEVELS[2] = {LOOM_CPU_ISA_AVX512, LOOM_CPU_ISA_AVX2};
  int ran = 0;
  loom_set_num_threads(2);
  /* The third round: AVX2, with the Winograd layers on the AVX-512
     kernels' code emulated on 16-lane generic vectors (their 16-bit loads
     and stores included), so an AVX2-only CPU checks that code too. */
  for (int l = 0; l < 3; l++) {
    const int isa = l < 2 ? l : 1;
    if (!loom_cpu_isa_runs(LEVELS[isa])) continue;
    cr_assert_eq(loom_set_cpu_isa(ISAS[isa]), LOOM_OK, "%s", loom_last_error());
    if (l == 2) cr_assert(loom_conv_winograd_test_kernels("emu16"));
    const char *label = l == 2 ? "avx2, Winograd emu16" : ISAS[isa];
    /* Winograd layers with 4x4 output tiles (the default), then 2x2. */
    for (int tile = 4; tile >= 2; tile -= 2) {
      loom_conv_cpu_set_winograd(tile);
      char lt[80];
      snprintf(lt, sizeof lt, "%s, Winograd tile %d", label, tile);
      tk_seed(2511);
      for (int ci = 0; ci < NCASES; ci++)
        for (int k = 0; k < 16; k++) {
          const loom_dtype dt = k & 1 ? LOOM_BF16 : LOOM_F16;
          const bool nhwc = k & 2, bias = k & 4, relu = k & 8;
          loom_scope_begin();
          check(&CASES[ci], ci, dt, nhwc, bias, relu, lt);
          loom_scope_end();
        }
    }
    loom_conv_cpu_set_winograd(4);
    loom_conv_winograd_test_kernels(NULL);
    ran++;
  }
  loom_set_cpu_isa(NULL);
  loom_set_num_threads(0);
  if (!ran) fprintf(stderr, "conv_widen skipped: this CPU runs neither AVX-512 nor AVX2 direct kernels\n");
}
