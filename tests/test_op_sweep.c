/* test_op_sweep.c — every op of the op table (LOOM_OP_COUNT ids), one case
 * each: fresh random inputs, the CPU kernel against a float64 reference
 * computed here, and a finite-difference gradient check where the op is
 * differentiable. Ops without a public entry point are reached through
 * loom_op_run with args (relu_backward, log_softmax_backward) or through
 * their forward op's gradient (the other *_BACKWARD ops: the gradient check
 * of the forward op runs them). It fails when an op has no case (the table
 * is indexed by op id; the failure names the op) and when the grad table
 * disagrees with a case about whether the op is differentiable (a
 * differentiable op without a grad-table entry would silently not record).
 *
 * To add an op's case: write `static void case_x(const sw_config *c)` that
 * makes its inputs with sw_input (in c's dtype, layout and shape class),
 * runs the op, compares with a float64 reference (sw_expect), and — if the
 * op is differentiable — calls sw_gradcheck; then add
 * `[LOOM_OP_X] = {case_x, SW_GRAD}` (or SW_NO_GRAD) to g_cases.
 *
 * Growing the sweep: a case sees one sw_config (dtype × layout × shape
 * class) and makes every input through sw_input, checks through sw_expect
 * and sw_gradcheck. Only {f32, contiguous, small} is in g_configs today; to
 * add a value (f16, a sliced / transposed / channels-last layout, another
 * shape class), teach sw_input and sw_atol about it and list the configs;
 * a case that cannot take a config returns early for it. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/grad_table.h"
#include "ops/op.h"
#include "support/testkit.h"

/* ---- the sweep's dimensions ------------------------------------------------ */
typedef enum sw_layout { SW_CONTIGUOUS, SW_SLICED, SW_TRANSPOSED, SW_CHANNELS_LAST } sw_layout;
typedef enum sw_shape_class { SW_SMALL } sw_shape_class;

typedef struct sw_config {
  loom_dtype dtype;
  sw_layout layout;
  sw_shape_class shape;
} sw_config;

static const sw_config g_configs[] = {
    {LOOM_F32, SW_CONTIGUOUS, SW_SMALL},
};

static const char *g_op;  /* the op under test, for messages */

/* A random input of logical shape (ndim, shape) in c's dtype and layout,
 * values in [lo, hi] with |v| >= away (see tk_rand_vals); *vals gets the
 * values (row-major, rounded to the dtype; caller frees). */
static loom_tensor *sw_input(const sw_config *c, int ndim, const int64_t *shape, double lo, double hi, double away,
                             double **vals) {
  cr_assert_eq(c->layout, SW_CONTIGUOUS, "%s: sw_input does not make layout %d yet", g_op, (int)c->layout);
  loom_tensor *t = tk_rand_tensor(ndim, shape, lo, hi, away, c->dtype, loom_cpu(), vals);
  cr_assert_not_null(t, "%s: making an input: %s", g_op, loom_last_error());
  return t;
}

/* Tolerances of a forward result in c's dtype against its float64 reference. */
static double sw_atol(const sw_config *c) { return c->dtype == LOOM_F32 ? 1e-5 : 1e-2; }

/* t must have shape (ndim, shape), c's dtype, and values close to want. */
static void sw_expect(const sw_config *c, loom_tensor *t, int ndim, const int64_t *shape, const double *want,
                      const char *what) {
  cr_assert_not_null(t, "%s: %s failed: %s", g_op, what, loom_last_error());
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %s", g_op, what);
  tk_assert_tensor(t, ndim, shape, c->dtype, want, sw_atol(c), tk_rtol(c->dtype), msg);
}

/* Finite-difference check of fn's gradient with respect to in[k] for each k
 * in grad_mask (the inputs are made to require grad here). Gradients are
 * checked in f32 only: other dtypes are too coarse for finite differences. */
static void sw_gradcheck(const sw_config *c, tk_fn fn, void *ctx, loom_tensor **in, int n, unsigned grad_mask, double h,
                         const char *what) {
  if (c->dtype != LOOM_F32) return;
  for (int k = 0; k < n; k++)
    if (grad_mask >> k & 1) cr_assert_eq(loom_set_requires_grad(in[k], true), LOOM_OK, "%s", loom_last_error());
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %s", g_op, what);
  tk_gradcheck(fn, ctx, in, n, h, 2e-3, 1e-2, msg);
}

static double *dalloc(int64_t n) {
  double *p = calloc((size_t)(n ? n : 1), sizeof *p);
  cr_assert_not_null(p);
  return p;
}

/* ---- elementwise ---------------------------------------------------------------- */

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

/* a [2, 3, 4] against b [3, 1] (broadcast both ways: gradients are summed back). */
static void binary(const sw_config *c, const bin_def *d) {
  int64_t sa[3] = {2, 3, 4}, sb[2] = {3, 1};
  double *va, *vb;
  loom_tensor *a = sw_input(c, 3, sa, -2, 2, 0, &va), *b = sw_input(c, 2, sb, -2, 2, d->b_away, &vb);
  double want[24];
  for (int64_t i = 0; i < 24; i++)
    want[i] = d->ref(va[tk_bcast_index(i, 3, sa, 3, sa)], vb[tk_bcast_index(i, 3, sa, 2, sb)]);
  sw_expect(c, d->fn(a, b), 3, sa, want, "forward");
  loom_tensor *in[2] = {a, b};
  sw_gradcheck(c, bin_fn, (void *)d, in, 2, 3u, 1e-2, "gradient");
  free(va);
  free(vb);
}

