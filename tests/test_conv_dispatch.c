/* test_conv_dispatch.c — the CPU conv2d dispatcher over a grid of valid
 * geometries: channel counts from 1 to 2056 (past the direct kernels' old
 * limits of 1024 output channels per group on AVX-512 and 256 on AVX2, both
 * in forward and, as input channels, in backward-data), groups (2,
 * depthwise, depthwise with multiplier 2), strides 1-3, dilation 2, 1x1 /
 * 1x5 / 3x3 / 7x7 / 9x9 kernels (81 taps: past the direct path's 64),
 * padding or none, batch 1 and 2, odd sizes, NCHW and NHWC.
 *
 * Under the instruction set in force (loom_cpu_isa(): the widest by
 * default; ctest runs this again with LOOM_CPU_ISA=avx2 and =scalar) each
 * geometry must get the path the selection rules below name — Winograd
 * (3x3 stride 1 NHWC, AVX2 or AVX-512), depthwise (AVX-512 only), direct
 * (AVX2 or AVX-512), 1x1 pointwise, else im2col + GEMM — never an error, and its y, dX, dW and db must match a float64
 * reference. Spatial sizes shrink with the channel counts so that the
 * reference stays cheap (a few million multiply-adds per case). */
#include <math.h>
#include <stdlib.h>

#include "ops/conv.h"
#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/conv_direct_kern.h"
#include "ops/cpu/cpu_isa.h"
#include "support/testkit.h"

typedef struct geo {
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, G;
} geo;

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* ---- the rules -------------------------------------------------------------- */
/* What conv_cpu.c must choose at instruction-set level isa for f32 tensors
 * in format nhwc, written out independently of it. */
static loom_conv_path expected_path(const geo *g, loom_cpu_isa_level isa, bool nhwc) {
  int64_t Cg = g->C / g->G, Og = g->O / g->G, taps = g->KH * g->KW;
  if (isa != LOOM_CPU_ISA_SCALAR && nhwc && g->G == 1 && g->KH == 3 && g->KW == 3 && g->sh == 1 && g->sw == 1 &&
      g->ph == 1 && g->pw == 1 && g->dh == 1 && g->dw == 1 && g->C % 16 == 0 && g->O % 16 == 0 && g->C <= 128 &&
      g->O <= 128)
    return LOOM_CONV_PATH_WINOGRAD;
  if (isa >= LOOM_CPU_ISA_AVX512 && g->G > 1 && Cg == 1 && Og == 1 && taps <= LOOM_CONV_MAX_TAPS)
    return LOOM_CONV_PATH_DEPTHWISE;
  if (isa != LOOM_CPU_ISA_SCALAR && taps <= LOOM_CONV_MAX_TAPS && !(g->G > 1 && (Og < 8 || Cg < 8)))
    return LOOM_CONV_PATH_DIRECT;
  if (g->KH == 1 && g->KW == 1 && g->G == 1 && g->ph == 0 && g->pw == 0) return LOOM_CONV_PATH_POINTWISE;
  return LOOM_CONV_PATH_GEMM;
}

/* ---- float64 reference -------------------------------------------------------- */
/* Taps outside the input are skipped before the channel loop, so a case
 * costs what its valid taps cost. */
static void ref_forward(const geo *c, const double *x, const double *w, const double *b, double *y) {
  int64_t OH = out_dim(c->H, c->KH, c->sh, c->ph, c->dh), OW = out_dim(c->W, c->KW, c->sw, c->pw, c->dw);
  int64_t Cg = c->C / c->G, Og = c->O / c->G;
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t o = 0; o < c->O; o++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double acc = b ? b[o] : 0;
          int64_t g = o / Og;
          for (int64_t kh = 0; kh < c->KH; kh++)
            for (int64_t kw = 0; kw < c->KW; kw++) {
              int64_t ih = oh * c->sh - c->ph + kh * c->dh, iw = ow * c->sw - c->pw + kw * c->dw;
              if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
              for (int64_t ci = 0; ci < Cg; ci++)
                acc += x[((n * c->C + g * Cg + ci) * c->H + ih) * c->W + iw] *
                       w[((o * Cg + ci) * c->KH + kh) * c->KW + kw];
            }
          y[((n * c->O + o) * OH + oh) * OW + ow] = acc;
        }
}

