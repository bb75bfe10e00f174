/* test_nn_optim.c — nn: Sequential fuses Linear→ReLU (one child, name shows
 * ", relu", same output as the unfused ops), MLP builder structure and
 * parameter count, initializer bounds and seeding; optim: SGD (plain,
 * momentum, dampening, nesterov, weight decay) and AdamW updates over
 * several steps against a hand-written float64 reference, parameters
 * without a gradient left alone, lr get/set and step count; LR schedules
 * (constant, step, cosine with warm-up) and one attached to the optimizer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support/testkit.h"

Test(nn, sequential_fuses_linear_relu) {
  loom_scope_begin();
  loom_manual_seed(5);
  loom_module *seq = loom_sequential_new();
  loom_module *l1 = loom_linear_new(4, 8, true, LOOM_INIT_KAIMING_UNIFORM, loom_cpu());
  loom_module *l2 = loom_linear_new(8, 3, false, LOOM_INIT_XAVIER_NORMAL, loom_cpu());
  cr_assert_str_eq(loom_module_name(l1), "Linear(4, 8)");
  cr_assert_eq(loom_sequential_add(seq, l1), LOOM_OK);
  cr_assert_eq(loom_sequential_add(seq, loom_relu_new()), LOOM_OK);
  cr_assert_eq(loom_sequential_add(seq, l2), LOOM_OK);
  cr_assert_eq(loom_sequential_add(seq, loom_relu_new()), LOOM_OK);
  cr_assert_eq(loom_sequential_add(seq, loom_relu_new()), LOOM_OK); /* nothing left to fuse into */
  cr_assert_eq(loom_module_num_children(seq), 3);
  cr_assert_str_eq(loom_module_name(loom_module_child(seq, 0)), "Linear(4, 8, relu)");
  cr_assert_str_eq(loom_module_name(loom_module_child(seq, 1)), "Linear(8, 3, relu)");
  cr_assert_str_eq(loom_module_name(loom_module_child(seq, 2)), "ReLU");
  cr_assert_str_eq(loom_module_name(seq), "Sequential[3]");
  cr_assert_eq(loom_module_num_params(seq), 3);
  cr_assert_eq(loom_module_num_param_elements(seq), 4 * 8 + 8 + 8 * 3);
  loom_tensor *w1 = loom_module_param(seq, 0), *b1 = loom_module_param(seq, 1), *w2 = loom_module_param(seq, 2);
  cr_assert_null(loom_module_param(seq, 3));
  cr_assert(loom_requires_grad(w1) && loom_requires_grad(b1) && loom_requires_grad(w2));
  int64_t sx[2] = {5, 4};
  loom_tensor *x = loom_randn(2, sx, LOOM_F32, loom_cpu());
  loom_tensor *y = loom_module_forward(seq, x);
  loom_tensor *ref = loom_relu(loom_matmul_ex(loom_relu(loom_add(loom_matmul_ex(x, w1, false, true), b1)), w2, false, true));
  double *a = tk_read(y), *b = tk_read(ref);
  tk_assert_close(a, b, 15, 1e-6, 1e-5, "Sequential vs unfused ops");
  free(a);
  free(b);
  /* forward propagates NULL with the root cause */
  int64_t bad[2] = {5, 7};
  cr_assert_null(loom_module_forward(seq, loom_matmul(x, loom_zeros(2, bad, LOOM_F32, loom_cpu()))));
  tk_assert_error(loom_last_status(), LOOM_ERR_SHAPE, "matmul");
  cr_assert_null(loom_module_forward(seq, loom_zeros(2, bad, LOOM_F32, loom_cpu())));
  tk_assert_error(loom_last_status(), LOOM_ERR_SHAPE, "linear", "[5, 7]");
  loom_module_free(seq);
  loom_scope_end();
  tk_leak_check();
}