static void case_add(const sw_config *c) { binary(c, &(bin_def){loom_add, r_add, 0}); }
static void case_sub(const sw_config *c) { binary(c, &(bin_def){loom_sub, r_sub, 0}); }
static void case_mul(const sw_config *c) { binary(c, &(bin_def){loom_mul, r_mul, 0}); }
static void case_div(const sw_config *c) { binary(c, &(bin_def){loom_div, r_div, 0.5}); }

typedef struct un_def {
  loom_tensor *(*fn)(loom_tensor *);                 /* unary, or */
  loom_tensor *(*fn_s)(loom_tensor *, double);       /* with a scalar s */
  double s;
  double (*ref)(double, double);                     /* ref(x, s) */
  double lo, hi, away;                               /* input domain */
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
  int64_t s[2] = {3, 5};
  double *v;
  loom_tensor *x = sw_input(c, 2, s, d->lo, d->hi, d->away, &v);
  double want[15];
  for (int i = 0; i < 15; i++) want[i] = d->ref(v[i], d->s);
  loom_tensor *in[1] = {x};
  sw_expect(c, un_fn(in, (void *)d), 2, s, want, "forward");
  sw_gradcheck(c, un_fn, (void *)d, in, 1, 1u, 1e-2, "gradient");
  free(v);
}

static void case_add_scalar(const sw_config *c) { unary(c, &(un_def){NULL, loom_add_scalar, 0.75, r_add_s, -2, 2, 0}); }
static void case_mul_scalar(const sw_config *c) { unary(c, &(un_def){NULL, loom_mul_scalar, -1.5, r_mul_s, -2, 2, 0}); }
static void case_rsub_scalar(const sw_config *c) { unary(c, &(un_def){NULL, loom_rsub_scalar, 2.0, r_rsub_s, -2, 2, 0}); }
static void case_rdiv_scalar(const sw_config *c) { unary(c, &(un_def){NULL, loom_rdiv_scalar, 2.0, r_rdiv_s, -2, 2, 0.5}); }
static void case_pow_scalar(const sw_config *c) { unary(c, &(un_def){NULL, loom_pow_scalar, 2.5, r_pow_s, 0.5, 2, 0}); }
static void case_neg(const sw_config *c) { unary(c, &(un_def){loom_neg, NULL, 0, r_neg, -2, 2, 0}); }
static void case_exp(const sw_config *c) { unary(c, &(un_def){loom_exp, NULL, 0, r_exp, -2, 2, 0}); }
static void case_log(const sw_config *c) { unary(c, &(un_def){loom_log, NULL, 0, r_log, 0.5, 3, 0}); }
static void case_sqrt(const sw_config *c) { unary(c, &(un_def){loom_sqrt, NULL, 0, r_sqrt, 0.5, 3, 0}); }
/* Kept 0.1 away from the kink: finite differences of step 1e-2 do not cross it. */
static void case_relu(const sw_config *c) { unary(c, &(un_def){loom_relu, NULL, 0, r_relu, -2, 2, 0.1}); }

/* No public entry point: loom_op_run with (dy, y) -> dy * (y > 0). */
static void case_relu_backward(const sw_config *c) {
  int64_t s[2] = {3, 4};
  double *vg, *vy;
  loom_tensor *gy = sw_input(c, 2, s, -2, 2, 0, &vg), *y = sw_input(c, 2, s, -1, 1, 0.1, &vy);
  double want[12];
  for (int i = 0; i < 12; i++) want[i] = vy[i] > 0 ? vg[i] : 0;
  loom_op_args a = {.in = {gy, y}, .n_in = 2};
  sw_expect(c, loom_op_run(LOOM_OP_RELU_BACKWARD, &a), 2, s, want, "relu_backward(dy, y)");
  free(vg);
  free(vy);
}

/* a == b as 0 / 1 in a's dtype; every other element of b equals a's. */
static void case_eq(const sw_config *c) {
  int64_t s[2] = {3, 4};
  double *va, *vb;
  loom_tensor *a = sw_input(c, 2, s, -2, 2, 0, &va);
  vb = dalloc(12);
  double want[12];
  for (int i = 0; i < 12; i++) {
    vb[i] = i % 2 ? va[i] + 1.0 : va[i];
    want[i] = i % 2 ? 0.0 : 1.0;
  }
  loom_tensor *b = tk_tensor(vb, 2, s, c->dtype, loom_cpu());
  sw_expect(c, loom_eq(a, b), 2, s, want, "eq");
  free(va);
  free(vb);
}

/* ---- reductions ----------------------------------------------------------------- */

static loom_tensor *sum_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_sum(in[0], 2, (const int[]){0, 2}, false);
}

static void case_sum(const sw_config *c) {
  int64_t s[3] = {3, 4, 5}, so[1] = {4};
  double *v;
  loom_tensor *x = sw_input(c, 3, s, -2, 2, 0, &v);
  double want[4] = {0};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 5; k++) want[j] += v[(i * 4 + j) * 5 + k];
  loom_tensor *in[1] = {x};
  sw_expect(c, sum_fn(in, NULL), 1, so, want, "sum over dims 0, 2");
  sw_gradcheck(c, sum_fn, NULL, in, 1, 1u, 1e-2, "gradient");
  free(v);
}

static loom_tensor *max_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_max(in[0], 1, (const int[]){1}, true);
}

