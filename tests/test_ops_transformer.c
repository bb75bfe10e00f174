/* test_ops_transformer.c — the transformer ops (issue 28) beyond the op
 * sweep's cases: PyTorch's own numbers for each (tests/ref/transformer_torch.py
 * → ref/transformer_torch_ref.h: F.gelu(approximate="tanh"), F.layer_norm,
 * F.embedding, softmax, causal attention, broadcast batched matmul,
 * cross_entropy(x @ wᵀ), clip_grad_norm_), attention at GPT-2's shapes
 * (head dim 64, T = 1024) against float64, its memory growing linearly in T,
 * the fused projection + cross-entropy over several row chunks against the
 * unfused ops, the reductions across rows giving the same bits twice, and
 * the error paths. The DEVICE_TESTs run on the CPU and, where a GPU exists,
 * on CUDA (the CUDA kernels of issue 28, loom's fused attention of
 * lib/ops/cuda/attention.cu among them; a bad index or label is reported
 * there at the next wait for the GPU), plus CUDA-only ones comparing the GPU
 * to the CPU attention op at GPT-2's training shape; the thread-count test is
 * CPU only. */
#include <math.h>
#include <stdlib.h>

#include "ops/op.h" /* loom_op_run: embedding_backward, attention with a scale of its own */
#include "ref/transformer_torch_ref.h"
#include "support/testkit.h"

#define CPU loom_cpu()

/* n values fn(i), as the reference script makes them (rounded to f32 by
 * tk_tensor when the tensor is f32). */
static double *vals(int64_t n, double (*fn)(int64_t)) {
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  cr_assert_not_null(v);
  for (int64_t i = 0; i < n; i++) v[i] = fn(i);
  return v;
}

/* A leaf on dev holding fn(i), requiring grad. */
static loom_tensor *leaf_on(loom_device dev, int64_t n, int nd, const int64_t *sh, double (*fn)(int64_t)) {
  double *v = vals(n, fn);
  loom_tensor *t = tk_tensor(v, nd, sh, LOOM_F32, dev);
  free(v);
  loom_set_requires_grad(t, true);
  return t;
}

/* Backward from y with the gradient fn(i) (on y's device). */
static void backward_on(loom_device dev, loom_tensor *y, int64_t n, int nd, const int64_t *sh, double (*fn)(int64_t)) {
  double *v = vals(n, fn);
  cr_assert_eq(loom_backward_with(y, tk_tensor(v, nd, sh, LOOM_F32, dev)), LOOM_OK, "%s", loom_last_error());
  free(v);
}

#define TOL 1e-6, 2e-5

/* ---- PyTorch's numbers ------------------------------------------------------------------ */

static double gelu_x(int64_t i) { return -4 + 8 * (double)i / 23; }
static double gelu_g(int64_t i) { return cos(0.3 * (double)i); }

DEVICE_TEST(transformer_torch, gelu_tanh) {
  int64_t s = 24;
  loom_tensor *x = leaf_on(dev, 24, 1, &s, gelu_x), *y = loom_gelu(x);
  tk_assert_tensor(y, 1, &s, LOOM_F32, GELU_Y, TOL, "torch: F.gelu(x, approximate='tanh')");
  backward_on(dev, y, 24, 1, &s, gelu_g);
  tk_assert_tensor(loom_grad(x), 1, &s, LOOM_F32, GELU_DX, TOL, "torch: gelu's dx");
}

/* GELU over the whole float range that matters, against float64 of the
 * same function written without cancellation (x / (1 + exp(-2u))): the
 * error bound grows with |u| because u itself is rounded to f32 before
 * exp(-2u) magnifies it. 0.5 x (1 + tanhf(u)) fails this by 10^5 in the
 * negative tail, where 1 + tanh(u) cancels. */
static double gelu_dense_x(int64_t i) { return -12 + 24 * (double)i / 240000; }
static double gelu_one(int64_t i) { (void)i; return 1; }
DEVICE_TEST(transformer, gelu_dense_range_against_float64) {
  int64_t n = 240001;
  loom_tensor *x = leaf_on(dev, n, 1, &n, gelu_dense_x), *y = loom_gelu(x);
  cr_assert_not_null(y, "%s", loom_last_error());
  backward_on(dev, y, n, 1, &n, gelu_one);
  double *xv = tk_read(x), *yv = tk_read(y), *gv = tk_read(loom_grad(x));
  double worst_y = 0, worst_g = 0;
  int64_t at_y = 0, at_g = 0;
  for (int64_t i = 0; i < n; i++) {
    double xd = xv[i], u = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd);
    double sg = 1 / (1 + exp(-2 * u)), ref = xd * sg;
    double dref = sg + 2 * xd * sg * (1 - sg) * 0.7978845608028654 * (1 + 3 * 0.044715 * xd * xd);
    double b = (8 + 6 * fabs(u)) * 0x1p-24;
    double ey = fabs(yv[i] - ref) / (b * fabs(ref) + 1e-30);
    double eg = fabs(gv[i] - dref) / (b * (fabs(dref) + 0.5 * fabs(xd)) + 1e-30);
    if (ey > worst_y) worst_y = ey, at_y = i;
    if (eg > worst_g) worst_g = eg, at_g = i;
  }
  cr_log_info("gelu dense range: worst forward %.3f of its bound (x = %g), worst dx %.3f (x = %g)", worst_y,
              xv[at_y], worst_g, xv[at_g]);
  cr_assert(worst_y <= 1, "gelu(%g) = %.9g is %.3g bounds from float64", xv[at_y], yv[at_y], worst_y);
  cr_assert(worst_g <= 1, "gelu'(%g) = %.9g is %.3g bounds from float64", xv[at_g], gv[at_g], worst_g);
  free(xv), free(yv), free(gv);
}

static double ln_x(int64_t i) { return sin(0.37 * (double)i) * (1 + 0.3 * (double)(i % 8)) + 0.1 * (double)i; }
static double ln_w(int64_t j) { return 0.5 + 0.1 * (double)j; }
static double ln_b(int64_t j) { return 0.05 * (double)j - 0.2; }
static double ln_g(int64_t i) { return cos(0.23 * (double)i); }

DEVICE_TEST(transformer_torch, layer_norm) {
  int64_t s[2] = {3, 8}, d = 8;
  loom_tensor *x = leaf_on(dev, 24, 2, s, ln_x), *w = leaf_on(dev, 8, 1, &d, ln_w), *b = leaf_on(dev, 8, 1, &d, ln_b);
  loom_tensor *y = loom_layer_norm(x, w, b, 1e-5);
  tk_assert_tensor(y, 2, s, LOOM_F32, LN_Y, TOL, "torch: F.layer_norm");
  backward_on(dev, y, 24, 2, s, ln_g);
  tk_assert_tensor(loom_grad(x), 2, s, LOOM_F32, LN_DX, TOL, "torch: layer_norm's dx");
  tk_assert_tensor(loom_grad(w), 1, &d, LOOM_F32, LN_DW, TOL, "torch: layer_norm's dweight");
  tk_assert_tensor(loom_grad(b), 1, &d, LOOM_F32, LN_DB, TOL, "torch: layer_norm's dbias");
}

