/* cases_transformer.c — the op sweep's cases for the transformer ops (issue
 * 28): GELU, softmax, embedding, layer norm, fused attention and the fused
 * final projection + cross-entropy, and their backward ops (run directly,
 * through loom_op_run: their kernels read dense rows, so a strided view is
 * refused; the public functions and autograd pass contiguous tensors). */
#include <math.h>

#include "op_sweep/sweep.h"
#include "ops/op.h"

/* ---- GELU ----------------------------------------------------------------------------- */

static double ref_gelu(double x) {
  double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + tanh(u));
}
static double ref_gelu_grad(double x) {
  double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x), t = tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

static loom_tensor *gelu_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_gelu(in[0]);
}

/* Inputs in [-4, 4]: both tails of the tanh and the bend between. */
void sw_case_gelu(const sw_config *c) {
  const int64_t *s = sw_nchw[c->shape];
  int64_t n = sw_numel(4, s);
  double *v, *want = sw_alloc(n);
  loom_tensor *in[1] = {sw_input(c, 4, s, -4, 4, 0, &v)};
  for (int64_t i = 0; i < n; i++) want[i] = ref_gelu(v[i]);
  if (sw_expect(c, gelu_fn(in, NULL), 4, s, want, 1, "gelu")) sw_gradcheck(c, gelu_fn, NULL, in, 1, 1u, 1e-2, "gradient");
  free(want);
  free(v);
}

/* (gy, x) -> gy * gelu'(x), both in the config's layout. */
void sw_case_gelu_backward(const sw_config *c) {
  const int64_t *s = sw_nchw[c->shape];
  int64_t n = sw_numel(4, s);
  double *vg, *vx, *want = sw_alloc(n);
  loom_tensor *gy = sw_input(c, 4, s, -2, 2, 0, &vg), *x = sw_input(c, 4, s, -4, 4, 0, &vx);
  for (int64_t i = 0; i < n; i++) want[i] = vg[i] * ref_gelu_grad(vx[i]);
  loom_op_args a = {.in = {gy, x}, .n_in = 2};
  sw_expect(c, loom_op_run(LOOM_OP_GELU_BACKWARD, &a), 4, s, want, 4, "gelu_backward(gy, x)");
  free(want);
  free(vg);
  free(vx);
}

/* ---- softmax -------------------------------------------------------------------------- */

/* {rows, classes}; BIG: rows of 4099. */
static const int64_t SM[SW_NSHAPES][2] = {
    [SW_SMALL] = {3, 5},  [SW_EMPTY] = {3, 0},    [SW_ONE] = {1, 1}, [SW_ODD] = {7, 127},
    [SW_BATCH1] = {1, 5}, [SW_BIG] = {256, 4099}, [SW_WIDE] = {2, 2048},
};

/* Softmax as exp(log-softmax): one reference for both ops. */
static void ref_softmax(const double *v, int64_t R, int64_t C, int dim, double *out) {
  sw_ref_log_softmax(v, R, C, dim, out);
  for (int64_t i = 0; i < R * C; i++) out[i] = exp(out[i]);
}

static loom_tensor *softmax_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_softmax(in[0], -1);
}

void sw_case_softmax(const sw_config *c) {
  const int64_t *s = SM[c->shape];
  double *v, *want = sw_alloc(s[0] * s[1]);
  loom_tensor *in[1] = {sw_input(c, 2, s, -3, 3, 0, &v)};
  ref_softmax(v, s[0], s[1], 1, want);
  if (sw_expect(c, softmax_fn(in, NULL), 2, s, want, 1, "softmax over dim 1")) {
    ref_softmax(v, s[0], s[1], 0, want);
    sw_expect(c, loom_softmax(in[0], 0), 2, s, want, 1, "softmax over dim 0");
    sw_gradcheck(c, softmax_fn, NULL, in, 1, 1u, 1e-2, "gradient");
  }
  free(want);
  free(v);
}

