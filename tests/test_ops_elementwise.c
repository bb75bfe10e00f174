/* test_ops_elementwise.c — elementwise ops (add, sub, mul, div with
 * broadcasting; add/mul/rsub/rdiv/pow scalar; neg, exp, log, sqrt, relu)
 * against a float64 reference on fresh random inputs of several shapes
 * (broadcasting, odd sizes, 0-d, empty, non-contiguous views) in f32, f16 and
 * bf16, and their gradients by finite differences. Every test runs per device
 * (CPU; CUDA when present). */
#include <math.h>
#include <stdlib.h>

#include "support/testkit.h"

typedef double (*bin_ref)(double, double);
static double r_add(double a, double b) { return a + b; }
static double r_sub(double a, double b) { return a - b; }
static double r_mul(double a, double b) { return a * b; }
static double r_div(double a, double b) { return a / b; }

typedef struct {
  const char *name;
  loom_tensor *(*fn)(loom_tensor *, loom_tensor *);
  bin_ref ref;
} bin_case;

static const bin_case BIN[] = {
    {"add", loom_add, r_add}, {"sub", loom_sub, r_sub}, {"mul", loom_mul, r_mul}, {"div", loom_div, r_div}};

typedef struct {
  int na;
  int64_t sa[4];
  int nb;
  int64_t sb[4];
} shape_pair;

static const shape_pair SHAPES[] = {
    {1, {7}, 1, {7}},                     /* same shape, odd size */
    {2, {5, 3}, 1, {3}},                  /* row broadcast */
    {2, {5, 1}, 2, {1, 4}},               /* outer product broadcast */
    {3, {2, 3, 4}, 3, {2, 1, 4}},         /* middle dim */
    {0, {0}, 2, {3, 2}},                  /* 0-d with 2-d */
    {4, {2, 1, 3, 1}, 3, {5, 1, 6}},      /* both sides broadcast, rank differs */
    {1, {1000}, 1, {1000}},               /* long run */
    {2, {0, 3}, 1, {3}},                  /* empty */
    {3, {33, 17, 5}, 2, {17, 1}},         /* odd sizes, larger */
};

static void check_binary(loom_device dev, loom_dtype dt) {
  tk_seed(11 + dt);
  for (size_t c = 0; c < sizeof BIN / sizeof BIN[0]; c++) {
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
      const shape_pair *sp = &SHAPES[s];
      double *va, *vb;
      loom_tensor *a = tk_rand_tensor(sp->na, sp->sa, -2, 2, 0, dt, dev, &va);
      /* keep divisors away from 0 */
      loom_tensor *b = tk_rand_tensor(sp->nb, sp->sb, -2, 2, 0.25, dt, dev, &vb);
      int no;
      int64_t so[8];
      cr_assert(tk_bcast_shape(sp->na, sp->sa, sp->nb, sp->sb, &no, so));
      int64_t n = tk_numel(no, so);
      double *want = malloc((size_t)(n ? n : 1) * sizeof *want);
      for (int64_t i = 0; i < n; i++)
        want[i] = tk_round(BIN[c].ref(va[tk_bcast_index(i, no, so, sp->na, sp->sa)],
                                      vb[tk_bcast_index(i, no, so, sp->nb, sp->sb)]), dt);
      char what[96];
      snprintf(what, sizeof what, "%s %s shapes #%zu", BIN[c].name, loom_dtype_name(dt), s);
      loom_tensor *y = BIN[c].fn(a, b);
      tk_assert_tensor(y, no, so, dt, want, 0, tk_rtol(dt), what);
      free(va);
      free(vb);
      free(want);
    }
  }
}

DEVICE_TEST(elementwise, binary_f32) { check_binary(dev, LOOM_F32); }
DEVICE_TEST(elementwise, binary_f16) { check_binary(dev, LOOM_F16); }
DEVICE_TEST(elementwise, binary_bf16) { check_binary(dev, LOOM_BF16); }

