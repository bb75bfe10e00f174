/* cases_cnn.c — the op sweep's cases for pooling (max, average, adaptive),
 * dropout and the fused residual add + ReLU, with their backward ops
 * (reached through the forward op's gradient). */
#include <math.h>

#include "op_sweep/sweep.h"

/* ---- pooling -------------------------------------------------------------------------- */

/* x [N, C, H, W]. BIG: 1,048,576 elements; WIDE: 2048 channels (NHWC rows). */
static const int64_t POOL[SW_NSHAPES][4] = {
    [SW_SMALL] = {2, 3, 5, 4},  [SW_EMPTY] = {0, 2, 5, 4},     [SW_ONE] = {1, 1, 1, 1},
    [SW_ODD] = {2, 7, 13, 11},  [SW_BATCH1] = {1, 3, 5, 4},    [SW_BIG] = {2, 8, 256, 256},
    [SW_WIDE] = {2, 2048, 5, 4},
};

typedef struct pool_def {
  int kind;        /* 0 max, 1 avg, 2 adaptive avg */
  int64_t k, s, p; /* square kernel, stride, padding (max / avg) */
  bool cip;        /* avg: count_include_pad */
  int64_t oh, ow;  /* adaptive output size */
  bool ceil;       /* max / avg: ceil_mode */
} pool_def;

/* ResNet's stem pool, a 2x2 pool in ceil mode (a last window hanging over
 * odd sizes), average pools counting the padding or not (the latter in ceil
 * mode too), an adaptive pool and the global one (its own CPU loops). */
static const pool_def MAX_POOL = {0, 3, 2, 1, false, 0, 0, false}, MAX_CEIL = {0, 2, 2, 0, false, 0, 0, true},
                      AVG_POOL = {1, 3, 2, 1, true, 0, 0, false}, AVG_EXCL = {1, 3, 2, 1, false, 0, 0, true},
                      ADAPTIVE = {2, 0, 0, 0, false, 2, 3, false}, GLOBAL = {2, 0, 0, 0, false, 1, 1, false};

static loom_tensor *pool_fn(loom_tensor **in, void *ctx) {
  const pool_def *d = ctx;
  if (d->kind == 2) return loom_adaptive_avg_pool2d(in[0], d->oh, d->ow);
  loom_pool2d_options o;
  loom_pool2d_options_init(&o, d->k, d->k);
  o.stride[0] = o.stride[1] = d->s;
  o.padding[0] = o.padding[1] = d->p;
  o.count_include_pad = d->cip;
  o.ceil_mode = d->ceil;
  return d->kind == 0 ? loom_max_pool2d(in[0], &o) : loom_avg_pool2d(in[0], &o);
}

/* PyTorch's output size (in ceil mode a window must start inside the
 * input or its left padding). */
static int64_t pool_out(const pool_def *d, int64_t in, bool h) {
  if (d->kind == 2) return h ? d->oh : d->ow;
  int64_t o = (in + 2 * d->p - d->k + (d->ceil ? d->s - 1 : 0)) / d->s + 1;
  if (d->ceil && (o - 1) * d->s >= in + d->p) o--;
  return o;
}

/* One window of a pooled dim: [*lo, *hi) clipped to the input, *span the
 * extent PyTorch divides by when counting padding. */
static void pool_window(const pool_def *d, int64_t o, int64_t in, int64_t out, int64_t *lo, int64_t *hi,
                        int64_t *span) {
  if (d->kind == 2) {
    *lo = o * in / out, *hi = ((o + 1) * in + out - 1) / out, *span = *hi - *lo;
    return;
  }
  int64_t start = o * d->s - d->p, end = start + d->k < in + d->p ? start + d->k : in + d->p;
  *span = end - start;
  *lo = start > 0 ? start : 0, *hi = end < in ? end : in;
}

