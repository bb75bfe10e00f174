/* test_ops_conv.c — conv2d against a float64 reference: forward (stride,
 * padding, dilation, groups incl. depthwise, bias, fused ReLU, odd sizes,
 * NCHW and NHWC inputs, channels-last weights, f32/f16/bf16) and backward
 * (dX, dW, db from a random output gradient against the reference
 * formulas; finite differences on small cases), on every CPU path (the
 * direct kernels, the 1x1 GEMM path, and the im2col + GEMM path, forced) and
 * on CUDA. Also the shape/option errors, and on CUDA the cuDNN plan cache
 * (the no-device-allocation-after-warm-up property is test_conv_device_memory.c,
 * run alone: it reads the device-wide free memory). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/conv_cpu.h"
#include "support/testkit.h"

typedef struct conv_case {
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, G;
} conv_case;

/* Small shapes covering each feature; a few big enough to cross the CPU
 * kernels' register tiles (16-64 output channels, rows of 12+ pixels). */
static const conv_case CASES[] = {
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},      /* 3x3 pad 1 */
    {2, 4, 9, 8, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1},      /* stride 2 */
    {1, 4, 9, 9, 4, 3, 2, 1, 2, 2, 0, 2, 1, 2},      /* dilation, groups, asymmetric */
    {2, 6, 5, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6},      /* depthwise */
    {2, 4, 6, 5, 8, 3, 3, 1, 1, 1, 1, 1, 1, 4},      /* depthwise, multiplier 2 */
    {2, 5, 6, 6, 7, 1, 1, 1, 1, 0, 0, 1, 1, 1},      /* 1x1 */
    {2, 8, 8, 7, 16, 1, 1, 2, 2, 0, 0, 1, 1, 1},     /* 1x1 stride 2 (ResNet shortcut) */
    {1, 3, 5, 5, 2, 5, 5, 1, 1, 0, 0, 1, 1, 1},      /* kernel == input: 1x1 output */
    {1, 2, 4, 4, 3, 3, 3, 3, 3, 2, 2, 1, 1, 1},      /* stride 3, padding 2 */
    {3, 16, 10, 13, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},  /* ResNet stage-1-like */
    {2, 16, 12, 11, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1},  /* stage 2 downsampling */
    {2, 32, 6, 5, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* stage 3 channels, odd spatial */
    {2, 1, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},     /* one input channel (MNIST stem) */
    {1, 24, 7, 30, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1},   /* channel counts not multiples of 16, wide rows */
    {2, 8, 7, 7, 12, 3, 3, 1, 1, 2, 2, 2, 2, 2},     /* dilated, grouped, stride 1 */
    {2, 12, 9, 9, 12, 3, 3, 2, 2, 1, 1, 1, 1, 12},   /* depthwise stride 2 */
    {1, 3, 11, 11, 8, 7, 7, 2, 2, 3, 3, 1, 1, 1},    /* ImageNet stem-like 7x7 s2 */
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

/* x [N][C][H][W], w [O][Cg][KH][KW], b [O] or NULL -> y [N][O][OH][OW]. */
static double *ref_conv(const conv_case *c, const double *x, const double *w, const double *b, bool relu) {
  int64_t OH = out_dim(c->H, c->KH, c->sh, c->ph, c->dh), OW = out_dim(c->W, c->KW, c->sw, c->pw, c->dw);
  int64_t Cg = c->C / c->G, Og = c->O / c->G;
  double *y = malloc((size_t)(c->N * c->O * OH * OW) * sizeof *y);
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t o = 0; o < c->O; o++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double acc = b ? b[o] : 0;
          int64_t g = o / Og;
          for (int64_t ci = 0; ci < Cg; ci++)
            for (int64_t kh = 0; kh < c->KH; kh++)
              for (int64_t kw = 0; kw < c->KW; kw++) {
                int64_t ih = oh * c->sh - c->ph + kh * c->dh, iw = ow * c->sw - c->pw + kw * c->dw;
                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                acc += x[((n * c->C + g * Cg + ci) * c->H + ih) * c->W + iw] *
                       w[((o * Cg + ci) * c->KH + kh) * c->KW + kw];
              }
          y[((n * c->O + o) * OH + oh) * OW + ow] = relu && acc < 0 ? 0 : acc;
        }
  return y;
}

/* Gradients of sum(y * dz) for the pre-activation gradient dz [N][O][OH][OW]. */
static void ref_conv_backward(const conv_case *c, const double *x, const double *w, const double *dz, double *dx,
                              double *dw, double *db) {
  int64_t OH = out_dim(c->H, c->KH, c->sh, c->ph, c->dh), OW = out_dim(c->W, c->KW, c->sw, c->pw, c->dw);
  int64_t Cg = c->C / c->G, Og = c->O / c->G;
  for (int64_t i = 0; i < c->N * c->C * c->H * c->W; i++) dx[i] = 0;
  for (int64_t i = 0; i < c->O * Cg * c->KH * c->KW; i++) dw[i] = 0;
  for (int64_t o = 0; o < c->O; o++) db[o] = 0;
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t o = 0; o < c->O; o++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double gz = dz[((n * c->O + o) * OH + oh) * OW + ow];
          db[o] += gz;
          int64_t g = o / Og;
          for (int64_t ci = 0; ci < Cg; ci++)
            for (int64_t kh = 0; kh < c->KH; kh++)
              for (int64_t kw = 0; kw < c->KW; kw++) {
                int64_t ih = oh * c->sh - c->ph + kh * c->dh, iw = ow * c->sw - c->pw + kw * c->dw;
                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                int64_t xi = ((n * c->C + g * Cg + ci) * c->H + ih) * c->W + iw;
                int64_t wi = ((o * Cg + ci) * c->KH + kh) * c->KW + kw;
                dx[xi] += gz * w[wi];
                dw[wi] += gz * x[xi];
              }
        }
}

static loom_conv2d_options opts_of(const conv_case *c, bool relu) {
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  o.stride[0] = c->sh;
  o.stride[1] = c->sw;
  o.padding[0] = c->ph;
  o.padding[1] = c->pw;
  o.dilation[0] = c->dh;
  o.dilation[1] = c->dw;
  o.groups = c->G;
  o.act = relu ? LOOM_ACT_RELU : LOOM_ACT_NONE;
  return o;
}