static void ref_backward(const geo *c, const double *x, const double *w, const double *dz, double *dx, double *dw,
                         double *db) {
  int64_t OH = out_dim(c->H, c->KH, c->sh, c->ph, c->dh), OW = out_dim(c->W, c->KW, c->sw, c->pw, c->dw);
  int64_t Cg = c->C / c->G, Og = c->O / c->G;
  memset(dx, 0, (size_t)(c->N * c->C * c->H * c->W) * sizeof *dx);
  memset(dw, 0, (size_t)(c->O * Cg * c->KH * c->KW) * sizeof *dw);
  memset(db, 0, (size_t)c->O * sizeof *db);
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t o = 0; o < c->O; o++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double gz = dz[((n * c->O + o) * OH + oh) * OW + ow];
          db[o] += gz;
          int64_t g = o / Og;
          for (int64_t kh = 0; kh < c->KH; kh++)
            for (int64_t kw = 0; kw < c->KW; kw++) {
              int64_t ih = oh * c->sh - c->ph + kh * c->dh, iw = ow * c->sw - c->pw + kw * c->dw;
              if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
              for (int64_t ci = 0; ci < Cg; ci++) {
                int64_t xi = ((n * c->C + g * Cg + ci) * c->H + ih) * c->W + iw;
                int64_t wi = ((o * Cg + ci) * c->KH + kh) * c->KW + kw;
                dx[xi] += gz * w[wi];
                dw[wi] += gz * x[xi];
              }
            }
        }
}

/* Multiply-adds of the forward over valid taps only. */
static double valid_macs(const geo *c) {
  int64_t OH = out_dim(c->H, c->KH, c->sh, c->ph, c->dh), OW = out_dim(c->W, c->KW, c->sw, c->pw, c->dw);
  double taps = 0;
  for (int64_t oh = 0; oh < OH; oh++)
    for (int64_t kh = 0; kh < c->KH; kh++) {
      int64_t ih = oh * c->sh - c->ph + kh * c->dh;
      if (ih < 0 || ih >= c->H) continue;
      for (int64_t ow = 0; ow < OW; ow++)
        for (int64_t kw = 0; kw < c->KW; kw++) {
          int64_t iw = ow * c->sw - c->pw + kw * c->dw;
          taps += iw >= 0 && iw < c->W;
        }
    }
  return taps * (double)c->N * (double)c->O * (double)(c->C / c->G);
}

/* ---- the grid ------------------------------------------------------------------ */
typedef struct kern {
  int64_t KH, KW, sh, sw, ph, pw, dh, dw;
} kern;

static const kern KERNS[] = {
    {1, 1, 1, 1, 0, 0, 1, 1},  /* 1x1 */
    {1, 1, 2, 2, 0, 0, 1, 1},  /* 1x1 stride 2 (projection shortcut) */
    {1, 1, 1, 1, 1, 1, 1, 1},  /* 1x1 with padding: not the 1x1 path */
    {3, 3, 1, 1, 1, 1, 1, 1},  /* 3x3 */
    {3, 3, 2, 2, 1, 1, 1, 1},  /* 3x3 stride 2 */
    {3, 3, 1, 1, 2, 2, 2, 2},  /* 3x3 dilation 2 */
    {3, 3, 3, 2, 0, 1, 1, 1},  /* 3x3 strides 3x2, asymmetric padding */
    {1, 5, 1, 1, 0, 2, 1, 1},  /* 1x5 */
    {7, 7, 2, 2, 3, 3, 1, 1},  /* 7x7 stride 2 (ImageNet stem) */
    {9, 9, 1, 1, 4, 4, 1, 1},  /* 81 taps: more than the direct path takes */
};
#define NKERNS ((int)(sizeof KERNS / sizeof KERNS[0]))