static void pool_ref(const pool_def *d, const double *v, const int64_t *s, double *out) {
  int64_t H = s[2], W = s[3], OH = pool_out(d, H, true), OW = pool_out(d, W, false);
  for (int64_t plane = 0; plane < s[0] * s[1]; plane++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t h0, h1, hs, w0, w1, ws;
        pool_window(d, oh, H, OH, &h0, &h1, &hs);
        pool_window(d, ow, W, OW, &w0, &w1, &ws);
        double m = -INFINITY, sum = 0;
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) {
            double x = v[(plane * H + h) * W + w];
            m = fmax(m, x);
            sum += x;
          }
        double div = d->kind == 1 && d->cip ? (double)(hs * ws) : (double)((h1 - h0) * (w1 - w0));
        out[(plane * OH + oh) * OW + ow] = d->kind == 0 ? m : sum / div;
      }
}

/* The pool's forward against pool_ref (when forward) and its gradient. */
static void pool_case(const sw_config *c, const pool_def *d, bool forward, const char *what) {
  const int64_t *s = POOL[c->shape];
  if (d->kind != 2 && (s[2] + 2 * d->p < d->k || s[3] + 2 * d->p < d->k)) return; /* (ONE: 1x1 < 2x2) */
  int64_t so[4] = {s[0], s[1], pool_out(d, s[2], true), pool_out(d, s[3], false)};
  double *v;
  loom_tensor *in[1] = {sw_input(c, 4, s, -2, 2, 0, &v)};
  if (forward) {
    double *want = sw_alloc(sw_numel(4, so));
    pool_ref(d, v, s, want);
    bool ok = sw_expect(c, pool_fn(in, (void *)d), 4, so, want, (double)(d->k * d->k), what);
    free(want);
    if (!ok) {
      free(v);
      return;
    }
  }
  /* Max: a step well below the gaps between random window maxima (fixed seed). */
  sw_gradcheck(c, pool_fn, (void *)d, in, 1, 1u, d->kind == 0 ? 1e-3 : 1e-2, what);
  free(v);
}

void sw_case_max_pool2d(const sw_config *c) {
  pool_case(c, &MAX_POOL, true, "max_pool2d 3x3 / 2, pad 1");
  pool_case(c, &MAX_CEIL, true, "max_pool2d 2x2 / 2, ceil mode");
}
/* Runs MAX_POOL2D_BACKWARD. */
void sw_case_max_pool2d_backward(const sw_config *c) {
  pool_case(c, &MAX_POOL, false, "gradient of max_pool2d (max_pool2d_backward)");
  pool_case(c, &MAX_CEIL, false, "gradient of max_pool2d, ceil mode (max_pool2d_backward)");
}
void sw_case_avg_pool2d(const sw_config *c) {
  pool_case(c, &AVG_POOL, true, "avg_pool2d 3x3 / 2, pad 1");
  pool_case(c, &AVG_EXCL, true, "avg_pool2d 3x3 / 2, pad 1, padding not counted, ceil mode");
}
void sw_case_adaptive_avg_pool2d(const sw_config *c) {
  pool_case(c, &ADAPTIVE, true, "adaptive_avg_pool2d to 2x3");
  pool_case(c, &GLOBAL, true, "adaptive_avg_pool2d to 1x1");
}
/* Runs AVG_POOL2D_BACKWARD in every window mode. */
void sw_case_avg_pool2d_backward(const sw_config *c) {
  pool_case(c, &AVG_POOL, false, "gradient of avg_pool2d (avg_pool2d_backward)");
  pool_case(c, &AVG_EXCL, false, "gradient of avg_pool2d, padding not counted, ceil mode (avg_pool2d_backward)");
  pool_case(c, &ADAPTIVE, false, "gradient of adaptive_avg_pool2d (avg_pool2d_backward)");
  pool_case(c, &GLOBAL, false, "gradient of the global average pool (avg_pool2d_backward)");
}

/* ---- dropout ---------------------------------------------------------------------------- */

/* p = 0.3 with a fixed seed, so every call draws the same mask. */
static loom_tensor *dropout_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  loom_manual_seed(77);
  return loom_dropout(in[0], 0.3, true);
}

