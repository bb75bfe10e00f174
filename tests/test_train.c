/* test_train.c — a whole training loop: an MLP (fused Linear+ReLU layers)
 * on synthetic 3-class data, 300 steps of mini-batch AdamW (and SGD with
 * momentum and a cosine schedule), one scope per step. The loss must fall
 * and the accuracy rise; the run must be clean under ASan/UBSan/LSan (the
 * scopes release every intermediate, the graph frees its saved tensors). */
#include <math.h>
#include <stdlib.h>

#include "support/testkit.h"

#define NPTS 384
#define DIN 4
#define NCLS 3

/* Three Gaussian-ish clusters in 4-d, plus a nonlinear twist on one feature. */
static void make_data(float *x, int64_t *y) {
  tk_seed(2024);
  const double centers[NCLS][DIN] = {{1, 0, -1, 0.5}, {-1, 1, 0, -0.5}, {0, -1, 1, 0}};
  for (int i = 0; i < NPTS; i++) {
    int c = i % NCLS;
    y[i] = c;
    for (int d = 0; d < DIN; d++) x[i * DIN + d] = (float)(centers[c][d] + tk_uniform(-0.9, 0.9));
    x[i * DIN + 3] = (float)(x[i * DIN + 0] * x[i * DIN + 1]);
  }
}

static void train(loom_device dev, int use_sgd) {
  static float xs[NPTS * DIN];
  static int64_t ys[NPTS];
  make_data(xs, ys);
  int64_t sx[2] = {NPTS, DIN}, sy = NPTS;
  loom_tensor *X = loom_keep(loom_from_host(xs, 2, sx, LOOM_F32, dev));
  loom_tensor *Y = loom_keep(loom_from_host(ys, 1, &sy, LOOM_I64, dev));
  cr_assert(X && Y, "%s", loom_last_error());
  loom_manual_seed(7);
  int64_t hidden[2] = {32, 32};
  loom_module *m = loom_mlp_new(DIN, 2, hidden, NCLS, dev);
  cr_assert_not_null(m, "%s", loom_last_error());
  int np = loom_module_num_params(m);
  loom_tensor *params[8];
  for (int i = 0; i < np; i++) params[i] = loom_module_param(m, i);
  loom_optimizer *opt;
  loom_lr_schedule sched;
  if (use_sgd) {
    loom_sgd_options o;
    loom_sgd_options_init(&o);
    o.momentum = 0.9;
    o.weight_decay = 1e-4;
    opt = loom_sgd_new(params, np, &o);
    sched = loom_lr_cosine(0.1, 20, 300, 0.005);
  } else {
    opt = loom_adamw_new(params, np, NULL);
    sched = loom_lr_constant(1e-2);
  }
  cr_assert_not_null(opt, "%s", loom_last_error());
  const int batch = 64, steps = 300;
  double first = 0, last = 0;
  for (int step = 0; step < steps; step++) {
    loom_scope_begin();
    int64_t start = (step * batch) % NPTS;
    loom_tensor *xb = loom_slice(X, 0, start, start + batch, 1);
    loom_tensor *yb = loom_slice(Y, 0, start, start + batch, 1);
    loom_tensor *loss = loom_cross_entropy(loom_module_forward(m, xb), yb);
    double lv;
    cr_assert_eq(loom_item(loss, &lv), LOOM_OK, "step %d: %s", step, loom_last_error());
    cr_assert(isfinite(lv), "step %d: loss %g", step, lv);
    cr_assert_eq(loom_optimizer_zero_grad(opt), LOOM_OK);
    cr_assert_eq(loom_backward(loss), LOOM_OK, "step %d: %s", step, loom_last_error());
    loom_optimizer_set_lr(opt, loom_lr_at(&sched, step));
    cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "step %d: %s", step, loom_last_error());
    if (step < 6) first += lv / 6;
    if (step >= steps - 6) last += lv / 6;
    loom_scope_end();
  }
  cr_assert_eq(loom_optimizer_steps(opt), steps);
  /* full-data evaluation without grad */
  bool prev = loom_no_grad_begin();
  loom_scope_begin();
  loom_tensor *logits = loom_module_forward(m, X);
  double acc = 0, full;
  cr_assert_eq(loom_accuracy(logits, Y, &acc), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_item(loom_cross_entropy(logits, Y), &full), LOOM_OK);
  loom_scope_end();
  loom_no_grad_end(prev);
  cr_assert_lt(last, 0.5 * first, "loss did not fall enough: first %g, last %g", first, last);
  cr_assert_lt(full, 0.3, "final full-data loss %g", full);
  cr_assert_gt(acc, 0.9, "accuracy %g", acc);
  loom_optimizer_free(opt);
  loom_module_free(m);
  loom_tensor_release(X);
  loom_tensor_release(Y);
}

DEVICE_TEST(train, mlp_adamw_300_steps, .timeout = 120) { train(dev, 0); }
DEVICE_TEST(train, mlp_sgd_momentum_cosine_300_steps, .timeout = 120) { train(dev, 1); }