static void case_max(const sw_config *c) {
  int64_t s[3] = {3, 4, 5}, so[3] = {3, 1, 5};
  double *v;
  loom_tensor *x = sw_input(c, 3, s, -2, 2, 0, &v);
  double want[15];
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 5; k++) {
      double m = -INFINITY;
      for (int j = 0; j < 4; j++) m = fmax(m, v[(i * 4 + j) * 5 + k]);
      want[i * 5 + k] = m;
    }
  loom_tensor *in[1] = {x};
  sw_expect(c, max_fn(in, NULL), 3, so, want, "max over dim 1, keepdim");
  /* A small step: random maxima are further apart than 2e-3 (fixed seed). */
  sw_gradcheck(c, max_fn, NULL, in, 1, 1u, 1e-3, "gradient");
  free(v);
}

static void case_argmax(const sw_config *c) {
  int64_t s[2] = {4, 6}, so[1] = {4};
  double *v;
  loom_tensor *x = sw_input(c, 2, s, -2, 2, 0, &v);
  loom_tensor *y = loom_argmax(x, 1, false);
  cr_assert_not_null(y, "%s: %s", g_op, loom_last_error());
  double want[4];
  for (int i = 0; i < 4; i++) {
    int best = 0;
    for (int j = 1; j < 6; j++)
      if (v[i * 6 + j] > v[i * 6 + best]) best = j;
    want[i] = best;
  }
  tk_assert_tensor(y, 1, so, LOOM_I64, want, 0, 0, "argmax over dim 1");
  free(v);
}

/* ---- linear algebra ------------------------------------------------------------- */

/* a [2, 3, 4] @ bᵀ with b [5, 4] (batched, trans_b): [2, 3, 5]. */
static loom_tensor *matmul_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_matmul_ex(in[0], in[1], false, true);
}

static void case_matmul(const sw_config *c) {
  int64_t sa[3] = {2, 3, 4}, sb[2] = {5, 4}, so[3] = {2, 3, 5};
  double *va, *vb;
  loom_tensor *a = sw_input(c, 3, sa, -1, 1, 0, &va), *b = sw_input(c, 2, sb, -1, 1, 0, &vb);
  double want[30] = {0};
  for (int n = 0; n < 2; n++)
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 5; j++)
        for (int k = 0; k < 4; k++) want[(n * 3 + i) * 5 + j] += va[(n * 3 + i) * 4 + k] * vb[j * 4 + k];
  loom_tensor *in[2] = {a, b};
  sw_expect(c, matmul_fn(in, NULL), 3, so, want, "matmul_ex(a, b, trans_b)");
  sw_gradcheck(c, matmul_fn, NULL, in, 2, 3u, 1e-2, "gradient");
  free(va);
  free(vb);
}

/* relu(x wᵀ + b): x [3, 4], w [5, 4], b [5]. */
static loom_tensor *linear_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_linear(in[0], in[1], in[2], LOOM_ACT_RELU);
}

typedef struct lin_data {
  loom_tensor *in[3];
  double *v[3];
} lin_data;

static void linear_make(const sw_config *c, lin_data *d) {
  int64_t sx[2] = {3, 4}, sw[2] = {5, 4}, sb[1] = {5};
  d->in[0] = sw_input(c, 2, sx, -1, 1, 0, &d->v[0]);
  d->in[1] = sw_input(c, 2, sw, -1, 1, 0, &d->v[1]);
  d->in[2] = sw_input(c, 1, sb, -1, 1, 0, &d->v[2]);
}

static void lin_free(lin_data *d) {
  for (int k = 0; k < 3; k++) free(d->v[k]);
}

/* Runs LINEAR_BACKWARD (dX, dW, db in one op). */
static void linear_grad(const sw_config *c) {
  lin_data d;
  linear_make(c, &d);
  sw_gradcheck(c, linear_fn, NULL, d.in, 3, 7u, 1e-3, "gradient (linear_backward)");
  lin_free(&d);
}

static void case_linear(const sw_config *c) {
  lin_data d;
  linear_make(c, &d);
  double want[15];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 5; j++) {
      double z = d.v[2][j];
      for (int k = 0; k < 4; k++) z += d.v[0][i * 4 + k] * d.v[1][j * 4 + k];
      want[i * 5 + j] = z > 0 ? z : 0;
    }
  int64_t so[2] = {3, 5};
  sw_expect(c, linear_fn(d.in, NULL), 2, so, want, "linear + ReLU");
  lin_free(&d);
  linear_grad(c);
}

/* ---- losses --------------------------------------------------------------------- */

static loom_tensor *log_softmax_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_log_softmax(in[0], 1);
}

/* Row-wise log-softmax of v [rows, cols] into out. */
static void ref_log_softmax(const double *v, int rows, int cols, double *out) {
  for (int i = 0; i < rows; i++) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < cols; j++) m = fmax(m, v[i * cols + j]);
    for (int j = 0; j < cols; j++) s += exp(v[i * cols + j] - m);
    for (int j = 0; j < cols; j++) out[i * cols + j] = v[i * cols + j] - m - log(s);
  }
}

static void case_log_softmax(const sw_config *c) {
  int64_t s[2] = {3, 5};
  double *v;
  loom_tensor *x = sw_input(c, 2, s, -2, 2, 0, &v);
  double want[15];
  ref_log_softmax(v, 3, 5, want);
  loom_tensor *in[1] = {x};
  sw_expect(c, log_softmax_fn(in, NULL), 2, s, want, "log_softmax over dim 1");
  sw_gradcheck(c, log_softmax_fn, NULL, in, 1, 1u, 1e-2, "gradient");
  free(v);
}