static double emb_w(int64_t i) { return sin(0.5 * (double)i); }
static double emb_g(int64_t i) { return cos(0.7 * (double)i); }

DEVICE_TEST(transformer_torch, embedding) {
  int64_t sw[2] = {6, 4}, si[2] = {2, 3}, so[3] = {2, 3, 4};
  double ind[6] = {1, 5, 1, 0, 3, 1};
  loom_tensor *w = leaf_on(dev, 24, 2, sw, emb_w), *y = loom_embedding(tk_tensor(ind, 2, si, LOOM_I64, dev), w);
  tk_assert_tensor(y, 3, so, LOOM_F32, EMB_Y, TOL, "torch: F.embedding");
  backward_on(dev, y, 24, 3, so, emb_g);
  tk_assert_tensor(loom_grad(w), 2, sw, LOOM_F32, EMB_DW, TOL, "torch: embedding's dweight (index 1 three times)");
}

static double sm_x(int64_t i) { return 3 * sin(1.1 * (double)i); }
static double sm_g(int64_t i) { return cos(0.9 * (double)i); }

DEVICE_TEST(transformer_torch, softmax) {
  int64_t s[2] = {2, 5};
  loom_tensor *x = leaf_on(dev, 10, 2, s, sm_x), *y = loom_softmax(x, -1);
  tk_assert_tensor(y, 2, s, LOOM_F32, SM_Y, TOL, "torch: F.softmax");
  backward_on(dev, y, 10, 2, s, sm_g);
  tk_assert_tensor(loom_grad(x), 2, s, LOOM_F32, SM_DX, TOL, "torch: softmax's dx");
}

static double at_q(int64_t i) { return sin(0.31 * (double)i); }
static double at_k(int64_t i) { return cos(0.17 * (double)i); }
static double at_v(int64_t i) { return sin(0.53 * (double)i + 1); }
static double at_g(int64_t i) { return cos(0.41 * (double)i); }

DEVICE_TEST(transformer_torch, causal_attention) {
  int64_t s[4] = {1, 2, 7, 4};
  loom_tensor *q = leaf_on(dev, 56, 4, s, at_q), *k = leaf_on(dev, 56, 4, s, at_k), *v = leaf_on(dev, 56, 4, s, at_v);
  loom_tensor *y = loom_scaled_dot_product_attention(q, k, v, true);
  tk_assert_tensor(y, 4, s, LOOM_F32, ATT_Y, TOL, "torch: softmax(q kᵀ/2 + causal mask) v");
  backward_on(dev, y, 56, 4, s, at_g);
  tk_assert_tensor(loom_grad(q), 4, s, LOOM_F32, ATT_DQ, TOL, "torch: attention's dq");
  tk_assert_tensor(loom_grad(k), 4, s, LOOM_F32, ATT_DK, TOL, "torch: attention's dk");
  tk_assert_tensor(loom_grad(v), 4, s, LOOM_F32, ATT_DV, TOL, "torch: attention's dv");
}

static double bmm_a(int64_t i) { return sin(0.2 * (double)i); }
static double bmm_b(int64_t i) { return cos(0.3 * (double)i); }
static double bmm_g(int64_t i) { return sin(0.13 * (double)i); }

DEVICE_TEST(transformer_torch, batched_matmul_broadcast) {
  int64_t sa[4] = {2, 1, 3, 4}, sb[4] = {1, 3, 4, 5}, so[4] = {2, 3, 3, 5};
  loom_tensor *a = leaf_on(dev, 24, 4, sa, bmm_a), *b = leaf_on(dev, 60, 4, sb, bmm_b), *y = loom_matmul(a, b);
  tk_assert_tensor(y, 4, so, LOOM_F32, BMM_Y, TOL, "torch: [2, 1, 3, 4] @ [1, 3, 4, 5]");
  backward_on(dev, y, 90, 4, so, bmm_g);
  tk_assert_tensor(loom_grad(a), 4, sa, LOOM_F32, BMM_DA, TOL, "torch: da (summed over the broadcast dim)");
  tk_assert_tensor(loom_grad(b), 4, sb, LOOM_F32, BMM_DB, TOL, "torch: db (summed over the broadcast dim)");
}

static double lce_x(int64_t i) { return sin(0.7 * (double)i); }
static double lce_w(int64_t i) { return cos(0.45 * (double)i); }

DEVICE_TEST(transformer_torch, linear_cross_entropy) {
  int64_t sx[2] = {5, 4}, sw[2] = {7, 4}, sl = 5;
  double lab[5] = {0, 3, 6, 2, 3};
  loom_tensor *x = leaf_on(dev, 20, 2, sx, lce_x), *w = leaf_on(dev, 28, 2, sw, lce_w);
  loom_tensor *loss = loom_linear_cross_entropy(x, w, tk_tensor(lab, 1, &sl, LOOM_I64, dev));
  tk_assert_tensor(loss, 0, NULL, LOOM_F32, LCE_LOSS, TOL, "torch: F.cross_entropy(x @ w.t(), labels)");
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
  tk_assert_tensor(loom_grad(x), 2, sx, LOOM_F32, LCE_DX, TOL, "torch: dx");
  tk_assert_tensor(loom_grad(w), 2, sw, LOOM_F32, LCE_DW, TOL, "torch: dw");
}

static double clip_g1(int64_t i) { return sin((double)i + 1); }
static double clip_g2(int64_t i) { return 2 * cos((double)i); }

/* p's gradient set to fn(i) through a backward of sum(p * G). */
static void set_grad(loom_device dev, loom_tensor *p, int64_t n, double (*fn)(int64_t)) {
  double *v = vals(n, fn);
  loom_tensor *g = tk_tensor(v, loom_tensor_ndim(p), loom_tensor_shape(p), LOOM_F32, dev);
  free(v);
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul(p, g))), LOOM_OK, "%s", loom_last_error());
}

