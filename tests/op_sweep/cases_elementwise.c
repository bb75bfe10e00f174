/* cases_elementwise.c — the op sweep's cases for the elementwise ops:
 * binary (with broadcasting), unary and scalar ops, relu_backward, eq. All
 * on [N, C, H, W] inputs (sw_nchw), so every layout applies. */
#include <math.h>

#include "op_sweep/sweep.h"
#include "ops/op.h"

/* ---- binary ---------------------------------------------------------------------- */

typedef struct bin_def {
  loom_tensor *(*fn)(loom_tensor *, loom_tensor *);
  double (*ref)(double, double);
  double b_away; /* keep b away from 0 (divisors) */
} bin_def;
static double r_add(double a, double b) { return a + b; }
static double r_sub(double a, double b) { return a - b; }
static double r_mul(double a, double b) { return a * b; }
static double r_div(double a, double b) { return a / b; }

static loom_tensor *bin_fn(loom_tensor **in, void *ctx) { return ((const bin_def *)ctx)->fn(in[0], in[1]); }

/* a [N, C, H, W] against b [1, 1, H, W] (b broadcast over N and C: its
 * gradient is summed back). */
static void binary(const sw_config *c, const bin_def *d) {
  const int64_t *sa = sw_nchw[c->shape];
  int64_t sb[4] = {1, 1, sa[2], sa[3]}, n = sw_numel(4, sa);
  double *va, *vb, *want = sw_alloc(n);
  loom_tensor *a = sw_input(c, 4, sa, -2, 2, 0, &va), *b = sw_input(c, 4, sb, -2, 2, d->b_away, &vb);
  for (int64_t i = 0; i < n; i++) want[i] = d->ref(va[i], vb[tk_bcast_index(i, 4, sa, 4, sb)]);
  loom_tensor *in[2] = {a, b};
  if (sw_expect(c, d->fn(a, b), 4, sa, want, 1, "a op b, b [1, 1, H, W] broadcast"))
    sw_gradcheck(c, bin_fn, (void *)d, in, 2, 3u, 1e-2, "gradient");
  free(want);
  free(va);
  free(vb);
}

void sw_case_add(const sw_config *c) { binary(c, &(bin_def){loom_add, r_add, 0}); }
void sw_case_sub(const sw_config *c) { binary(c, &(bin_def){loom_sub, r_sub, 0}); }
void sw_case_mul(const sw_config *c) { binary(c, &(bin_def){loom_mul, r_mul, 0}); }
void sw_case_div(const sw_config *c) { binary(c, &(bin_def){loom_div, r_div, 0.5}); }

/* ---- unary and scalar ---------------------------------------------------------------- */

typedef struct un_def {
  loom_tensor *(*fn)(loom_tensor *);           /* unary, or */
  loom_tensor *(*fn_s)(loom_tensor *, double); /* with a scalar s */
  double s;
  double (*ref)(double, double); /* ref(x, s) */
  double lo, hi, away;           /* input domain */
} un_def;
static double r_add_s(double x, double s) { return x + s; }
static double r_mul_s(double x, double s) { return x * s; }
static double r_rsub_s(double x, double s) { return s - x; }
static double r_rdiv_s(double x, double s) { return s / x; }
static double r_pow_s(double x, double s) { return pow(x, s); }
static double r_neg(double x, double s) { (void)s; return -x; }
static double r_exp(double x, double s) { (void)s; return exp(x); }
static double r_log(double x, double s) { (void)s; return log(x); }
static double r_sqrt(double x, double s) { (void)s; return sqrt(x); }
static double r_relu(double x, double s) { (void)s; return x > 0 ? x : 0; }

static loom_tensor *un_fn(loom_tensor **in, void *ctx) {
  const un_def *d = ctx;
  return d->fn ? d->fn(in[0]) : d->fn_s(in[0], d->s);
}

static void unary(const sw_config *c, const un_def *d) {
  const int64_t *s = sw_nchw[c->shape];
  int64_t n = sw_numel(4, s);
  double *v, *want = sw_alloc(n);
  loom_tensor *in[1] = {sw_input(c, 4, s, d->lo, d->hi, d->away, &v)};
  for (int64_t i = 0; i < n; i++) want[i] = d->ref(v[i], d->s);
  if (sw_expect(c, un_fn(in, (void *)d), 4, s, want, 1, "forward"))
    sw_gradcheck(c, un_fn, (void *)d, in, 1, 1u, 1e-2, "gradient");
  free(want);
  free(v);
}

