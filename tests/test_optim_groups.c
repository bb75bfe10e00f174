/* test_optim_groups.c — optimizer parameter groups and the one-cycle
 * schedule: SGD with Nesterov momentum over two groups with their own lr and
 * weight decay against PyTorch's numbers (tests/ref/resnet_torch.py; CPU and CUDA), AdamW
 * groups against a float64 reference, set_lr vs set_group_lr, groups added
 * after steps start with fresh state, the weight-decay split of a model and
 * the optimizers built from it, low-precision copies refreshed in every
 * group, bad arguments; OneCycleLR's values from PyTorch. */
#include <math.h>
#include <stdlib.h>

#include "support/testkit.h"

/* The device of the current test (DEVICE_TEST bodies set it; CPU otherwise). */
static loom_device cur_dev;
static bool cur_set;
static loom_device dev_now(void) { return cur_set ? cur_dev : loom_cpu(); }

static loom_tensor *leaf(const double *v, int64_t n) {
  loom_tensor *t = tk_tensor(v, 1, &n, LOOM_F32, dev_now());
  loom_set_requires_grad(t, true);
  return t;
}

static void set_grad(loom_tensor *p, const double *g) {
  loom_scope_begin();
  loom_zero_grad(p);
  loom_tensor *gt = tk_tensor(g, loom_tensor_ndim(p), loom_tensor_shape(p), LOOM_F32, dev_now());
  cr_assert_eq(loom_backward_with(p, gt), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
}

/* PyTorch: SGD(momentum 0.9, nesterov) with groups {lr 0.1, wd 5e-4} and
 * {lr 0.05, wd 0}, five steps (tests/ref/resnet_torch.py, part 3). */
DEVICE_TEST(optim_groups, sgd_nesterov_two_groups_match_pytorch) {
  cur_dev = dev, cur_set = true;
  loom_scope_begin();
  double a0[5], b0[3];
  for (int i = 0; i < 5; i++) a0[i] = cos(0.3 * i);
  for (int i = 0; i < 3; i++) b0[i] = cos(0.3 * i);
  loom_tensor *a = leaf(a0, 5), *b = leaf(b0, 3);
  loom_sgd_options o;
  loom_sgd_options_init(&o);
  o.lr = 0.1, o.momentum = 0.9, o.nesterov = true, o.weight_decay = 5e-4;
  loom_optimizer *opt = loom_sgd_new(&a, 1, &o);
  cr_assert_not_null(opt, "%s", loom_last_error());
  loom_param_group_options g;
  loom_param_group_options_init(&g);
  g.lr = 0.05, g.weight_decay = 0.0;
  cr_assert_eq(loom_optimizer_add_param_group(opt, &b, 1, &g), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_optimizer_num_groups(opt), 2);
  cr_assert_eq(loom_optimizer_group_num_params(opt, 0), 1);
  cr_assert_eq(loom_optimizer_group_num_params(opt, 1), 1);
  for (int t = 0; t < 5; t++) {
    double ga[5], gb[3];
    for (int i = 0; i < 5; i++) ga[i] = sin(0.7 * i + 1.3 * t);
    for (int i = 0; i < 3; i++) gb[i] = sin(0.7 * i + 1.3 * t);
    set_grad(a, ga);
    set_grad(b, gb);
    cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
  }
  const double want_a[5] = {0.7816445294607904, 0.6750648302026782, 0.6146576934426018, 0.5793463572185449,
                            0.50818644539773};
  const double want_b[3] = {0.8911866897230448, 0.8155140830978493, 0.7202647754713349};
  double *got_a = tk_read(a), *got_b = tk_read(b);
  tk_assert_close(got_a, want_a, 5, 2e-6, 2e-6, "group 0 (lr 0.1, wd 5e-4) vs PyTorch");
  tk_assert_close(got_b, want_b, 3, 2e-6, 2e-6, "group 1 (lr 0.05, wd 0) vs PyTorch");
  free(got_a);
  free(got_b);
  loom_optimizer_free(opt);
  loom_scope_end();
  tk_leak_check();
}

/* AdamW: each group's lr and decoupled weight decay, against float64. */
Test(optim_groups, adamw_groups_match_reference) {
  loom_scope_begin();
  tk_seed(11);
  const double lr[3] = {1e-2, 3e-2, 5e-3}, wd[3] = {0.1, 0.0, 0.02};
  loom_tensor *p[3];
  double *ref[3], m[3][4] = {{0}}, v[3][4] = {{0}};
  loom_adamw_options o;
  loom_adamw_options_init(&o);
  o.lr = lr[0], o.weight_decay = wd[0];
  for (int k = 0; k < 3; k++) {
    ref[k] = tk_rand_vals(4, -1, 1, 0, LOOM_F32);
    p[k] = leaf(ref[k], 4);
  }
  loom_optimizer *opt = loom_adamw_new(&p[0], 1, &o);
  cr_assert_not_null(opt, "%s", loom_last_error());
  for (int k = 1; k < 3; k++) {
    loom_param_group_options g;
    loom_param_group_options_init(&g);
    g.lr = lr[k], g.weight_decay = wd[k];
    cr_assert_eq(loom_optimizer_add_param_group(opt, &p[k], 1, &g), LOOM_OK, "%s", loom_last_error());
  }
  for (int t = 1; t <= 4; t++) {
    for (int k = 0; k < 3; k++) {
      double *g = tk_rand_vals(4, -2, 2, 0, LOOM_F32);
      set_grad(p[k], g);
      for (int i = 0; i < 4; i++) {
        ref[k][i] *= 1 - lr[k] * wd[k];
        m[k][i] = o.beta1 * m[k][i] + (1 - o.beta1) * g[i];
        v[k][i] = o.beta2 * v[k][i] + (1 - o.beta2) * g[i] * g[i];
        double mh = m[k][i] / (1 - pow(o.beta1, t)), vh = v[k][i] / (1 - pow(o.beta2, t));
        ref[k][i] -= lr[k] * mh / (sqrt(vh) + o.eps);
      }
      free(g);
    }
    cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
  }
  for (int k = 0; k < 3; k++) {
    double *got = tk_read(p[k]);
    char what[32];
    snprintf(what, sizeof what, "adamw group %d", k);
    tk_assert_close(got, ref[k], 4, 2e-6, 1e-5, what);
    free(got);
    free(ref[k]);
  }
  loom_optimizer_free(opt);
  loom_scope_end();
  tk_leak_check();
}

Test(optim_groups, lr_control_and_defaults) {
  loom_scope_begin();
  double one[2] = {1, 1};
  loom_tensor *a = leaf(one, 2), *b = leaf(one, 2), *c = leaf(one, 2);
  loom_sgd_options o;
  loom_sgd_options_init(&o);
  o.lr = 0.2, o.weight_decay = 0.01;
  loom_optimizer *opt = loom_sgd_new(&a, 1, &o);
  /* Defaults: group 0's lr, the optimizer's weight decay. */
  cr_assert_eq(loom_optimizer_add_param_group(opt, &b, 1, NULL), LOOM_OK, "%s", loom_last_error());
  cr_assert_float_eq(loom_optimizer_get_group_lr(opt, 1), 0.2, 1e-15);
  cr_assert_float_eq(loom_optimizer_get_group_weight_decay(opt, 1), 0.01, 1e-15);
  loom_param_group_options g;
  loom_param_group_options_init(&g);
  g.lr = 0.5;
  cr_assert_eq(loom_optimizer_add_param_group(opt, &c, 1, &g), LOOM_OK);
  cr_assert_float_eq(loom_optimizer_get_group_lr(opt, 2), 0.5, 1e-15);
  /* set_lr: every group (what a schedule does); set_group_lr: one. */
  loom_optimizer_set_lr(opt, 0.3);
  for (int k = 0; k < 3; k++) cr_assert_float_eq(loom_optimizer_get_group_lr(opt, k), 0.3, 1e-15);
  cr_assert_eq(loom_optimizer_set_group_lr(opt, 1, 0.7), LOOM_OK);
  cr_assert_float_eq(loom_optimizer_get_group_lr(opt, 1), 0.7, 1e-15);
  cr_assert_float_eq(loom_optimizer_get_lr(opt), 0.3, 1e-15);
  cr_assert_eq(loom_optimizer_set_group_lr(opt, 0, 0.25), LOOM_OK);
  cr_assert_float_eq(loom_optimizer_get_lr(opt), 0.25, 1e-15, "get_lr is group 0's");
  cr_assert_eq(loom_optimizer_set_group_weight_decay(opt, 2, 0.0), LOOM_OK);
  /* One plain SGD step: p -= lr * (g + wd * p) per group. */
  double g1[2] = {1, -1};
  set_grad(a, g1);
  set_grad(b, g1);
  set_grad(c, g1);
  cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
  double wa[2] = {1 - 0.25 * 1.01, 1 - 0.25 * (-0.99)}, wb[2] = {1 - 0.7 * 1.01, 1 - 0.7 * (-0.99)},
         wc[2] = {1 - 0.3, 1 + 0.3};
  int64_t two = 2;
  tk_assert_tensor(a, 1, &two, LOOM_F32, wa, 1e-7, 1e-6, "group 0");
  tk_assert_tensor(b, 1, &two, LOOM_F32, wb, 1e-7, 1e-6, "group 1");
  tk_assert_tensor(c, 1, &two, LOOM_F32, wc, 1e-7, 1e-6, "group 2");
  cr_assert(isnan(loom_optimizer_get_group_lr(opt, 3)));
  cr_assert(isnan(loom_optimizer_get_group_weight_decay(opt, -1)));
  cr_assert_eq(loom_optimizer_group_num_params(opt, 9), 0);
  loom_optimizer_free(opt);
  loom_scope_end();
  tk_leak_check();
}

Test(optim_groups, bad_arguments) {
  loom_scope_begin();
  double one[2] = {1, 1};
  loom_tensor *a = leaf(one, 2), *b = leaf(one, 2);
  loom_optimizer *opt = loom_sgd_new(&a, 1, NULL);
  tk_assert_error(loom_optimizer_add_param_group(opt, &a, 1, NULL), LOOM_ERR_INVALID_ARG, "already in the optimizer");
  loom_tensor *twice[2] = {b, b};
  tk_assert_error(loom_optimizer_add_param_group(opt, twice, 2, NULL), LOOM_ERR_INVALID_ARG, "given twice");
  tk_assert_error(loom_optimizer_add_param_group(opt, &b, 0, NULL), LOOM_ERR_INVALID_ARG, "at least one");
  loom_param_group_options g;
  loom_param_group_options_init(&g);
  g.lr = -1;
  tk_assert_error(loom_optimizer_add_param_group(opt, &b, 1, &g), LOOM_ERR_INVALID_ARG, "lr", "-1");
  loom_param_group_options_init(&g);
  g.struct_size = 1000;
  tk_assert_error(loom_optimizer_add_param_group(opt, &b, 1, &g), LOOM_ERR_INVALID_ARG, "options.struct_size");
  int64_t two = 2;
  loom_tensor *h = loom_zeros(1, &two, LOOM_F16, loom_cpu());
  tk_assert_error(loom_optimizer_add_param_group(opt, &h, 1, NULL), LOOM_ERR_INVALID_ARG, "f32");
  tk_assert_error(loom_optimizer_add_param_group(NULL, &b, 1, NULL), LOOM_ERR_INVALID_ARG, "NULL");
  tk_assert_error(loom_optimizer_set_group_lr(opt, 1, 0.1), LOOM_ERR_INVALID_ARG, "group 1 does not exist");
  tk_assert_error(loom_optimizer_set_group_lr(opt, 0, NAN), LOOM_ERR_INVALID_ARG, "finite");
  tk_assert_error(loom_optimizer_set_group_weight_decay(opt, 0, -0.5), LOOM_ERR_INVALID_ARG, "weight_decay");
  /* Failures left the optimizer as it was. */
  cr_assert_eq(loom_optimizer_num_groups(opt), 1);
  cr_assert_eq(loom_optimizer_add_param_group(opt, &b, 1, NULL), LOOM_OK);
  cr_assert_eq(loom_optimizer_num_groups(opt), 2);
  loom_optimizer_free(opt);
  loom_scope_end();
  tk_leak_check();
}

/* A group added after some steps starts its momentum fresh: it ends where
 * an optimizer created over it alone at that point would. */
DEVICE_TEST(optim_groups, late_group_starts_fresh) {
  cur_dev = dev, cur_set = true;
  loom_scope_begin();
  double init[3] = {0.5, -1, 2}, ga[3] = {0.1, -0.2, 0.3}, gb[3] = {1, 2, -3};
  loom_tensor *a = leaf(init, 3), *b = leaf(init, 3), *solo = leaf(init, 3);
  loom_sgd_options o;
  loom_sgd_options_init(&o);
  o.lr = 0.1, o.momentum = 0.9, o.nesterov = true;
  loom_optimizer *opt = loom_sgd_new(&a, 1, &o);
  for (int s = 0; s < 2; s++) {
    set_grad(a, ga);
    cr_assert_eq(loom_optimizer_step(opt), LOOM_OK);
  }
  loom_param_group_options g;
  loom_param_group_options_init(&g);
  g.lr = 0.05;
  cr_assert_eq(loom_optimizer_add_param_group(opt, &b, 1, &g), LOOM_OK, "%s", loom_last_error());
  o.lr = 0.05;
  loom_optimizer *o1 = loom_sgd_new(&solo, 1, &o);
  for (int s = 0; s < 3; s++) {
    set_grad(a, ga);
    set_grad(b, gb);
    set_grad(solo, gb);
    cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_optimizer_step(o1), LOOM_OK);
  }
  float vb[3], vs[3];
  cr_assert_eq(loom_to_host(b, vb, sizeof vb, LOOM_F32), LOOM_OK);
  cr_assert_eq(loom_to_host(solo, vs, sizeof vs, LOOM_F32), LOOM_OK);
  for (int i = 0; i < 3; i++) cr_assert_eq(vb[i], vs[i], "element %d: %.9g vs %.9g", i, vb[i], vs[i]);
  cr_assert_neq(vb[0], (float)init[0]);
  cr_assert_eq(loom_optimizer_steps(opt), 5);
  loom_optimizer_free(opt);
  loom_optimizer_free(o1);
  loom_scope_end();
  tk_leak_check();
}