DEVICE_TEST(transformer_torch, clip_grad_norm) {
  int64_t s1 = 5, s2[2] = {2, 3};
  loom_tensor *p[3] = {loom_zeros(1, &s1, LOOM_F32, dev), loom_zeros(1, &s1, LOOM_F32, dev),
                       loom_zeros(2, s2, LOOM_F32, dev)};
  for (int k = 0; k < 3; k++) loom_set_requires_grad(p[k], true);
  set_grad(dev, p[0], 5, clip_g1);
  set_grad(dev, p[2], 6, clip_g2);  /* p[1] has no gradient: skipped */
  double norm = 0;
  cr_assert_eq(loom_clip_grad_norm(p, 3, 1.5, &norm), LOOM_OK, "%s", loom_last_error());
  tk_assert_close(&norm, CLIP_NORM, 1, TOL, "torch: clip_grad_norm_'s returned norm");
  tk_assert_tensor(loom_grad(p[0]), 1, &s1, LOOM_F32, CLIP_G1, TOL, "torch: first gradient clipped");
  tk_assert_tensor(loom_grad(p[2]), 2, s2, LOOM_F32, CLIP_G2, TOL, "torch: second gradient clipped");
  cr_assert_null(loom_grad(p[1]), "a parameter without a gradient keeps none");
  /* Below max_norm: nothing changes; the norm is still returned. */
  double again = 0;
  cr_assert_eq(loom_clip_grad_norm(p, 3, 10.0, &again), LOOM_OK, "%s", loom_last_error());
  tk_assert_close(&again, &(double){1.5}, 1, 1e-5, 1e-5, "norm after clipping to 1.5");
  tk_assert_tensor(loom_grad(p[0]), 1, &s1, LOOM_F32, CLIP_G1, TOL, "unclipped below max_norm");
}

/* ---- clip_grad_norm's edges -------------------------------------------------------------- */

static double ones_fn(int64_t i) { (void)i; return 1.0; }
static double inf_fn(int64_t i) { return i == 1 ? INFINITY : 1.0; }

DEVICE_TEST(transformer, clip_grad_norm_non_finite_and_bad_args) {
  int64_t s = 3;
  loom_tensor *p = loom_zeros(1, &s, LOOM_F32, dev);
  loom_set_requires_grad(p, true);
  set_grad(dev, p, 3, inf_fn);
  double norm = 0, want[3] = {1, INFINITY, 1};
  cr_assert_eq(loom_clip_grad_norm(&p, 1, 1.0, &norm), LOOM_OK, "%s", loom_last_error());
  cr_assert(isinf(norm), "an infinite gradient gives an infinite norm, got %g", norm);
  tk_assert_tensor(loom_grad(p), 1, &s, LOOM_F32, want, 0, 0, "a non-finite norm leaves the gradients alone");
  tk_assert_error(loom_clip_grad_norm(&p, 1, -1.0, NULL), LOOM_ERR_INVALID_ARG, "max_norm must be >= 0");
  tk_assert_error(loom_clip_grad_norm(&p, 1, NAN, NULL), LOOM_ERR_INVALID_ARG, "max_norm");
  loom_tensor *none[1] = {NULL};
  tk_assert_error(loom_clip_grad_norm(none, 1, 1.0, NULL), LOOM_ERR_NULL_INPUT, "parameter 0 is NULL");
  cr_assert_eq(loom_clip_grad_norm(NULL, 0, 1.0, &norm), LOOM_OK, "no parameters: norm 0");
  cr_assert_eq(norm, 0.0);
  (void)ones_fn;
}

/* ---- attention at GPT-2's shapes ------------------------------------------------------------ */

/* Attention per head in float64 (causal or not, any scale): out, and the
 * gradients of sum(out * gy) (the formulas, not the kernels' tiling). */
static void ref_attention_ex(const double *q, const double *k, const double *v, const double *gy, int64_t BH,
                             int64_t T, int64_t D, bool causal, double scale, double *out, double *dq, double *dk,
                             double *dv) {
  double *p = calloc((size_t)(T > 0 ? T : 1), sizeof *p);
  for (int64_t h = 0; h < BH; h++)
    for (int64_t i = 0; i < T; i++) {
      const double *qi = q + (h * T + i) * D, *gi = gy + (h * T + i) * D;
      int64_t nj = causal ? i + 1 : T;
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < nj; j++) {
        double z = 0;
        for (int64_t d = 0; d < D; d++) z += qi[d] * k[(h * T + j) * D + d];
        p[j] = z * scale;
        m = fmax(m, p[j]);
      }
      for (int64_t j = 0; j < nj; j++) s += (p[j] = exp(p[j] - m));
      double *o = out + (h * T + i) * D, rs = 0;
      for (int64_t d = 0; d < D; d++) o[d] = 0;
      for (int64_t j = 0; j < nj; j++) {
        p[j] /= s;
        for (int64_t d = 0; d < D; d++) o[d] += p[j] * v[(h * T + j) * D + d];
      }
      for (int64_t d = 0; d < D; d++) rs += gi[d] * o[d];
      for (int64_t j = 0; j < nj; j++) {
        const double *kj = k + (h * T + j) * D, *vj = v + (h * T + j) * D;
        double g = 0;
        for (int64_t d = 0; d < D; d++) g += gi[d] * vj[d];
        double ds = p[j] * (g - rs) * scale;
        for (int64_t d = 0; d < D; d++) {
          dv[(h * T + j) * D + d] += p[j] * gi[d];
          dk[(h * T + j) * D + d] += ds * qi[d];
          dq[(h * T + i) * D + d] += ds * kj[d];
        }
      }
    }
  free(p);
}

static void ref_attention(const double *q, const double *k, const double *v, const double *gy, int64_t BH, int64_t T,
                          int64_t D, double *out, double *dq, double *dk, double *dv) {
  ref_attention_ex(q, k, v, gy, BH, T, D, true, 1.0 / sqrt((double)D), out, dq, dk, dv);
}

static void require_grad3(loom_tensor *q, loom_tensor *k, loom_tensor *v) {
  loom_set_requires_grad(q, true);
  loom_set_requires_grad(k, true);
  loom_set_requires_grad(v, true);
}

/* B = 1, two heads of T = 1024, head dim 64 (GPT-2 small's), f32: forward
 * and the three gradients against float64. */
DEVICE_TEST(transformer, attention_gpt2_shapes_against_float64) {
  tk_seed(2801);
  int64_t s[4] = {1, 2, 1024, 64}, n = 2 * 1024 * 64;
  double *vq = tk_rand_vals(n, -1, 1, 0, LOOM_F32), *vk = tk_rand_vals(n, -1, 1, 0, LOOM_F32);
  double *vv = tk_rand_vals(n, -1, 1, 0, LOOM_F32), *vg = tk_rand_vals(n, -1, 1, 0, LOOM_F32);
  double *out = calloc((size_t)n, sizeof *out), *dq = calloc((size_t)n, sizeof *dq);
  double *dk = calloc((size_t)n, sizeof *dk), *dv = calloc((size_t)n, sizeof *dv);
  ref_attention(vq, vk, vv, vg, 2, 1024, 64, out, dq, dk, dv);
  loom_tensor *q = tk_tensor(vq, 4, s, LOOM_F32, dev), *k = tk_tensor(vk, 4, s, LOOM_F32, dev);
  loom_tensor *v = tk_tensor(vv, 4, s, LOOM_F32, dev);
  require_grad3(q, k, v);
  loom_tensor *y = loom_scaled_dot_product_attention(q, k, v, true);
  tk_assert_tensor(y, 4, s, LOOM_F32, out, 2e-5, 1e-4, "attention [1, 2, 1024, 64]");
  cr_assert_eq(loom_backward_with(y, tk_tensor(vg, 4, s, LOOM_F32, dev)), LOOM_OK, "%s", loom_last_error());
  tk_assert_tensor(loom_grad(q), 4, s, LOOM_F32, dq, 1e-4, 1e-3, "dq at T = 1024");
  tk_assert_tensor(loom_grad(k), 4, s, LOOM_F32, dk, 1e-4, 1e-3, "dk at T = 1024");
  tk_assert_tensor(loom_grad(v), 4, s, LOOM_F32, dv, 1e-4, 1e-3, "dv at T = 1024");
  /* bf16 inputs (f32 inside, rounded once): close to the f32 result. */
  double *yf = tk_read(y);
  loom_tensor *yb = loom_scaled_dot_product_attention(loom_cast(q, LOOM_BF16), loom_cast(k, LOOM_BF16),
                                                      loom_cast(v, LOOM_BF16), true);
  tk_assert_tensor(yb, 4, s, LOOM_BF16, yf, 2e-2, 2e-2, "bf16 attention against f32");
  free(yf);
  free(vq), free(vk), free(vv), free(vg), free(out), free(dq), free(dk), free(dv);
}

