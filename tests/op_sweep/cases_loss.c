/* cases_loss.c — the op sweep's cases for log_softmax, its backward (run
 * directly, through loom_op_run) and the fused cross-entropy. */
#include <math.h>

#include "op_sweep/sweep.h"
#include "ops/op.h"

/* {rows, classes}. EMPTY: no classes (log_softmax) / no rows (cross-
 * entropy); BIG: rows of 4099 classes, more than the kernels' on-stack row. */
static const int64_t LS[SW_NSHAPES][2] = {
    [SW_SMALL] = {3, 5},  [SW_EMPTY] = {3, 0},    [SW_ONE] = {1, 1}, [SW_ODD] = {7, 127},
    [SW_BATCH1] = {1, 5}, [SW_BIG] = {256, 4099}, [SW_WIDE] = {2, 2048},
};
static const int64_t CE[SW_NSHAPES][2] = {
    [SW_SMALL] = {4, 5},  [SW_EMPTY] = {0, 5},    [SW_ONE] = {1, 1}, [SW_ODD] = {7, 127},
    [SW_BATCH1] = {1, 5}, [SW_BIG] = {256, 4099}, [SW_WIDE] = {2, 2048},
};

/* Log-softmax of v [R, C] along dim (0 or 1) into out (sweep.h). */
void sw_ref_log_softmax(const double *v, int64_t R, int64_t C, int dim, double *out) {
  int64_t lines = dim ? R : C, len = dim ? C : R, step = dim ? 1 : C, next = dim ? C : 1;
  for (int64_t l = 0; l < lines; l++) {
    const double *p = v + l * next;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < len; j++) m = fmax(m, p[j * step]);
    for (int64_t j = 0; j < len; j++) s += exp(p[j * step] - m);
    for (int64_t j = 0; j < len; j++) out[l * next + j * step] = p[j * step] - m - log(s);
  }
}

static loom_tensor *log_softmax_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_log_softmax(in[0], 1);
}

/* Along dim 1 (the last: the kernel's own) with its gradient, and along
 * dim 0 (moved last and back by the public function). */
void sw_case_log_softmax(const sw_config *c) {
  const int64_t *s = LS[c->shape];
  double *v, *want = sw_alloc(s[0] * s[1]);
  loom_tensor *in[1] = {sw_input(c, 2, s, -2, 2, 0, &v)};
  sw_ref_log_softmax(v, s[0], s[1], 1, want);
  if (sw_expect(c, log_softmax_fn(in, NULL), 2, s, want, 1, "log_softmax over dim 1")) {
    sw_ref_log_softmax(v, s[0], s[1], 0, want);
    sw_expect(c, loom_log_softmax(in[0], 0), 2, s, want, 1, "log_softmax over dim 0");
    sw_gradcheck(c, log_softmax_fn, NULL, in, 1, 1u, 1e-2, "gradient");
  }
  free(want);
  free(v);
}

/* No public entry point: loom_op_run with (dy, y), i[0] = dim ->
 * dy - exp(y) * sum(dy), both inputs in the config's layout. */
void sw_case_log_softmax_backward(const sw_config *c) {
  const int64_t *s = LS[c->shape];
  int64_t R = s[0], C = s[1], n = R * C;
  double *vg, *vx = tk_rand_vals(n, -2, 2, 0, c->dtype), *yv = sw_alloc(n), *want = sw_alloc(n);
  loom_tensor *gy = sw_input(c, 2, s, -1, 1, 0, &vg);
  sw_ref_log_softmax(vx, R, C, 1, yv);
  for (int64_t i = 0; i < n; i++) yv[i] = tk_round(yv[i], c->dtype); /* what the kernel reads */
  loom_tensor *y = sw_input_vals(c, 2, s, c->dtype, yv);
  for (int64_t i = 0; i < R; i++) {
    double sg = 0;
    for (int64_t j = 0; j < C; j++) sg += vg[i * C + j];
    for (int64_t j = 0; j < C; j++) want[i * C + j] = vg[i * C + j] - exp(yv[i * C + j]) * sg;
  }
  loom_op_args a = {.in = {gy, y}, .n_in = 2};
  a.i[0] = 1;
  sw_expect(c, loom_op_run(LOOM_OP_LOG_SOFTMAX_BACKWARD, &a), 2, s, want, (double)C, "log_softmax_backward(dy, y)");
  free(want);
  free(yv);
  free(vg);
  free(vx);
}