Test(nn, mlp_builder) {
  int64_t hidden[2] = {128, 64};
  loom_module *m = loom_mlp_new(784, 2, hidden, 10, loom_cpu());
  cr_assert_not_null(m, "%s", loom_last_error());
  cr_assert_eq(loom_module_num_children(m), 3);
  cr_assert_str_eq(loom_module_name(loom_module_child(m, 0)), "Linear(784, 128, relu)");
  cr_assert_str_eq(loom_module_name(loom_module_child(m, 1)), "Linear(128, 64, relu)");
  cr_assert_str_eq(loom_module_name(loom_module_child(m, 2)), "Linear(64, 10)");
  cr_assert_eq(loom_module_num_params(m), 6);
  cr_assert_eq(loom_module_num_param_elements(m), 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10);
  const int64_t shapes[6][2] = {{128, 784}, {128, 0}, {64, 128}, {64, 0}, {10, 64}, {10, 0}};
  for (int i = 0; i < 6; i++) {
    loom_tensor *p = loom_module_param(m, i);
    cr_assert_eq(loom_tensor_ndim(p), shapes[i][1] ? 2 : 1);
    cr_assert_eq(loom_tensor_dim(p, 0), shapes[i][0]);
    if (shapes[i][1]) cr_assert_eq(loom_tensor_dim(p, 1), shapes[i][1]);
  }
  /* Kaiming-uniform hidden weights stay within sqrt(6/fan_in), default bias within 1/sqrt(fan_in) */
  double *w0 = tk_read(loom_module_param(m, 0)), *b0 = tk_read(loom_module_param(m, 1));
  double bw = sqrt(6.0 / 784), bb = 1 / sqrt(784.0), mx = 0;
  for (int i = 0; i < 128 * 784; i++) {
    cr_assert(fabs(w0[i]) <= bw * (1 + 1e-6));
    mx = fmax(mx, fabs(w0[i]));
  }
  cr_assert_gt(mx, 0.9 * bw, "weights do not fill their range");
  for (int i = 0; i < 128; i++) cr_assert(fabs(b0[i]) <= bb * (1 + 1e-6));
  free(w0);
  free(b0);
  /* no hidden layers: one Linear */
  loom_module *lin = loom_mlp_new(3, 0, NULL, 2, loom_cpu());
  cr_assert_eq(loom_module_num_children(lin), 1);
  cr_assert_str_eq(loom_module_name(loom_module_child(lin, 0)), "Linear(3, 2)");
  loom_module_free(lin);
  loom_module_free(m);
  tk_leak_check();
}

Test(nn, init_is_seeded) {
  int64_t s[2] = {8, 8};
  loom_tensor *a = loom_empty(2, s, LOOM_F32, loom_cpu()), *b = loom_empty(2, s, LOOM_F32, loom_cpu());
  loom_manual_seed(77);
  cr_assert_eq(loom_init_(a, LOOM_INIT_KAIMING_NORMAL, 8, 8), LOOM_OK);
  loom_manual_seed(77);
  cr_assert_eq(loom_init_(b, LOOM_INIT_KAIMING_NORMAL, 8, 8), LOOM_OK);
  double *va = tk_read(a), *vb = tk_read(b);
  for (int i = 0; i < 64; i++) cr_assert_eq(va[i], vb[i]);
  /* N(0, 2/fan_in): the sample std is in the right ballpark */
  double ss = 0;
  for (int i = 0; i < 64; i++) ss += va[i] * va[i];
  cr_assert(fabs(sqrt(ss / 64) - 0.5) < 0.15, "kaiming normal std %g", sqrt(ss / 64));
  free(va);
  free(vb);
  loom_tensor_release(a);
  loom_tensor_release(b);
  tk_leak_check();
}

/* ---- optimizers vs float64 ---- */
typedef struct {
  double lr, mom, damp, wd;
  bool nesterov;
} sgd_cfg;