/* No public entry point: loom_op_run with (dy, y), i[0] = dim -> dy - exp(y) * sum(dy). */
static void case_log_softmax_backward(const sw_config *c) {
  int64_t s[2] = {3, 5};
  double *vg, *vx = tk_rand_vals(15, -2, 2, 0, c->dtype), yv[15], want[15];
  loom_tensor *gy = sw_input(c, 2, s, -1, 1, 0, &vg);
  ref_log_softmax(vx, 3, 5, yv);
  for (int i = 0; i < 15; i++) yv[i] = tk_round(yv[i], c->dtype);  /* what the kernel reads */
  loom_tensor *y = tk_tensor(yv, 2, s, c->dtype, loom_cpu());
  for (int i = 0; i < 3; i++) {
    double sg = 0;
    for (int j = 0; j < 5; j++) sg += vg[i * 5 + j];
    for (int j = 0; j < 5; j++) want[i * 5 + j] = vg[i * 5 + j] - exp(yv[i * 5 + j]) * sg;
  }
  loom_op_args a = {.in = {gy, y}, .n_in = 2};
  a.i[0] = 1;
  sw_expect(c, loom_op_run(LOOM_OP_LOG_SOFTMAX_BACKWARD, &a), 2, s, want, "log_softmax_backward(dy, y)");
  free(vg);
  free(vx);
}

static loom_tensor *ce_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_cross_entropy(in[0], in[1]);
}

typedef struct ce_data {
  loom_tensor *in[2];
  double *v, lab[4];
} ce_data;

static void ce_make(const sw_config *c, ce_data *d) {
  int64_t s[2] = {4, 5}, sl[1] = {4};
  d->in[0] = sw_input(c, 2, s, -2, 2, 0, &d->v);
  for (int i = 0; i < 4; i++) d->lab[i] = (double)((i * 3 + 1) % 5);
  d->in[1] = tk_tensor(d->lab, 1, sl, LOOM_I64, loom_cpu());
}

/* Runs CROSS_ENTROPY_BACKWARD. */
static void ce_grad(const sw_config *c) {
  ce_data d;
  ce_make(c, &d);
  sw_gradcheck(c, ce_fn, NULL, d.in, 2, 1u, 1e-2, "gradient (cross_entropy_backward)");
  free(d.v);
}

static void case_cross_entropy(const sw_config *c) {
  ce_data d;
  ce_make(c, &d);
  double ls[20], want = 0;
  ref_log_softmax(d.v, 4, 5, ls);
  for (int i = 0; i < 4; i++) want -= ls[i * 5 + (int)d.lab[i]] / 4.0;
  loom_tensor *y = ce_fn(d.in, NULL);
  cr_assert_not_null(y, "%s: %s", g_op, loom_last_error());
  /* Computed in f32 whatever the logits' dtype: a 0-d f32 result. */
  tk_assert_tensor(y, 0, NULL, LOOM_F32, &want, sw_atol(c), tk_rtol(c->dtype), "cross_entropy");
  free(d.v);
  ce_grad(c);
}

/* ---- copies and views ----------------------------------------------------------- */

/* A strided read (contiguous of a transpose) runs the copy kernel. */
static loom_tensor *copy_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_contiguous(loom_transpose(in[0], 0, 1));
}

static void case_copy(const sw_config *c) {
  int64_t s[2] = {3, 4}, st[2] = {4, 3};
  double *v, want[12], half[12];
  loom_tensor *x = sw_input(c, 2, s, -2, 2, 0, &v);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) want[j * 3 + i] = v[i * 4 + j];
  loom_tensor *in[1] = {x};
  sw_expect(c, copy_fn(in, NULL), 2, st, want, "contiguous(transpose)");
  /* A cast converts through the same kernel. */
  for (int i = 0; i < 12; i++) half[i] = tk_round(v[i], LOOM_F16);
  tk_assert_tensor(loom_cast(x, LOOM_F16), 2, s, LOOM_F16, half, 0, 0, "copy: cast to f16");
  sw_gradcheck(c, copy_fn, NULL, in, 1, 1u, 1e-2, "gradient");
  free(v);
}

static loom_tensor *reshape_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_view(in[0], 2, (const int64_t[]){3, -1});
}

static void case_view_reshape(const sw_config *c) {
  int64_t s[2] = {2, 6}, so[2] = {3, 4};
  double *v;
  loom_tensor *x = sw_input(c, 2, s, -2, 2, 0, &v);
  loom_tensor *in[1] = {x};
  sw_expect(c, reshape_fn(in, NULL), 2, so, v, "view as [3, -1]");
  sw_gradcheck(c, reshape_fn, NULL, in, 1, 1u, 1e-2, "gradient");
  free(v);
}

static loom_tensor *permute_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_permute(in[0], (const int[]){2, 0, 1});
}

static void case_view_permute(const sw_config *c) {
  int64_t s[3] = {2, 3, 4}, so[3] = {4, 2, 3};
  double *v, want[24];
  loom_tensor *x = sw_input(c, 3, s, -2, 2, 0, &v);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++) want[(i * 2 + j) * 3 + k] = v[(j * 3 + k) * 4 + i];
  loom_tensor *in[1] = {x};
  sw_expect(c, permute_fn(in, NULL), 3, so, want, "permute (2, 0, 1)");
  sw_gradcheck(c, permute_fn, NULL, in, 1, 1u, 1e-2, "gradient");
  free(v);
}

static loom_tensor *slice_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_slice(in[0], 0, 1, 5, 2);
}

static void case_view_slice(const sw_config *c) {
  int64_t s[2] = {5, 4}, so[2] = {2, 4};
  double *v, want[8];
  loom_tensor *x = sw_input(c, 2, s, -2, 2, 0, &v);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) want[i * 4 + j] = v[(1 + 2 * i) * 4 + j];
  loom_tensor *in[1] = {x};
  sw_expect(c, slice_fn(in, NULL), 2, so, want, "rows 1:5:2");
  sw_gradcheck(c, slice_fn, NULL, in, 1, 1u, 1e-2, "gradient");
  free(v);
}

