/* test_ops_pool.c — max_pool2d, avg_pool2d and adaptive_avg_pool2d against a
 * float64 reference over kernels, strides, paddings, ceil mode and
 * count_include_pad (rectangular ones too), NCHW and NHWC, f32 / f16 / bf16;
 * backward against the reference (max: the gradient goes to the argmax,
 * first on ties) and by finite differences; the memory format of results
 * and gradients; and the shape errors. */
#include <math.h>
#include <stdlib.h>

#include "support/testkit.h"

enum { MAXP, AVGP, ADAPT };

typedef struct pcase {
  int kind;
  int64_t kh, kw, sh, sw, ph, pw;  /* ADAPT: kh, kw = output size */
  bool ceil, cip;
} pcase;

/* ---- float64 reference (written from PyTorch's documentation, not from the kernels) ---- */

static int64_t out_len(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  double q = (double)(in + 2 * p - k) / (double)s;
  int64_t o = (int64_t)(ceil_mode ? ceil(q) : floor(q)) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) o--;  /* the last window must start inside the (left-padded) input */
  return o;
}

static void out_hw(const pcase *c, int64_t H, int64_t W, int64_t *OH, int64_t *OW) {
  if (c->kind == ADAPT) {
    *OH = c->kh;
    *OW = c->kw;
  } else {
    *OH = out_len(H, c->kh, c->sh, c->ph, c->ceil);
    *OW = out_len(W, c->kw, c->sw, c->pw, c->ceil);
  }
}

/* Window of output o: [lo, hi) before clipping to the input, and the
 * divisor's extent (avg with count_include_pad counts padding up to in + p). */
static void ref_window(const pcase *c, int dim, int64_t o, int64_t in, int64_t out, int64_t *lo, int64_t *hi,
                       int64_t *pad_hi) {
  if (c->kind == ADAPT) {
    *lo = (int64_t)floor((double)(o * in) / (double)out);
    *hi = (int64_t)ceil((double)((o + 1) * in) / (double)out);
    *pad_hi = *hi;
    return;
  }
  int64_t k = dim ? c->kw : c->kh, s = dim ? c->sw : c->sh, p = dim ? c->pw : c->ph;
  *lo = o * s - p;
  *hi = *lo + k;
  *pad_hi = *hi < in + p ? *hi : in + p;
}

/* x, y logical NCHW; argmax (max pool) as h * W + w. */
static void ref_pool(const pcase *c, const double *x, int64_t N, int64_t C, int64_t H, int64_t W, double *y,
                     int64_t *arg) {
  int64_t OH, OW;
  out_hw(c, H, W, &OH, &OW);
  for (int64_t nc = 0; nc < N * C; nc++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t h0, h1, hp, w0, w1, wp;
        ref_window(c, 0, oh, H, OH, &h0, &h1, &hp);
        ref_window(c, 1, ow, W, OW, &w0, &w1, &wp);
        double best = -INFINITY, sum = 0;
        int64_t bi = -1, cnt = 0;
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) {
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            double v = x[(nc * H + h) * W + w];
            if (bi < 0 || v > best) best = v, bi = h * W + w;
            sum += v;
            cnt++;
          }
        int64_t o = (nc * OH + oh) * OW + ow;
        if (c->kind == MAXP) {
          y[o] = best;
          if (arg) arg[o] = bi;
        } else {
          double div = c->kind == AVGP && c->cip ? (double)((hp - h0) * (wp - w0)) : (double)cnt;
          y[o] = sum / div;
        }
      }
}