static void set_grad(loom_tensor *p, const double *g) {
  loom_scope_begin();
  loom_zero_grad(p);
  loom_tensor *gt = tk_tensor(g, loom_tensor_ndim(p), loom_tensor_shape(p), LOOM_F32, loom_cpu());
  cr_assert_eq(loom_backward_with(p, gt), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
}

Test(optim, sgd_matches_reference) {
  const sgd_cfg cfgs[] = {{0.1, 0, 0, 0, false},   {0.05, 0.9, 0, 0, false}, {0.05, 0.9, 0.3, 0, false},
                          {0.05, 0.9, 0, 0, true}, {0.1, 0, 0, 0.01, false}, {0.02, 0.8, 0.1, 0.05, false},
                          {0.02, 0.8, 0, 0.05, true}};
  for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
    tk_seed(300 + c);
    int64_t n = 7;
    double *p0 = tk_rand_vals(n, -1, 1, 0, LOOM_F32);
    loom_tensor *p = tk_tensor(p0, 1, &n, LOOM_F32, loom_cpu());
    loom_set_requires_grad(p, true);
    loom_sgd_options o;
    loom_sgd_options_init(&o);
    o.lr = cfgs[c].lr;
    o.momentum = cfgs[c].mom;
    o.dampening = cfgs[c].damp;
    o.weight_decay = cfgs[c].wd;
    o.nesterov = cfgs[c].nesterov;
    loom_optimizer *opt = loom_sgd_new(&p, 1, &o);
    cr_assert_not_null(opt, "%s", loom_last_error());
    double ref[7], buf[7];
    memcpy(ref, p0, sizeof ref);
    for (int step = 0; step < 5; step++) {
      double *g = tk_rand_vals(n, -1, 1, 0, LOOM_F32);
      set_grad(p, g);
      cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
      for (int i = 0; i < n; i++) {
        double d = g[i] + cfgs[c].wd * ref[i];
        if (cfgs[c].mom > 0) {
          buf[i] = step == 0 ? d : cfgs[c].mom * buf[i] + (1 - cfgs[c].damp) * d;
          d = cfgs[c].nesterov ? d + cfgs[c].mom * buf[i] : buf[i];
        }
        ref[i] -= cfgs[c].lr * d;
      }
      double *got = tk_read(p);
      char what[48];
      snprintf(what, sizeof what, "sgd cfg %zu step %d", c, step);
      tk_assert_close(got, ref, n, 1e-6, 1e-5, what);
      free(got);
      free(g);
    }
    cr_assert_eq(loom_optimizer_steps(opt), 5);
    loom_optimizer_free(opt);
    loom_tensor_release(p);
    free(p0);
  }
  tk_leak_check();
}

Test(optim, adamw_matches_reference) {
  const double cfgs[][5] = {{1e-2, 0.9, 0.999, 1e-8, 0.01}, {5e-2, 0.8, 0.99, 1e-6, 0.0}, {1e-3, 0.0, 0.9, 1e-3, 0.1}};
  for (size_t c = 0; c < 3; c++) {
    tk_seed(400 + c);
    int64_t s[2] = {3, 4};
    double *p0 = tk_rand_vals(12, -1, 1, 0, LOOM_F32);
    loom_tensor *p = tk_tensor(p0, 2, s, LOOM_F32, loom_cpu());
    loom_set_requires_grad(p, true);
    loom_adamw_options o;
    loom_adamw_options_init(&o);
    o.lr = cfgs[c][0];
    o.beta1 = cfgs[c][1];
    o.beta2 = cfgs[c][2];
    o.eps = cfgs[c][3];
    o.weight_decay = cfgs[c][4];
    loom_optimizer *opt = loom_adamw_new(&p, 1, &o);
    cr_assert_not_null(opt, "%s", loom_last_error());
    double ref[12], m[12] = {0}, v[12] = {0};
    memcpy(ref, p0, sizeof ref);
    for (int t = 1; t <= 6; t++) {
      double *g = tk_rand_vals(12, -2, 2, 0, LOOM_F32);
      set_grad(p, g);
      cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
      for (int i = 0; i < 12; i++) {
        ref[i] *= 1 - o.lr * o.weight_decay;
        m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
        v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
        double mh = m[i] / (1 - pow(o.beta1, t)), vh = v[i] / (1 - pow(o.beta2, t));
        ref[i] -= o.lr * mh / (sqrt(vh) + o.eps);
      }
      double *got = tk_read(p);
      char what[48];
      snprintf(what, sizeof what, "adamw cfg %zu step %d", c, t);
      tk_assert_close(got, ref, 12, 2e-6, 1e-5, what);
      free(got);
      free(g);
    }
    loom_optimizer_free(opt);
    loom_tensor_release(p);
    free(p0);
  }
  tk_leak_check();
}

