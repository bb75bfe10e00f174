/* test_optim_offload.c — AdamW with its state and update on the host
 * (loom_adamw_offload_new): the parameters after several steps equal, bit
 * for bit, those of the ordinary AdamW (the same CPU kernel runs on host
 * copies of the same values); the offloading optimizer keeps no state
 * tensors on the device; learning-rate changes, parameters without a
 * gradient, zero_grad and the refused device-side skip. */
#include <criterion/criterion.h>
#include <string.h>

#include "optim/optim_internal.h"
#include "support/testkit.h"

static double *train(loom_device dev, bool offload, int64_t *steps) {
  loom_manual_seed(21);
  int64_t hidden[2] = {24, 24};
  loom_module *m = loom_mlp_new(12, 2, hidden, 4, dev);
  int np = loom_module_num_params(m);
  loom_tensor *params[8];
  for (int i = 0; i < np; i++) params[i] = loom_module_param(m, i);
  int64_t ls[1] = {3};
  loom_tensor *unused = loom_ones(1, ls, LOOM_F32, dev);  /* never gets a gradient */
  loom_set_requires_grad(unused, true);
  params[np] = unused;
  loom_adamw_options ao;
  loom_adamw_options_init(&ao);
  ao.weight_decay = 0.05;
  loom_optimizer *opt = offload ? loom_adamw_offload_new(params, np + 1, &ao) : loom_adamw_new(params, np + 1, &ao);
  cr_assert_not_null(opt, "%s", loom_last_error());
  if (offload)
    for (int i = 0; i <= np; i++) cr_assert_null(opt->buf1[i], "no state on the device");
  int64_t xs[2] = {10, 12}, ys[2] = {10, 4};
  loom_tensor *x = loom_randn(2, xs, LOOM_F32, dev), *r = loom_randn(2, ys, LOOM_F32, dev);
  for (int s = 0; s < 4; s++) {
    loom_scope_begin();
    loom_optimizer_set_lr(opt, 1e-2 / (s + 1));
    loom_optimizer_zero_grad(opt);
    cr_assert_eq(loom_backward(loom_sum_all(loom_mul(loom_module_forward(m, x), r))), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
    loom_scope_end();
  }
  *steps = loom_optimizer_steps(opt);
  int total = 0;
  double *all = NULL;
  for (int i = 0; i <= np; i++) {
    double *v = tk_read(params[i]);
    int64_t n = loom_tensor_numel(params[i]);
    all = realloc(all, (size_t)(total + n) * sizeof *all);
    memcpy(all + total, v, (size_t)n * sizeof *v);
    total += (int)n;
    free(v);
  }
  double *u = tk_read(unused);
  for (int i = 0; i < 3; i++) cr_assert_float_eq(u[i], 1.0, 0, "a parameter without gradient is not touched");
  free(u);
  loom_optimizer_free(opt);
  loom_module_free(m);  /* x, r and unused belong to the test's scope */
  return all;
}

DEVICE_TEST(optim_offload, adamw_on_the_host_equals_adamw) {
  int64_t s0 = 0, s1 = 0;
  double *plain = train(dev, false, &s0), *off = train(dev, true, &s1);
  cr_assert_eq(s0, 4);
  cr_assert_eq(s1, 4);
  int n = 24 * 12 + 24 + 24 * 24 + 24 + 4 * 24 + 4;
  for (int i = 0; i < n; i++) cr_assert(plain[i] == off[i], "parameter value %d: %.9g vs %.9g", i, plain[i], off[i]);
  free(plain);
  free(off);
}

Test(optim_offload, refuses_bad_parameters_and_the_device_skip) {
  loom_tensor *none[1] = {NULL};
  tk_assert_fails((loom_tensor *)loom_adamw_offload_new(none, 1, NULL), LOOM_ERR_NULL_INPUT, "parameter 0 is NULL");
  int64_t s[1] = {4};
  loom_tensor *p = loom_ones(1, s, LOOM_F32, loom_cpu());
  loom_set_requires_grad(p, true);
  loom_optimizer *o = loom_adamw_offload_new(&p, 1, NULL);
  cr_assert_not_null(o, "%s", loom_last_error());
  int32_t flag = 0;
  tk_assert_error(loom_optimizer_step_guarded(o, &flag), LOOM_ERR_UNSUPPORTED, "device-side skip");
  loom_optimizer_free(o);
  loom_tensor_release(p);
  tk_leak_check();
}
