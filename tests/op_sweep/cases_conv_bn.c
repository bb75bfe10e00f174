/* cases_conv_bn.c — the op sweep's cases for conv2d and batch norm (and,
 * through their gradients, conv2d_backward and batch_norm_backward). Every
 * 4-D operand, the convolution weight included, takes the config's layout. */
#include <math.h>

#include "op_sweep/sweep.h"

/* ---- conv2d ------------------------------------------------------------------------ */

/* One convolution: x [N, C, H, W], w [O, C/G, K, K], b [O]. */
typedef struct conv_geo {
  int64_t N, C, H, W, O, K, sh, sw, ph, pw, dil, G;
} conv_geo;

/* Up to three geometries per class (N == 0 in a later slot ends the list,
 * except for the EMPTY class's single one). SMALL: plain (strided, padded),
 * depthwise, and grouped + dilated; ODD: plain and depthwise; WIDE: 2048
 * output channels (3x3: more than the direct path's blocks hold at once),
 * and 2048 input channels (1x1). */
#define CONV_GEOS 3
static const conv_geo CONV[SW_NSHAPES][CONV_GEOS] = {
    [SW_SMALL] = {{2, 3, 5, 5, 4, 3, 2, 1, 1, 1, 1, 1},
                  {2, 4, 6, 6, 4, 3, 1, 1, 1, 1, 1, 4},
                  {2, 4, 7, 6, 6, 3, 1, 2, 2, 1, 2, 2}},
    [SW_EMPTY] = {{0, 3, 5, 5, 4, 3, 2, 1, 1, 1, 1, 1}},
    [SW_ONE] = {{1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1}},
    [SW_ODD] = {{2, 7, 13, 11, 5, 3, 2, 1, 1, 1, 1, 1}, {1, 7, 13, 11, 7, 3, 1, 1, 1, 1, 1, 7}},
    [SW_BATCH1] = {{1, 3, 5, 5, 4, 3, 2, 1, 1, 1, 1, 1}},
    [SW_BIG] = {{1, 4, 512, 512, 4, 3, 2, 1, 1, 1, 1, 1}},
    [SW_WIDE] = {{1, 16, 3, 3, 2048, 3, 1, 1, 1, 1, 1, 1}, {1, 2048, 3, 3, 16, 1, 1, 1, 0, 0, 1, 1}},
};

static int64_t conv_oh(const conv_geo *g) { return (g->H + 2 * g->ph - g->dil * (g->K - 1) - 1) / g->sh + 1; }
static int64_t conv_ow(const conv_geo *g) { return (g->W + 2 * g->pw - g->dil * (g->K - 1) - 1) / g->sw + 1; }

static loom_tensor *conv_fn(loom_tensor **in, void *ctx) {
  const conv_geo *g = ctx;
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  o.stride[0] = g->sh, o.stride[1] = g->sw;
  o.padding[0] = g->ph, o.padding[1] = g->pw;
  o.dilation[0] = o.dilation[1] = g->dil;
  o.groups = g->G;
  return loom_conv2d(in[0], in[1], in[2], &o);
}

typedef struct conv_data {
  loom_tensor *in[3];
  double *v[3];
} conv_data;

static void conv_make(const sw_config *c, const conv_geo *g, conv_data *d) {
  int64_t sx[4] = {g->N, g->C, g->H, g->W}, sw[4] = {g->O, g->C / g->G, g->K, g->K}, sb[1] = {g->O};
  d->in[0] = sw_input(c, 4, sx, -1, 1, 0, &d->v[0]);
  d->in[1] = sw_input(c, 4, sw, -1, 1, 0, &d->v[1]);
  d->in[2] = sw_input(c, 1, sb, -1, 1, 0, &d->v[2]);
}

static void conv_free(conv_data *d) {
  for (int k = 0; k < 3; k++) free(d->v[k]);
}

static void ref_conv(const conv_geo *g, const double *x, const double *w, const double *b, double *y) {
  int64_t OH = conv_oh(g), OW = conv_ow(g), Cg = g->C / g->G, Og = g->O / g->G, K = g->K;
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t o = 0; o < g->O; o++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double z = b[o];
          for (int64_t ci = 0; ci < Cg; ci++) {
            int64_t ch = o / Og * Cg + ci;
            for (int64_t kh = 0; kh < K; kh++) {
              int64_t ih = oh * g->sh - g->ph + kh * g->dil;
              if (ih < 0 || ih >= g->H) continue;
              for (int64_t kw = 0; kw < K; kw++) {
                int64_t iw = ow * g->sw - g->pw + kw * g->dil;
                if (iw < 0 || iw >= g->W) continue;
                z += x[((n * g->C + ch) * g->H + ih) * g->W + iw] * w[((o * Cg + ci) * K + kh) * K + kw];
              }
            }
          }
          y[((n * g->O + o) * OH + oh) * OW + ow] = z;
        }
}