/* One shape of the head-dim / tile sweep below. */
typedef struct attn_case {
  int64_t bh, T, D;
  bool causal;
  double scale; /* 0: the public API's 1 / sqrt(D) */
} attn_case;

/* Attention through the op itself when the scale is not the public API's
 * (the op's f[0] attribute); recorded for autograd like the public call. */
static loom_tensor *attention_scaled(loom_tensor *q, loom_tensor *k, loom_tensor *v, bool causal, double scale) {
  if (scale == 0) return loom_scaled_dot_product_attention(q, k, v, causal);
  loom_op_args a = {.in = {q, k, v}, .n_in = 3};
  a.f[0] = scale;
  a.i[0] = causal;
  return loom_op_run(LOOM_OP_ATTENTION, &a);
}

/* Forward and gradients of one case in dtype dt against float64 of the
 * inputs as rounded to dt. Tolerances: f32 as at GPT-2's shapes; f16 and
 * bf16 a few units of their last place (the output and the gradients are
 * rounded once; gy * out for the backward statistics uses the rounded out). */
static void attention_case(loom_device dev, const attn_case *c, loom_dtype dt) {
  int64_t s[3] = {c->bh, c->T, c->D}, n = c->bh * c->T * c->D;
  double scale = c->scale != 0 ? c->scale : 1.0 / sqrt((double)c->D);
  double *vq = tk_rand_vals(n, -1, 1, 0, dt), *vk = tk_rand_vals(n, -1, 1, 0, dt);
  double *vv = tk_rand_vals(n, -1, 1, 0, dt), *vg = tk_rand_vals(n, -1, 1, 0, dt);
  size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(double);
  double *out = calloc(1, bytes), *dq = calloc(1, bytes), *dk = calloc(1, bytes), *dv = calloc(1, bytes);
  ref_attention_ex(vq, vk, vv, vg, c->bh, c->T, c->D, c->causal, scale, out, dq, dk, dv);
  loom_scope_begin();
  loom_tensor *q = tk_tensor(vq, 3, s, dt, dev), *k = tk_tensor(vk, 3, s, dt, dev), *v = tk_tensor(vv, 3, s, dt, dev);
  require_grad3(q, k, v);
  loom_tensor *y = attention_scaled(q, k, v, c->causal, c->scale);
  cr_assert_not_null(y, "%s", loom_last_error());
  double ya = dt == LOOM_F32 ? 2e-5 : dt == LOOM_F16 ? 2e-3 : 1.5e-2, yr = dt == LOOM_F32 ? 1e-4 : 4 * tk_rtol(dt);
  double ga = dt == LOOM_F32 ? 1e-4 : dt == LOOM_F16 ? 5e-3 : 4e-2, gr = dt == LOOM_F32 ? 1e-3 : 8 * tk_rtol(dt);
  char what[160];
  snprintf(what, sizeof what, "attention [%lld, %lld, %lld] %s scale %g %s", (long long)c->bh, (long long)c->T,
           (long long)c->D, c->causal ? "causal" : "not causal", scale, loom_dtype_name(dt));
  tk_assert_tensor(y, 3, s, dt, out, ya, yr, what);
  cr_assert_eq(loom_backward_with(y, tk_tensor(vg, 3, s, dt, dev)), LOOM_OK, "%s: %s", what, loom_last_error());
  char w2[200];
  snprintf(w2, sizeof w2, "dq of %s", what);
  tk_assert_tensor(loom_grad(q), 3, s, dt, dq, ga, gr, w2);
  snprintf(w2, sizeof w2, "dk of %s", what);
  tk_assert_tensor(loom_grad(k), 3, s, dt, dk, ga, gr, w2);
  snprintf(w2, sizeof w2, "dv of %s", what);
  tk_assert_tensor(loom_grad(v), 3, s, dt, dv, ga, gr, w2);
  loom_scope_end();
  free(vq), free(vk), free(vv), free(vg), free(out), free(dq), free(dk), free(dv);
}

/* Head dims on every kernel path (CUDA pads to 32, 64, 128 or 256; 64 and
 * 128 unpadded), lengths that end inside a tile or hold one row, causal and
 * not, the scale attribute, and the three float dtypes. */
DEVICE_TEST(transformer, attention_head_dims_tiles_and_dtypes_against_float64) {
  tk_seed(2804);
  static const attn_case cases[] = {
      {2, 1, 8, true, 0},      {1, 17, 16, false, 0},  {2, 65, 40, true, 0},   {1, 130, 64, false, 0},
      {1, 97, 128, true, 0},   {1, 33, 200, true, 0},  {1, 70, 256, false, 0}, {3, 50, 64, true, 0.3},
      {1, 40, 128, false, 0.05},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) attention_case(dev, &cases[i], LOOM_F32);
  static const loom_dtype low[2] = {LOOM_F16, LOOM_BF16};
  for (int t = 0; t < 2; t++) {
    attention_case(dev, &cases[2], low[t]);
    attention_case(dev, &cases[4], low[t]);
    attention_case(dev, &cases[6], low[t]);
  }
}

static loom_tensor *attention_causal_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_scaled_dot_product_attention(in[0], in[1], in[2], true);
}

/* Central differences of the whole op (forward through the kernels, so
 * they check backward against forward), at a padded head dim and two
 * tiles of queries on the GPU. */
DEVICE_TEST(transformer, attention_finite_differences) {
  tk_seed(2805);
  int64_t s[4] = {1, 2, 70, 40};
  loom_tensor *in[3];
  for (int k = 0; k < 3; k++) {
    in[k] = tk_rand_tensor(4, s, -1, 1, 0, LOOM_F32, dev, NULL);
    loom_set_requires_grad(in[k], true);
  }
  tk_gradcheck_sampled(attention_causal_fn, NULL, in, 3, 1e-2, 2e-3, 2e-2, 40, "causal attention [1, 2, 70, 40]");
}