static loom_tensor *ce_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_cross_entropy(in[0], in[1]);
}

typedef struct ce_data {
  loom_tensor *in[2];
  double *v, *lab;
} ce_data;

/* Logits in the config's dtype and layout; i64 labels in its layout too
 * (their padding holds an invalid label: reading it is an error). */
static void ce_make(const sw_config *c, ce_data *d) {
  const int64_t *s = CE[c->shape];
  d->in[0] = sw_input(c, 2, s, -2, 2, 0, &d->v);
  d->lab = sw_alloc(s[0]);
  for (int64_t i = 0; i < s[0]; i++) d->lab[i] = (double)((i * 3 + 1) % s[1]);
  d->in[1] = sw_input_vals(c, 1, s, LOOM_I64, d->lab);
}

static void ce_free(ce_data *d) {
  free(d->v);
  free(d->lab);
}

/* Runs CROSS_ENTROPY_BACKWARD. */
void sw_case_cross_entropy_backward(const sw_config *c) {
  ce_data d;
  ce_make(c, &d);
  sw_gradcheck(c, ce_fn, NULL, d.in, 2, 1u, 1e-2, "gradient (cross_entropy_backward)");
  ce_free(&d);
}

/* The mean over rows of -log_softmax(x)[label], in f32 whatever the logits'
 * dtype (a 0-d f32 result); over no rows it is NaN (a mean of nothing, as
 * PyTorch); logits without classes are refused. */
void sw_case_cross_entropy(const sw_config *c) {
  const int64_t *s = CE[c->shape];
  ce_data d;
  ce_make(c, &d);
  double *ls = sw_alloc(s[0] * s[1]), want = 0;
  sw_ref_log_softmax(d.v, s[0], s[1], 1, ls);
  for (int64_t i = 0; i < s[0]; i++) want -= ls[i * s[1] + (int64_t)d.lab[i]] / (double)s[0];
  if (s[0] == 0) want = NAN;
  free(ls);
  bool ok = sw_expect_as(c, ce_fn(d.in, NULL), 0, NULL, LOOM_F32, &want, sw_atol(LOOM_F32, 1), sw_rtol(LOOM_F32),
                         "cross_entropy");
  /* The other label dtypes it takes (u8 where its padding, 255, is no class). */
  for (int k = 0; ok && k < 2; k++) {
    loom_dtype dt = k ? LOOM_U8 : LOOM_I32;
    if (dt == LOOM_U8 && s[1] > 255) continue;
    char what[48];
    snprintf(what, sizeof what, "cross_entropy with %s labels", loom_dtype_name(dt));
    loom_tensor *lab = sw_input_vals(c, 1, s, dt, d.lab);
    ok = sw_expect_as(c, loom_cross_entropy(d.in[0], lab), 0, NULL, LOOM_F32, &want, sw_atol(LOOM_F32, 1),
                      sw_rtol(LOOM_F32), what);
  }
  if (ok && c->shape == SW_EMPTY) {
    int64_t sx[2] = {3, 0}, sl[1] = {3};
    double *vx, lab[3] = {0, 0, 0};
    loom_tensor *x = sw_input(c, 2, sx, -1, 1, 0, &vx);
    sw_expect_error(loom_cross_entropy(x, sw_input_vals(c, 1, sl, LOOM_I64, lab)), LOOM_ERR_SHAPE, "0 classes",
                    "cross_entropy of logits without classes");
    free(vx);
  }
  ce_free(&d);
  if (ok) sw_case_cross_entropy_backward(c);
}