/* (gy, y) -> y * (gy - sum(gy * y)) per row. */
void sw_case_softmax_backward(const sw_config *c) {
  const int64_t *s = SM[c->shape];
  int64_t R = s[0], C = s[1], n = R * C;
  double *vg, *vx = tk_rand_vals(n, -2, 2, 0, c->dtype), *yv = sw_alloc(n), *want = sw_alloc(n);
  loom_tensor *gy = sw_input(c, 2, s, -1, 1, 0, &vg);
  ref_softmax(vx, R, C, 1, yv);
  for (int64_t i = 0; i < n; i++) yv[i] = tk_round(yv[i], c->dtype);
  loom_tensor *y = sw_input_vals(c, 2, s, c->dtype, yv);
  for (int64_t i = 0; i < R; i++) {
    double sg = 0;
    for (int64_t j = 0; j < C; j++) sg += vg[i * C + j] * yv[i * C + j];
    for (int64_t j = 0; j < C; j++) want[i * C + j] = yv[i * C + j] * (vg[i * C + j] - sg);
  }
  loom_op_args a = {.in = {gy, y}, .n_in = 2};
  sw_expect(c, loom_op_run(LOOM_OP_SOFTMAX_BACKWARD, &a), 2, s, want, (double)C, "softmax_backward(gy, y)");
  free(want);
  free(yv);
  free(vg);
  free(vx);
}

/* ---- embedding -------------------------------------------------------------------------- */

/* {V, D, B, T}: indices [B, T]. EMPTY: no indices; BIG: a [4, 257, 1024] result. */
static const int64_t EMB[SW_NSHAPES][4] = {
    [SW_SMALL] = {7, 5, 2, 3},   [SW_EMPTY] = {7, 5, 2, 0},     [SW_ONE] = {1, 1, 1, 1},
    [SW_ODD] = {13, 127, 3, 7},  [SW_BATCH1] = {7, 5, 1, 3},    [SW_BIG] = {1024, 1024, 4, 257},
    [SW_WIDE] = {3, 2048, 2, 2},
};

/* Indices with repeats (i * 5 + 2 mod V), so the backward's adds collide. */
static double *emb_indices(int64_t n, int64_t V) {
  double *p = sw_alloc(n);
  for (int64_t i = 0; i < n; i++) p[i] = (double)((i * 5 + 2) % V);
  return p;
}

static loom_tensor *embedding_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_embedding(in[0], in[1]);
}

/* A bad index (or label) fails the CPU kernel at once; the CUDA kernel finds it on
 * the GPU and reports it at the next call that waits for the GPU
 * (device/deferred.c): the same error, one synchronize later. */
static void expect_bad_index(const sw_config *c, loom_tensor *t, const char *frag, const char *what) {
  if (c->dev.kind == LOOM_CUDA && t) {
    cr_assert_eq(loom_device_synchronize(c->dev), LOOM_ERR_INVALID_ARG, "%s: %s: the synchronize reports it", sw_ctx,
                 what);
    t = NULL;
  }
  sw_expect_error(t, LOOM_ERR_INVALID_ARG, frag, what);
}

/* The weight in the config's dtype and layout, i64 indices in its layout
 * (their padding holds an invalid index: reading it is an error). */
void sw_case_embedding(const sw_config *c) {
  const int64_t *d = EMB[c->shape];
  int64_t V = d[0], D = d[1], sw[2] = {V, D}, si[2] = {d[2], d[3]}, so[3] = {d[2], d[3], D}, n = d[2] * d[3];
  double *vw, *idx = emb_indices(n, V), *want = sw_alloc(n * D);
  loom_tensor *in[2] = {sw_input_vals(c, 2, si, LOOM_I64, idx), sw_input(c, 2, sw, -2, 2, 0, &vw)};
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < D; j++) want[i * D + j] = vw[(int64_t)idx[i] * D + j];
  bool ok = sw_expect(c, embedding_fn(in, NULL), 3, so, want, 1, "embedding");
  if (ok && c->shape == SW_SMALL) {
    double bad[3] = {0, (double)V, 1};
    int64_t s3 = 3;
    expect_bad_index(c, loom_embedding(sw_input_vals(c, 1, &s3, LOOM_I64, bad), in[1]), "embedding: index 7 at position 1",
                     "embedding with an index past the table");
    bad[1] = -1;
    expect_bad_index(c, loom_embedding(sw_input_vals(c, 1, &s3, LOOM_I32, bad), in[1]), "outside [0, 7)",
                     "embedding with a negative index");
    sw_expect_error(loom_embedding(in[1], in[1]), LOOM_ERR_DTYPE, "i32, i64 or u8", "embedding with float indices");
  }
  if (ok) sw_gradcheck(c, embedding_fn, NULL, in, 2, 2u, 1e-2, "gradient (embedding_backward)");
  free(want);
  free(idx);
  free(vw);
}