/* (C, O): small, odd, ResNet's, and past the old per-group limits. */
static const int64_t CHANNELS[][2] = {
    {1, 16},     {3, 64},      {17, 33},    {64, 64},    {96, 96},     {255, 257},  {256, 264}, {264, 256},
    {512, 512},  {64, 1040},   {1040, 64},  {1024, 1032}, {2048, 512}, {512, 2048}, {2048, 2048}, {2056, 24},
};
#define NCHANNELS ((int)(sizeof CHANNELS / sizeof CHANNELS[0]))

enum { GROUPS_1, GROUPS_2, GROUPS_DEPTHWISE, GROUPS_MULTIPLIER, NGROUPS };

#define MAX_WEIGHT 4500000.0 /* elements: 2048x2048 1x1 fits, 2048x2048 3x3 does not */
#define MAC_BUDGET 1.0e6     /* forward multiply-adds of the reference per case */

/* Case k of the grid in *g; false if that combination is left out (groups
 * that do not divide, weights too large, no spatial size within budget). */
static bool make_case(int ch, int kn, int gr, int variant, geo *g) {
  const kern *k = &KERNS[kn];
  int64_t C = CHANNELS[ch][0], O = CHANNELS[ch][1], G = 1;
  if (gr == GROUPS_2) {
    if (C % 2 || O % 2) return false;
    G = 2;
  } else if (gr == GROUPS_DEPTHWISE) {
    if (C != O || C == 1) return false;
    G = C;
  } else if (gr == GROUPS_MULTIPLIER) {
    if (C > 512) return false;
    G = C, O = 2 * C;
  }
  if ((double)O * (double)(C / G) * (double)(k->KH * k->KW) > MAX_WEIGHT) return false;
  *g = (geo){.N = variant % 3 == 0 ? 1 : 2, .C = C, .O = O, .KH = k->KH, .KW = k->KW, .sh = k->sh, .sw = k->sw,
             .ph = k->ph, .pw = k->pw, .dh = k->dh, .dw = k->dw, .G = G};
  /* The largest odd-ish size (H odd, W = H + 2 or the other way round) whose
   * reference fits the budget and whose padded input holds the kernel. */
  for (int64_t s = 13; s >= 1; s--) {
    g->H = s + (variant % 2 ? 2 : 0);
    g->W = s + (variant % 2 ? 0 : 2);
    if (g->H + 2 * g->ph < g->dh * (g->KH - 1) + 1 || g->W + 2 * g->pw < g->dw * (g->KW - 1) + 1) return false;
    if (valid_macs(g) <= MAC_BUDGET) return true;
  }
  return false;
}

static loom_conv2d_options opts_of(const geo *c, bool relu) {
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  o.stride[0] = c->sh, o.stride[1] = c->sw;
  o.padding[0] = c->ph, o.padding[1] = c->pw;
  o.dilation[0] = c->dh, o.dilation[1] = c->dw;
  o.groups = c->G;
  o.act = relu ? LOOM_ACT_RELU : LOOM_ACT_NONE;
  return o;
}

static double atol_for(int64_t K) { return 2e-6 * sqrt((double)K + 1); }

/* The path chosen for c (as the op sees it: x in its format). */
static loom_conv_path chosen_path(loom_tensor *x, loom_tensor *w, loom_tensor *b, const loom_conv2d_options *o) {
  int64_t i[12] = {0};
  i[LOOM_CONV_I_STRIDE_H] = o->stride[0], i[LOOM_CONV_I_STRIDE_W] = o->stride[1];
  i[LOOM_CONV_I_PAD_H] = o->padding[0], i[LOOM_CONV_I_PAD_W] = o->padding[1];
  i[LOOM_CONV_I_DIL_H] = o->dilation[0], i[LOOM_CONV_I_DIL_W] = o->dilation[1];
  i[LOOM_CONV_I_GROUPS] = o->groups, i[LOOM_CONV_I_ACT] = o->act;
  loom_conv_geom g;
  cr_assert_eq(loom_conv_geom_make("conv2d", x, w, b, i, &g), LOOM_OK, "%s", loom_last_error());
  return loom_conv_cpu_choose(&g);
}

/* One case in both formats: the path, then y, dX, dW, db. Returns the NHWC
 * path (NCHW differs only where NHWC runs Winograd). */