/* Tolerances: f32 sums of K products of values in [-1, 1]; f16/bf16 inputs
 * are exact in f32, so the only extra error is the final rounding. */
static double atol_for(loom_dtype dt, int64_t K) { return (dt == LOOM_F32 ? 2e-6 : dt == LOOM_F16 ? 2e-3 : 1.6e-2) * sqrt((double)K + 1); }

/* Winograd F(4x4, 3x3) (the CPU's NHWC 3x3 stride-1 layers) grows f32
 * rounding by up to ~2^7 of the terms' magnitudes (tests/test_conv_winograd.c
 * bounds it); here, 16 times the f32 tolerances. 16-bit results are
 * dominated by their final rounding. */
static double winograd_factor(loom_device dev, loom_dtype dt, const conv_case *c, bool nhwc) {
  if (dev.kind != LOOM_CPU || dt != LOOM_F32 || !nhwc || loom_conv_cpu_winograd_tile() != 4) return 1;
  if (!strcmp(loom_conv_cpu_isa_name(), "none")) return 1;
  bool wg = c->G == 1 && c->KH == 3 && c->KW == 3 && c->sh == 1 && c->sw == 1 && c->ph == 1 && c->pw == 1 &&
            c->dh == 1 && c->dw == 1 && c->C % 16 == 0 && c->O % 16 == 0 && c->C <= 128 && c->O <= 128;
  return wg ? 16 : 1;
}

typedef enum { PATH_DEFAULT = 0, PATH_GEMM = 1 } cpu_path;
static const char *path_name(cpu_path p) { return p == PATH_GEMM ? "gemm" : "default"; }

/* One forward + backward check of case c. */
static void check_case(loom_device dev, loom_dtype dt, const conv_case *c, int ci, bool nhwc, bool w_cl, bool bias,
                       bool relu) {
  int64_t sx[4] = {c->N, c->C, c->H, c->W}, sw[4] = {c->O, c->C / c->G, c->KH, c->KW};
  int64_t OH = out_dim(c->H, c->KH, c->sh, c->ph, c->dh), OW = out_dim(c->W, c->KW, c->sw, c->pw, c->dw);
  int64_t sy[4] = {c->N, c->O, OH, OW};
  double *vx, *vw, *vb = NULL;
  loom_tensor *x = tk_rand_tensor(4, sx, -1, 1, 0, dt, dev, &vx);
  loom_tensor *w = tk_rand_tensor(4, sw, -1, 1, 0, dt, dev, &vw);
  loom_tensor *b = bias ? tk_rand_tensor(1, &c->O, -1, 1, 0, dt, dev, &vb) : NULL;
  loom_set_requires_grad(x, true);
  loom_set_requires_grad(w, true);
  if (b) loom_set_requires_grad(b, true);
  loom_tensor *xin = nhwc ? loom_to_memory_format(x, LOOM_FORMAT_NHWC) : x;
  loom_tensor *win = w_cl ? loom_to_memory_format(w, LOOM_FORMAT_NHWC) : w;
  char what[160];
  snprintf(what, sizeof what, "conv case %d %s %s%s bias=%d relu=%d", ci, loom_dtype_name(dt), nhwc ? "NHWC" : "NCHW",
           w_cl ? " w-channels-last" : "", bias, relu);
  loom_conv2d_options o = opts_of(c, relu);
  loom_tensor *y = loom_conv2d(xin, win, b, &o);
  cr_assert_not_null(y, "%s: %s", what, loom_last_error());
  /* With C == 1 (or H == W == 1) a channels-last x is also contiguous:
   * loom reads it as NCHW (PyTorch's tie rule), and so is y. */
  if (nhwc && c->C > 1 && c->H * c->W > 1 && c->O > 1 && OH * OW > 1)
    cr_assert(loom_tensor_is_channels_last(y) && !loom_tensor_is_contiguous(y), "%s: output is not channels-last", what);
  if (!nhwc) cr_assert(loom_tensor_is_contiguous(y), "%s: output is not contiguous NCHW", what);
  int64_t K = c->C / c->G * c->KH * c->KW, ny = tk_numel(4, sy);
  double *want = ref_conv(c, vx, vw, vb, relu);
  for (int64_t i = 0; i < ny; i++) want[i] = tk_round(want[i], dt);
  const double wf = loom_conv_cpu_gemm_forced() ? 1 : winograd_factor(dev, dt, c, nhwc);
  tk_assert_tensor(y, 4, sy, dt, want, wf * atol_for(dt, K), wf * tk_rtol(dt) * 2, what);

  /* Backward from a random gradient; the ReLU mask is the op's own y > 0. */
  double *vg;
  loom_tensor *gy = tk_rand_tensor(4, sy, -1, 1, 0, dt, dev, &vg);
  if (nhwc) gy = loom_to_memory_format(gy, LOOM_FORMAT_NHWC);
  double *yv = tk_read(y);
  double *dz = malloc((size_t)ny * sizeof *dz);
  for (int64_t i = 0; i < ny; i++) dz[i] = relu && !(yv[i] > 0) ? 0 : vg[i];
  int64_t nx = tk_numel(4, sx), nw = tk_numel(4, sw);
  double *rdx = malloc((size_t)nx * sizeof *rdx), *rdw = malloc((size_t)nw * sizeof *rdw);
  double *rdb = malloc((size_t)c->O * sizeof *rdb);
  ref_conv_backward(c, vx, vw, dz, rdx, rdw, rdb);
  cr_assert_eq(loom_backward_with(y, gy), LOOM_OK, "%s: backward: %s", what, loom_last_error());
  for (int64_t i = 0; i < nx; i++) rdx[i] = tk_round(rdx[i], dt);
  for (int64_t i = 0; i < nw; i++) rdw[i] = tk_round(rdw[i], dt);
  for (int64_t i = 0; i < c->O; i++) rdb[i] = tk_round(rdb[i], dt);
  char w2[200];
  snprintf(w2, sizeof w2, "%s dX", what);
  int64_t taps = (c->O / c->G) * c->KH * c->KW, pix = c->N * OH * OW;
  tk_assert_tensor(loom_grad(x), 4, sx, dt, rdx, wf * atol_for(dt, taps), wf * tk_rtol(dt) * 2, w2);
  snprintf(w2, sizeof w2, "%s dW", what);
  tk_assert_tensor(loom_grad(w), 4, sw, dt, rdw, wf * atol_for(dt, pix), wf * tk_rtol(dt) * 2, w2);
  if (b) {
    snprintf(w2, sizeof w2, "%s db", what);
    tk_assert_tensor(loom_grad(b), 1, &c->O, dt, rdb, atol_for(dt, pix), tk_rtol(dt) * 2, w2);
  }
  free(vx), free(vw), free(vb), free(vg), free(yv), free(dz), free(want), free(rdx), free(rdw), free(rdb);
}