static loom_tensor *expand_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_expand(in[0], 3, (const int64_t[]){2, 3, 4});
}

static void case_view_expand(const sw_config *c) {
  int64_t s[2] = {3, 1}, so[3] = {2, 3, 4};
  double *v, want[24];
  loom_tensor *x = sw_input(c, 2, s, -2, 2, 0, &v);
  for (int i = 0; i < 24; i++) want[i] = v[(i / 4) % 3];
  loom_tensor *in[1] = {x};
  sw_expect(c, expand_fn(in, NULL), 3, so, want, "expand [3, 1] to [2, 3, 4]");
  sw_gradcheck(c, expand_fn, NULL, in, 1, 1u, 1e-2, "gradient");
  free(v);
}

/* ---- CNN ops -------------------------------------------------------------------- */

/* x [2, 3, 5, 5], w [4, 3, 3, 3], b [4]; stride (2, 1), padding 1. */
static loom_tensor *conv_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  o.stride[0] = 2;
  o.padding[0] = o.padding[1] = 1;
  return loom_conv2d(in[0], in[1], in[2], &o);
}

typedef struct conv_data {
  loom_tensor *in[3];
  double *v[3];
} conv_data;

static void conv_make(const sw_config *c, conv_data *d) {
  int64_t sx[4] = {2, 3, 5, 5}, sw[4] = {4, 3, 3, 3}, sb[1] = {4};
  d->in[0] = sw_input(c, 4, sx, -1, 1, 0, &d->v[0]);
  d->in[1] = sw_input(c, 4, sw, -1, 1, 0, &d->v[1]);
  d->in[2] = sw_input(c, 1, sb, -1, 1, 0, &d->v[2]);
}

/* Runs CONV2D_BACKWARD (dX, dW, db in one op). */
static void conv_grad(const sw_config *c) {
  conv_data d;
  conv_make(c, &d);
  sw_gradcheck(c, conv_fn, NULL, d.in, 3, 7u, 1e-2, "gradient (conv2d_backward)");
  for (int k = 0; k < 3; k++) free(d.v[k]);
}

static void case_conv2d(const sw_config *c) {
  conv_data d;
  conv_make(c, &d);
  const int N = 2, C = 3, H = 5, W = 5, O = 4, K = 3, OH = 3, OW = 5;
  double want[2 * 4 * 3 * 5];
  for (int n = 0; n < N; n++)
    for (int o = 0; o < O; o++)
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
          double z = d.v[2][o];
          for (int ci = 0; ci < C; ci++)
            for (int kh = 0; kh < K; kh++)
              for (int kw = 0; kw < K; kw++) {
                int ih = oh * 2 - 1 + kh, iw = ow - 1 + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                z += d.v[0][((n * C + ci) * H + ih) * W + iw] * d.v[1][((o * C + ci) * K + kh) * K + kw];
              }
          want[((n * O + o) * OH + oh) * OW + ow] = z;
        }
  int64_t so[4] = {N, O, OH, OW};
  sw_expect(c, conv_fn(d.in, NULL), 4, so, want, "conv2d");
  for (int k = 0; k < 3; k++) free(d.v[k]);
  conv_grad(c);
}

/* Training mode on x [3, 2, 2, 2] with weight and bias (running statistics
 * left out of the gradient check: they change with every call). */
static loom_tensor *bn_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_batch_norm(in[0], NULL, NULL, in[1], in[2], NULL);
}

typedef struct bn_data {
  loom_tensor *in[3];
  double *v[3];
} bn_data;

static void bn_make(const sw_config *c, bn_data *d) {
  int64_t sx[4] = {3, 2, 2, 2}, sc[1] = {2};
  d->in[0] = sw_input(c, 4, sx, -2, 2, 0, &d->v[0]);
  d->in[1] = sw_input(c, 1, sc, 0.5, 1.5, 0, &d->v[1]);
  d->in[2] = sw_input(c, 1, sc, -1, 1, 0, &d->v[2]);
}

/* Runs BATCH_NORM_BACKWARD (dx, dweight, dbias). */
static void bn_grad(const sw_config *c) {
  bn_data d;
  bn_make(c, &d);
  sw_gradcheck(c, bn_fn, NULL, d.in, 3, 7u, 1e-3, "gradient (batch_norm_backward)");
  for (int k = 0; k < 3; k++) free(d.v[k]);
}

static void case_batch_norm(const sw_config *c) {
  bn_data d;
  bn_make(c, &d);
  int64_t sx[4] = {3, 2, 2, 2}, sc[1] = {2};
  double want[24], rm_want[2], rv_want[2], zeros[2] = {0, 0}, ones[2] = {1, 1};
  for (int ch = 0; ch < 2; ch++) {
    double m = 0, var = 0;
    for (int n = 0; n < 3; n++)
      for (int k = 0; k < 4; k++) m += d.v[0][(n * 2 + ch) * 4 + k] / 12.0;
    for (int n = 0; n < 3; n++)
      for (int k = 0; k < 4; k++) var += pow(d.v[0][(n * 2 + ch) * 4 + k] - m, 2) / 12.0;
    for (int n = 0; n < 3; n++)
      for (int k = 0; k < 4; k++) {
        int i = (n * 2 + ch) * 4 + k;
        want[i] = (d.v[0][i] - m) / sqrt(var + 1e-5) * d.v[1][ch] + d.v[2][ch];
      }
    rm_want[ch] = 0.9 * 0 + 0.1 * m;
    rv_want[ch] = 0.9 * 1 + 0.1 * var * 12.0 / 11.0; /* Bessel-corrected, as PyTorch */
  }
  loom_tensor *rm = tk_tensor(zeros, 1, sc, LOOM_F32, loom_cpu()), *rv = tk_tensor(ones, 1, sc, LOOM_F32, loom_cpu());
  sw_expect(c, loom_batch_norm(d.in[0], rm, rv, d.in[1], d.in[2], NULL), 4, sx, want, "batch_norm (training)");
  tk_assert_tensor(rm, 1, sc, LOOM_F32, rm_want, 1e-6, 1e-5, "batch_norm: running mean");
  tk_assert_tensor(rv, 1, sc, LOOM_F32, rv_want, 1e-6, 1e-5, "batch_norm: running var");
  for (int k = 0; k < 3; k++) free(d.v[k]);
  bn_grad(c);
}