/* (gy [B, T, D], indices [B, T]), i[0] = V -> the scatter-add [V, D]. */
void sw_case_embedding_backward(const sw_config *c) {
  const int64_t *d = EMB[c->shape];
  int64_t V = d[0], D = d[1], sw[2] = {V, D}, si[2] = {d[2], d[3]}, sg[3] = {d[2], d[3], D}, n = d[2] * d[3];
  double *vg, *idx = emb_indices(n, V), *want = sw_alloc(V * D);
  loom_tensor *gy = sw_input(c, 3, sg, -1, 1, 0, &vg);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < D; j++) want[(int64_t)idx[i] * D + j] += vg[i * D + j];
  loom_op_args a = {.in = {gy, sw_input_vals(c, 2, si, LOOM_I64, idx)}, .n_in = 2};
  a.i[0] = V;
  sw_expect(c, loom_op_run(LOOM_OP_EMBEDDING_BACKWARD, &a), 2, sw, want, (double)(n / V + 1),
            "embedding_backward(gy, indices)");
  free(want);
  free(idx);
  free(vg);
}

/* ---- layer norm ------------------------------------------------------------------------- */

/* {rows, D}. EMPTY: no rows (D = 0 is refused: checked in SMALL); BIG: 1024 rows of 1025. */
static const int64_t LN[SW_NSHAPES][2] = {
    [SW_SMALL] = {3, 5},  [SW_EMPTY] = {0, 5},     [SW_ONE] = {1, 1}, [SW_ODD] = {7, 127},
    [SW_BATCH1] = {1, 5}, [SW_BIG] = {1024, 1025}, [SW_WIDE] = {2, 2048},
};
#define LN_EPS 1e-5

/* y, and per row mean and rstd. w, b may be NULL. */
static void ref_layer_norm(const double *x, const double *w, const double *b, int64_t R, int64_t D, double *y,
                           double *mean, double *rstd) {
  for (int64_t i = 0; i < R; i++) {
    double s = 0, q = 0;
    for (int64_t j = 0; j < D; j++) s += x[i * D + j];
    double m = s / (double)D;
    for (int64_t j = 0; j < D; j++) q += (x[i * D + j] - m) * (x[i * D + j] - m);
    double r = 1.0 / sqrt(q / (double)D + LN_EPS);
    for (int64_t j = 0; j < D; j++) y[i * D + j] = (x[i * D + j] - m) * r * (w ? w[j] : 1) + (b ? b[j] : 0);
    if (mean) mean[i] = m, rstd[i] = r;
  }
}

static loom_tensor *layer_norm_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_layer_norm(in[0], in[1], in[2], LN_EPS);
}