static void check_all(loom_device dev, loom_dtype dt, cpu_path path) {
  bool cpu = loom_device_eq(dev, loom_cpu());
  if (cpu) loom_conv_cpu_force_gemm(path == PATH_GEMM);
  tk_seed(71 + dt * 3 + path);
  for (int ci = 0; ci < NCASES; ci++)
    for (int nhwc = 0; nhwc < 2; nhwc++) {
      bool bias = (ci + nhwc) % 2 == 0, relu = (ci / 2 + nhwc) % 2 == 1, w_cl = ci % 3 == 1;
      loom_scope_begin();
      check_case(dev, dt, &CASES[ci], ci, nhwc, w_cl, bias, relu);
      loom_scope_end();
    }
  if (cpu) loom_conv_cpu_force_gemm(false);
  (void)path_name;
}

DEVICE_TEST(conv2d, f32) { check_all(dev, LOOM_F32, PATH_DEFAULT); }
DEVICE_TEST(conv2d, f16) { check_all(dev, LOOM_F16, PATH_DEFAULT); }
DEVICE_TEST(conv2d, bf16) { check_all(dev, LOOM_BF16, PATH_DEFAULT); }
/* The im2col + GEMM path, forced where a direct kernel would run. */
Test(conv2d_cpu, f32_gemm_path) {
  loom_scope_begin();
  check_all(loom_cpu(), LOOM_F32, PATH_GEMM);
  loom_scope_end();
  tk_leak_check();
}
Test(conv2d_cpu, bf16_gemm_path) {
  loom_scope_begin();
  check_all(loom_cpu(), LOOM_BF16, PATH_GEMM);
  loom_scope_end();
  tk_leak_check();
}

/* The AVX2 kernels, forced on a CPU that would pick AVX-512. */
Test(conv2d_cpu, f32_avx2_kernels) {
  if (!loom_conv_cpu_select_isa("avx2")) cr_skip_test("this CPU has no AVX2+FMA");
  loom_scope_begin();
  check_all(loom_cpu(), LOOM_F32, PATH_DEFAULT);
  loom_scope_end();
  loom_conv_cpu_select_isa(NULL);
  tk_leak_check();
}

/* Every bias/ReLU/format combination on one case (the loop above varies
 * them across cases). */
DEVICE_TEST(conv2d, bias_relu_format_combinations) {
  tk_seed(72);
  for (int k = 0; k < 8; k++) {
    loom_scope_begin();
    check_case(dev, LOOM_F32, &CASES[10], 10, k & 1, false, k & 2, k & 4);
    loom_scope_end();
  }
}

/* ---- finite differences ---------------------------------------------------- */
typedef struct {
  const conv_case *c;
  bool nhwc, bias, relu;
} fd_ctx;

static loom_tensor *conv_fn(loom_tensor **in, void *p) {
  fd_ctx *f = p;
  loom_conv2d_options o = opts_of(f->c, f->relu);
  loom_tensor *x = f->nhwc ? loom_to_memory_format(in[0], LOOM_FORMAT_NHWC) : in[0];
  return loom_conv2d(x, in[1], f->bias ? in[2] : NULL, &o);
}

DEVICE_TEST(conv2d, gradients_finite_difference) {
  tk_seed(73);
  static const conv_case FD[] = {
      {2, 3, 5, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1},
      {1, 4, 6, 6, 4, 3, 2, 2, 1, 1, 0, 1, 2, 2},
      {2, 3, 5, 5, 3, 3, 3, 2, 2, 1, 1, 1, 1, 3},  /* depthwise stride 2 */
      {1, 2, 4, 5, 3, 1, 1, 2, 2, 0, 0, 1, 1, 1},
  };
  for (int ci = 0; ci < 4; ci++)
    for (int k = 0; k < 2; k++) {
      const conv_case *c = &FD[ci];
      int64_t sx[4] = {c->N, c->C, c->H, c->W}, sw[4] = {c->O, c->C / c->G, c->KH, c->KW};
      fd_ctx f = {c, k == 1, (ci + k) % 2 == 0, ci >= 2 || k == 1};
      loom_tensor *in[3];
      /* ReLU: keep pre-activations clear of 0 so differences do not straddle the kink. */
      for (int tries = 0;; tries++) {
        in[0] = tk_rand_tensor(4, sx, -1, 1, 0, LOOM_F32, dev, NULL);
        in[1] = tk_rand_tensor(4, sw, -1, 1, 0, LOOM_F32, dev, NULL);
        in[2] = tk_rand_tensor(1, &c->O, -1, 1, 0, LOOM_F32, dev, NULL);
        fd_ctx lin = f;
        lin.relu = false;
        loom_tensor *pre = conv_fn(in, &lin);
        double *v = tk_read(pre);
        bool ok = true;
        for (int64_t i = 0; i < loom_tensor_numel(pre); i++) ok = ok && fabs(v[i]) > 0.05;
        free(v);
        if (ok || !f.relu || tries > 300) break;
      }
      for (int j = 0; j < 3; j++) loom_set_requires_grad(in[j], true);
      char what[96];
      snprintf(what, sizeof what, "conv FD case %d %s bias=%d relu=%d", ci, f.nhwc ? "NHWC" : "NCHW", f.bias, f.relu);
      tk_gradcheck(conv_fn, &f, in, f.bias ? 3 : 2, 1e-2, 2e-3, 1e-2, what);
      if (!f.bias) cr_assert_null(loom_grad(in[2]), "%s: unused bias got a gradient", what);
    }
}