/* Pooling over x [2, 2, H, W]; the window reference covers max and average
 * (count_include_pad) and PyTorch's adaptive windows. */
typedef struct pool_def {
  int kind;               /* 0 max, 1 avg, 2 adaptive avg */
  int64_t k, s, p;        /* square kernel, stride, padding (max / avg) */
  int64_t oh, ow;         /* adaptive output size */
} pool_def;

static loom_tensor *pool_fn(loom_tensor **in, void *ctx) {
  const pool_def *d = ctx;
  if (d->kind == 2) return loom_adaptive_avg_pool2d(in[0], d->oh, d->ow);
  loom_pool2d_options o;
  loom_pool2d_options_init(&o, d->k, d->k);
  o.stride[0] = o.stride[1] = d->s;
  o.padding[0] = o.padding[1] = d->p;
  return d->kind == 0 ? loom_max_pool2d(in[0], &o) : loom_avg_pool2d(in[0], &o);
}

static int64_t pool_out(const pool_def *d, int64_t in, bool h) {
  if (d->kind == 2) return h ? d->oh : d->ow;
  return (in + 2 * d->p - d->k) / d->s + 1;
}

static void pool_ref(const pool_def *d, const double *v, int64_t H, int64_t W, double *out) {
  int64_t OH = pool_out(d, H, true), OW = pool_out(d, W, false);
  for (int64_t plane = 0; plane < 4; plane++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t h0, h1, w0, w1;
        if (d->kind == 2) {
          h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
          w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
        } else {
          h0 = oh * d->s - d->p, h1 = h0 + d->k;
          w0 = ow * d->s - d->p, w1 = w0 + d->k;
        }
        double m = -INFINITY, s = 0;
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) {
            if (h < 0 || h >= H || w < 0 || w >= W) continue;  /* padding: zeros for avg, ignored by max */
            double x = v[(plane * H + h) * W + w];
            m = fmax(m, x);
            s += x;
          }
        out[(plane * OH + oh) * OW + ow] = d->kind == 0 ? m : s / (double)((h1 - h0) * (w1 - w0));
      }
}

static void pool_case(const sw_config *c, const pool_def *d, int64_t H, int64_t W, bool forward, const char *what) {
  int64_t s[4] = {2, 2, H, W}, so[4] = {2, 2, pool_out(d, H, true), pool_out(d, W, false)};
  double *v;
  loom_tensor *x = sw_input(c, 4, s, -2, 2, 0, &v);
  loom_tensor *in[1] = {x};
  if (forward) {
    double *want = dalloc(tk_numel(4, so));
    pool_ref(d, v, H, W, want);
    sw_expect(c, pool_fn(in, (void *)d), 4, so, want, what);
    free(want);
  }
  /* Max: a step well below the gaps between random window maxima (fixed seed). */
  sw_gradcheck(c, pool_fn, (void *)d, in, 1, 1u, d->kind == 0 ? 1e-3 : 1e-2, what);
  free(v);
}

static const pool_def MAX_POOL = {0, 2, 2, 0, 0, 0}, AVG_POOL = {1, 3, 2, 1, 0, 0}, ADAPTIVE_POOL = {2, 0, 0, 0, 2, 3};

static void case_max_pool2d(const sw_config *c) { pool_case(c, &MAX_POOL, 4, 4, true, "max_pool2d 2x2 / 2"); }
/* Runs MAX_POOL2D_BACKWARD. */
static void case_max_pool2d_backward(const sw_config *c) {
  pool_case(c, &MAX_POOL, 4, 4, false, "gradient of max_pool2d (max_pool2d_backward)");
}
static void case_avg_pool2d(const sw_config *c) { pool_case(c, &AVG_POOL, 5, 5, true, "avg_pool2d 3x3 / 2, pad 1"); }
static void case_adaptive_avg_pool2d(const sw_config *c) {
  pool_case(c, &ADAPTIVE_POOL, 5, 4, true, "adaptive_avg_pool2d to 2x3");
}
/* Runs AVG_POOL2D_BACKWARD, in both window modes. */
static void case_avg_pool2d_backward(const sw_config *c) {
  pool_case(c, &AVG_POOL, 5, 5, false, "gradient of avg_pool2d (avg_pool2d_backward)");
  pool_case(c, &ADAPTIVE_POOL, 5, 4, false, "gradient of adaptive_avg_pool2d (avg_pool2d_backward)");
}

/* p = 0.3 with a fixed seed, so every call draws the same mask. */
static loom_tensor *dropout_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  loom_manual_seed(77);
  return loom_dropout(in[0], 0.3, true);
}

/* Runs DROPOUT_BACKWARD. */
static void dropout_grad(const sw_config *c) {
  int64_t s[2] = {4, 6};
  double *v;
  loom_tensor *in[1] = {sw_input(c, 2, s, -2, 2, 0, &v)};
  sw_gradcheck(c, dropout_fn, NULL, in, 1, 1u, 1e-2, "gradient (dropout_backward)");
  free(v);
}