Test(optim, params_without_grad_untouched_and_lr_control) {
  loom_scope_begin();
  int64_t n = 3;
  double one[3] = {1, 1, 1}, g[3] = {1, 2, 3};
  loom_tensor *a = tk_tensor(one, 1, &n, LOOM_F32, loom_cpu()), *b = tk_tensor(one, 1, &n, LOOM_F32, loom_cpu());
  loom_set_requires_grad(a, true);
  loom_set_requires_grad(b, true);
  loom_tensor *ps[2] = {a, b};
  loom_optimizer *o = loom_sgd_new(ps, 2, NULL); /* defaults: lr 0.01 */
  cr_assert_float_eq(loom_optimizer_get_lr(o), 0.01, 1e-15);
  loom_optimizer_set_lr(o, 0.5);
  cr_assert_float_eq(loom_optimizer_get_lr(o), 0.5, 1e-15);
  set_grad(a, g);
  cr_assert_eq(loom_optimizer_step(o), LOOM_OK);
  double wa[3] = {0.5, 0, -0.5};
  tk_assert_tensor(a, 1, &n, LOOM_F32, wa, 0, 0, "updated with lr 0.5");
  tk_assert_tensor(b, 1, &n, LOOM_F32, one, 0, 0, "no grad: untouched");
  cr_assert_eq(loom_optimizer_zero_grad(o), LOOM_OK);
  cr_assert_null(loom_grad(a));
  cr_assert_eq(loom_optimizer_step(o), LOOM_OK); /* nothing has a grad: no change */
  tk_assert_tensor(a, 1, &n, LOOM_F32, wa, 0, 0, "step without grads");
  loom_optimizer_free(o);
  loom_scope_end();
  tk_leak_check();
}

Test(optim, lr_schedules) {
  loom_lr_schedule c = loom_lr_constant(0.1);
  for (int s = 0; s < 100; s += 7) cr_assert_float_eq(loom_lr_at(&c, s), 0.1, 1e-15);
  loom_lr_schedule st = loom_lr_step(1.0, 10, 0.5);
  cr_assert_float_eq(loom_lr_at(&st, 0), 1.0, 1e-15);
  cr_assert_float_eq(loom_lr_at(&st, 9), 1.0, 1e-15);
  cr_assert_float_eq(loom_lr_at(&st, 10), 0.5, 1e-15);
  cr_assert_float_eq(loom_lr_at(&st, 25), 0.25, 1e-15);
  cr_assert_float_eq(loom_lr_at(&st, 30), 0.125, 1e-15);
  loom_lr_schedule cs = loom_lr_cosine(1.0, 10, 110, 0.1);
  /* warm-up: linear ramp reaching base at the end of warm-up */
  cr_assert_float_eq(loom_lr_at(&cs, 0), 0.1, 1e-12);
  cr_assert_float_eq(loom_lr_at(&cs, 4), 0.5, 1e-12);
  cr_assert_float_eq(loom_lr_at(&cs, 9), 1.0, 1e-12);
  double prev = 2;
  for (int s = 10; s <= 110; s++) {
    double want = 0.1 + 0.45 * (1 + cos(M_PI * (s - 10) / 100.0));
    cr_assert_float_eq(loom_lr_at(&cs, s), want, 1e-12, "cosine step %d", s);
    cr_assert(loom_lr_at(&cs, s) <= prev + 1e-15, "cosine must not increase");
    prev = loom_lr_at(&cs, s);
  }
  cr_assert_float_eq(loom_lr_at(&cs, 60), 0.55, 1e-12);
  cr_assert_float_eq(loom_lr_at(&cs, 500), 0.1, 1e-12);
  cr_assert_float_eq(loom_lr_at(&cs, -5), 0.1, 1e-12);
  cr_assert_eq(loom_lr_at(NULL, 3), 0.0);
  /* step with warm-up */
  loom_lr_schedule sw = loom_lr_step(2.0, 5, 0.1);
  sw.warmup_steps = 4;
  cr_assert_float_eq(loom_lr_at(&sw, 1), 1.0, 1e-12);
  cr_assert_float_eq(loom_lr_at(&sw, 4), 2.0, 1e-12);
  cr_assert_float_eq(loom_lr_at(&sw, 5), 0.2, 1e-12);
  tk_leak_check();
}

/* An attached schedule equals setting each step's lr by hand (bit for bit,
 * AdamW over a one-cycle schedule), attached mid-run at a position, and
 * detached; bad arguments are errors. */