DEVICE_TEST(conv2d, input_needs_no_gradient) {
  /* The first layer: dX is skipped, dW and db still right. */
  tk_seed(74);
  const conv_case *c = &CASES[0];
  int64_t sx[4] = {c->N, c->C, c->H, c->W}, sw[4] = {c->O, c->C, c->KH, c->KW};
  loom_tensor *in[3] = {tk_rand_tensor(4, sx, -1, 1, 0, LOOM_F32, dev, NULL),
                        tk_rand_tensor(4, sw, -1, 1, 0, LOOM_F32, dev, NULL),
                        tk_rand_tensor(1, &c->O, -1, 1, 0, LOOM_F32, dev, NULL)};
  loom_set_requires_grad(in[1], true);
  loom_set_requires_grad(in[2], true);
  fd_ctx f = {c, false, true, false};
  tk_gradcheck(conv_fn, &f, in, 3, 1e-2, 2e-3, 1e-2, "conv without dX");
  cr_assert_null(loom_grad(in[0]), "x needs no gradient but got one");
}

DEVICE_TEST(conv2d, strided_view_input_and_empty_batch) {
  tk_seed(75);
  /* A sliced view (neither NCHW nor NHWC) is made NCHW first. */
  int64_t sx[4] = {2, 3, 6, 8}, sw[4] = {4, 3, 3, 3};
  double *vx, *vw;
  loom_tensor *x = tk_rand_tensor(4, sx, -1, 1, 0, LOOM_F32, dev, &vx);
  loom_tensor *w = tk_rand_tensor(4, sw, -1, 1, 0, LOOM_F32, dev, &vw);
  loom_tensor *xs = loom_slice(x, 3, 0, 8, 2); /* [2, 3, 6, 4] */
  conv_case c = {2, 3, 6, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1};
  double *xv = tk_read(xs);
  double *want = ref_conv(&c, xv, vw, NULL, false);
  loom_conv2d_options o = opts_of(&c, false);
  int64_t sy[4] = {2, 4, 6, 4};
  tk_assert_tensor(loom_conv2d(xs, w, NULL, &o), 4, sy, LOOM_F32, want, 1e-5, 1e-5, "conv of a strided view");
  /* N = 0: an empty result, and empty/zero gradients. */
  int64_t s0[4] = {0, 3, 6, 8};
  loom_tensor *x0 = loom_zeros(4, s0, LOOM_F32, dev);
  loom_tensor *w0 = loom_tensor_retain(w);
  loom_set_requires_grad(w0, true);
  loom_tensor *y0 = loom_conv2d(x0, w0, NULL, &o);
  cr_assert_not_null(y0, "%s", loom_last_error());
  cr_assert_eq(loom_tensor_numel(y0), 0);
  cr_assert_eq(loom_backward_with(y0, loom_zeros_like(y0)), LOOM_OK, "%s", loom_last_error());
  double *g0 = tk_read(loom_grad(w0));
  for (int i = 0; i < 4 * 3 * 9; i++) cr_assert_eq(g0[i], 0.0, "dW of an empty batch must be 0");
  loom_tensor_release(w0);
  free(vx), free(vw), free(xv), free(want), free(g0);
}

/* dX, dW, db and y bit for bit the same with 1, 2 and 3 threads, on each
 * CPU path (chunked partial sums, never per-thread ones). */
static double *run_all(const conv_case *c, bool nhwc, int threads, int64_t *n_out) {
  loom_set_num_threads(threads);
  tk_seed(76);
  int64_t sx[4] = {c->N, c->C, c->H, c->W}, sw[4] = {c->O, c->C / c->G, c->KH, c->KW};
  loom_tensor *x = tk_rand_tensor(4, sx, -1, 1, 0, LOOM_F32, loom_cpu(), NULL);
  loom_tensor *w = tk_rand_tensor(4, sw, -1, 1, 0, LOOM_F32, loom_cpu(), NULL);
  loom_tensor *b = tk_rand_tensor(1, &c->O, -1, 1, 0, LOOM_F32, loom_cpu(), NULL);
  loom_set_requires_grad(x, true), loom_set_requires_grad(w, true), loom_set_requires_grad(b, true);
  loom_conv2d_options o = opts_of(c, true);
  loom_tensor *y = loom_conv2d(nhwc ? loom_to_memory_format(x, LOOM_FORMAT_NHWC) : x, w, b, &o);
  cr_assert_not_null(y, "%s", loom_last_error());
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul(y, y))), LOOM_OK, "%s", loom_last_error());
  loom_tensor *parts[4] = {y, loom_grad(x), loom_grad(w), loom_grad(b)};
  int64_t total = 0;
  for (int k = 0; k < 4; k++) total += loom_tensor_numel(parts[k]);
  double *all = malloc((size_t)total * sizeof *all);
  int64_t at = 0;
  for (int k = 0; k < 4; k++) {
    double *v = tk_read(parts[k]);
    memcpy(all + at, v, (size_t)loom_tensor_numel(parts[k]) * sizeof *v);
    at += loom_tensor_numel(parts[k]);
    free(v);
  }
  *n_out = total;
  return all;
}

Test(conv2d_cpu, same_results_for_any_thread_count) {
  static const conv_case D[] = {
      {11, 16, 9, 10, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1},  /* direct */
      {11, 16, 9, 10, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1},  /* direct, stride 2 */
      {11, 24, 7, 7, 24, 3, 3, 1, 1, 1, 1, 1, 1, 24},  /* depthwise */
      {11, 6, 7, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1, 3},     /* narrow groups: im2col + GEMM */
  };
  for (int path = 0; path < 2; path++)
    for (int ci = 0; ci < 4; ci++)
      for (int nhwc = 0; nhwc < 2; nhwc++) {
        loom_conv_cpu_force_gemm(path == 1);
        loom_scope_begin();
        int64_t n1, n;
        double *ref = run_all(&D[ci], nhwc, 1, &n1);
        for (int t = 2; t <= 3; t++) {
          double *got = run_all(&D[ci], nhwc, t, &n);
          cr_assert_eq(n, n1);
          for (int64_t i = 0; i < n; i++)
            cr_assert(got[i] == ref[i], "case %d nhwc=%d path=%s: %d threads differ from 1 at %lld: %.9g vs %.9g", ci,
                      nhwc, path ? "gemm" : "default", t, (long long)i, got[i], ref[i]);
          free(got);
        }
        free(ref);
        loom_scope_end();
      }
  loom_conv_cpu_force_gemm(false);
  loom_set_num_threads(0);
  tk_leak_check();
}