static int conv_geos(const sw_config *c) {
  int n = 1;
  while (n < CONV_GEOS && CONV[c->shape][n].N > 0) n++;
  return n;
}

/* Runs CONV2D_BACKWARD (dX, dW, db in one op) for every geometry. */
void sw_case_conv2d_backward(const sw_config *c) {
  for (int k = 0; k < conv_geos(c); k++) {
    const conv_geo *g = &CONV[c->shape][k];
    conv_data d;
    conv_make(c, g, &d);
    char what[64];
    snprintf(what, sizeof what, "gradient of geometry %d (conv2d_backward)", k);
    sw_gradcheck(c, conv_fn, (void *)g, d.in, 3, 7u, 1e-2, what);
    conv_free(&d);
  }
}

void sw_case_conv2d(const sw_config *c) {
  for (int k = 0; k < conv_geos(c); k++) {
    const conv_geo *g = &CONV[c->shape][k];
    conv_data d;
    conv_make(c, g, &d);
    int64_t so[4] = {g->N, g->O, conv_oh(g), conv_ow(g)};
    double *want = sw_alloc(sw_numel(4, so));
    ref_conv(g, d.v[0], d.v[1], d.v[2], want);
    char what[64];
    snprintf(what, sizeof what, "conv2d, geometry %d", k);
    bool ok = sw_expect(c, conv_fn(d.in, (void *)g), 4, so, want, (double)(g->C / g->G * g->K * g->K), what);
    free(want);
    conv_free(&d);
    if (!ok) return;
  }
  sw_case_conv2d_backward(c);
}

/* ---- batch norm --------------------------------------------------------------------- */

/* [N, C, H, W]. EMPTY and ONE have fewer than 2 values per channel:
 * training refuses them (as PyTorch), evaluation normalizes them. */
static const int64_t BN[SW_NSHAPES][4] = {
    [SW_SMALL] = {3, 2, 2, 2},   [SW_EMPTY] = {0, 2, 2, 2},      [SW_ONE] = {1, 1, 1, 1},
    [SW_ODD] = {3, 7, 13, 11},   [SW_BATCH1] = {1, 3, 4, 5},     [SW_BIG] = {4, 16, 128, 128},
    [SW_WIDE] = {2, 2048, 3, 3},
};

/* ctx: running mean and variance for evaluation mode, or NULL (training,
 * running statistics left out of the gradient check: they change with
 * every call). */
typedef struct bn_ctx {
  loom_tensor *rm, *rv;
} bn_ctx;

static loom_tensor *bn_fn(loom_tensor **in, void *ctx) {
  const bn_ctx *k = ctx;
  loom_batch_norm_options o;
  loom_batch_norm_options_init(&o);
  o.training = k == NULL;
  return loom_batch_norm(in[0], k ? k->rm : NULL, k ? k->rv : NULL, in[1], in[2], &o);
}

typedef struct bn_data {
  loom_tensor *in[3];
  double *v[3];
  double rm[2048], rv[2048]; /* evaluation's running statistics */
  bn_ctx eval;
} bn_data;

/* x, weight and bias in the config's dtype (x in its layout); the running
 * statistics f32 and contiguous (kept in f32 whatever x's dtype; they are
 * updated in place). */
static void bn_make(const sw_config *c, bn_data *d) {
  const int64_t *s = BN[c->shape];
  int64_t sc[1] = {s[1]};
  d->in[0] = sw_input(c, 4, s, -2, 2, 0, &d->v[0]);
  d->in[1] = sw_input(c, 1, sc, 0.5, 1.5, 0, &d->v[1]);
  d->in[2] = sw_input(c, 1, sc, -1, 1, 0, &d->v[2]);
  for (int64_t ch = 0; ch < s[1]; ch++) d->rm[ch] = tk_round(tk_uniform(-0.5, 0.5), LOOM_F32);
  for (int64_t ch = 0; ch < s[1]; ch++) d->rv[ch] = tk_round(tk_uniform(0.5, 1.5), LOOM_F32);
  d->eval.rm = tk_tensor(d->rm, 1, sc, LOOM_F32, c->dev);
  d->eval.rv = tk_tensor(d->rv, 1, sc, LOOM_F32, c->dev);
}

static void bn_free(bn_data *d) {
  for (int k = 0; k < 3; k++) free(d->v[k]);
}

static bool bn_trains(const int64_t *s) { return s[0] * s[2] * s[3] >= 2; }

/* Runs BATCH_NORM_BACKWARD (dx, dweight, dbias), training and evaluation.
 * Training: an input moves every output of its channel (through the batch
 * statistics), so the f32 rounding of m outputs adds noise ~ 2^-24 sqrt(m)
 * to a difference: the step grows with sqrt(m) to keep it below 1e-3 (an
 * output is nearly linear in one input when m is large). */