static void case_dropout(const sw_config *c) {
  int64_t s[2] = {4, 6};
  double *v, want[24];
  loom_tensor *in[1] = {sw_input(c, 2, s, -2, 2, 0, &v)};
  /* Element i is kept when element i of loom_rand at the same seed is >= p. */
  loom_manual_seed(77);
  double *u = tk_read(loom_rand(2, s, LOOM_F32, loom_cpu()));
  for (int i = 0; i < 24; i++) want[i] = u[i] >= 0.3 ? v[i] / 0.7 : 0.0;
  sw_expect(c, dropout_fn(in, NULL), 2, s, want, "dropout p = 0.3");
  free(u);
  free(v);
  dropout_grad(c);
}

static loom_tensor *add_relu_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_add_relu(in[0], in[1]);
}

/* |a| >= 0.6 and |b| <= 0.3 keep a + b clear of ReLU's kink. */
static void add_relu_case(const sw_config *c, bool forward) {
  int64_t s[2] = {3, 4};
  double *va, *vb, want[12];
  loom_tensor *in[2] = {sw_input(c, 2, s, -1.5, 1.5, 0.6, &va), sw_input(c, 2, s, -0.3, 0.3, 0, &vb)};
  if (forward) {
    for (int i = 0; i < 12; i++) want[i] = fmax(va[i] + vb[i], 0.0);
    sw_expect(c, add_relu_fn(in, NULL), 2, s, want, "relu(a + b)");
  }
  sw_gradcheck(c, add_relu_fn, NULL, in, 2, 3u, 1e-2, forward ? "gradient" : "gradient (add_relu_backward)");
  free(va);
  free(vb);
}

static void case_add_relu(const sw_config *c) { add_relu_case(c, true); }
/* Runs ADD_RELU_BACKWARD. */
static void case_add_relu_backward(const sw_config *c) { add_relu_case(c, false); }

/* Three inputs joined along dim 1 ([2,1,3] [2,2,3] [2,3,3] -> [2,6,3]), and
 * seven along dim 0 (loom_cat chains two CAT ops past LOOM_OP_MAX_IN). */
static loom_tensor *cat_fn(loom_tensor **in, void *ctx) {
  return loom_cat(ctx ? 7 : 3, in, ctx ? 0 : 1);
}

static void case_cat(const sw_config *c) {
  int64_t s[3][3] = {{2, 1, 3}, {2, 2, 3}, {2, 3, 3}}, so[3] = {2, 6, 3};
  double *v[3], want[36];
  loom_tensor *in[7];
  for (int k = 0; k < 3; k++) in[k] = sw_input(c, 3, s[k], -2, 2, 0, &v[k]);
  for (int i = 0; i < 2; i++)
    for (int j = 0, at = 0; j < 3; j++)
      for (int r = 0; r < s[j][1]; r++, at++)
        for (int e = 0; e < 3; e++) want[(i * 6 + at) * 3 + e] = v[j][(i * s[j][1] + r) * 3 + e];
  sw_expect(c, cat_fn(in, NULL), 3, so, want, "cat of three along dim 1");
  sw_gradcheck(c, cat_fn, NULL, in, 3, 7u, 1e-2, "gradient");
  for (int k = 0; k < 3; k++) free(v[k]);
  int64_t r1[1] = {2}, r7[1] = {14};
  double *w[7], want7[14];
  for (int k = 0; k < 7; k++) {
    in[k] = sw_input(c, 1, r1, -2, 2, 0, &w[k]);
    want7[2 * k] = w[k][0], want7[2 * k + 1] = w[k][1];
  }
  sw_expect(c, cat_fn(in, in), 1, r7, want7, "cat of seven along dim 0");
  sw_gradcheck(c, cat_fn, in, in, 7, 0x7fu, 1e-2, "gradient of seven");
  for (int k = 0; k < 7; k++) free(w[k]);
}

/* ---- the case table ---------------------------------------------------------- */

typedef void (*sw_case_fn)(const sw_config *c);
enum { SW_NO_GRAD = 0, SW_GRAD = 1 };
typedef struct sw_case {
  sw_case_fn run;
  int grad; /* SW_GRAD: differentiable (a grad-table entry; run checks the gradient) */
} sw_case;