/* Peak bytes the allocator handed out over one forward + backward of causal
 * attention on one head of [T, 64], beyond q, k, v themselves. */
static int64_t attention_peak_extra(loom_device dev, int64_t T) {
  loom_scope_begin();
  int64_t s[4] = {1, 1, T, 64};
  loom_tensor *in[3];
  for (int k = 0; k < 3; k++) {
    in[k] = loom_randn(4, s, LOOM_F32, dev);
    loom_set_requires_grad(in[k], true);
  }
  loom_memory_stats st = {.struct_size = sizeof st};
  cr_assert_eq(loom_memory_stats_get(dev, &st), LOOM_OK);
  int64_t base = st.allocated_bytes[LOOM_MEM_ALL].current;
  cr_assert_eq(loom_memory_reset_peaks(dev), LOOM_OK);
  loom_tensor *y = loom_scaled_dot_product_attention(in[0], in[1], in[2], true);
  cr_assert_eq(loom_backward(loom_sum_all(y)), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_memory_stats_get(dev, &st), LOOM_OK);
  loom_scope_end();
  return st.allocated_bytes[LOOM_MEM_ALL].peak - base;
}

/* O(T) per head: 4x the sequence costs about 4x the memory (a stored score
 * matrix would cost 16x), and at T = 1024 less than one f32 [T, T] matrix. */
DEVICE_TEST(transformer, attention_memory_grows_linearly) {
  int64_t m256 = attention_peak_extra(dev, 256), m1024 = attention_peak_extra(dev, 1024);
  cr_log_info("attention peak allocated beyond q, k, v: T=256 %lld B, T=1024 %lld B (ratio %.2f)", (long long)m256,
              (long long)m1024, (double)m1024 / (double)m256);
  cr_assert_gt(m256, 0);
  cr_assert_lt((double)m1024 / (double)m256, 5.0, "peak grew %lld -> %lld bytes for 4x T: not linear",
               (long long)m256, (long long)m1024);
  cr_assert_lt(m1024, 1024 * 1024 * 4, "peak %lld bytes at T = 1024 holds a [T, T] score matrix's worth",
               (long long)m1024);
}

/* ---- attention on CUDA against the CPU op ---------------------------------------------------- */

/* One forward + backward of attention on dev from the same host values;
 * out[0] = y, out[1..3] = dq, dk, dv, read back as doubles. */
static void attention_run(loom_device dev, const double *const *vals, int nd, const int64_t *s, loom_dtype dt,
                          bool causal, double **out) {
  loom_scope_begin();
  loom_tensor *q = tk_tensor(vals[0], nd, s, dt, dev), *k = tk_tensor(vals[1], nd, s, dt, dev);
  loom_tensor *v = tk_tensor(vals[2], nd, s, dt, dev);
  require_grad3(q, k, v);
  loom_tensor *y = loom_scaled_dot_product_attention(q, k, v, causal);
  cr_assert_not_null(y, "%s", loom_last_error());
  cr_assert_eq(loom_backward_with(y, tk_tensor(vals[3], nd, s, dt, dev)), LOOM_OK, "%s", loom_last_error());
  out[0] = tk_read(y);
  out[1] = tk_read(loom_grad(q));
  out[2] = tk_read(loom_grad(k));
  out[3] = tk_read(loom_grad(v));
  loom_scope_end();
}

/* GPT-2 small's training shape, B 4, H 12, T 1024, D 64: the CUDA kernels
 * against the CPU op (each computes in f32 and sums in its own order).
 * Tolerance: f32 atol 2e-5 / rtol 1e-4 for out and 1e-4 / 1e-3 for the
 * gradients (as against float64 above); f16 / bf16 one unit of bf16's last
 * place either way (2^-8 relative, both round the same f32 results once),
 * plus the same again for the gradients' f32 statistics over rounded
 * outputs.
 * And the backward twice on the GPU: the same bits (no atomics). */
static void gpt2_cuda_vs_cpu(loom_dtype dt, bool causal) {
  tk_require_device(loom_cuda(0));
  tk_seed(2806);
  int64_t s[4] = {4, 12, 1024, 64}, n = 4 * 12 * 1024 * 64;
  double *v[4];
  for (int k = 0; k < 4; k++) v[k] = tk_rand_vals(n, -1, 1, 0, dt);
  double *cpu[4], *gpu[4], *again[4];
  attention_run(loom_cpu(), (const double *const *)v, 4, s, dt, causal, cpu);
  attention_run(loom_cuda(0), (const double *const *)v, 4, s, dt, causal, gpu);
  attention_run(loom_cuda(0), (const double *const *)v, 4, s, dt, causal, again);
  static const char *names[4] = {"out", "dq", "dk", "dv"};
  for (int k = 0; k < 4; k++) {
    double atol = dt == LOOM_F32 ? (k ? 1e-4 : 2e-5) : (k ? 3e-2 : 1e-2);
    double rtol = dt == LOOM_F32 ? (k ? 1e-3 : 1e-4) : (k ? 2e-2 : 1e-2);
    char what[120];
    snprintf(what, sizeof what, "CUDA %s against the CPU op, [4, 12, 1024, 64] %s %s", names[k],
             causal ? "causal" : "not causal", loom_dtype_name(dt));
    tk_assert_close(gpu[k], cpu[k], n, atol, rtol, what);
    for (int64_t i = 0; i < n; i++)
      cr_assert(gpu[k][i] == again[k][i] || (gpu[k][i] != gpu[k][i] && again[k][i] != again[k][i]),
                "CUDA %s[%lld] differs between two identical runs: %.9g, %.9g", names[k], (long long)i, gpu[k][i],
                again[k][i]);
    free(cpu[k]), free(gpu[k]), free(again[k]), free(v[k]);
  }
}

Test(transformer_cuda, attention_gpt2_training_shape_matches_cpu_f32, .fini = tk_teardown) {
  gpt2_cuda_vs_cpu(LOOM_F32, true);
}
Test(transformer_cuda, attention_gpt2_training_shape_matches_cpu_not_causal, .fini = tk_teardown) {
  gpt2_cuda_vs_cpu(LOOM_F32, false);
}
Test(transformer_cuda, attention_gpt2_training_shape_matches_cpu_bf16, .fini = tk_teardown) {
  gpt2_cuda_vs_cpu(LOOM_BF16, true);
}
Test(transformer_cuda, attention_gpt2_training_shape_matches_cpu_f16, .fini = tk_teardown) {
  gpt2_cuda_vs_cpu(LOOM_F16, true);
}

/* Head dims above 256: the CUDA kernels refuse them with an error naming
 * the limit (the CPU op takes any). */