/* An MLP (weights + biases): the split, the two-group optimizers, and under
 * bf16 the low-precision copies of both groups refreshed by the step. */
Test(optim_groups, module_split_and_optimizer_for_module) {
  loom_scope_begin();
  loom_manual_seed(3);
  int64_t hidden[1] = {8};
  loom_module *mlp = loom_mlp_new(4, 1, hidden, 3, loom_cpu());
  loom_tensor *d[4], *nd[4];
  int n_d = -1, n_nd = -1;
  cr_assert_eq(loom_module_split_decay(mlp, d, &n_d, nd, &n_nd), LOOM_OK);
  cr_assert_eq(n_d, 2);
  cr_assert_eq(n_nd, 2);
  cr_assert_eq(d[0], loom_module_param(mlp, 0));
  cr_assert_eq(d[1], loom_module_param(mlp, 2));
  cr_assert_eq(nd[0], loom_module_param(mlp, 1));
  cr_assert_eq(nd[1], loom_module_param(mlp, 3));
  cr_assert_eq(loom_module_split_decay(NULL, d, &n_d, nd, &n_nd), LOOM_ERR_INVALID_ARG);

  cr_assert_eq(loom_module_set_precision(mlp, LOOM_PRECISION_MIXED_BF16, false), LOOM_OK);
  loom_sgd_options o;
  loom_sgd_options_init(&o);
  o.lr = 0.1, o.momentum = 0.9, o.nesterov = true, o.weight_decay = 0.05;
  loom_optimizer *opt = loom_sgd_new_for_module(mlp, &o);
  cr_assert_not_null(opt, "%s", loom_last_error());
  cr_assert_eq(loom_optimizer_num_groups(opt), 2);
  cr_assert_float_eq(loom_optimizer_get_group_weight_decay(opt, 0), 0.05, 1e-15);
  cr_assert_float_eq(loom_optimizer_get_group_weight_decay(opt, 1), 0.0, 1e-15);
  cr_assert_float_eq(loom_optimizer_get_group_lr(opt, 1), 0.1, 1e-15);
  int64_t xs[2] = {5, 4};
  int64_t labels[5] = {0, 1, 2, 0, 1}, n5 = 5;
  for (int s = 0; s < 2; s++) {
    loom_scope_begin();
    loom_tensor *x = loom_randn(2, xs, LOOM_F32, loom_cpu());
    loom_tensor *y = loom_from_host(labels, 1, &n5, LOOM_I64, loom_cpu());
    loom_tensor *loss = loom_cross_entropy(loom_module_forward(mlp, x), y);
    cr_assert_eq(loom_optimizer_zero_grad(opt), LOOM_OK);
    cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
    loom_scope_end();
  }
  /* Every parameter's copy is its master rounded to bf16, in both groups. */
  for (int i = 0; i < 4; i++) {
    loom_tensor *p = loom_module_param(mlp, i), *c = loom_amp_lowp_copy(p);
    cr_assert_not_null(c);
    double *vp = tk_read(p), *vc = tk_read(c);
    for (int64_t j = 0; j < loom_tensor_numel(p); j++)
      cr_assert_eq(vc[j], tk_round(vp[j], LOOM_BF16), "param %d element %lld", i, (long long)j);
    free(vp);
    free(vc);
  }
  loom_optimizer_free(opt);

  /* AdamW: the same two groups. */
  loom_adamw_options ao;
  loom_adamw_options_init(&ao);
  opt = loom_adamw_new_for_module(mlp, &ao);
  cr_assert_not_null(opt, "%s", loom_last_error());
  cr_assert_eq(loom_optimizer_num_groups(opt), 2);
  cr_assert_float_eq(loom_optimizer_get_group_weight_decay(opt, 0), 0.01, 1e-15);
  loom_optimizer_free(opt);
  cr_assert_null(loom_sgd_new_for_module(NULL, &o));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "module is NULL");
  loom_module *relu = loom_relu_new();
  cr_assert_null(loom_adamw_new_for_module(relu, NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "no parameters");
  loom_module_free(relu);
  loom_module_free(mlp);
  loom_scope_end();
  tk_leak_check();
}