void sw_case_layer_norm(const sw_config *c) {
  const int64_t *s = LN[c->shape];
  int64_t R = s[0], D = s[1];
  double *vx, *vw, *vb, *want = sw_alloc(R * D);
  loom_tensor *in[3] = {sw_input(c, 2, s, -2, 2, 0, &vx), sw_input(c, 1, &D, 0.5, 1.5, 0, &vw),
                        sw_input(c, 1, &D, -1, 1, 0, &vb)};
  ref_layer_norm(vx, vw, vb, R, D, want, NULL, NULL);
  bool ok = sw_expect(c, layer_norm_fn(in, NULL), 2, s, want, (double)D, "layer_norm");
  if (ok) {
    ref_layer_norm(vx, NULL, NULL, R, D, want, NULL, NULL);
    ok = sw_expect(c, loom_layer_norm(in[0], NULL, NULL, LN_EPS), 2, s, want, (double)D, "layer_norm without affine");
  }
  if (ok && c->shape == SW_SMALL) {
    int64_t s0[2] = {3, 0}, d4 = 4;
    double *v0;
    sw_expect_error(loom_layer_norm(sw_input(c, 2, s0, -1, 1, 0, &v0), NULL, NULL, LN_EPS), LOOM_ERR_SHAPE,
                    "normalized dim is empty", "layer_norm over an empty dim");
    free(v0);
    double *v4;
    sw_expect_error(loom_layer_norm(in[0], sw_input(c, 1, &d4, -1, 1, 0, &v4), NULL, LN_EPS), LOOM_ERR_SHAPE,
                    "must be [5]", "layer_norm with a weight of the wrong size");
    free(v4);
  }
  /* x's gradient is small where D is large (the mean and variance take most
   * of it out): the finite differences need rows of a few elements to be
   * meaningful, which every shape but BIG and WIDE has. */
  if (ok) sw_gradcheck(c, layer_norm_fn, NULL, in, 3, 7u, 1e-2, "gradient (layer_norm_backward)");
  free(want);
  free(vx);
  free(vw);
  free(vb);
}

/* (gy, x, stats, weight) -> dx, dweight, dbias against the float64 formulas. */
void sw_case_layer_norm_backward(const sw_config *c) {
  const int64_t *s = LN[c->shape];
  int64_t R = s[0], D = s[1], ss[2] = {R, 2};
  double *vx, *vw, *vg, *y = sw_alloc(R * D), *mean = sw_alloc(R), *rstd = sw_alloc(R), *st = sw_alloc(2 * R);
  double *dx = sw_alloc(R * D), *dw = sw_alloc(D), *db = sw_alloc(D);
  loom_tensor *x = sw_input(c, 2, s, -2, 2, 0, &vx), *w = sw_input(c, 1, &D, 0.5, 1.5, 0, &vw);
  loom_tensor *gy = sw_input(c, 2, s, -1, 1, 0, &vg);
  ref_layer_norm(vx, vw, NULL, R, D, y, mean, rstd);
  for (int64_t i = 0; i < R; i++) {
    st[2 * i] = tk_round(mean[i], LOOM_F32), st[2 * i + 1] = tk_round(rstd[i], LOOM_F32);
    double sg = 0, sgx = 0;
    for (int64_t j = 0; j < D; j++) {
      double xh = (vx[i * D + j] - mean[i]) * rstd[i], g = vg[i * D + j] * vw[j];
      sg += g, sgx += g * xh;
      dw[j] += vg[i * D + j] * xh, db[j] += vg[i * D + j];
    }
    for (int64_t j = 0; j < D; j++) {
      double xh = (vx[i * D + j] - mean[i]) * rstd[i];
      dx[i * D + j] = rstd[i] * (vg[i * D + j] * vw[j] - sg / (double)D - xh * sgx / (double)D);
    }
  }
  loom_op_args a = {.in = {gy, x, sw_input_vals(c, 2, ss, LOOM_F32, st), w}, .n_in = 4};
  a.i[0] = a.i[1] = a.i[2] = 1;
  a.i[3] = c->dtype;
  if (sw_expect(c, loom_op_run(LOOM_OP_LAYER_NORM_BACKWARD, &a), 2, s, dx, (double)D, "dx")) {
    sw_expect(c, a.out[1], 1, &D, dw, (double)R, "dweight");
    sw_expect(c, a.out[2], 1, &D, db, (double)R, "dbias");
  }
  free(y), free(mean), free(rstd), free(st), free(dx), free(dw), free(db);
  free(vx), free(vw), free(vg);
}

/* ---- attention -------------------------------------------------------------------------- */

/* {B, H, T, D}. ODD: T = 67 (a second, short tile of queries and keys);
 * BIG: 1024 heads of [16, 64] (1M elements per input; long sequences are
 * tests/test_ops_transformer.c's, whose float64 reference would make the
 * sweep slow). */