static const sw_case g_cases[LOOM_OP_COUNT] = {
    [LOOM_OP_ADD] = {case_add, SW_GRAD},
    [LOOM_OP_SUB] = {case_sub, SW_GRAD},
    [LOOM_OP_MUL] = {case_mul, SW_GRAD},
    [LOOM_OP_DIV] = {case_div, SW_GRAD},
    [LOOM_OP_ADD_SCALAR] = {case_add_scalar, SW_GRAD},
    [LOOM_OP_MUL_SCALAR] = {case_mul_scalar, SW_GRAD},
    [LOOM_OP_RSUB_SCALAR] = {case_rsub_scalar, SW_GRAD},
    [LOOM_OP_RDIV_SCALAR] = {case_rdiv_scalar, SW_GRAD},
    [LOOM_OP_POW_SCALAR] = {case_pow_scalar, SW_GRAD},
    [LOOM_OP_NEG] = {case_neg, SW_GRAD},
    [LOOM_OP_EXP] = {case_exp, SW_GRAD},
    [LOOM_OP_LOG] = {case_log, SW_GRAD},
    [LOOM_OP_SQRT] = {case_sqrt, SW_GRAD},
    [LOOM_OP_RELU] = {case_relu, SW_GRAD},
    [LOOM_OP_RELU_BACKWARD] = {case_relu_backward, SW_NO_GRAD},
    [LOOM_OP_EQ] = {case_eq, SW_NO_GRAD},
    [LOOM_OP_SUM] = {case_sum, SW_GRAD},
    [LOOM_OP_MAX] = {case_max, SW_GRAD},
    [LOOM_OP_ARGMAX] = {case_argmax, SW_NO_GRAD},
    [LOOM_OP_MATMUL] = {case_matmul, SW_GRAD},
    [LOOM_OP_LINEAR] = {case_linear, SW_GRAD},
    [LOOM_OP_LINEAR_BACKWARD] = {linear_grad, SW_NO_GRAD},
    [LOOM_OP_LOG_SOFTMAX] = {case_log_softmax, SW_GRAD},
    [LOOM_OP_LOG_SOFTMAX_BACKWARD] = {case_log_softmax_backward, SW_NO_GRAD},
    [LOOM_OP_CROSS_ENTROPY] = {case_cross_entropy, SW_GRAD},
    [LOOM_OP_CROSS_ENTROPY_BACKWARD] = {ce_grad, SW_NO_GRAD},
    [LOOM_OP_COPY] = {case_copy, SW_GRAD},
    [LOOM_OP_VIEW_RESHAPE] = {case_view_reshape, SW_GRAD},
    [LOOM_OP_VIEW_PERMUTE] = {case_view_permute, SW_GRAD},
    [LOOM_OP_VIEW_SLICE] = {case_view_slice, SW_GRAD},
    [LOOM_OP_VIEW_EXPAND] = {case_view_expand, SW_GRAD},
    [LOOM_OP_CONV2D] = {case_conv2d, SW_GRAD},
    [LOOM_OP_CONV2D_BACKWARD] = {conv_grad, SW_NO_GRAD},
    [LOOM_OP_BATCH_NORM] = {case_batch_norm, SW_GRAD},
    [LOOM_OP_BATCH_NORM_BACKWARD] = {bn_grad, SW_NO_GRAD},
    [LOOM_OP_MAX_POOL2D] = {case_max_pool2d, SW_GRAD},
    [LOOM_OP_MAX_POOL2D_BACKWARD] = {case_max_pool2d_backward, SW_NO_GRAD},
    [LOOM_OP_AVG_POOL2D] = {case_avg_pool2d, SW_GRAD},
    [LOOM_OP_ADAPTIVE_AVG_POOL2D] = {case_adaptive_avg_pool2d, SW_GRAD},
    [LOOM_OP_AVG_POOL2D_BACKWARD] = {case_avg_pool2d_backward, SW_NO_GRAD},
    [LOOM_OP_DROPOUT] = {case_dropout, SW_GRAD},
    [LOOM_OP_DROPOUT_BACKWARD] = {dropout_grad, SW_NO_GRAD},
    [LOOM_OP_ADD_RELU] = {case_add_relu, SW_GRAD},
    [LOOM_OP_ADD_RELU_BACKWARD] = {case_add_relu_backward, SW_NO_GRAD},
    [LOOM_OP_CAT] = {case_cat, SW_GRAD},
};

static const char *op_name(int id) {
  const loom_op_def *d = loom_op_get((loom_op_id)id);
  return d && d->name ? d->name : "(unnamed op)";
}

/* Why op id fails the table checks, or NULL. */
static const char *table_problem(int id, char *buf, size_t n) {
  const sw_case *cs = &g_cases[id];
  bool has_rule = loom_grad_get((loom_op_id)id) != NULL;
  if (!cs->run)
    snprintf(buf, n, "op %s (id %d) has no case in tests/test_op_sweep.c", op_name(id), id);
  else if (cs->grad && !has_rule)
    snprintf(buf, n, "op %s (id %d) is differentiable but has no grad-table entry (lib/autograd/grad_table.c)",
             op_name(id), id);
  else if (!cs->grad && has_rule)
    snprintf(buf, n, "op %s (id %d) has a grad-table entry but its case checks no gradient", op_name(id), id);
  else
    return NULL;
  return buf;
}

/* Every op id in one go: the full list of ops without a case (or whose
 * differentiability disagrees with the grad table). */
Test(op_sweep, every_op_has_a_case) {
  char report[4096] = "", line[256];
  for (int id = 0; id < LOOM_OP_COUNT; id++) {
    if (!table_problem(id, line, sizeof line)) continue;
    strncat(report, "\n  ", sizeof report - strlen(report) - 1);
    strncat(report, line, sizeof report - strlen(report) - 1);
  }
  cr_assert(report[0] == '\0', "the op sweep does not cover the op table:%s", report);
}

ParameterizedTestParameters(op_sweep, op) {
  static int ids[LOOM_OP_COUNT];
  for (int i = 0; i < LOOM_OP_COUNT; i++) ids[i] = i;
  return cr_make_param_array(int, ids, LOOM_OP_COUNT);
}

/* One op: its table checks, then its case under every configuration. */
ParameterizedTest(int *id, op_sweep, op) {
  char why[256];
  const char *problem = table_problem(*id, why, sizeof why);
  cr_assert_null(problem, "%s", problem);
  g_op = op_name(*id);
  /* One CPU thread: on these tiny tensors more only add fork/join waits
   * (seconds on a loaded machine); the kernels' threading is tested by the
   * per-op test files on larger shapes. */
  loom_set_num_threads(1);
  for (size_t k = 0; k < sizeof g_configs / sizeof g_configs[0]; k++) {
    tk_seed(1000 + (uint64_t)*id);
    loom_scope_begin();
    g_cases[*id].run(&g_configs[k]);
    loom_scope_end();
  }
  tk_leak_check();
}