static void ref_pool_backward(const pcase *c, const double *x, const double *gy, int64_t N, int64_t C, int64_t H,
                              int64_t W, double *dx) {
  int64_t OH, OW;
  out_hw(c, H, W, &OH, &OW);
  int64_t ny = N * C * OH * OW;
  double *y = malloc((size_t)ny * sizeof *y);
  int64_t *arg = malloc((size_t)ny * sizeof *arg);
  ref_pool(c, x, N, C, H, W, y, arg);
  for (int64_t i = 0; i < N * C * H * W; i++) dx[i] = 0;
  for (int64_t nc = 0; nc < N * C; nc++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t o = (nc * OH + oh) * OW + ow;
        if (c->kind == MAXP) {
          dx[nc * H * W + arg[o]] += gy[o];
          continue;
        }
        int64_t h0, h1, hp, w0, w1, wp, cnt = 0;
        ref_window(c, 0, oh, H, OH, &h0, &h1, &hp);
        ref_window(c, 1, ow, W, OW, &w0, &w1, &wp);
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) cnt += h >= 0 && h < H && w >= 0 && w < W;
        double div = c->kind == AVGP && c->cip ? (double)((hp - h0) * (wp - w0)) : (double)cnt;
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++)
            if (h >= 0 && h < H && w >= 0 && w < W) dx[(nc * H + h) * W + w] += gy[o] / div;
      }
  free(y);
  free(arg);
}

/* ---- running the op -------------------------------------------------------------------------- */

static loom_tensor *run_pool(const pcase *c, loom_tensor *x) {
  if (c->kind == ADAPT) return loom_adaptive_avg_pool2d(x, c->kh, c->kw);
  loom_pool2d_options o;
  loom_pool2d_options_init(&o, c->kh, c->kw);
  o.stride[0] = c->sh;
  o.stride[1] = c->sw;
  o.padding[0] = c->ph;
  o.padding[1] = c->pw;
  o.ceil_mode = c->ceil;
  o.count_include_pad = c->cip;
  return c->kind == MAXP ? loom_max_pool2d(x, &o) : loom_avg_pool2d(x, &o);
}

static loom_tensor *in_format(loom_tensor *t, loom_memory_format f) {
  return f == LOOM_FORMAT_NHWC ? loom_to_memory_format(t, f) : t;
}

/* Distinct values (no ties unless asked): a shuffled grid, scaled. */
static double *distinct_vals(int64_t n, loom_dtype dt) {
  double *v = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = (double)i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)tk_uniform(0, (double)(i + 1)) % (i + 1);
    double t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
  /* bf16 keeps 8 bits: repeat 256 steps (ties then resolve to the first
   * maximum in the reference and the kernels alike). */
  for (int64_t i = 0; i < n; i++)
    v[i] = tk_round(dt == LOOM_BF16 ? -2 + fmod(v[i], 256) * (4.0 / 256) : -2 + v[i] * (4.0 / (double)n), dt);
  return v;
}

static const char *kind_name(int k) { return k == MAXP ? "max_pool2d" : k == AVGP ? "avg_pool2d" : "adaptive_avg_pool2d"; }

static void check_case(loom_device dev, const pcase *c, int64_t N, int64_t C, int64_t H, int64_t W, loom_memory_format f,
                       loom_dtype dt) {
  int64_t sh[4] = {N, C, H, W}, n = N * C * H * W, OH, OW;
  out_hw(c, H, W, &OH, &OW);
  int64_t osh[4] = {N, C, OH, OW}, no = N * C * OH * OW;
  double *xv = distinct_vals(n, dt), *gv = tk_rand_vals(no, -1, 1, 0, dt);
  double *want = malloc((size_t)no * sizeof *want), *dwant = malloc((size_t)n * sizeof *dwant);
  ref_pool(c, xv, N, C, H, W, want, NULL);
  ref_pool_backward(c, xv, gv, N, C, H, W, dwant);
  for (int64_t i = 0; i < no; i++) want[i] = tk_round(want[i], dt);
  char what[200];
  snprintf(what, sizeof what, "%s k%lldx%lld s%lldx%lld p%lldx%lld ceil=%d cip=%d on [%lld,%lld,%lld,%lld] %s %s",
           kind_name(c->kind), (long long)c->kh, (long long)c->kw, (long long)c->sh, (long long)c->sw,
           (long long)c->ph, (long long)c->pw, c->ceil, c->cip, (long long)N, (long long)C, (long long)H, (long long)W,
           f == LOOM_FORMAT_NHWC ? "NHWC" : "NCHW", loom_dtype_name(dt));
  loom_tensor *x = tk_tensor(xv, 4, sh, dt, dev);
  loom_set_requires_grad(x, true);
  loom_tensor *y = run_pool(c, in_format(x, f));
  double t = dt == LOOM_F32 ? 1e-6 : tk_rtol(dt) * 2;
  tk_assert_tensor(y, 4, osh, dt, want, t, t, what);
  /* The result keeps the input's layout (shapes like [N, C, 1, 1] are both). */
  if (f == LOOM_FORMAT_NHWC) cr_assert(loom_tensor_is_channels_last(y), "%s: result is not channels-last", what);
  else cr_assert(loom_tensor_is_contiguous(y), "%s: result is not contiguous", what);
  loom_tensor *gy = in_format(tk_tensor(gv, 4, osh, dt, dev), f);
  cr_assert_eq(loom_backward_with(y, gy), LOOM_OK, "%s: %s", what, loom_last_error());
  for (int64_t i = 0; i < n; i++) dwant[i] = tk_round(dwant[i], dt);
  tk_assert_tensor(loom_grad(x), 4, sh, dt, dwant, dt == LOOM_F32 ? 1e-5 : t * 4, t * 2, what);
  free(xv), free(gv), free(want), free(dwant);
}