void sw_case_add_scalar(const sw_config *c) { unary(c, &(un_def){NULL, loom_add_scalar, 0.75, r_add_s, -2, 2, 0}); }
void sw_case_mul_scalar(const sw_config *c) { unary(c, &(un_def){NULL, loom_mul_scalar, -1.5, r_mul_s, -2, 2, 0}); }
void sw_case_rsub_scalar(const sw_config *c) { unary(c, &(un_def){NULL, loom_rsub_scalar, 2.0, r_rsub_s, -2, 2, 0}); }
void sw_case_rdiv_scalar(const sw_config *c) { unary(c, &(un_def){NULL, loom_rdiv_scalar, 2.0, r_rdiv_s, -2, 2, 0.5}); }
void sw_case_pow_scalar(const sw_config *c) { unary(c, &(un_def){NULL, loom_pow_scalar, 2.5, r_pow_s, 0.5, 2, 0}); }
void sw_case_neg(const sw_config *c) { unary(c, &(un_def){loom_neg, NULL, 0, r_neg, -2, 2, 0}); }
void sw_case_exp(const sw_config *c) { unary(c, &(un_def){loom_exp, NULL, 0, r_exp, -2, 2, 0}); }
void sw_case_log(const sw_config *c) { unary(c, &(un_def){loom_log, NULL, 0, r_log, 0.5, 3, 0}); }
void sw_case_sqrt(const sw_config *c) { unary(c, &(un_def){loom_sqrt, NULL, 0, r_sqrt, 0.5, 3, 0}); }
/* Kept 0.1 away from the kink: finite differences of step 1e-2 do not cross it. */
void sw_case_relu(const sw_config *c) { unary(c, &(un_def){loom_relu, NULL, 0, r_relu, -2, 2, 0.1}); }

/* No public entry point: loom_op_run with (dy, y) -> dy * (y > 0), both in
 * the config's layout. */
void sw_case_relu_backward(const sw_config *c) {
  const int64_t *s = sw_nchw[c->shape];
  int64_t n = sw_numel(4, s);
  double *vg, *vy, *want = sw_alloc(n);
  loom_tensor *gy = sw_input(c, 4, s, -2, 2, 0, &vg), *y = sw_input(c, 4, s, -1, 1, 0.1, &vy);
  for (int64_t i = 0; i < n; i++) want[i] = vy[i] > 0 ? vg[i] : 0;
  loom_op_args a = {.in = {gy, y}, .n_in = 2};
  sw_expect(c, loom_op_run(LOOM_OP_RELU_BACKWARD, &a), 4, s, want, 1, "relu_backward(dy, y)");
  free(want);
  free(vg);
  free(vy);
}

/* a == b as 0 / 1 in a's dtype; every other element of b equals a's (both
 * in the config's layout). */
void sw_case_eq(const sw_config *c) {
  const int64_t *s = sw_nchw[c->shape];
  int64_t n = sw_numel(4, s);
  double *va, *vb = sw_alloc(n), *want = sw_alloc(n);
  loom_tensor *a = sw_input(c, 4, s, -2, 2, 0, &va);
  for (int64_t i = 0; i < n; i++) {
    vb[i] = i % 2 ? tk_round(va[i] + 1.0, c->dtype) : va[i];
    want[i] = i % 2 ? 0.0 : 1.0;
  }
  loom_tensor *b = sw_input_vals(c, 4, s, c->dtype, vb);
  if (sw_expect_as(c, loom_eq(a, b), 4, s, c->dtype, want, 0, 0, "eq") && c->shape == SW_SMALL) {
    /* Float inputs only (its result is in their dtype). */
    loom_tensor *ai = loom_cast(a, LOOM_I32);
    sw_expect_error(loom_eq(ai, ai), LOOM_ERR_DTYPE, "f32, f16 or bf16", "eq of i32 tensors");
  }
  free(want);
  free(va);
  free(vb);
}
