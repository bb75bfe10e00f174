/* test_offload.c — activation offload (loom_offload): the saved tensors of
 * the region's nodes are host copies until backward brings them back, and
 * gradients equal the plain run's bit for bit (the same kernels on the same
 * values). On the CPU the host copy is a second CPU buffer, so this checks
 * the logic; the device copies run with LOOM_TEST_DEVICE=cuda. */
#include <criterion/criterion.h>
#include <string.h>

#include "autograd/node.h"
#include "support/testkit.h"

static loom_tensor *mlp_fn(void *ctx, int n, loom_tensor *const *in) {
  (void)n;
  return loom_module_forward(ctx, in[0]);
}

/* Gradients of every parameter and of x after one backward; the region's
 * output node must hold host copies before backward when offloading. */
static double *grads(loom_device dev, bool offload, int *n_out) {
  loom_manual_seed(3);
  int64_t hidden[3] = {40, 40, 40};
  loom_module *m = loom_mlp_new(16, 3, hidden, 6, dev);
  int64_t xs[2] = {12, 16}, ys[2] = {12, 6};
  loom_tensor *x = loom_randn(2, xs, LOOM_F32, dev), *r = loom_randn(2, ys, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  loom_tensor *h = loom_relu(loom_mul_scalar(x, 1.5));  /* a recorded op before the region */
  loom_tensor *in[1] = {h};
  loom_tensor *y = offload ? loom_offload(mlp_fn, m, 1, in) : mlp_fn(m, 1, in);
  cr_assert_not_null(y, "%s", loom_last_error());
  if (offload) {
    cr_assert_not_null(y->grad_fn);
    cr_assert_neq(y->grad_fn->offloaded, 0u, "the region's last node keeps host copies");
    cr_assert_eq(y->grad_fn->saved_in[0]->storage->device.kind, LOOM_CPU);
  }
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul(y, r))), LOOM_OK, "%s", loom_last_error());
  int np = loom_module_num_params(m), total = 0;
  double *all = NULL;
  for (int i = 0; i <= np; i++) {
    loom_tensor *t = i < np ? loom_module_param(m, i) : x;
    double *v = tk_read(loom_grad(t));
    int64_t k = loom_tensor_numel(t);
    all = realloc(all, (size_t)(total + k) * sizeof *all);
    memcpy(all + total, v, (size_t)k * sizeof *v);
    total += (int)k;
    free(v);
  }
  loom_module_free(m);
  *n_out = total;
  return all;
}

DEVICE_TEST(offload, gradients_equal_the_in_memory_run) {
  int n0 = 0, n1 = 0;
  double *plain = grads(dev, false, &n0), *off = grads(dev, true, &n1);
  cr_assert_eq(n0, n1);
  for (int i = 0; i < n0; i++) cr_assert(plain[i] == off[i], "gradient %d: %.9g vs %.9g", i, plain[i], off[i]);
  free(plain);
  free(off);
}

static loom_tensor *square(void *ctx, int n, loom_tensor *const *in) {
  (void)ctx;
  (void)n;
  return loom_mul(in[0], in[0]);
}

Test(offload, under_no_grad_and_errors) {
  loom_scope_begin();
  int64_t s[1] = {3};
  loom_tensor *x = loom_ones(1, s, LOOM_F32, loom_cpu());
  loom_set_requires_grad(x, true);
  loom_tensor *in[1] = {x};
  bool prev = loom_no_grad_begin();
  loom_tensor *y = loom_offload(square, NULL, 1, in);
  loom_no_grad_end(prev);
  cr_assert_not_null(y);
  cr_assert_not(loom_requires_grad(y));
  tk_assert_fails(loom_offload(NULL, NULL, 1, in), LOOM_ERR_INVALID_ARG, "needs a function");
  loom_tensor *nul[1] = {NULL};
  loom_clear_error();
  tk_assert_fails(loom_offload(square, NULL, 1, nul), LOOM_ERR_NULL_INPUT, "input 0");
  /* Backward twice through an offloaded graph: refused like any other. */
  loom_tensor *z = loom_sum_all(loom_offload(square, NULL, 1, in));
  cr_assert_eq(loom_backward(z), LOOM_OK, "%s", loom_last_error());
  tk_assert_error(loom_backward(z), LOOM_ERR_STATE, "already ran backward");
  loom_scope_end();
  tk_leak_check();
}