static const int64_t AT[SW_NSHAPES][4] = {
    [SW_SMALL] = {1, 2, 5, 3},   [SW_EMPTY] = {1, 2, 0, 3},    [SW_ONE] = {1, 1, 1, 1},
    [SW_ODD] = {1, 3, 67, 13},   [SW_BATCH1] = {1, 2, 5, 3},   [SW_BIG] = {64, 16, 16, 64},
    [SW_WIDE] = {1, 1, 4, 2048},
};

/* Per head: out = softmax(q kᵀ scale + mask) v, and the logsumexp of each
 * row of scores (lse, may be NULL). */
static void ref_attention(const double *q, const double *k, const double *v, int64_t BH, int64_t T, int64_t D,
                          bool causal, double *out, double *lse) {
  double scale = 1.0 / sqrt((double)D), *p = sw_alloc(T);
  for (int64_t h = 0; h < BH; h++)
    for (int64_t i = 0; i < T; i++) {
      const double *qi = q + (h * T + i) * D;
      int64_t nj = causal ? i + 1 : T;
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < nj; j++) {
        double z = 0;
        for (int64_t d = 0; d < D; d++) z += qi[d] * k[(h * T + j) * D + d];
        p[j] = z * scale;
        m = fmax(m, p[j]);
      }
      for (int64_t j = 0; j < nj; j++) s += (p[j] = exp(p[j] - m));
      double *o = out + (h * T + i) * D;
      for (int64_t d = 0; d < D; d++) o[d] = 0;
      for (int64_t j = 0; j < nj; j++)
        for (int64_t d = 0; d < D; d++) o[d] += p[j] / s * v[(h * T + j) * D + d];
      if (lse) lse[h * T + i] = m + log(s);
    }
  free(p);
}

static loom_tensor *attention_fn(loom_tensor **in, void *ctx) {
  return loom_scaled_dot_product_attention(in[0], in[1], in[2], ctx != NULL);
}

void sw_case_attention(const sw_config *c) {
  const int64_t *s = AT[c->shape];
  int64_t BH = s[0] * s[1], T = s[2], D = s[3], n = BH * T * D;
  double *vq, *vk, *vv, *want = sw_alloc(n);
  loom_tensor *in[3] = {sw_input(c, 4, s, -1, 1, 0, &vq), sw_input(c, 4, s, -1, 1, 0, &vk),
                        sw_input(c, 4, s, -1, 1, 0, &vv)};
  static int causal = 1;
  ref_attention(vq, vk, vv, BH, T, D, true, want, NULL);
  bool ok = sw_expect(c, attention_fn(in, &causal), 4, s, want, (double)D, "causal attention");
  if (ok) {
    ref_attention(vq, vk, vv, BH, T, D, false, want, NULL);
    ok = sw_expect(c, attention_fn(in, NULL), 4, s, want, (double)D, "attention (not causal)");
  }
  if (ok && c->shape == SW_SMALL) {
    int64_t s2[4] = {1, 2, 4, 3};
    double *v2;
    sw_expect_error(loom_scaled_dot_product_attention(in[0], sw_input(c, 4, s2, -1, 1, 0, &v2), in[2], true),
                    LOOM_ERR_SHAPE, "must have one shape", "attention with k of another length");
    free(v2);
  }
  if (ok) sw_gradcheck(c, attention_fn, &causal, in, 3, 7u, 1e-2, "gradient (attention_backward)");
  free(want);
  free(vq), free(vk), free(vv);
}

/* (gy, q, k, v, stats = (lse, rowsum(gy * out))) -> dq, dk, dv against the
 * float64 formulas: P = softmax(S), dV = Pᵀ dO, dS = P (dO Vᵀ - D), dQ =
 * scale dS K, dK = scale dSᵀ Q (causal). */