/* torch.optim.lr_scheduler.OneCycleLR(max_lr=0.4, total_steps=100,
 * pct_start=0.25, anneal_strategy='cos', div_factor=25,
 * final_div_factor=1e4) (tests/ref/resnet_torch.py, part 2). */
Test(lr, one_cycle_matches_pytorch) {
  loom_lr_schedule s = loom_lr_one_cycle(0.4, 25, 100, 25.0, 1e4);
  cr_assert_eq(s.kind, LOOM_LR_ONE_CYCLE);
  const struct { int step; double lr; } want[] = {
      {0, 0.016000000000000014}, {1, 0.017642586616228417}, {10, 0.15830674334031603},
      {23, 0.3983574133837716},  {24, 0.4},                 {25, 0.3998245667215076},
      {50, 0.29265963638714426}, {98, 0.00017703327849240245}, {99, 1.6e-06}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    cr_assert_float_eq(loom_lr_at(&s, want[i].step), want[i].lr, 1e-12 + 1e-12 * want[i].lr, "step %d: %.17g vs %.17g",
                       want[i].step, loom_lr_at(&s, want[i].step), want[i].lr);
  /* Rises through the warm-up, falls after it; past the end it stays at the floor. */
  for (int t = 1; t < 100; t++) {
    double a = loom_lr_at(&s, t - 1), b = loom_lr_at(&s, t);
    cr_assert(t < 25 ? b > a : b < a, "step %d: %g then %g", t, a, b);
  }
  cr_assert_float_eq(loom_lr_at(&s, 500), 1.6e-06, 1e-15);
  cr_assert_float_eq(loom_lr_at(&s, -3), 0.016, 1e-12);
  /* Degenerate arguments are clamped, never NaN. */
  loom_lr_schedule d = loom_lr_one_cycle(1.0, 0, 1, 0, -1);
  for (int t = 0; t < 4; t++) cr_assert(isfinite(loom_lr_at(&d, t)));
  tk_leak_check();
}