Test(transformer_cuda, attention_head_dim_above_256_is_an_error, .fini = tk_teardown) {
  tk_require_device(loom_cuda(0));
  loom_scope_begin();
  int64_t s[4] = {1, 1, 8, 300};
  loom_tensor *q = loom_randn(4, s, LOOM_F32, loom_cuda(0));
  tk_assert_fails(loom_scaled_dot_product_attention(q, q, q, true), LOOM_ERR_UNSUPPORTED, "head dim 300", "256");
  loom_scope_end();
}

/* ---- the fused projection + cross-entropy over several chunks ------------------------------ */

/* GPT-2's vocabulary: 50257 classes, so 200 rows take three chunks of
 * logits on the CPU (83 rows each) and 700 rows three on CUDA (333 rows
 * each: linear_ce_cuda.c); loss and gradients equal the unfused matmul +
 * cross_entropy's. */
DEVICE_TEST(transformer, linear_cross_entropy_chunks_match_unfused) {
  tk_seed(2802);
  int64_t N = dev.kind == LOOM_CUDA ? 700 : 200, E = 32, V = 50257, sx[2] = {N, E}, sw[2] = {V, E};
  double *lab = malloc((size_t)N * sizeof *lab);
  for (int64_t i = 0; i < N; i++) lab[i] = (double)((i * 7919) % V);
  loom_tensor *labels = tk_tensor(lab, 1, &N, LOOM_I64, dev);
  loom_tensor *x = tk_rand_tensor(2, sx, -1, 1, 0, LOOM_F32, dev, NULL), *w = tk_rand_tensor(2, sw, -1, 1, 0, LOOM_F32, dev, NULL);
  loom_tensor *x2 = loom_clone(x), *w2 = loom_clone(w);
  loom_tensor *leaves[4] = {x, w, x2, w2};
  for (int k = 0; k < 4; k++) loom_set_requires_grad(leaves[k], true);
  loom_tensor *fused = loom_linear_cross_entropy(x, w, labels);
  loom_tensor *plain = loom_cross_entropy(loom_matmul_ex(x2, w2, false, true), labels);
  double a, b;
  cr_assert_eq(loom_item(fused, &a), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_item(plain, &b), LOOM_OK, "%s", loom_last_error());
  tk_assert_close(&a, &b, 1, 1e-5, 1e-5, "fused loss against matmul + cross_entropy");
  cr_assert_eq(loom_backward(fused), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_backward(plain), LOOM_OK, "%s", loom_last_error());
  double *g2 = tk_read(loom_grad(x2));
  tk_assert_tensor(loom_grad(x), 2, sx, LOOM_F32, g2, 1e-6, 1e-4, "dx fused against unfused");
  free(g2);
  g2 = tk_read(loom_grad(w2));
  tk_assert_tensor(loom_grad(w), 2, sw, LOOM_F32, g2, 1e-7, 1e-4, "dw fused against unfused");
  free(g2);
  free(lab);
}

/* f16/bf16 x and w (the head of a GPT under a mixed policy): logits summed
 * in f32, loss in f32, dx and dw in the inputs' dtype, against float64 from
 * the same rounded inputs. V = 20000 and N = 1000 take 5 row chunks on the
 * CPU and 2 on CUDA, where dw is summed over the chunks in f32. The bounds:
 * the loss to f32 rounding; each gradient element to two roundings of the
 * dtype (u = 2^-8 for bf16, 2^-11 for f16) of its own value plus one of
 * the magnitude of the sum it is made of (scale = Σ|dlogit|·|w| or
 * Σ|dlogit|·|x|), since CUDA rounds the softmax gradient to the dtype
 * before the two GEMMs, as torch.autocast's bf16 lm_head does; in f16 also
 * one subnormal step (2^-24), where small dw elements land. Unscaled, most
 * of these dlogits (about 1/(V·N) = 5e-8) are f16 subnormals: CUDA scales
 * them by a power of two first, and this bound holds only because it does
 * (the GPU run of 2026-11-28, before that: dx 2.8e-6 off, bound 1.5e-6). */
static void lce_16bit(loom_device dev, loom_dtype dt) {
  tk_seed(2803);
  int64_t N = 1000, E = 16, V = 20000, sx[2] = {N, E}, sw[2] = {V, E};
  double *xv, *wv, *lab = malloc((size_t)N * sizeof *lab);
  for (int64_t i = 0; i < N; i++) lab[i] = (double)((i * 7919) % V);
  loom_tensor *x = tk_rand_tensor(2, sx, -2, 2, 0, dt, dev, &xv), *w = tk_rand_tensor(2, sw, -2, 2, 0, dt, dev, &wv);
  loom_set_requires_grad(x, true);
  loom_set_requires_grad(w, true);
  loom_tensor *loss = loom_linear_cross_entropy(x, w, tk_tensor(lab, 1, &N, LOOM_I64, dev));
  cr_assert_not_null(loss, "%s", loom_last_error());
  cr_assert_eq(loom_tensor_dtype(loss), LOOM_F32);
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_tensor_dtype(loom_grad(x)), dt, "dx in the inputs' dtype");
  cr_assert_eq(loom_tensor_dtype(loom_grad(w)), dt, "dw in the inputs' dtype");
  /* float64: per row, softmax p; dlogit = (p - onehot) / N. */
  double *dx = calloc((size_t)(N * E), sizeof *dx), *sdx = calloc((size_t)(N * E), sizeof *sdx);
  double *dw = calloc((size_t)(V * E), sizeof *dw), *sdw = calloc((size_t)(V * E), sizeof *sdw);
  double *z = malloc((size_t)V * sizeof *z), total = 0;
  for (int64_t i = 0; i < N; i++) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < V; j++) {
      double a = 0;
      for (int64_t k = 0; k < E; k++) a += xv[i * E + k] * wv[j * E + k];
      z[j] = a;
      m = fmax(m, a);
    }
    for (int64_t j = 0; j < V; j++) s += exp(z[j] - m);
    int64_t l = (int64_t)lab[i];
    total += m + log(s) - z[l];
    for (int64_t j = 0; j < V; j++) {
      double g = (exp(z[j] - m) / s - (j == l)) / (double)N, ag = fabs(g);
      for (int64_t k = 0; k < E; k++) {
        dx[i * E + k] += g * wv[j * E + k];
        sdx[i * E + k] += ag * fabs(wv[j * E + k]);
        dw[j * E + k] += g * xv[i * E + k];
        sdw[j * E + k] += ag * fabs(xv[i * E + k]);
      }
    }
  }
  double got, want = total / (double)N;
  cr_assert_eq(loom_item(loss, &got), LOOM_OK, "%s", loom_last_error());
  cr_assert(fabs(got - want) <= 1e-5 * fabs(want), "%s loss %.9g, float64 %.9g", loom_dtype_name(dt), got, want);
  double u = dt == LOOM_BF16 ? 0x1p-8 : 0x1p-11, sub = dt == LOOM_F16 ? 0x1p-24 : 0; /* f16's subnormal step */
  const struct { const char *name; loom_tensor *g; const double *ref, *scale; int64_t n; } gr[2] = {
      {"dx", loom_grad(x), dx, sdx, N * E}, {"dw", loom_grad(w), dw, sdw, V * E}};
  for (int q = 0; q < 2; q++) {
    double *g = tk_read(gr[q].g);
    for (int64_t i = 0; i < gr[q].n; i++) {
      double tol = 2 * u * fabs(gr[q].ref[i]) + u * gr[q].scale[i] + sub;
      cr_assert(fabs(g[i] - gr[q].ref[i]) <= tol, "%s %s element %lld: %.9g, float64 %.9g (|diff| %.3g > %.3g)",
                loom_dtype_name(dt), gr[q].name, (long long)i, g[i], gr[q].ref[i], fabs(g[i] - gr[q].ref[i]), tol);
    }
    free(g);
  }
  free(dx), free(sdx), free(dw), free(sdw), free(z), free(lab), free(xv), free(wv);
}