/* Runs DROPOUT_BACKWARD. */
void sw_case_dropout_backward(const sw_config *c) {
  double *v;
  loom_tensor *in[1] = {sw_input(c, 4, sw_nchw[c->shape], -2, 2, 0, &v)};
  sw_gradcheck(c, dropout_fn, NULL, in, 1, 1u, 1e-2, "gradient (dropout_backward)");
  free(v);
}

/* The mask is in memory order: element i is kept when the uniform number
 * loom_rand draws at the same seed for x's i-th element in memory is >= p
 * (channels-last inputs stay channels-last; other layouts are made
 * contiguous first). */
void sw_case_dropout(const sw_config *c) {
  const int64_t *s = sw_nchw[c->shape];
  int64_t n = sw_numel(4, s), flat[1] = {n}, idx[4] = {0};
  double *v, *want = sw_alloc(n);
  loom_tensor *in[1] = {sw_input(c, 4, s, -2, 2, 0, &v)};
  loom_manual_seed(77);
  double *u = tk_read(loom_rand(1, flat, LOOM_F32, c->dev));
  for (int64_t i = 0; i < n; i++) {
    int64_t mem = c->layout == SW_CHANNELS_LAST ? ((idx[0] * s[2] + idx[2]) * s[3] + idx[3]) * s[1] + idx[1] : i;
    want[i] = u[mem] >= 0.3 ? v[i] / 0.7 : 0.0;
    for (int d = 3; d >= 0 && ++idx[d] == s[d]; d--) idx[d] = 0;
  }
  if (sw_expect(c, dropout_fn(in, NULL), 4, s, want, 1, "dropout p = 0.3")) {
    /* p = 1 drops everything; p = 0 and evaluation keep x as it is. */
    for (int64_t i = 0; i < n; i++) want[i] = 0;
    sw_expect(c, loom_dropout(in[0], 1.0, true), 4, s, want, 1, "dropout p = 1");
    sw_expect(c, loom_dropout(in[0], 0.0, true), 4, s, v, 1, "dropout p = 0");
    sw_expect(c, loom_dropout(in[0], 0.3, false), 4, s, v, 1, "dropout in evaluation");
    sw_case_dropout_backward(c);
  }
  free(u);
  free(want);
  free(v);
}

/* ---- add + ReLU ----------------------------------------------------------------------------- */

static loom_tensor *add_relu_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_add_relu(in[0], in[1]);
}

/* |a| >= 0.6 and |b| <= 0.3 keep a + b clear of ReLU's kink. With forward:
 * also b broadcast from [1, C, 1, 1] (materialized by the public function). */
static void add_relu_case(const sw_config *c, bool forward) {
  const int64_t *s = sw_nchw[c->shape];
  int64_t n = sw_numel(4, s), sb[4] = {1, s[1], 1, 1};
  double *va, *vb, *vb2, *want = sw_alloc(n);
  loom_tensor *in[2] = {sw_input(c, 4, s, -1.5, 1.5, 0.6, &va), sw_input(c, 4, s, -0.3, 0.3, 0, &vb)};
  loom_tensor *b2 = sw_input(c, 4, sb, -0.3, 0.3, 0, &vb2);
  bool ok = true;
  if (forward) {
    for (int64_t i = 0; i < n; i++) want[i] = fmax(va[i] + vb[i], 0.0);
    ok = sw_expect(c, add_relu_fn(in, NULL), 4, s, want, 1, "relu(a + b)");
    for (int64_t i = 0; ok && i < n; i++) want[i] = fmax(va[i] + vb2[tk_bcast_index(i, 4, s, 4, sb)], 0.0);
    if (ok) ok = sw_expect(c, loom_add_relu(in[0], b2), 4, s, want, 1, "relu(a + b), b [1, C, 1, 1] broadcast");
  }
  if (ok) sw_gradcheck(c, add_relu_fn, NULL, in, 2, 3u, 1e-2, forward ? "gradient" : "gradient (add_relu_backward)");
  free(want);
  free(va);
  free(vb);
  free(vb2);
}

void sw_case_add_relu(const sw_config *c) { add_relu_case(c, true); }
/* Runs ADD_RELU_BACKWARD. */
void sw_case_add_relu_backward(const sw_config *c) { add_relu_case(c, false); }