static loom_conv_path check_case(const geo *c, int ci, bool bias, bool relu, loom_cpu_isa_level isa) {
  int64_t sx[4] = {c->N, c->C, c->H, c->W}, sw[4] = {c->O, c->C / c->G, c->KH, c->KW};
  int64_t OH = out_dim(c->H, c->KH, c->sh, c->ph, c->dh), OW = out_dim(c->W, c->KW, c->sw, c->pw, c->dw);
  int64_t sy[4] = {c->N, c->O, OH, OW}, nx = tk_numel(4, sx), nw = tk_numel(4, sw), ny = tk_numel(4, sy);
  double *vx = tk_rand_vals(nx, -1, 1, 0, LOOM_F32), *vw = tk_rand_vals(nw, -1, 1, 0, LOOM_F32);
  double *vb = bias ? tk_rand_vals(c->O, -1, 1, 0, LOOM_F32) : NULL, *vg = tk_rand_vals(ny, -1, 1, 0, LOOM_F32);
  double *pre = malloc((size_t)ny * sizeof *pre), *dz = malloc((size_t)ny * sizeof *dz);
  double *rdx = malloc((size_t)nx * sizeof *rdx), *rdw = malloc((size_t)nw * sizeof *rdw);
  double *rdb = malloc((size_t)c->O * sizeof *rdb), *want = malloc((size_t)ny * sizeof *want);
  ref_forward(c, vx, vw, vb, pre);
  for (int64_t i = 0; i < ny; i++) want[i] = relu && pre[i] < 0 ? 0 : pre[i];
  loom_conv_path want_path = expected_path(c, isa, false), got_path = want_path, nhwc_path = want_path;
  const int64_t Cg = c->C / c->G, Og = c->O / c->G;
  for (int nhwc = 0; nhwc < 2; nhwc++) {
    loom_scope_begin();
    want_path = expected_path(c, isa, nhwc);
    char what[256];
    snprintf(what, sizeof what,
             "%s case %d: N=%lld C=%lld %lldx%lld -> O=%lld, %lldx%lld s%lldx%lld p%lldx%lld d%lldx%lld G=%lld %s "
             "bias=%d relu=%d",
             loom_cpu_isa(), ci, (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W, (long long)c->O,
             (long long)c->KH, (long long)c->KW, (long long)c->sh, (long long)c->sw, (long long)c->ph,
             (long long)c->pw, (long long)c->dh, (long long)c->dw, (long long)c->G, nhwc ? "NHWC" : "NCHW", bias, relu);
    loom_tensor *x = tk_tensor(vx, 4, sx, LOOM_F32, loom_cpu()), *w = tk_tensor(vw, 4, sw, LOOM_F32, loom_cpu());
    loom_tensor *b = bias ? tk_tensor(vb, 1, &c->O, LOOM_F32, loom_cpu()) : NULL;
    loom_set_requires_grad(x, true);
    loom_set_requires_grad(w, true);
    if (b) loom_set_requires_grad(b, true);
    loom_tensor *xin = nhwc ? loom_to_memory_format(x, LOOM_FORMAT_NHWC) : x;
    loom_conv2d_options o = opts_of(c, relu);
    got_path = chosen_path(xin, w, b, &o);
    cr_assert_eq(got_path, want_path, "%s: path %s, the rules say %s", what, loom_conv_path_name(got_path),
                 loom_conv_path_name(want_path));
    loom_tensor *y = loom_conv2d(xin, w, b, &o);
    cr_assert_not_null(y, "%s (%s path): %s", what, loom_conv_path_name(got_path), loom_last_error());
    /* Winograd F(4x4, 3x3) grows f32 rounding by up to ~2^7 of the terms'
       magnitudes (tests/test_conv_winograd.c bounds it): 16x the bounds. */
    const double wf = got_path == LOOM_CONV_PATH_WINOGRAD && loom_conv_cpu_winograd_tile() == 4 ? 16 : 1;
    tk_assert_tensor(y, 4, sy, LOOM_F32, want, wf * atol_for(Cg * c->KH * c->KW), wf * 1e-5, what);
    /* Backward; the ReLU mask is the op's own y > 0 (no flips at ties). */
    double *yv = tk_read(y);
    for (int64_t i = 0; i < ny; i++) dz[i] = relu && !(yv[i] > 0) ? 0 : vg[i];
    free(yv);
    ref_backward(c, vx, vw, dz, rdx, rdw, rdb);
    loom_tensor *gy = tk_tensor(vg, 4, sy, LOOM_F32, loom_cpu());
    if (nhwc) gy = loom_to_memory_format(gy, LOOM_FORMAT_NHWC);
    cr_assert_eq(loom_backward_with(y, gy), LOOM_OK, "%s (%s path): backward: %s", what,
                 loom_conv_path_name(got_path), loom_last_error());
    char w2[300];
    int64_t pix = c->N * OH * OW;
    snprintf(w2, sizeof w2, "%s dX", what);
    tk_assert_tensor(loom_grad(x), 4, sx, LOOM_F32, rdx, wf * atol_for(Og * c->KH * c->KW), wf * 1e-5, w2);
    snprintf(w2, sizeof w2, "%s dW", what);
    tk_assert_tensor(loom_grad(w), 4, sw, LOOM_F32, rdw, wf * atol_for(pix), wf * 1e-5, w2);
    if (b) {
      snprintf(w2, sizeof w2, "%s db", what);
      tk_assert_tensor(loom_grad(b), 1, &c->O, LOOM_F32, rdb, atol_for(pix), 1e-5, w2);
    }
    loom_scope_end();
    if (nhwc) nhwc_path = got_path;
  }
  free(vx), free(vw), free(vb), free(vg), free(pre), free(dz), free(rdx), free(rdw), free(rdb), free(want);
  return nhwc_path;
}

/* The whole grid under the instruction set in force. */
Test(conv_dispatch, every_valid_geometry_gets_a_path_and_the_right_result, .timeout = 1800) {
  loom_cpu_isa_level isa = loom_cpu_isa_level_now();
  /* One thread: the paths and results do not depend on the thread count
   * (test_ops_conv checks that), and ~700 small convolutions run faster
   * without fork/join next to other tests under ctest -j. */
  loom_set_num_threads(1);
  tk_seed(2301);
  int ran = 0, per_path[LOOM_CONV_NPATHS] = {0}, big = 0;
  for (int ch = 0; ch < NCHANNELS; ch++)
    for (int kn = 0; kn < NKERNS; kn++)
      for (int gr = 0; gr < NGROUPS; gr++) {
        geo g;
        if (!make_case(ch, kn, gr, ran, &g)) continue;
        loom_conv_path p = check_case(&g, ran, ran % 2 == 0, ran % 3 == 1, isa);
        per_path[p]++;
        big += g.O / g.G > 1024 || g.C / g.G > 1024;
        ran++;
      }
  cr_log_info("%s: %d geometries x 2 formats, NHWC paths: winograd %d, depthwise %d, direct %d, pointwise %d, gemm %d; "
              "%d with > 1024 channels per group",
              loom_cpu_isa(), ran, per_path[LOOM_CONV_PATH_WINOGRAD], per_path[LOOM_CONV_PATH_DEPTHWISE],
              per_path[LOOM_CONV_PATH_DIRECT], per_path[LOOM_CONV_PATH_POINTWISE], per_path[LOOM_CONV_PATH_GEMM], big);
  loom_set_num_threads(0);
  cr_assert_geq(ran, 150, "the grid shrank to %d cases", ran);
  cr_assert_geq(big, 10);
  /* Every path this instruction set has was exercised. */
  cr_assert_gt(per_path[LOOM_CONV_PATH_GEMM], 0);
  if (isa >= LOOM_CPU_ISA_AVX512) cr_assert_gt(per_path[LOOM_CONV_PATH_DEPTHWISE], 0);
  if (isa != LOOM_CPU_ISA_SCALAR) cr_assert_gt(per_path[LOOM_CONV_PATH_DIRECT], 0);
  if (isa != LOOM_CPU_ISA_SCALAR) cr_assert_gt(per_path[LOOM_CONV_PATH_WINOGRAD], 0);
  else cr_assert_gt(per_path[LOOM_CONV_PATH_POINTWISE], 0);
  tk_leak_check();
}