void sw_case_batch_norm_backward(const sw_config *c) {
  const int64_t *s = BN[c->shape];
  double m = (double)(s[0] * s[2] * s[3]), h = 1e-3 * fmax(1.0, sqrt(m) / 16);
  bn_data d;
  bn_make(c, &d);
  if (bn_trains(s)) sw_gradcheck(c, bn_fn, NULL, d.in, 3, 7u, h, "gradient, training");
  sw_gradcheck(c, bn_fn, &d.eval, d.in, 3, 7u, 1e-2, "gradient, evaluation");
  bn_free(&d);
}

void sw_case_batch_norm(const sw_config *c) {
  const int64_t *s = BN[c->shape];
  int64_t C = s[1], per = s[2] * s[3], m = s[0] * per, n = sw_numel(4, s), sc[1] = {C};
  bn_data d;
  bn_make(c, &d);
  double *x = d.v[0], *w = d.v[1], *b = d.v[2];
  double *want = sw_alloc(n), *relu = sw_alloc(n), *rm_want = sw_alloc(C), *rv_want = sw_alloc(C);
  double *zeros = sw_alloc(C), *ones = sw_alloc(C);
  for (int64_t ch = 0; ch < C; ch++) ones[ch] = 1;
  loom_tensor *rm = tk_tensor(zeros, 1, sc, LOOM_F32, c->dev), *rv = tk_tensor(ones, 1, sc, LOOM_F32, c->dev);
  bool ok;
  if (!bn_trains(s)) {
    ok = true;
    sw_expect_error(loom_batch_norm(d.in[0], rm, rv, d.in[1], d.in[2], NULL), LOOM_ERR_SHAPE, "more than 1",
                    "batch_norm (training) with one value per channel");
  } else {
    double *mean = sw_alloc(C), *var = sw_alloc(C); /* (zeroed) */
    for (int64_t i = 0; i < n; i++) mean[i / per % C] += x[i] / (double)m;
    for (int64_t i = 0; i < n; i++) var[i / per % C] += pow(x[i] - mean[i / per % C], 2) / (double)m;
    for (int64_t i = 0; i < n; i++) {
      int64_t ch = i / per % C;
      want[i] = (x[i] - mean[ch]) / sqrt(var[ch] + 1e-5) * w[ch] + b[ch];
    }
    for (int64_t ch = 0; ch < C; ch++) {
      rm_want[ch] = 0.1 * mean[ch];
      rv_want[ch] = 0.9 + 0.1 * var[ch] * (double)m / (double)(m - 1); /* Bessel-corrected, as PyTorch */
    }
    free(mean);
    free(var);
    ok = sw_expect(c, loom_batch_norm(d.in[0], rm, rv, d.in[1], d.in[2], NULL), 4, s, want, 1,
                   "batch_norm (training)");
    if (ok) {
      char what[320];
      snprintf(what, sizeof what, "%s: batch_norm: running mean", sw_ctx);
      tk_assert_tensor(rm, 1, sc, LOOM_F32, rm_want, 1e-6, 1e-5, what);
      snprintf(what, sizeof what, "%s: batch_norm: running var", sw_ctx);
      tk_assert_tensor(rv, 1, sc, LOOM_F32, rv_want, 1e-6, 1e-5, what);
      /* The fused ReLU (training: the batch statistics again). */
      loom_batch_norm_options o;
      loom_batch_norm_options_init(&o);
      o.act = LOOM_ACT_RELU;
      for (int64_t i = 0; i < n; i++) relu[i] = want[i] > 0 ? want[i] : 0;
      sw_expect(c, loom_batch_norm(d.in[0], NULL, NULL, d.in[1], d.in[2], &o), 4, s, relu, 1,
                "batch_norm (training) + ReLU");
    }
  }
  if (ok) {
    for (int64_t i = 0; i < n; i++) {
      int64_t ch = i / per % C;
      want[i] = (x[i] - d.rm[ch]) / sqrt(d.rv[ch] + 1e-5) * w[ch] + b[ch];
    }
    ok = sw_expect(c, bn_fn(d.in, &d.eval), 4, s, want, 1, "batch_norm (evaluation)");
  }
  if (ok && c->dtype != LOOM_F32) {
    /* Running statistics are f32 whatever x's dtype. */
    loom_tensor *rm16 = loom_cast(d.eval.rm, c->dtype), *rv16 = loom_cast(d.eval.rv, c->dtype);
    loom_batch_norm_options o;
    loom_batch_norm_options_init(&o);
    o.training = false;
    sw_expect_error(loom_batch_norm(d.in[0], rm16, rv16, d.in[1], d.in[2], &o), LOOM_ERR_DTYPE, "kept in f32",
                    "batch_norm with 16-bit running statistics");
  }
  free(want);
  free(relu);
  free(rm_want);
  free(rv_want);
  free(zeros);
  free(ones);
  bn_free(&d);
  if (ok) sw_case_batch_norm_backward(c);
}