/* ---- the 1x1 path ------------------------------------------------------------------ */
/* 1x1 kernels, groups 1, no padding: conv_pointwise.c's GEMMs. They run where
 * no direct kernel does, so the tests select "none" (a CPU without AVX2).
 * Odd sizes, strides 1, 2, 3 and mixed, dilation (no effect at 1x1), and one
 * shape big enough for several chunks per image (NCHW) and chunks that span
 * images (NHWC). */
static const conv_case PW[] = {
    {2, 5, 6, 6, 7, 1, 1, 1, 1, 0, 0, 1, 1, 1},     /* stride 1 */
    {3, 6, 7, 7, 10, 1, 1, 2, 2, 0, 0, 1, 1, 1},    /* 7x7 stride 2: 4x4, the last row/column used */
    {2, 16, 8, 8, 32, 1, 1, 2, 2, 0, 0, 1, 1, 1},   /* 8x8 stride 2: the last row/column skipped */
    {2, 16, 9, 11, 20, 1, 1, 3, 2, 0, 0, 1, 1, 1},  /* strides 3 and 2 */
    {1, 33, 5, 9, 17, 1, 1, 1, 2, 0, 0, 2, 3, 1},   /* stride 1 x 2, dilation, odd channel counts */
    {2, 24, 61, 45, 40, 1, 1, 2, 2, 0, 0, 1, 1, 1}, /* several chunks per image */
};
#define NPW ((int)(sizeof PW / sizeof PW[0]))

static double max_rel_diff(const double *a, const double *b, int64_t n, double atol) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(a[i] - b[i]) / (atol + fabs(b[i]));
    if (d > worst) worst = d;
  }
  return worst;
}

Test(conv2d_cpu, pointwise_path) {
  cr_assert(loom_conv_cpu_select_isa("none"));
  tk_seed(78);
  for (int ci = 0; ci < NPW; ci++)
    for (int nhwc = 0; nhwc < 2; nhwc++)
      for (int k = 0; k < 4; k++) {
        loom_scope_begin();
        check_case(loom_cpu(), LOOM_F32, &PW[ci], ci, nhwc, ci % 2 == 1, k & 1, k & 2);
        loom_scope_end();
      }
  /* Against the im2col + GEMM path: y, dX, dW, db (with bias and ReLU). */
  for (int ci = 0; ci < NPW; ci++)
    for (int nhwc = 0; nhwc < 2; nhwc++) {
      loom_scope_begin();
      int64_t n1, n2;
      double *pw = run_all(&PW[ci], nhwc, 0, &n1);
      loom_conv_cpu_force_gemm(true);
      double *im = run_all(&PW[ci], nhwc, 0, &n2);
      loom_conv_cpu_force_gemm(false);
      cr_assert_eq(n1, n2);
      double d = max_rel_diff(pw, im, n1, 1e-5);
      cr_assert(d < 1e-4, "1x1 case %d nhwc=%d: the 1x1 and im2col paths differ (max relative %.3g)", ci, nhwc, d);
      free(pw), free(im);
      loom_scope_end();
    }
  loom_set_num_threads(0);
  loom_conv_cpu_select_isa(NULL);
  tk_leak_check();
}

/* bf16 operands through the 1x1 path (conv_cpu.c widens and rounds around it). */
Test(conv2d_cpu, pointwise_path_bf16) {
  cr_assert(loom_conv_cpu_select_isa("none"));
  tk_seed(79);
  for (int ci = 0; ci < NPW; ci++) {
    loom_scope_begin();
    check_case(loom_cpu(), LOOM_BF16, &PW[ci], ci, ci % 2, false, true, ci % 3 == 0);
    loom_scope_end();
  }
  loom_conv_cpu_select_isa(NULL);
  tk_leak_check();
}

/* Every case of the main table on the dispatch of a CPU without direct
 * kernels (1x1 cases on the 1x1 path, the rest on im2col + GEMM). */
Test(conv2d_cpu, f32_no_direct_kernels) {
  cr_assert(loom_conv_cpu_select_isa("none"));
  cr_assert_str_eq(loom_conv_cpu_isa_name(), "none");
  loom_scope_begin();
  check_all(loom_cpu(), LOOM_F32, PATH_DEFAULT);
  loom_scope_end();
  loom_conv_cpu_select_isa(NULL);
  tk_leak_check();
}

Test(conv2d_cpu, pointwise_gradients_finite_difference) {
  cr_assert(loom_conv_cpu_select_isa("none"));
  tk_seed(80);
  loom_scope_begin();
  static const conv_case FD[] = {
      {2, 3, 5, 5, 4, 1, 1, 2, 2, 0, 0, 1, 1, 1},
      {1, 4, 4, 5, 3, 1, 1, 1, 1, 0, 0, 1, 1, 1},
  };
  for (int ci = 0; ci < 2; ci++)
    for (int k = 0; k < 2; k++) {
      const conv_case *c = &FD[ci];
      int64_t sx[4] = {c->N, c->C, c->H, c->W}, sw[4] = {c->O, c->C, 1, 1};
      fd_ctx f = {c, k == 1, true, false};
      loom_tensor *in[3] = {tk_rand_tensor(4, sx, -1, 1, 0, LOOM_F32, loom_cpu(), NULL),
                            tk_rand_tensor(4, sw, -1, 1, 0, LOOM_F32, loom_cpu(), NULL),
                            tk_rand_tensor(1, &c->O, -1, 1, 0, LOOM_F32, loom_cpu(), NULL)};
      for (int j = 0; j < 3; j++) loom_set_requires_grad(in[j], true);
      char what[96];
      snprintf(what, sizeof what, "1x1 FD case %d %s", ci, f.nhwc ? "NHWC" : "NCHW");
      tk_gradcheck(conv_fn, &f, in, 3, 1e-2, 2e-3, 1e-2, what);
    }
  loom_scope_end();
  loom_conv_cpu_select_isa(NULL);
  tk_leak_check();
}