Test(optim, attached_schedule_equals_set_lr_each_step) {
  loom_scope_begin();
  int64_t n = 3;
  double init[3] = {0.5, -1, 2}, g[3] = {0.1, -0.2, 0.3};
  loom_tensor *a = tk_tensor(init, 1, &n, LOOM_F32, loom_cpu()), *b = tk_tensor(init, 1, &n, LOOM_F32, loom_cpu());
  loom_set_requires_grad(a, true);
  loom_set_requires_grad(b, true);
  loom_optimizer *oa = loom_adamw_new(&a, 1, NULL), *ob = loom_adamw_new(&b, 1, NULL);
  loom_lr_schedule sc = loom_lr_one_cycle(0.05, 4, 20, 25.0, 1e4);
  for (int step = 0; step < 6; step++) {  /* b: by hand from the start, a: attached at step 3 */
    set_grad(a, g);
    set_grad(b, g);
    loom_optimizer_set_lr(oa, loom_lr_at(&sc, step));
    if (step == 3) {
      cr_assert_eq(loom_optimizer_set_schedule(oa, &sc, 3), LOOM_OK, "%s", loom_last_error());
      cr_assert_eq(loom_optimizer_get_lr(oa), loom_lr_at(&sc, 3), "attaching sets the next step's lr");
      loom_optimizer_set_lr(oa, 123.0);  /* overridden by the schedule at the step */
    }
    loom_optimizer_set_lr(ob, loom_lr_at(&sc, step));
    cr_assert_eq(loom_optimizer_step(oa), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_optimizer_step(ob), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_optimizer_get_lr(oa), loom_lr_at(&sc, step), "step %d ran with lr %g", step,
                 loom_optimizer_get_lr(oa));
  }
  cr_assert_eq(loom_optimizer_set_schedule(oa, NULL, 0), LOOM_OK);  /* detached: set_lr rules again */
  loom_optimizer_set_lr(oa, 0.0);
  set_grad(a, g);
  cr_assert_eq(loom_optimizer_step(oa), LOOM_OK);
  cr_assert_eq(loom_optimizer_get_lr(oa), 0.0);
  float va[3], vb[3];
  cr_assert_eq(loom_to_host(a, va, sizeof va, LOOM_F32), LOOM_OK);
  cr_assert_eq(loom_to_host(b, vb, sizeof vb, LOOM_F32), LOOM_OK);
  for (int i = 0; i < 3; i++) cr_assert_eq(va[i], vb[i], "element %d: %.9g vs %.9g", i, va[i], vb[i]);
  cr_assert_neq(va[0], (float)init[0]);
  cr_assert_eq(loom_optimizer_set_schedule(oa, &sc, -1), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "step is -1"), "%s", loom_last_error());
  loom_lr_schedule old = sc;
  old.struct_size = sizeof old + 8;
  cr_assert_eq(loom_optimizer_set_schedule(oa, &old, 0), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "loom_lr_schedule.struct_size"), "%s", loom_last_error());
  cr_assert_eq(loom_optimizer_set_schedule(NULL, &sc, 0), LOOM_ERR_INVALID_ARG);
  loom_optimizer_free(oa);
  loom_optimizer_free(ob);
  loom_scope_end();
  tk_leak_check();
}

/* A parameter that first gets a gradient after others have been updated
 * starts its own AdamW bias correction and SGD momentum then (per-parameter
 * step counts, as in PyTorch): it must end exactly where a fresh optimizer
 * over it alone would. */
static void late_param_case(bool adamw) {
  loom_scope_begin();
  int64_t n = 3;
  double init[3] = {0.5, -1, 2}, ga[3] = {0.1, -0.2, 0.3}, gb[3] = {1, 2, -3};
  loom_tensor *a = tk_tensor(init, 1, &n, LOOM_F32, loom_cpu()), *b = tk_tensor(init, 1, &n, LOOM_F32, loom_cpu());
  loom_tensor *solo = tk_tensor(init, 1, &n, LOOM_F32, loom_cpu());
  loom_set_requires_grad(a, true);
  loom_set_requires_grad(b, true);
  loom_set_requires_grad(solo, true);
  loom_tensor *ps[2] = {a, b};
  loom_sgd_options so;
  loom_sgd_options_init(&so);
  so.lr = 0.1, so.momentum = 0.9, so.dampening = 0.5;
  loom_optimizer *o = adamw ? loom_adamw_new(ps, 2, NULL) : loom_sgd_new(ps, 2, &so);
  loom_optimizer *o1 = adamw ? loom_adamw_new(&solo, 1, NULL) : loom_sgd_new(&solo, 1, &so);
  for (int step = 0; step < 5; step++) {
    set_grad(a, ga);
    if (step >= 2) {
      set_grad(b, gb);
      set_grad(solo, gb);
      cr_assert_eq(loom_optimizer_step(o1), LOOM_OK, "%s", loom_last_error());
    } else {
      loom_zero_grad(b);
    }
    cr_assert_eq(loom_optimizer_step(o), LOOM_OK, "%s", loom_last_error());
  }
  float vb[3], vs[3];
  cr_assert_eq(loom_to_host(b, vb, sizeof vb, LOOM_F32), LOOM_OK);
  cr_assert_eq(loom_to_host(solo, vs, sizeof vs, LOOM_F32), LOOM_OK);
  for (int i = 0; i < 3; i++) cr_assert_eq(vb[i], vs[i], "element %d: %.9g vs %.9g", i, vb[i], vs[i]);
  cr_assert_neq(vb[0], (float)init[0], "b was updated");
  cr_assert_eq(loom_optimizer_steps(o), 5);
  loom_optimizer_free(o);
  loom_optimizer_free(o1);
  loom_scope_end();
  tk_leak_check();
}