DEVICE_TEST(elementwise, binary_noncontiguous_inputs) {
  /* a transposed view and a slice with step: strides the kernels must honor */
  tk_seed(5);
  int64_t s[2] = {6, 9};
  double *va, *vb;
  loom_tensor *a = tk_rand_tensor(2, s, -1, 1, 0, LOOM_F32, dev, &va);
  loom_tensor *b = tk_rand_tensor(2, s, -1, 1, 0, LOOM_F32, dev, &vb);
  loom_tensor *at = loom_transpose(a, 0, 1);     /* [9, 6] */
  loom_tensor *bs = loom_slice(loom_transpose(b, 0, 1), 1, 0, 6, 1);
  cr_assert(!loom_tensor_is_contiguous(at));
  loom_tensor *y = loom_mul(at, bs);
  double want[54];
  for (int i = 0; i < 9; i++)
    for (int j = 0; j < 6; j++) want[i * 6 + j] = (double)(float)(va[j * 9 + i] * vb[j * 9 + i]);
  int64_t so[2] = {9, 6};
  tk_assert_tensor(y, 2, so, LOOM_F32, want, 0, 1e-7, "mul of transposed views");
  /* step-2 slice of a row */
  loom_tensor *ev = loom_slice(a, 1, 1, 9, 2); /* [6, 4] columns 1,3,5,7 */
  loom_tensor *z = loom_add_scalar(ev, 1.0);
  double w2[24];
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 4; j++) w2[i * 4 + j] = (double)(float)(va[i * 9 + 1 + 2 * j] + 1.0);
  int64_t s2[2] = {6, 4};
  tk_assert_tensor(z, 2, s2, LOOM_F32, w2, 0, 1e-7, "add_scalar of a strided slice");
  free(va);
  free(vb);
}

/* ---- unary and scalar ops ---- */
typedef struct {
  const char *name;
  int kind; /* 0: no scalar, 1: scalar */
  loom_tensor *(*f0)(loom_tensor *);
  loom_tensor *(*f1)(loom_tensor *, double);
  double s;
  double lo, hi, away;
} un_case;

static double un_ref(const char *name, double x, double s) {
  if (!strcmp(name, "add_scalar")) return x + s;
  if (!strcmp(name, "mul_scalar")) return x * s;
  if (!strcmp(name, "rsub_scalar")) return s - x;
  if (!strcmp(name, "rdiv_scalar")) return s / x;
  if (!strcmp(name, "pow_scalar")) return pow(x, s);
  if (!strcmp(name, "pow_scalar2")) return pow(x, s);
  if (!strcmp(name, "neg")) return -x;
  if (!strcmp(name, "exp")) return exp(x);
  if (!strcmp(name, "log")) return log(x);
  if (!strcmp(name, "sqrt")) return sqrt(x);
  if (!strcmp(name, "relu")) return x > 0 ? x : 0;
  cr_assert_fail("unknown op %s", name);
  return 0;
}

static const un_case UN[] = {
    {"add_scalar", 1, NULL, loom_add_scalar, 1.75, -3, 3, 0},
    {"mul_scalar", 1, NULL, loom_mul_scalar, -0.3, -3, 3, 0},
    {"rsub_scalar", 1, NULL, loom_rsub_scalar, 2.5, -3, 3, 0},
    {"rdiv_scalar", 1, NULL, loom_rdiv_scalar, 1.5, -3, 3, 0.3},
    {"pow_scalar", 1, NULL, loom_pow_scalar, 3.0, -2, 2, 0},
    {"pow_scalar2", 1, NULL, loom_pow_scalar, 0.5, 0.2, 4, 0},
    {"neg", 0, loom_neg, NULL, 0, -3, 3, 0},
    {"exp", 0, loom_exp, NULL, 0, -3, 3, 0},
    {"log", 0, loom_log, NULL, 0, 0.1, 5, 0},
    {"sqrt", 0, loom_sqrt, NULL, 0, 0.1, 5, 0},
    {"relu", 0, loom_relu, NULL, 0, -2, 2, 0.05},
};