void sw_case_attention_backward(const sw_config *c) {
  const int64_t *s = AT[c->shape];
  int64_t BH = s[0] * s[1], T = s[2], D = s[3], n = BH * T * D, ss[4] = {s[0], s[1], T, 2};
  double *vq, *vk, *vv, *vg, *out = sw_alloc(n), *lse = sw_alloc(BH * T), *st = sw_alloc(2 * BH * T);
  double *dq = sw_alloc(n), *dk = sw_alloc(n), *dv = sw_alloc(n), *p = sw_alloc(T), *dp = sw_alloc(T);
  loom_tensor *q = sw_input(c, 4, s, -1, 1, 0, &vq), *k = sw_input(c, 4, s, -1, 1, 0, &vk);
  loom_tensor *v = sw_input(c, 4, s, -1, 1, 0, &vv), *gy = sw_input(c, 4, s, -1, 1, 0, &vg);
  ref_attention(vq, vk, vv, BH, T, D, true, out, lse);
  double scale = 1.0 / sqrt((double)D);
  for (int64_t h = 0; h < BH; h++)
    for (int64_t i = 0; i < T; i++) {
      const double *qi = vq + (h * T + i) * D, *gi = vg + (h * T + i) * D;
      double rs = 0;
      for (int64_t d = 0; d < D; d++) rs += gi[d] * out[(h * T + i) * D + d];
      st[2 * (h * T + i)] = tk_round(lse[h * T + i], LOOM_F32);
      st[2 * (h * T + i) + 1] = tk_round(rs, LOOM_F32);
      for (int64_t j = 0; j <= i; j++) {
        const double *kj = vk + (h * T + j) * D, *vj = vv + (h * T + j) * D;
        double z = 0, g = 0;
        for (int64_t d = 0; d < D; d++) z += qi[d] * kj[d], g += gi[d] * vj[d];
        p[j] = exp(z * scale - lse[h * T + i]);
        dp[j] = p[j] * (g - rs);
        for (int64_t d = 0; d < D; d++) {
          dv[(h * T + j) * D + d] += p[j] * gi[d];
          dk[(h * T + j) * D + d] += scale * dp[j] * qi[d];
          dq[(h * T + i) * D + d] += scale * dp[j] * kj[d];
        }
      }
    }
  loom_op_args a = {.in = {gy, q, k, v, sw_input_vals(c, 4, ss, LOOM_F32, st)}, .n_in = 5};
  a.f[0] = scale;
  a.i[0] = 1;
  if (sw_expect(c, loom_op_run(LOOM_OP_ATTENTION_BACKWARD, &a), 4, s, dq, (double)(T * D), "dq")) {
    sw_expect(c, a.out[1], 4, s, dk, (double)(T * D), "dk");
    sw_expect(c, a.out[2], 4, s, dv, (double)T, "dv");
  }
  free(out), free(lse), free(st), free(dq), free(dk), free(dv), free(p), free(dp);
  free(vq), free(vk), free(vv), free(vg);
}

/* ---- fused final projection + cross-entropy ------------------------------------------------- */

/* {N, E, V}. EMPTY: no rows (a NaN mean, as cross_entropy); BIG: w [1025, 1024]. */
static const int64_t LCE[SW_NSHAPES][3] = {
    [SW_SMALL] = {4, 3, 5},  [SW_EMPTY] = {0, 3, 5},       [SW_ONE] = {1, 1, 1}, [SW_ODD] = {7, 13, 127},
    [SW_BATCH1] = {1, 3, 5}, [SW_BIG] = {64, 1024, 1025},  [SW_WIDE] = {2, 2048, 3},
};

typedef struct lce_data {
  loom_tensor *in[3];
  double *vx, *vw, *lab, *logits, *lse;
} lce_data;

static void lce_make(const sw_config *c, lce_data *d) {
  const int64_t *s = LCE[c->shape];
  int64_t N = s[0], E = s[1], V = s[2], sx[2] = {N, E}, sw[2] = {V, E};
  d->in[0] = sw_input(c, 2, sx, -1, 1, 0, &d->vx);
  d->in[1] = sw_input(c, 2, sw, -1, 1, 0, &d->vw);
  d->lab = sw_alloc(N);
  for (int64_t i = 0; i < N; i++) d->lab[i] = (double)((i * 3 + 1) % V);
  d->in[2] = sw_input_vals(c, 1, sx, LOOM_I64, d->lab);
  d->logits = sw_alloc(N * V);
  d->lse = sw_alloc(N);
  for (int64_t i = 0; i < N; i++) {
    double m = -INFINITY, z = 0;
    for (int64_t j = 0; j < V; j++) {
      double t = 0;
      for (int64_t e = 0; e < E; e++) t += d->vx[i * E + e] * d->vw[j * E + e];
      d->logits[i * V + j] = t;
      m = fmax(m, t);
    }
    for (int64_t j = 0; j < V; j++) z += exp(d->logits[i * V + j] - m);
    d->lse[i] = m + log(z);
  }
}

