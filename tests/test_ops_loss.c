/* test_ops_loss.c — log_softmax over any dim (forward against float64,
 * stability with large logits, gradients by finite differences including
 * when the incoming gradient is a strided view), cross_entropy on [N, C]
 * logits with i32 / i64 / u8 labels (value, gradient, f16 logits, strided
 * labels), and accuracy / count_correct. */
#include <math.h>
#include <stdlib.h>

#include "support/testkit.h"

static double *ref_log_softmax(const double *v, int nd, const int64_t *sh, int dim) {
  int64_t n = tk_numel(nd, sh), C = sh[dim], inner = 1;
  for (int d = dim + 1; d < nd; d++) inner *= sh[d];
  double *o = malloc((size_t)n * sizeof *o);
  for (int64_t base = 0; base < n; base++) {
    if ((base / inner) % C != 0) continue; /* first element of each slice along dim */
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < C; j++) m = fmax(m, v[base + j * inner]);
    for (int64_t j = 0; j < C; j++) s += exp(v[base + j * inner] - m);
    for (int64_t j = 0; j < C; j++) o[base + j * inner] = v[base + j * inner] - m - log(s);
  }
  return o;
}

DEVICE_TEST(log_softmax, forward_any_dim) {
  tk_seed(61);
  int64_t s[3] = {3, 5, 4};
  loom_dtype dts[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
  for (int t = 0; t < 3; t++) {
    double *v;
    loom_tensor *x = tk_rand_tensor(3, s, -4, 4, 0, dts[t], dev, &v);
    for (int dim = -3; dim < 3; dim++) {
      double *want = ref_log_softmax(v, 3, s, (dim + 3) % 3);
      for (int i = 0; i < 60; i++) want[i] = tk_round(want[i], dts[t]);
      char what[64];
      snprintf(what, sizeof what, "log_softmax %s dim %d", loom_dtype_name(dts[t]), dim);
      tk_assert_tensor(loom_log_softmax(x, dim), 3, s, dts[t], want, dts[t] == LOOM_F32 ? 2e-6 : 0.02, tk_rtol(dts[t]) * 2, what);
      free(want);
    }
    free(v);
  }
}

DEVICE_TEST(log_softmax, large_logits_are_stable) {
  double v[4] = {1000, 1001, -1000, 999};
  int64_t s = 4;
  loom_tensor *x = tk_tensor(v, 1, &s, LOOM_F32, dev);
  double *want = ref_log_softmax(v, 1, &s, 0);
  tk_assert_tensor(loom_log_softmax(x, 0), 1, &s, LOOM_F32, want, 1e-5, 1e-6, "log_softmax large");
  free(want);
}

typedef struct {
  int dim;
} ls_ctx;
static loom_tensor *ls_fn(loom_tensor **in, void *c) { return loom_log_softmax(in[0], ((ls_ctx *)c)->dim); }

DEVICE_TEST(log_softmax, gradients_any_dim) {
  tk_seed(62);
  int64_t s[3] = {2, 4, 3};
  for (int dim = 0; dim < 3; dim++) {
    loom_tensor *in[1] = {tk_rand_tensor(3, s, -2, 2, 0, LOOM_F32, dev, NULL)};
    loom_set_requires_grad(in[0], true);
    ls_ctx c = {dim};
    char what[48];
    snprintf(what, sizeof what, "log_softmax grad dim %d", dim);
    tk_gradcheck(ls_fn, &c, in, 1, 1e-2, 2e-3, 1e-2, what);
  }
}

static loom_tensor *ls_t_fn(loom_tensor **in, void *c) {
  /* the gradient reaching log_softmax arrives through a transpose: strided */
  (void)c;
  return loom_transpose(loom_log_softmax(in[0], 1), 0, 1);
}

DEVICE_TEST(log_softmax, gradient_through_transposed_output) {
  tk_seed(63);
  int64_t s[2] = {3, 5};
  loom_tensor *in[1] = {tk_rand_tensor(2, s, -2, 2, 0, LOOM_F32, dev, NULL)};
  loom_set_requires_grad(in[0], true);
  tk_gradcheck(ls_t_fn, NULL, in, 1, 1e-2, 2e-3, 1e-2, "transpose(log_softmax(x, 1))");
}

/* ---- cross entropy ---- */
static double ref_ce(const double *x, const int64_t *lab, int64_t N, int64_t C) {
  double tot = 0;
  for (int64_t i = 0; i < N; i++) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < C; j++) m = fmax(m, x[i * C + j]);
    for (int64_t j = 0; j < C; j++) s += exp(x[i * C + j] - m);
    tot += m + log(s) - x[i * C + lab[i]];
  }
  return tot / (double)N;
}