/* The 1x1 path gives the same bits for 1, 2 and 3 threads. */
Test(conv2d_cpu, pointwise_same_results_for_any_thread_count) {
  static const conv_case D[] = {
      {11, 16, 9, 10, 32, 1, 1, 2, 2, 0, 0, 1, 1, 1},
      {11, 16, 9, 10, 32, 1, 1, 1, 1, 0, 0, 1, 1, 1},
      {3, 24, 61, 45, 40, 1, 1, 2, 2, 0, 0, 1, 1, 1},
  };
  cr_assert(loom_conv_cpu_select_isa("none"));
  for (int ci = 0; ci < 3; ci++)
    for (int nhwc = 0; nhwc < 2; nhwc++) {
      loom_scope_begin();
      int64_t n1, n;
      double *ref = run_all(&D[ci], nhwc, 1, &n1);
      for (int t = 2; t <= 3; t++) {
        double *got = run_all(&D[ci], nhwc, t, &n);
        cr_assert_eq(n, n1);
        for (int64_t i = 0; i < n; i++)
          cr_assert(got[i] == ref[i], "1x1 case %d nhwc=%d: %d threads differ from 1 at %lld: %.9g vs %.9g", ci, nhwc,
                    t, (long long)i, got[i], ref[i]);
        free(got);
      }
      free(ref);
      loom_scope_end();
    }
  loom_conv_cpu_select_isa(NULL);
  loom_set_num_threads(0);
  tk_leak_check();
}

/* ---- errors -------------------------------------------------------------------- */
DEVICE_TEST(conv2d, malformed_shapes_and_options_are_errors) {
  int64_t sx[4] = {1, 4, 5, 5}, sw[4] = {6, 4, 3, 3}, sb = 6, sb_bad = 5;
  loom_tensor *x = loom_zeros(4, sx, LOOM_F32, dev), *w = loom_zeros(4, sw, LOOM_F32, dev);
  loom_tensor *b = loom_zeros(1, &sb, LOOM_F32, dev);
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  cr_assert_not_null(loom_conv2d(x, w, b, &o), "%s", loom_last_error());
  cr_assert_not_null(loom_conv2d(x, w, b, NULL), "NULL options are the defaults: %s", loom_last_error());

  /* kernel larger than the padded input */
  int64_t sbig[4] = {6, 4, 7, 3};
  tk_assert_fails(loom_conv2d(x, loom_zeros(4, sbig, LOOM_F32, dev), NULL, &o), LOOM_ERR_SHAPE, "larger than the padded input",
                  "7x3");
  o.padding[0] = 1;  /* 5 + 2 = 7: now it fits */
  cr_assert_not_null(loom_conv2d(x, loom_zeros(4, sbig, LOOM_F32, dev), NULL, &o), "%s", loom_last_error());
  loom_conv2d_options_init(&o);
  o.dilation[1] = 3; /* 3x3 dilated by 3 -> 7 wide > 5 */
  tk_assert_fails(loom_conv2d(x, w, NULL, &o), LOOM_ERR_SHAPE, "larger than the padded input", "dilation");

  /* channels not divisible by groups; weight channels per group */
  loom_conv2d_options_init(&o);
  o.groups = 3;
  tk_assert_fails(loom_conv2d(x, w, NULL, &o), LOOM_ERR_SHAPE, "not divisible by groups");
  o.groups = 2;
  tk_assert_fails(loom_conv2d(x, w, NULL, &o), LOOM_ERR_SHAPE, "input channels per group");
  int64_t sw5[4] = {5, 2, 3, 3};
  tk_assert_fails(loom_conv2d(x, loom_zeros(4, sw5, LOOM_F32, dev), NULL, &o), LOOM_ERR_SHAPE, "5 output channels",
                  "not divisible by groups");

  /* ranks */
  int64_t s3[3] = {6, 4, 9};
  loom_conv2d_options_init(&o);
  tk_assert_fails(loom_conv2d(x, loom_zeros(3, s3, LOOM_F32, dev), NULL, &o), LOOM_ERR_SHAPE, "weight must be 4-D");
  tk_assert_fails(loom_conv2d(loom_zeros(3, s3, LOOM_F32, dev), w, NULL, &o), LOOM_ERR_SHAPE, "x must be 4-D");

  /* bias */
  tk_assert_fails(loom_conv2d(x, w, loom_zeros(1, &sb_bad, LOOM_F32, dev), &o), LOOM_ERR_SHAPE, "bias", "6 output channels");
  int64_t sb2[2] = {6, 1};
  tk_assert_fails(loom_conv2d(x, w, loom_zeros(2, sb2, LOOM_F32, dev), &o), LOOM_ERR_SHAPE, "bias");

  /* dtypes */
  tk_assert_fails(loom_conv2d(x, loom_zeros(4, sw, LOOM_F16, dev), NULL, &o), LOOM_ERR_DTYPE, "conv2d", "f16");
  tk_assert_fails(loom_conv2d(x, w, loom_zeros(1, &sb, LOOM_BF16, dev), &o), LOOM_ERR_DTYPE, "bf16");
  tk_assert_fails(loom_conv2d(loom_zeros(4, sx, LOOM_I32, dev), loom_zeros(4, sw, LOOM_I32, dev), NULL, &o),
                  LOOM_ERR_DTYPE, "f32, f16 or bf16");

  /* options */
  o.stride[0] = 0;
  tk_assert_fails(loom_conv2d(x, w, NULL, &o), LOOM_ERR_INVALID_ARG, "stride");
  loom_conv2d_options_init(&o);
  o.padding[1] = -1;
  tk_assert_fails(loom_conv2d(x, w, NULL, &o), LOOM_ERR_INVALID_ARG, "padding");
  loom_conv2d_options_init(&o);
  o.dilation[0] = 0;
  tk_assert_fails(loom_conv2d(x, w, NULL, &o), LOOM_ERR_INVALID_ARG, "dilation");
  loom_conv2d_options_init(&o);
  o.groups = 0;
  tk_assert_fails(loom_conv2d(x, w, NULL, &o), LOOM_ERR_INVALID_ARG, "groups");
  loom_conv2d_options_init(&o);
  o.act = 7;
  tk_assert_fails(loom_conv2d(x, w, NULL, &o), LOOM_ERR_INVALID_ARG, "activation");
  loom_conv2d_options_init(&o);
  o.struct_size = 3;
  tk_assert_fails(loom_conv2d(x, w, NULL, &o), LOOM_ERR_INVALID_ARG, "options.struct_size");

  /* NULL inputs propagate; a NULL bias is no bias */
  loom_conv2d_options_init(&o);
  loom_clear_error();
  tk_assert_fails(loom_conv2d(NULL, w, NULL, &o), LOOM_ERR_NULL_INPUT, "conv2d");
  loom_clear_error();
  tk_assert_fails(loom_conv2d(x, NULL, NULL, &o), LOOM_ERR_NULL_INPUT, "conv2d");
}