static const pcase MAX_CASES[] = {
    {MAXP, 2, 2, 2, 2, 0, 0, false, true}, {MAXP, 3, 3, 2, 2, 1, 1, false, true}, {MAXP, 3, 3, 2, 2, 1, 1, true, true},
    {MAXP, 3, 3, 1, 1, 1, 1, false, true}, {MAXP, 2, 3, 3, 1, 1, 0, true, true},  {MAXP, 1, 1, 2, 2, 0, 0, false, true},
    {MAXP, 4, 2, 3, 2, 2, 1, true, true},
};
static const pcase AVG_CASES[] = {
    {AVGP, 2, 2, 2, 2, 0, 0, false, true},  {AVGP, 3, 3, 2, 2, 1, 1, false, true}, {AVGP, 3, 3, 2, 2, 1, 1, false, false},
    {AVGP, 3, 3, 2, 2, 1, 1, true, true},   {AVGP, 3, 3, 2, 2, 1, 1, true, false}, {AVGP, 3, 2, 1, 2, 1, 1, false, false},
    {AVGP, 4, 4, 3, 3, 2, 2, true, true},
};
static const pcase ADAPT_CASES[] = {
    {ADAPT, 3, 4, 0, 0, 0, 0, false, false}, {ADAPT, 2, 3, 0, 0, 0, 0, false, false},
    {ADAPT, 1, 1, 0, 0, 0, 0, false, false}, {ADAPT, 7, 6, 0, 0, 0, 0, false, false},
    {ADAPT, 9, 4, 0, 0, 0, 0, false, false},
};