DEVICE_TEST(cross_entropy, value_for_each_label_dtype) {
  tk_seed(71);
  int64_t N = 37, C = 11, s[2] = {37, 11};
  double *vx;
  loom_tensor *x = tk_rand_tensor(2, s, -5, 5, 0, LOOM_F32, dev, &vx);
  int64_t lab[37];
  double labd[37];
  for (int i = 0; i < N; i++) labd[i] = (double)(lab[i] = (int64_t)tk_uniform(0, (double)C) % C);
  double want = ref_ce(vx, lab, N, C);
  loom_dtype ldt[3] = {LOOM_I32, LOOM_I64, LOOM_U8};
  for (int k = 0; k < 3; k++) {
    loom_tensor *l = tk_tensor(labd, 1, &N, ldt[k], dev);
    loom_tensor *ce = loom_cross_entropy(x, l);
    tk_assert_tensor(ce, 0, NULL, LOOM_F32, &want, 1e-5, 1e-5, loom_dtype_name(ldt[k]));
  }
  /* f16 logits: still an f32 result */
  loom_tensor *xh = loom_cast(x, LOOM_F16);
  double *vh = tk_read(xh);
  double wh = ref_ce(vh, lab, N, C);
  tk_assert_tensor(loom_cross_entropy(xh, tk_tensor(labd, 1, &N, LOOM_I64, dev)), 0, NULL, LOOM_F32, &wh, 1e-4, 1e-4, "ce f16");
  /* labels as a strided view: every other element of a longer vector */
  double lab2[74];
  for (int i = 0; i < 74; i++) lab2[i] = i % 2 ? 0 : labd[i / 2];
  int64_t n2 = 74;
  loom_tensor *ls = loom_slice(tk_tensor(lab2, 1, &n2, LOOM_I32, dev), 0, 0, 74, 2);
  tk_assert_tensor(loom_cross_entropy(x, ls), 0, NULL, LOOM_F32, &want, 1e-5, 1e-5, "ce strided labels");
  /* logits as a transposed view */
  loom_tensor *xt = loom_transpose(loom_contiguous(loom_transpose(x, 0, 1)), 0, 1);
  cr_assert(!loom_tensor_is_contiguous(xt));
  tk_assert_tensor(loom_cross_entropy(xt, ls), 0, NULL, LOOM_F32, &want, 1e-5, 1e-5, "ce transposed logits");
  free(vx);
  free(vh);
}

typedef struct {
  loom_tensor *labels;
} ce_ctx;
static loom_tensor *ce_fn(loom_tensor **in, void *c) { return loom_cross_entropy(in[0], ((ce_ctx *)c)->labels); }

DEVICE_TEST(cross_entropy, gradient) {
  tk_seed(72);
  int64_t s[2] = {5, 4}, N = 5;
  double labd[5] = {0, 3, 1, 1, 2};
  loom_dtype ldt[3] = {LOOM_I32, LOOM_I64, LOOM_U8};
  for (int k = 0; k < 3; k++) {
    loom_tensor *in[1] = {tk_rand_tensor(2, s, -2, 2, 0, LOOM_F32, dev, NULL)};
    loom_set_requires_grad(in[0], true);
    ce_ctx c = {tk_tensor(labd, 1, &N, ldt[k], dev)};
    tk_gradcheck(ce_fn, &c, in, 1, 1e-2, 1e-3, 1e-2, "cross_entropy grad");
  }
}

DEVICE_TEST(cross_entropy, scaled_loss_gradient) {
  /* backward of 3 * ce: the incoming gradient is not 1 */
  double v[6] = {1, 2, 3, -1, 0, 1}, labd[2] = {2, 0};
  int64_t s[2] = {2, 3}, N = 2;
  loom_tensor *x = tk_tensor(v, 2, s, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  loom_tensor *l = loom_mul_scalar(loom_cross_entropy(x, tk_tensor(labd, 1, &N, LOOM_I64, dev)), 3.0);
  cr_assert_eq(loom_backward(l), LOOM_OK, "%s", loom_last_error());
  double want[6];
  for (int i = 0; i < 2; i++) {
    double m = fmax(fmax(v[i * 3], v[i * 3 + 1]), v[i * 3 + 2]), z = 0;
    for (int j = 0; j < 3; j++) z += exp(v[i * 3 + j] - m);
    for (int j = 0; j < 3; j++) want[i * 3 + j] = 3.0 / 2 * (exp(v[i * 3 + j] - m) / z - (j == (int)labd[i]));
  }
  tk_assert_tensor(loom_grad(x), 2, s, LOOM_F32, want, 1e-6, 1e-5, "3*ce grad");
}

DEVICE_TEST(accuracy, counts_and_fraction) {
  double v[12] = {0.1, 0.9, 0.0, /* 1 */ 2, 1, 0, /* 0 */ 0, 0, 5, /* 2 */ 3, 3, 1 /* tie -> 0 */};
  int64_t s[2] = {4, 3}, N = 4;
  loom_tensor *x = tk_tensor(v, 2, s, LOOM_F32, dev);
  double labs[4] = {1, 2, 2, 0};
  loom_dtype ldt[3] = {LOOM_I32, LOOM_I64, LOOM_U8};
  for (int k = 0; k < 3; k++) {
    loom_tensor *l = tk_tensor(labs, 1, &N, ldt[k], dev);
    int64_t c = -1;
    cr_assert_eq(loom_count_correct(x, l, &c), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(c, 3);
    double acc = -1;
    cr_assert_eq(loom_accuracy(x, l, &acc), LOOM_OK, "%s", loom_last_error());
    cr_assert_float_eq(acc, 0.75, 1e-12);
  }
  /* zero rows: 0 correct, accuracy 0 */
  int64_t s0[2] = {0, 3}, n0 = 0;
  loom_tensor *e = loom_zeros(2, s0, LOOM_F32, dev);
  double acc = -1;
  cr_assert_eq(loom_accuracy(e, loom_zeros(1, &n0, LOOM_I64, dev), &acc), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(acc, 0.0);
}