DEVICE_TEST(transformer, linear_cross_entropy_bf16_against_float64) { lce_16bit(dev, LOOM_BF16); }
DEVICE_TEST(transformer, linear_cross_entropy_f16_against_float64) { lce_16bit(dev, LOOM_F16); }

/* ---- determinism ------------------------------------------------------------------------- */

/* dweight of an embedding over n indices with many repeats (V = 50), in
 * dtype dt, and layer_norm's dweight / dbias over 1000 rows: the
 * reductions across rows (scatter-add into one row of the table, the sums
 * of layer_norm_backward over rows) in f32. */
static void reductions(loom_device dev, loom_dtype dt, double **out) {
  loom_scope_begin();
  tk_seed(2804);
  int64_t V = 50, D = 96, n = 4096, sg[2] = {n, D}, sx[2] = {1000, 96}, d = 96;
  double *ind = malloc((size_t)n * sizeof *ind);
  for (int64_t i = 0; i < n; i++) ind[i] = (double)((i * 7 + i / 13) % V);
  loom_op_args a = {.in = {tk_rand_tensor(2, sg, -1, 1, 0, dt, dev, NULL), tk_tensor(ind, 1, &n, LOOM_I32, dev)},
                    .n_in = 2};
  a.i[0] = V;
  free(ind);
  loom_tensor *dw = loom_op_run(LOOM_OP_EMBEDDING_BACKWARD, &a);
  cr_assert_not_null(dw, "%s", loom_last_error());
  out[0] = tk_read(dw);
  loom_tensor *x = tk_rand_tensor(2, sx, -2, 2, 0, dt, dev, NULL), *w = tk_rand_tensor(1, &d, 0.5, 1.5, 0, dt, dev, NULL);
  loom_tensor *b = tk_rand_tensor(1, &d, -1, 1, 0, dt, dev, NULL);
  loom_set_requires_grad(w, true);
  loom_set_requires_grad(b, true);
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul(loom_layer_norm(x, w, b, 1e-5), x))), LOOM_OK, "%s",
               loom_last_error());
  out[1] = tk_read(loom_grad(w));
  out[2] = tk_read(loom_grad(b));
  loom_scope_end();
}

/* Twice the same inputs, the same bits: no atomics in the sums across rows
 * (embedding.cu sorts the indices, layer_norm.cu adds fixed blocks of rows
 * in order), in f32 and bf16; and the embedding's dweight against float64. */
DEVICE_TEST(transformer, row_reductions_are_reproducible) {
  static const int64_t sizes[3] = {50 * 96, 96, 96};
  static const char *names[3] = {"embedding dweight", "layer_norm dweight", "layer_norm dbias"};
  loom_dtype dts[2] = {LOOM_F32, LOOM_BF16};
  for (int t = 0; t < 2; t++) {
    double *one[3], *two[3];
    reductions(dev, dts[t], one);
    reductions(dev, dts[t], two);
    for (int k = 0; k < 3; k++) {
      for (int64_t i = 0; i < sizes[k]; i++)
        cr_assert(one[k][i] == two[k][i], "%s %s[%lld]: %.9g, then %.9g", loom_dtype_name(dts[t]), names[k],
                  (long long)i, one[k][i], two[k][i]);
      if (k) free(one[k]);
      free(two[k]);
    }
    /* The scatter-add against float64 of the same rounded gradients. */
    tk_seed(2804);
    int64_t V = 50, D = 96, n = 4096;
    double *g = tk_rand_vals(n * D, -1, 1, 0, dts[t]), *want = calloc((size_t)(V * D), sizeof *want);
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < D; j++) want[((i * 7 + i / 13) % V) * D + j] += g[i * D + j];
    /* bf16: the f32 sum rounded once to 8 bits of mantissa. */
    tk_assert_close(one[0], want, V * D, dts[t] == LOOM_F32 ? 1e-4 : 1e-2, tk_rtol(dts[t]),
                    "embedding dweight against float64");
    free(one[0]);
    free(g);
    free(want);
  }
}

/* ---- errors ------------------------------------------------------------------------------ */

/* The status of a call that should fail over a bad index or label: the CPU
 * kernels fail the call; the CUDA ones find it on the GPU and report it at
 * the next call that waits for the GPU (device/deferred.c). */
static loom_status bad_value_status(loom_device dev, loom_tensor *t) {
  if (!t) return loom_last_status();
  if (dev.kind == LOOM_CUDA) return loom_device_synchronize(dev);
  return LOOM_OK;
}

DEVICE_TEST(transformer, bad_indices_and_labels_are_errors) {
  int64_t sw[2] = {4, 3}, s3 = 3, s4 = 4, sg[2] = {3, 3};
  loom_tensor *w = loom_randn(2, sw, LOOM_F32, dev);
  double bad[3] = {0, 4, 1}, good[3] = {0, 3, 1}, lab[4] = {0, 1, 7, 2};
  tk_assert_error(bad_value_status(dev, loom_embedding(tk_tensor(bad, 1, &s3, LOOM_I64, dev), w)), LOOM_ERR_INVALID_ARG,
                  "embedding: index 4 at position 1 is outside [0, 4)");
  /* Reported once: the next good lookup works. */
  loom_tensor *y = loom_embedding(tk_tensor(good, 1, &s3, LOOM_I32, dev), w);
  cr_assert_not_null(y, "%s", loom_last_error());
  double *yv = tk_read(y), *wv = tk_read(w);
  cr_assert(yv[3] == wv[9] && yv[8] == wv[5], "rows 3 and 1 of the table");
  free(yv), free(wv);
  loom_op_args a = {.in = {loom_randn(2, sg, LOOM_F32, dev), tk_tensor(bad, 1, &s3, LOOM_U8, dev)}, .n_in = 2};
  a.i[0] = 4;
  tk_assert_error(bad_value_status(dev, loom_op_run(LOOM_OP_EMBEDDING_BACKWARD, &a)), LOOM_ERR_INVALID_ARG,
                  "embedding backward: index 4 at position 1");
  loom_tensor *x = loom_randn(2, (int64_t[]){4, 3}, LOOM_F32, dev);
  tk_assert_error(bad_value_status(dev, loom_linear_cross_entropy(x, w, tk_tensor(lab, 1, &s4, LOOM_I64, dev))),
                  LOOM_ERR_INVALID_ARG, "linear_cross_entropy: label 7 at row 2 is outside [0, 4)");
  lab[2] = 3;
  double loss = 0;
  cr_assert_eq(loom_item(loom_linear_cross_entropy(x, w, tk_tensor(lab, 1, &s4, LOOM_I64, dev)), &loss), LOOM_OK, "%s",
               loom_last_error());
  cr_assert(isfinite(loss));
}