Test(optim, late_parameter_adamw) { late_param_case(true); }
Test(optim, late_parameter_sgd_momentum_dampening) { late_param_case(false); }

/* Dotted parameter names (PyTorch's named_parameters spelling), buffers and
 * train/eval mode through nested modules, and the error paths. */
#include "nn/module_internal.h"
Test(nn, names_buffers_and_mode) {
  int64_t hidden[1] = {8};
  loom_module *mlp = loom_mlp_new(4, 1, hidden, 3, loom_cpu());
  cr_assert_not_null(mlp, "%s", loom_last_error());
  char buf[64];
  cr_assert_str_eq(loom_module_param_name(mlp, 0, buf, sizeof buf), "0.weight");
  cr_assert_str_eq(loom_module_param_name(mlp, 1, buf, sizeof buf), "0.bias");
  cr_assert_str_eq(loom_module_param_name(mlp, 3, buf, sizeof buf), "1.bias");
  cr_assert_null(loom_module_param_name(mlp, 4, buf, sizeof buf));
  char tiny[4];
  cr_assert_null(loom_module_param_name(mlp, 0, tiny, sizeof tiny));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "too small");

  /* A named container holding the MLP plus a module with a buffer. */
  loom_module *root = loom_module_alloc(99, "Root");
  loom_module *stats = loom_module_alloc(98, "Stats");
  int64_t three = 3;
  cr_assert_eq(loom_module_add_param(stats, "scale", loom_ones(1, &three, LOOM_F32, loom_cpu())), LOOM_OK);
  cr_assert_eq(loom_module_add_buffer(stats, "running_mean", loom_zeros(1, &three, LOOM_F32, loom_cpu())), LOOM_OK);
  cr_assert_neq(loom_module_add_buffer(stats, "bad.name", loom_zeros(1, &three, LOOM_F32, loom_cpu())), LOOM_OK);
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "without '.'");
  cr_assert_eq(loom_module_add_child(root, "features", mlp), LOOM_OK);
  cr_assert_eq(loom_module_add_child(root, "head", stats), LOOM_OK);
  cr_assert_eq(loom_module_num_params(root), 5);
  cr_assert_str_eq(loom_module_param_name(root, 2, buf, sizeof buf), "features.1.weight");
  cr_assert_str_eq(loom_module_param_name(root, 4, buf, sizeof buf), "head.scale");
  cr_assert_eq(loom_module_num_buffers(root), 1);
  cr_assert_str_eq(loom_module_buffer_name(root, 0, buf, sizeof buf), "head.running_mean");
  cr_assert_eq(loom_tensor_numel(loom_module_buffer(root, 0)), 3);
  cr_assert_null(loom_module_buffer(root, 1));

  cr_assert(loom_module_is_training(root) && loom_module_is_training(stats));
  cr_assert_eq(loom_module_train(root, false), LOOM_OK);
  cr_assert(!loom_module_is_training(root) && !loom_module_is_training(mlp) && !loom_module_is_training(stats));
  /* A child added to an eval-mode module joins it in eval mode. */
  loom_module *late = loom_relu_new();
  cr_assert(loom_module_is_training(late));
  cr_assert_eq(loom_module_add_child(root, "late", late), LOOM_OK);
  cr_assert(!loom_module_is_training(late));
  cr_assert_eq(loom_module_train(root, true), LOOM_OK);
  cr_assert(loom_module_is_training(late) && loom_module_is_training(mlp));
  cr_assert_eq(loom_module_train(NULL, true), LOOM_ERR_INVALID_ARG);
  loom_module_free(root);
  tk_leak_check();
}