static void lce_free(lce_data *d) {
  free(d->vx), free(d->vw), free(d->lab), free(d->logits), free(d->lse);
}

static loom_tensor *lce_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_linear_cross_entropy(in[0], in[1], in[2]);
}

void sw_case_linear_cross_entropy(const sw_config *c) {
  const int64_t *s = LCE[c->shape];
  int64_t N = s[0], E = s[1], V = s[2];
  lce_data d;
  lce_make(c, &d);
  double want = 0;
  for (int64_t i = 0; i < N; i++) want += (d.lse[i] - d.logits[i * V + (int64_t)d.lab[i]]) / (double)N;
  if (N == 0) want = NAN;
  bool ok = sw_expect_as(c, lce_fn(d.in, NULL), 0, NULL, LOOM_F32, &want, sw_atol(LOOM_F32, (double)E),
                         sw_rtol(LOOM_F32), "linear_cross_entropy");
  if (ok && c->shape == SW_SMALL) {
    double bad[4] = {0, 1, 5, 2};
    expect_bad_index(c, loom_linear_cross_entropy(d.in[0], d.in[1], sw_input_vals(c, 1, s, LOOM_I64, bad)),
                     "linear_cross_entropy: label 5 at row 2", "linear_cross_entropy with a label past the classes");
    sw_expect_error(loom_linear_cross_entropy(d.in[1], d.in[1], d.in[2]), LOOM_ERR_SHAPE, "w [V, E]",
                    "linear_cross_entropy with 5 rows of x and 4 labels");
  }
  /* Over no rows the loss is NaN: nothing to differentiate (the backward
   * case checks that dw is zeros then). */
  if (ok && N > 0) sw_gradcheck(c, lce_fn, NULL, d.in, 3, 3u, 1e-2, "gradient (linear_cross_entropy_backward)");
  lce_free(&d);
}

/* (gy, x, w, labels, lse) -> dx, dw: dlogits = (softmax - onehot) gy / N. */
void sw_case_linear_cross_entropy_backward(const sw_config *c) {
  const int64_t *s = LCE[c->shape];
  int64_t N = s[0], E = s[1], V = s[2], sx[2] = {N, E}, sw[2] = {V, E};
  lce_data d;
  lce_make(c, &d);
  double g = 0.75, *dx = sw_alloc(N * E), *dw = sw_alloc(V * E), *lse = sw_alloc(N);
  for (int64_t i = 0; i < N; i++) {
    lse[i] = tk_round(d.lse[i], LOOM_F32);
    for (int64_t j = 0; j < V; j++) {
      double dl = (exp(d.logits[i * V + j] - d.lse[i]) - (j == (int64_t)d.lab[i])) * g / (double)N;
      for (int64_t e = 0; e < E; e++) {
        dx[i * E + e] += dl * d.vw[j * E + e];
        dw[j * E + e] += dl * d.vx[i * E + e];
      }
    }
  }
  loom_op_args a = {.in = {loom_full(0, NULL, g, LOOM_F32, c->dev), d.in[0], d.in[1], d.in[2],
                           sw_input_vals(c, 1, sx, LOOM_F32, lse)},
                    .n_in = 5};
  a.i[0] = a.i[1] = 1;
  if (sw_expect(c, loom_op_run(LOOM_OP_LINEAR_CROSS_ENTROPY_BACKWARD, &a), 2, sx, dx, (double)V, "dx"))
    sw_expect(c, a.out[1], 2, sw, dw, (double)N, "dw");
  free(dx), free(dw), free(lse);
  lce_free(&d);
}