CPU_TEST(transformer, malformed_inputs_are_errors) {
  int64_t sw[2] = {4, 3}, s1 = 3, s3[3] = {2, 3, 5}, s0 = 0;
  loom_tensor *w = loom_randn(2, sw, LOOM_F32, CPU);
  double bad[3] = {0, 4, 1};
  tk_assert_fails(loom_embedding(tk_tensor(bad, 1, &s1, LOOM_I64, CPU), w), LOOM_ERR_INVALID_ARG,
                  "embedding: index 4 at position 1 is outside [0, 4)");
  tk_assert_fails(loom_embedding(tk_tensor(bad, 1, &s1, LOOM_I64, CPU), loom_randn(1, &s1, LOOM_F32, CPU)),
                  LOOM_ERR_SHAPE, "weight must be [num_embeddings, dim]");
  loom_tensor *x = loom_randn(3, s3, LOOM_F32, CPU);
  tk_assert_fails(loom_layer_norm(x, loom_randn(1, &s1, LOOM_F32, CPU), NULL, 1e-5), LOOM_ERR_SHAPE, "must be [5]");
  tk_assert_fails(loom_layer_norm(x, NULL, NULL, -1.0), LOOM_ERR_INVALID_ARG, "eps must be >= 0");
  tk_assert_fails(loom_scaled_dot_product_attention(x, x, loom_randn(1, &s1, LOOM_F32, CPU), true), LOOM_ERR_SHAPE,
                  "must have one shape");
  loom_clear_error(); /* else a NULL input passes the previous error on */
  tk_assert_fails(loom_scaled_dot_product_attention(loom_randn(1, &s1, LOOM_F32, CPU), NULL, NULL, true),
                  LOOM_ERR_NULL_INPUT, "attention");
  tk_assert_fails(loom_scaled_dot_product_attention(x, loom_cast(x, LOOM_BF16), x, true), LOOM_ERR_DTYPE, "attention");
  loom_tensor *x2 = loom_randn(2, sw, LOOM_F32, CPU);
  loom_clear_error();
  tk_assert_fails(loom_linear_cross_entropy(loom_cast(x2, LOOM_BF16), loom_cast(w, LOOM_BF16), NULL),
                  LOOM_ERR_NULL_INPUT, "linear_cross_entropy");
  double lab[4] = {0, 1, 2, 1};
  int64_t s4 = 4;
  tk_assert_fails(loom_linear_cross_entropy(loom_cast(x2, LOOM_BF16), w, tk_tensor(lab, 1, &s4, LOOM_I64, CPU)),
                  LOOM_ERR_DTYPE, "one float dtype");
  tk_assert_fails(loom_softmax(loom_zeros(0, NULL, LOOM_F32, CPU), 0), LOOM_ERR_SHAPE, "0-d");
  tk_assert_fails(loom_gelu(tk_tensor(bad, 1, &s1, LOOM_I32, CPU)), LOOM_ERR_DTYPE, "gelu");
  (void)s0;
}

/* ---- thread-count independence ------------------------------------------------------------ */

/* Attention, layer norm and the fused cross-entropy, forward and backward,
 * with 1 and with 2 threads: the kernels give every output one writer and
 * sum partials in a fixed order, so the bits must match. */
static void transformer_results(int threads, double **out) {
  loom_set_num_threads(threads);
  loom_scope_begin();
  tk_seed(2803);
  int64_t sa[4] = {2, 2, 200, 64}, sl[2] = {300, 96}, d = 96, sx[2] = {300, 96}, sw[2] = {1000, 96}, n = 300;
  loom_tensor *in[8] = {
      tk_rand_tensor(4, sa, -1, 1, 0, LOOM_F32, CPU, NULL), tk_rand_tensor(4, sa, -1, 1, 0, LOOM_F32, CPU, NULL),
      tk_rand_tensor(4, sa, -1, 1, 0, LOOM_F32, CPU, NULL), tk_rand_tensor(2, sl, -2, 2, 0, LOOM_F32, CPU, NULL),
      tk_rand_tensor(1, &d, 0.5, 1.5, 0, LOOM_F32, CPU, NULL), tk_rand_tensor(1, &d, -1, 1, 0, LOOM_F32, CPU, NULL),
      tk_rand_tensor(2, sx, -1, 1, 0, LOOM_F32, CPU, NULL), tk_rand_tensor(2, sw, -1, 1, 0, LOOM_F32, CPU, NULL)};
  for (int k = 0; k < 8; k++) loom_set_requires_grad(in[k], true);
  double *lab = malloc((size_t)n * sizeof *lab);
  for (int64_t i = 0; i < n; i++) lab[i] = (double)((i * 37) % 1000);
  loom_tensor *loss = loom_add(
      loom_add(loom_sum_all(loom_mul(loom_scaled_dot_product_attention(in[0], in[1], in[2], true), in[0])),
               loom_sum_all(loom_mul(loom_layer_norm(in[3], in[4], in[5], 1e-5), in[3]))),
      loom_linear_cross_entropy(in[6], in[7], tk_tensor(lab, 1, &n, LOOM_I64, CPU)));
  free(lab);
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
  out[0] = tk_read(loss);
  for (int k = 0; k < 8; k++) out[1 + k] = tk_read(loom_grad(in[k]));
  loom_scope_end();
  loom_set_num_threads(0);
}

CPU_TEST(transformer, results_do_not_depend_on_thread_count) {
  static const int64_t sizes[9] = {1, 51200, 51200, 51200, 28800, 96, 96, 28800, 96000};
  static const char *names[9] = {"loss", "dq", "dk", "dv", "layer_norm dx", "dweight", "dbias", "dx", "dw"};
  double *one[9], *two[9];
  transformer_results(1, one);
  transformer_results(2, two);
  for (int k = 0; k < 9; k++) {
    for (int64_t i = 0; i < sizes[k]; i++)
      cr_assert(one[k][i] == two[k][i], "%s[%lld]: %.9g with 1 thread, %.9g with 2", names[k], (long long)i,
                one[k][i], two[k][i]);
    free(one[k]);
    free(two[k]);
  }
}