static void check_all(loom_device dev, const pcase *cs, size_t nc) {
  loom_dtype dts[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
  for (size_t i = 0; i < nc; i++)
    for (int f = 0; f < 2; f++)
      for (int d = 0; d < 3; d++) check_case(dev, &cs[i], 2, 3, 7, 6, f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW, dts[d]);
}

DEVICE_TEST(max_pool2d, matches_reference) {
  tk_seed(201);
  check_all(dev, MAX_CASES, sizeof MAX_CASES / sizeof MAX_CASES[0]);
}

DEVICE_TEST(avg_pool2d, matches_reference) {
  tk_seed(202);
  check_all(dev, AVG_CASES, sizeof AVG_CASES / sizeof AVG_CASES[0]);
}

DEVICE_TEST(adaptive_avg_pool2d, matches_reference) {
  tk_seed(203);
  check_all(dev, ADAPT_CASES, sizeof ADAPT_CASES / sizeof ADAPT_CASES[0]);
}

DEVICE_TEST(pool2d, larger_multithreaded_shapes) {
  /* Enough work for the threaded loops; ResNet's 3x3/2 max pool and its
   * global average pool, both layouts. */
  tk_seed(204);
  pcase mp = {MAXP, 3, 3, 2, 2, 1, 1, false, true}, gp = {ADAPT, 1, 1, 0, 0, 0, 0, false, false};
  for (int f = 0; f < 2; f++) {
    check_case(dev, &mp, 4, 16, 24, 24, f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW, LOOM_F32);
    check_case(dev, &gp, 8, 64, 8, 9, f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW, LOOM_F32);
    check_case(dev, &gp, 8, 64, 8, 9, f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW, LOOM_F16);
  }
}

DEVICE_TEST(max_pool2d, ties_go_to_the_first_and_backward_follows_the_argmax) {
  /* One 2x4 plane, 2x2 windows: window 0 all equal, window 1 has its max twice. */
  double xv[8] = {1, 1, 0, 5, 1, 1, 5, 2}, gv[2] = {10, 20};
  int64_t sh[4] = {1, 1, 2, 4}, osh[4] = {1, 1, 1, 2};
  for (int f = 0; f < 2; f++) {
    loom_tensor *x = tk_tensor(xv, 4, sh, LOOM_F32, dev);
    loom_set_requires_grad(x, true);
    loom_pool2d_options o;
    loom_pool2d_options_init(&o, 2, 2);
    loom_tensor *y = loom_max_pool2d(in_format(x, f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW), &o);
    double want[2] = {1, 5}, dwant[8] = {10, 0, 0, 20, 0, 0, 0, 0};
    tk_assert_tensor(y, 4, osh, LOOM_F32, want, 0, 0, "max with ties");
    cr_assert_eq(loom_backward_with(y, tk_tensor(gv, 4, osh, LOOM_F32, dev)), LOOM_OK, "%s", loom_last_error());
    tk_assert_tensor(loom_grad(x), 4, sh, LOOM_F32, dwant, 0, 0, "gradient to the first maximum");
  }
}

DEVICE_TEST(max_pool2d, nan_propagates) {
  double xv[4] = {1, NAN, 3, 2};
  int64_t sh[4] = {1, 1, 2, 2}, osh[4] = {1, 1, 1, 1};
  loom_pool2d_options o;
  loom_pool2d_options_init(&o, 2, 2);
  double want = NAN;
  tk_assert_tensor(loom_max_pool2d(tk_tensor(xv, 4, sh, LOOM_F32, dev), &o), 4, osh, LOOM_F32, &want, 0, 0, "NaN max");
}

DEVICE_TEST(adaptive_avg_pool2d, global_equals_full_window_average) {
  tk_seed(205);
  int64_t sh[4] = {3, 5, 4, 7};
  loom_tensor *x = tk_rand_tensor(4, sh, -1, 1, 0, LOOM_F32, dev, NULL);
  loom_pool2d_options o;
  loom_pool2d_options_init(&o, 4, 7);
  double *a = tk_read(loom_adaptive_avg_pool2d(x, 1, 1)), *b = tk_read(loom_avg_pool2d(x, &o));
  tk_assert_close(a, b, 15, 1e-6, 1e-6, "global pool vs 4x7 avg pool");
  free(a), free(b);
}

typedef struct gctx {
  pcase c;
  loom_memory_format f;
} gctx;
static loom_tensor *pool_fn(loom_tensor **in, void *p) {
  gctx *g = p;
  return run_pool(&g->c, in_format(in[0], g->f));
}

DEVICE_TEST(pool2d, finite_difference_gradients) {
  tk_seed(206);
  int64_t sh[4] = {2, 2, 5, 4};
  pcase cs[] = {{MAXP, 3, 3, 2, 2, 1, 1, true, true}, {AVGP, 3, 2, 2, 1, 1, 1, true, false},
                {AVGP, 2, 2, 1, 1, 1, 0, false, true}, {ADAPT, 3, 3, 0, 0, 0, 0, false, false}};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
    for (int f = 0; f < 2; f++) {
      double *xv = distinct_vals(80, LOOM_F32);  /* steps of 0.05: far from ties at h = 1e-3 */
      loom_tensor *in[1] = {tk_tensor(xv, 4, sh, LOOM_F32, dev)};
      loom_set_requires_grad(in[0], true);
      gctx g = {cs[i], f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW};
      char what[64];
      snprintf(what, sizeof what, "%s gradcheck %s", kind_name(cs[i].kind), f ? "NHWC" : "NCHW");
      tk_gradcheck(pool_fn, &g, in, 1, 1e-3, 2e-3, 1e-2, what);
      free(xv);
    }
}

DEVICE_TEST(pool2d, gradient_keeps_the_input_format) {
  int64_t sh[4] = {2, 3, 4, 4};
  loom_tensor *x = loom_to_memory_format(loom_ones(4, sh, LOOM_F32, dev), LOOM_FORMAT_NHWC);
  loom_set_requires_grad(x, true);
  /* A global pool's [N, C, 1, 1] output cannot tell NCHW from NHWC; the
   * gradient must still come back channels-last. */
  loom_tensor *y = loom_adaptive_avg_pool2d(x, 1, 1);
  loom_pool2d_options o;
  loom_pool2d_options_init(&o, 2, 2);
  loom_tensor *z = loom_max_pool2d(x, &o);
  cr_assert_eq(loom_backward(loom_add(loom_sum_all(y), loom_sum_all(z))), LOOM_OK, "%s", loom_last_error());
  loom_tensor *g = loom_grad(x);
  cr_assert(loom_tensor_is_channels_last(g) && !loom_tensor_is_contiguous(g), "x.grad is not channels-last");
}

DEVICE_TEST(pool2d, errors) {
  int64_t sh[4] = {1, 2, 3, 3}, sh3[3] = {2, 3, 3};
  loom_tensor *x = loom_zeros(4, sh, LOOM_F32, dev);
  loom_pool2d_options o;
  loom_pool2d_options_init(&o, 4, 4);
  tk_assert_fails(loom_max_pool2d(x, &o), LOOM_ERR_SHAPE, "max_pool2d", "larger than the padded input", "3x3");
  o.padding[0] = o.padding[1] = 1;  /* 5x5 padded: a 4x4 window fits */
  cr_assert_not_null(loom_avg_pool2d(x, &o), "%s", loom_last_error());
  loom_pool2d_options_init(&o, 3, 3);
  o.padding[1] = 2;
  tk_assert_fails(loom_avg_pool2d(x, &o), LOOM_ERR_INVALID_ARG, "avg_pool2d", "half the kernel");
  loom_pool2d_options_init(&o, 2, 2);
  o.stride[0] = -1;
  tk_assert_fails(loom_max_pool2d(x, &o), LOOM_ERR_INVALID_ARG, "stride");
  loom_pool2d_options_init(&o, 0, 2);
  tk_assert_fails(loom_max_pool2d(x, &o), LOOM_ERR_INVALID_ARG, "kernel");
  loom_pool2d_options_init(&o, 2, 2);
  tk_assert_fails(loom_max_pool2d(loom_zeros(3, sh3, LOOM_F32, dev), &o), LOOM_ERR_SHAPE, "4-D");
  tk_assert_fails(loom_max_pool2d(loom_zeros(4, sh, LOOM_I64, dev), &o), LOOM_ERR_DTYPE, "i64");
  tk_assert_fails(loom_max_pool2d(x, NULL), LOOM_ERR_INVALID_ARG, "loom_pool2d_options_init");
  o.struct_size = 1;
  tk_assert_fails(loom_avg_pool2d(x, &o), LOOM_ERR_INVALID_ARG, "options.struct_size");
  tk_assert_fails(loom_adaptive_avg_pool2d(x, 0, 2), LOOM_ERR_INVALID_ARG, "output size");
  loom_clear_error();
  tk_assert_fails(loom_adaptive_avg_pool2d(NULL, 1, 1), LOOM_ERR_NULL_INPUT, "adaptive_avg_pool2d");
}