/* Every CUDA test ends with loom_shutdown (tk_teardown as .fini: after a
 * failed assertion too), so that compute-sanitizer --leak-check sees only
 * what loom lost track of, never the allocator's cache, the CUDA context or
 * cuDNN's handles (kept for the life of the process unless shut down). */
TestSuite(conv2d_cuda, .fini = tk_teardown);

/* Needs a second device kind, so CUDA only (skips visibly without a GPU). */
Test(conv2d_cuda, device_mismatch_is_an_error) {
  tk_require_device(loom_cuda(0));
  loom_scope_begin();
  int64_t sx[4] = {1, 2, 5, 5}, sw[4] = {3, 2, 3, 3};
  loom_tensor *x = loom_zeros(4, sx, LOOM_F32, loom_cuda(0));
  loom_tensor *w = loom_zeros(4, sw, LOOM_F32, loom_cpu());
  tk_assert_fails(loom_conv2d(x, w, NULL, NULL), LOOM_ERR_DEVICE, "conv2d", "one device");
  loom_scope_end();
  tk_leak_check();
}

/* ---- CUDA: cuDNN plans, the fused forward's fallback, the allocator -------------------- */
#ifdef LOOM_HAVE_CUDA
#include "ops/conv.h"

/* The fused conv+bias+ReLU graph and its fallback (forced) both match the
 * reference; the counters say which one ran. */
Test(conv2d_cuda, fused_forward_and_its_fallback) {
  tk_require_device(loom_cuda(0));
  loom_device dev = loom_cuda(0);
  tk_seed(81);
  for (int forced = 0; forced < 2; forced++) {
    loom_cuda_conv_force_unfused(forced);
    for (int dt = 0; dt < 2; dt++)
      for (int nhwc = 0; nhwc < 2; nhwc++) {
        loom_cuda_conv_stats s0, s1;
        loom_cuda_conv_stats_get(&s0);
        loom_scope_begin();
        check_case(dev, dt ? LOOM_F16 : LOOM_F32, &CASES[9], 9, nhwc, false, true, true);
        loom_scope_end();
        loom_cuda_conv_stats_get(&s1);
        cr_assert(s1.fused_runs + s1.fallback_runs > s0.fused_runs + s0.fallback_runs, "no bias/ReLU forward was counted");
        if (forced)
          cr_assert_eq(s1.fused_runs, s0.fused_runs, "forced fallback, yet the fused graph ran");
        else
          cr_assert(s1.fused_runs > s0.fused_runs || s1.unsupported > s0.unsupported,
                    "the fused graph neither ran nor was found unsupported");
      }
  }
  loom_cuda_conv_force_unfused(false);
  tk_leak_check();
}