static loom_tensor *apply_un(const un_case *u, loom_tensor *x) { return u->kind ? u->f1(x, u->s) : u->f0(x); }

static void check_unary(loom_device dev, loom_dtype dt) {
  tk_seed(23 + dt);
  const int64_t shapes[][3] = {{13, 1, 1}, {4, 5, 3}, {1, 1, 1}};
  const int nds[] = {1, 3, 0};
  for (size_t c = 0; c < sizeof UN / sizeof UN[0]; c++) {
    for (int s = 0; s < 3; s++) {
      double *v;
      loom_tensor *x = tk_rand_tensor(nds[s], shapes[s], UN[c].lo, UN[c].hi, UN[c].away, dt, dev, &v);
      int64_t n = tk_numel(nds[s], shapes[s]);
      double *want = malloc((size_t)n * sizeof *want);
      for (int64_t i = 0; i < n; i++) want[i] = tk_round(un_ref(UN[c].name, v[i], UN[c].s), dt);
      char what[64];
      snprintf(what, sizeof what, "%s %s", UN[c].name, loom_dtype_name(dt));
      /* f32: the kernel uses float libm (expf, powf): allow a few ulp. */
      double rtol = dt == LOOM_F32 ? 1e-6 : tk_rtol(dt);
      tk_assert_tensor(apply_un(&UN[c], x), nds[s], shapes[s], dt, want, 1e-30, rtol, what);
      free(v);
      free(want);
    }
  }
}

DEVICE_TEST(elementwise, unary_f32) { check_unary(dev, LOOM_F32); }
DEVICE_TEST(elementwise, unary_f16) { check_unary(dev, LOOM_F16); }
DEVICE_TEST(elementwise, unary_bf16) { check_unary(dev, LOOM_BF16); }

DEVICE_TEST(elementwise, special_values) {
  double v[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -1.0};
  int64_t n = 6;
  loom_tensor *x = tk_tensor(v, 1, &n, LOOM_F32, dev);
  double *r = tk_read(loom_relu(x));
  cr_assert(r[0] == 0 && r[2] == INFINITY && r[3] == 0 && r[5] == 0);
  free(r);
  double *l = tk_read(loom_log(x));
  cr_assert(l[0] == -INFINITY && l[2] == INFINITY && isnan(l[4]) && isnan(l[5]));
  free(l);
  double *e = tk_read(loom_exp(x));
  cr_assert(e[0] == 1 && e[2] == INFINITY && e[3] == 0 && isnan(e[4]));
  free(e);
  /* division by zero gives inf, like IEEE */
  double one = 1.0;
  loom_tensor *o = tk_tensor(&one, 0, NULL, LOOM_F32, dev);
  double *d = tk_read(loom_div(o, x));
  cr_assert(d[0] == INFINITY && d[1] == -INFINITY && d[2] == 0);
  free(d);
}

/* ---- gradients ---- */
typedef struct {
  int which;
} bin_ctx;

static loom_tensor *bin_fn(loom_tensor **in, void *ctx) { return BIN[((bin_ctx *)ctx)->which].fn(in[0], in[1]); }

DEVICE_TEST(elementwise, binary_gradients_with_broadcasting) {
  tk_seed(101);
  const shape_pair cases[] = {
      {2, {3, 4}, 2, {3, 4}}, {2, {3, 4}, 1, {4}}, {2, {3, 1}, 3, {2, 1, 5}}, {0, {0}, 2, {2, 3}}};
  for (size_t c = 0; c < 4; c++) {
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++) {
      const shape_pair *sp = &cases[s];
      loom_tensor *in[2] = {tk_rand_tensor(sp->na, sp->sa, -2, 2, 0.3, LOOM_F32, dev, NULL),
                            tk_rand_tensor(sp->nb, sp->sb, -2, 2, 0.5, LOOM_F32, dev, NULL)};
      loom_set_requires_grad(in[0], true);
      loom_set_requires_grad(in[1], true);
      bin_ctx ctx = {(int)c};
      char what[64];
      snprintf(what, sizeof what, "grad %s case %zu", BIN[c].name, s);
      tk_gradcheck(bin_fn, &ctx, in, 2, 1e-2, 2e-3, 1e-2, what);
    }
  }
}