/* Plans are built once per shape and layout, then found in the cache. */
Test(conv2d_cuda, plan_cache) {
  tk_require_device(loom_cuda(0));
  loom_device dev = loom_cuda(0);
  loom_scope_begin();
  int64_t sx[4] = {2, 8, 9, 9}, sx2[4] = {2, 8, 11, 9}, sw[4] = {16, 8, 3, 3};
  loom_tensor *x = loom_to_memory_format(loom_randn(4, sx, LOOM_F16, dev), LOOM_FORMAT_NHWC);
  loom_tensor *x2 = loom_to_memory_format(loom_randn(4, sx2, LOOM_F16, dev), LOOM_FORMAT_NHWC);
  loom_tensor *w = loom_randn(4, sw, LOOM_F16, dev);
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  o.padding[0] = o.padding[1] = 1;
  loom_cuda_conv_stats s0, s1, s2, s3;
  loom_cuda_conv_stats_get(&s0);
  cr_assert_not_null(loom_conv2d(x, w, NULL, &o), "%s", loom_last_error());
  loom_cuda_conv_stats_get(&s1);
  cr_assert_geq(s1.plans_built, s0.plans_built + 1, "the first call built no plan");
  cr_assert_not_null(loom_conv2d(x, w, NULL, &o), "%s", loom_last_error());
  loom_cuda_conv_stats_get(&s2);
  cr_assert_eq(s2.plans_built, s1.plans_built, "the same shape built another plan");
  cr_assert_geq(s2.plan_hits, s1.plan_hits + 1, "the second call did not hit the cache");
  cr_assert_not_null(loom_conv2d(x2, w, NULL, &o), "%s", loom_last_error());
  loom_cuda_conv_stats_get(&s3);
  cr_assert_geq(s3.plans_built, s2.plans_built + 1, "a new shape reused an old plan");
  cr_assert_eq(loom_device_synchronize(dev), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
  tk_leak_check();
}

/* Every plain pass on loom's im2col + GEMM path (the fallback for a pass
 * cuDNN has no engine for: issue 22, prediction 6), forced, against the
 * float64 reference: all cases, NCHW and NHWC, f32 and f16; the counter
 * says the path ran. */
Test(conv2d_cuda, gemm_fallback_matches_the_reference) {
  tk_require_device(loom_cuda(0));
  loom_device dev = loom_cuda(0);
  loom_cuda_conv_stats s0, s1;
  loom_cuda_conv_stats_get(&s0);
  loom_cuda_conv_force_gemm(true);
  loom_cuda_conv_force_unfused(true);  /* bias/ReLU by loom's kernels around the GEMM forward */
  loom_scope_begin();
  check_all(dev, LOOM_F32, PATH_DEFAULT);
  check_all(dev, LOOM_F16, PATH_DEFAULT);
  loom_scope_end();
  loom_cuda_conv_force_gemm(false);
  loom_cuda_conv_force_unfused(false);
  loom_cuda_conv_stats_get(&s1);
  cr_assert_geq(s1.gemm_runs, s0.gemm_runs + 2 * NCASES, "the GEMM path ran %lld passes",
                (long long)(s1.gemm_runs - s0.gemm_runs));
  tk_leak_check();
}

/* A batch slice with odd C*H*W in f16 starts 2-byte aligned: cuDNN must be
 * told so (not 4), or the engine it picks faults on the misaligned address
 * (prediction 8). Forward and backward on the slice match the reference
 * (check_case on a view is not possible, so: the same values contiguous). */
Test(conv2d_cuda, two_byte_aligned_f16_slice) {
  tk_require_device(loom_cuda(0));
  loom_device dev = loom_cuda(0);
  loom_scope_begin();
  int64_t sx[4] = {3, 3, 5, 5}, sw[4] = {4, 3, 3, 3};
  loom_tensor *xall = loom_randn(4, sx, LOOM_F16, dev);
  loom_tensor *w = loom_randn(4, sw, LOOM_F16, dev);
  loom_tensor *x = loom_slice(xall, 0, 1, 3, 1);
  cr_assert_not_null(x, "%s", loom_last_error());
  cr_assert_eq((uintptr_t)loom_tensor_ptr(x) % 4, 2, "the slice is not 2-byte aligned: the test proves nothing");
  loom_tensor *xc = loom_clone(x);
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  o.padding[0] = o.padding[1] = 1;
  loom_tensor *y = loom_conv2d(x, w, NULL, &o), *yc = loom_conv2d(xc, w, NULL, &o);
  cr_assert(y && yc, "%s", loom_last_error());
  cr_assert_eq(loom_device_synchronize(dev), LOOM_OK, "%s", loom_last_error());
  double *a = tk_read(y), *b = tk_read(yc);
  for (int64_t i = 0; i < loom_tensor_numel(y); i++) cr_assert_eq(a[i], b[i], "y[%lld]: %g on the slice, %g contiguous", (long long)i, a[i], b[i]);
  free(a), free(b);
  loom_scope_end();
  tk_leak_check();
}

/* Deterministic mode (prediction 10): the same backward twice gives the
 * same bits (engines cuDNN marks non-deterministic are filtered out; the
 * GEMM path is deterministic), f32 and f16, NCHW and NHWC. */
Test(conv2d_cuda, deterministic_mode_repeats_bit_for_bit) {
  tk_require_device(loom_cuda(0));
  loom_device dev = loom_cuda(0);
  loom_set_deterministic(true);
  for (int dt = 0; dt < 2; dt++)
    for (int nhwc = 0; nhwc < 2; nhwc++) {
      loom_scope_begin();
      int64_t sx[4] = {16, 32, 14, 14}, sw[4] = {64, 32, 3, 3};
      loom_dtype t = dt ? LOOM_F16 : LOOM_F32;
      tk_seed(91);
      loom_tensor *x = loom_randn(4, sx, t, dev), *w = loom_randn(4, sw, t, dev);
      if (nhwc) x = loom_to_memory_format(x, LOOM_FORMAT_NHWC);
      double *dws[2];
      for (int run = 0; run < 2; run++) {
        loom_tensor *wr = loom_clone(w);
        loom_set_requires_grad(wr, true);
        loom_conv2d_options o;
        loom_conv2d_options_init(&o);
        o.padding[0] = o.padding[1] = 1;
        cr_assert_eq(loom_backward(loom_sum_all(loom_conv2d(x, wr, NULL, &o))), LOOM_OK, "%s", loom_last_error());
        dws[run] = tk_read(loom_grad(wr));
      }
      for (int64_t i = 0; i < 64 * 32 * 9; i++)
        cr_assert_eq(memcmp(&dws[0][i], &dws[1][i], sizeof(double)), 0, "%s %s dW[%lld]: %.17g then %.17g",
                     loom_dtype_name(t), nhwc ? "NHWC" : "NCHW", (long long)i, dws[0][i], dws[1][i]);
      free(dws[0]), free(dws[1]);
      loom_scope_end();
    }
  loom_set_deterministic(false);
  tk_leak_check();
}

/* Which path the fused conv+bias+ReLU took is reported (prediction 7: cuDNN's
 * runtime-compiled engines need NVRTC, and the fallback is silent): a
 * "result conv_paths ..." line that scripts/gpu-suite.sh copies into its
 * report, for the ResNet layer shapes in f16 NHWC. */
Test(conv2d_cuda, fused_path_is_reported) {
  tk_require_device(loom_cuda(0));
  loom_device dev = loom_cuda(0);
  loom_cuda_conv_stats s0, s1;
  loom_cuda_conv_stats_get(&s0);
  loom_scope_begin();
  static const int64_t chans[3] = {16, 32, 64};
  for (int k = 0; k < 3; k++) {
    int64_t sx[4] = {32, chans[k], 16, 16}, sw[4] = {chans[k], chans[k], 3, 3}, sb = chans[k];
    loom_tensor *x = loom_to_memory_format(loom_randn(4, sx, LOOM_F16, dev), LOOM_FORMAT_NHWC);
    loom_tensor *w = loom_randn(4, sw, LOOM_F16, dev), *b = loom_zeros(1, &sb, LOOM_F16, dev);
    loom_conv2d_options o;
    loom_conv2d_options_init(&o);
    o.padding[0] = o.padding[1] = 1;
    o.act = LOOM_ACT_RELU;
    cr_assert_not_null(loom_conv2d(x, w, b, &o), "%s", loom_last_error());
  }
  cr_assert_eq(loom_device_synchronize(dev), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
  loom_cuda_conv_stats_get(&s1);
  long long fused = s1.fused_runs - s0.fused_runs, fb = s1.fallback_runs - s0.fallback_runs;
  printf("result conv_paths f16_nhwc_conv_bias_relu fused=%lld fallback=%lld gemm=%lld unsupported_graphs=%lld\n", fused,
         fb, (long long)(s1.gemm_runs - s0.gemm_runs), (long long)(s1.unsupported - s0.unsupported));
  fflush(stdout);
  cr_assert_eq(fused + fb, 3, "3 fused forwards, %lld counted", fused + fb);
  tk_leak_check();
}
#else
Test(conv2d_cuda, cudnn_tests_need_a_cuda_build) { tk_require_device(loom_cuda(0)); }
#endif