DEVICE_TEST(elementwise, binary_gradient_only_one_side) {
  /* b does not require grad: only a gets one; b's grad stays NULL */
  int64_t s[2] = {2, 3};
  loom_tensor *in[2] = {tk_rand_tensor(2, s, -1, 1, 0, LOOM_F32, dev, NULL),
                        tk_rand_tensor(1, s + 1, 0.5, 2, 0, LOOM_F32, dev, NULL)};
  loom_set_requires_grad(in[0], true);
  bin_ctx ctx = {3};
  tk_gradcheck(bin_fn, &ctx, in, 2, 1e-2, 2e-3, 1e-2, "div, a only");
  cr_assert_null(loom_grad(in[1]));
}

typedef struct {
  const un_case *u;
} un_ctx;
static loom_tensor *un_fn(loom_tensor **in, void *ctx) { return apply_un(((un_ctx *)ctx)->u, in[0]); }

DEVICE_TEST(elementwise, unary_gradients) {
  tk_seed(202);
  int64_t s[2] = {3, 5};
  for (size_t c = 0; c < sizeof UN / sizeof UN[0]; c++) {
    /* keep FD away from relu's kink */
    double away = UN[c].away > 0.05 ? UN[c].away : (strcmp(UN[c].name, "relu") ? 0 : 0.05);
    loom_tensor *in[1] = {tk_rand_tensor(2, s, UN[c].lo, UN[c].hi, away, LOOM_F32, dev, NULL)};
    loom_set_requires_grad(in[0], true);
    un_ctx ctx = {&UN[c]};
    char what[64];
    snprintf(what, sizeof what, "grad %s", UN[c].name);
    tk_gradcheck(un_fn, &ctx, in, 1, 1e-2, 2e-3, 1e-2, what);
  }
}

static loom_tensor *chain_fn(loom_tensor **in, void *ctx) {
  /* sqrt(exp(a) * b + a^2) / (1 + relu(b)) — ops feeding ops, inputs used twice */
  (void)ctx;
  loom_tensor *a = in[0], *b = in[1];
  return loom_div(loom_sqrt(loom_add(loom_mul(loom_exp(a), b), loom_pow_scalar(a, 2))),
                  loom_add_scalar(loom_relu(b), 1.0));
}

DEVICE_TEST(elementwise, composed_gradient) {
  tk_seed(303);
  int64_t s[2] = {4, 3};
  loom_tensor *in[2] = {tk_rand_tensor(2, s, -1, 1, 0, LOOM_F32, dev, NULL),
                        tk_rand_tensor(1, s + 1, 0.2, 2, 0, LOOM_F32, dev, NULL)};
  loom_set_requires_grad(in[0], true);
  loom_set_requires_grad(in[1], true);
  tk_gradcheck(chain_fn, NULL, in, 2, 1e-2, 2e-3, 1e-2, "composed");
}

DEVICE_TEST(elementwise, f16_gradients_have_input_dtype) {
  int64_t s = 8;
  double *v;
  loom_tensor *x = tk_rand_tensor(1, &s, 0.5, 2, 0, LOOM_F16, dev, &v);
  loom_set_requires_grad(x, true);
  loom_tensor *y = loom_sum_all(loom_mul(x, x));
  cr_assert_eq(loom_backward(y), LOOM_OK, "%s", loom_last_error());
  loom_tensor *g = loom_grad(x);
  cr_assert_eq(loom_tensor_dtype(g), LOOM_F16);
  double want[8];
  for (int i = 0; i < 8; i++) want[i] = tk_round(2 * v[i], LOOM_F16);
  tk_assert_tensor(g, 1, &s, LOOM_F16, want, 0, tk_rtol(LOOM_F16), "d sum(x*x) f16");
  free(v);
}
