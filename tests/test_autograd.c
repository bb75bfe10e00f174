/* test_autograd.c — the autograd engine: accumulation into .grad across
 * backward calls, zero_grad, no-grad mode recording nothing, the grad-ready
 * hook (exactly once per leaf per backward, after the leaf's gradient is
 * complete, also for leaves used several times), saved tensors released
 * after backward, the graph releasing its inputs, deep graphs, and a
 * gradient shared by several consumers (the in-place dReLU path of linear
 * must not clobber it). */
#include <math.h>
#include <stdlib.h>

#include "support/testkit.h"
#include "tensor/tensor_internal.h"

static int refs(loom_tensor *t) { return atomic_load(&t->refcount); }
static int srefs(loom_tensor *t) { return atomic_load(&t->storage->refcount); }

DEVICE_TEST(autograd, accumulates_across_backward_and_zero_grad) {
  int64_t n = 3;
  double v[3] = {1, -2, 0.5};
  loom_tensor *x = tk_tensor(v, 1, &n, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  cr_assert_null(loom_grad(x));
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul(x, x))), LOOM_OK, "%s", loom_last_error());
  double g1[3] = {2, -4, 1};
  tk_assert_tensor(loom_grad(x), 1, &n, LOOM_F32, g1, 0, 0, "first backward");
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul_scalar(x, 3))), LOOM_OK);
  double g2[3] = {5, -1, 4};
  tk_assert_tensor(loom_grad(x), 1, &n, LOOM_F32, g2, 0, 0, "accumulated");
  cr_assert_eq(loom_zero_grad(x), LOOM_OK);
  cr_assert_null(loom_grad(x));
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul_scalar(x, 3))), LOOM_OK);
  double g3[3] = {3, 3, 3};
  tk_assert_tensor(loom_grad(x), 1, &n, LOOM_F32, g3, 0, 0, "after zero_grad");
  /* backward directly on a leaf */
  cr_assert_eq(loom_zero_grad(x), LOOM_OK);
  cr_assert_eq(loom_backward_with(x, loom_full(1, &n, 2.0, LOOM_F32, dev)), LOOM_OK, "%s", loom_last_error());
  double g4[3] = {2, 2, 2};
  tk_assert_tensor(loom_grad(x), 1, &n, LOOM_F32, g4, 0, 0, "leaf root");
}

DEVICE_TEST(autograd, no_grad_mode_records_nothing) {
  int64_t s[2] = {2, 3};
  loom_tensor *x = loom_rand(2, s, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  cr_assert(loom_is_grad_enabled());
  bool prev = loom_no_grad_begin();
  cr_assert(prev);
  cr_assert(!loom_is_grad_enabled());
  loom_tensor *outs[6] = {loom_exp(x), loom_mul(x, x), loom_transpose(x, 0, 1), loom_sum_all(x),
                          loom_linear(x, loom_rand(2, (int64_t[]){4, 3}, LOOM_F32, dev), NULL, LOOM_ACT_RELU),
                          loom_log_softmax(x, 0)};
  for (int i = 0; i < 6; i++) {
    cr_assert_not_null(outs[i]);
    cr_assert(!loom_requires_grad(outs[i]), "op %d recorded under no-grad", i);
    cr_assert_null(outs[i]->grad_fn);
  }
  cr_assert_eq(refs(x), 1 + 0 /* scope holds x once: nothing else references it */ + 0);
  loom_no_grad_end(prev);
  cr_assert(loom_is_grad_enabled());
  tk_assert_error(loom_backward(outs[3]), LOOM_ERR_INVALID_ARG, "require grad");
  cr_assert(loom_requires_grad(loom_exp(x)));
}

typedef struct {
  int calls;
  double seen[8];
  loom_tensor *who;
} hook_log;

static void hook(loom_tensor *t, loom_tensor *grad, void *user) {
  hook_log *h = user;
  cr_assert_eq(t, h->who);
  cr_assert_eq(grad, loom_grad(t), "the hook gets the leaf's accumulated gradient");
  double *g = tk_read(grad);
  for (int64_t i = 0; i < loom_tensor_numel(grad) && i < 8; i++) h->seen[i] = g[i];
  free(g);
  h->calls++;
}

DEVICE_TEST(autograd, grad_hook_fires_once_when_complete) {
  int64_t n = 2;
  double v[2] = {0.5, -1.5};
  loom_tensor *x = tk_tensor(v, 1, &n, LOOM_F32, dev);
  loom_tensor *w = tk_tensor(v, 1, &n, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  loom_set_requires_grad(w, true);
  hook_log hx = {.who = x}, hw = {.who = w};
  cr_assert_eq(loom_set_grad_hook(x, hook, &hx), LOOM_OK);
  cr_assert_eq(loom_set_grad_hook(w, hook, &hw), LOOM_OK);
  /* x is used by three nodes at different depths: x*x, exp(x), and (x*w)*3 */
  loom_tensor *l = loom_sum_all(loom_add(loom_add(loom_mul(x, x), loom_exp(x)), loom_mul_scalar(loom_mul(x, w), 3)));
  cr_assert_eq(loom_backward(l), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(hx.calls, 1, "x hook fired %d times", hx.calls);
  cr_assert_eq(hw.calls, 1, "w hook fired %d times", hw.calls);
  for (int i = 0; i < 2; i++) {
    double want = 2 * v[i] + exp(v[i]) + 3 * v[i];
    cr_assert_float_eq(hx.seen[i], want, 1e-5, "x hook saw an incomplete gradient %g (final %g)", hx.seen[i], want);
    cr_assert_float_eq(hw.seen[i], 3 * v[i], 1e-5);
  }
  /* second backward: once more each */
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul(x, w))), LOOM_OK);
  cr_assert_eq(hx.calls, 2);
  cr_assert_eq(hw.calls, 2);
  /* a backward that does not reach w does not fire w's hook */
  cr_assert_eq(loom_backward(loom_sum_all(loom_exp(x))), LOOM_OK);
  cr_assert_eq(hx.calls, 3);
  cr_assert_eq(hw.calls, 2);
  /* a leaf used twice by the same node, and the leaf as root */
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul(w, w))), LOOM_OK);
  cr_assert_eq(hw.calls, 3);
  cr_assert_eq(loom_backward_with(w, loom_ones(1, &n, LOOM_F32, dev)), LOOM_OK);
  cr_assert_eq(hw.calls, 4, "hook of a leaf root");
  /* removing the hook */
  cr_assert_eq(loom_set_grad_hook(x, NULL, NULL), LOOM_OK);
  cr_assert_eq(loom_backward(loom_sum_all(loom_exp(x))), LOOM_OK);
  cr_assert_eq(hx.calls, 3);
}

DEVICE_TEST(autograd, saved_tensors_released_after_backward) {
  int64_t s[2] = {16, 16};
  loom_tensor *x = loom_rand(2, s, LOOM_F32, dev);
  loom_tensor *w = loom_rand(2, s, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  loom_set_requires_grad(w, true);
  loom_scope_begin();
  loom_tensor *e = loom_exp(x);             /* saves its output */
  loom_tensor *m = loom_mul(e, w);          /* saves both inputs */
  loom_tensor *mm = loom_matmul(m, w);      /* saves both inputs */
  loom_tensor *l = loom_sum_all(mm);
  cr_assert_gt(srefs(e), 1, "exp saved its output");
  cr_assert_gt(srefs(w), 1, "mul/matmul saved w");
  int e_before = srefs(e);
  cr_assert_eq(loom_backward(l), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(srefs(e), 1, "exp output storage still shared after backward (%d, was %d)", srefs(e), e_before);
  cr_assert_eq(srefs(m), 1, "mul output still saved by matmul after backward");
  cr_assert_eq(srefs(w), 1, "w's storage still held by saved aliases after backward");
  cr_assert_eq(srefs(x), 1);
  loom_scope_end();
  /* the graph is gone with the scope: nothing holds the leaves but us */
  cr_assert_eq(refs(x), 1, "x refcount %d after the graph died", refs(x));
  cr_assert_eq(refs(w), 1);
}

DEVICE_TEST(autograd, deep_graph) {
  int64_t n = 4;
  loom_tensor *x = loom_ones(1, &n, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  loom_scope_begin();
  loom_tensor *y = x;
  for (int i = 0; i < 20000; i++) y = loom_add_scalar(loom_mul_scalar(y, 1.0), 0.0);
  cr_assert_eq(loom_backward(loom_sum_all(y)), LOOM_OK, "%s", loom_last_error());
  loom_scope_end(); /* releases a 40000-node chain without recursion */
  double want[4] = {1, 1, 1, 1};
  tk_assert_tensor(loom_grad(x), 1, &n, LOOM_F32, want, 0, 0, "deep chain");
}

DEVICE_TEST(autograd, shared_gradient_with_fused_linear_relu) {
  /* y feeds both a fused linear+relu and another consumer; the engine may
   * hand linear's backward its gradient to overwrite in place only when no
   * one else holds it. Compare with an unfused graph. */
  tk_seed(9);
  int64_t sx[2] = {5, 4}, sw[2] = {4, 4}, n4 = 4;
  double *vx, *vw, *vb;
  loom_tensor *x = tk_rand_tensor(2, sx, -1, 1, 0, LOOM_F32, dev, &vx);
  loom_tensor *w = tk_rand_tensor(2, sw, -1, 1, 0, LOOM_F32, dev, &vw);
  loom_tensor *b = tk_rand_tensor(1, &n4, -1, 1, 0, LOOM_F32, dev, &vb);
  loom_tensor *x2 = tk_tensor(vx, 2, sx, LOOM_F32, dev), *w2 = tk_tensor(vw, 2, sw, LOOM_F32, dev),
              *b2 = tk_tensor(vb, 1, &n4, LOOM_F32, dev);
  loom_tensor *all[6] = {x, w, b, x2, w2, b2};
  for (int i = 0; i < 6; i++) loom_set_requires_grad(all[i], true);
  /* h = relu(x w^T + b); out = sum(relu(h w^T + b) * h) + sum(h + h) */
  loom_tensor *h1 = loom_linear(x, w, b, LOOM_ACT_RELU);
  loom_tensor *o1 = loom_add(loom_sum_all(loom_mul(loom_linear(h1, w, b, LOOM_ACT_RELU), h1)), loom_sum_all(loom_add(h1, h1)));
  loom_tensor *h2 = loom_relu(loom_add(loom_matmul_ex(x2, w2, false, true), b2));
  loom_tensor *o2 = loom_add(loom_sum_all(loom_mul(loom_relu(loom_add(loom_matmul_ex(h2, w2, false, true), b2)), h2)),
                             loom_sum_all(loom_add(h2, h2)));
  cr_assert_eq(loom_backward(o1), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_backward(o2), LOOM_OK, "%s", loom_last_error());
  for (int i = 0; i < 3; i++) {
    double *g1 = tk_read(loom_grad(all[i])), *g2 = tk_read(loom_grad(all[i + 3]));
    tk_assert_close(g1, g2, loom_tensor_numel(all[i]), 1e-5, 1e-5, "fused vs unfused with a shared gradient");
    free(g1);
    free(g2);
  }
  free(vx);
  free(vw);
  free(vb);
}

DEVICE_TEST(autograd, backward_with_does_not_modify_the_seed) {
  int64_t s[2] = {3, 4};
  loom_tensor *x = loom_rand(2, s, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  double ones[12];
  for (int i = 0; i < 12; i++) ones[i] = -1.0 + i * 0.25;
  loom_tensor *seed = tk_tensor(ones, 2, s, LOOM_F32, dev);
  loom_tensor *y = loom_linear(x, loom_rand(2, (int64_t[]){4, 4}, LOOM_F32, dev), NULL, LOOM_ACT_RELU);
  cr_assert_eq(loom_backward_with(loom_add_scalar(y, 0.0), seed), LOOM_OK, "%s", loom_last_error());
  double *after = tk_read(seed);
  tk_assert_close(after, ones, 12, 0, 0, "seed untouched by the in-place dReLU");
  free(after);
}

/* A tensor saved for backward and then written in place (fill_, copy_, an
 * optimizer step) makes backward fail with a message, before any node runs,
 * instead of returning wrong gradients; a fresh forward works again. */
Test(autograd, in_place_write_after_forward_is_refused) {
  loom_scope_begin();
  int64_t n = 4;
  double xv[4] = {1, 2, 3, 4}, wv[4] = {0.5, -1, 2, 0};
  loom_tensor *x = tk_tensor(xv, 1, &n, LOOM_F32, loom_cpu());
  loom_tensor *w = tk_tensor(wv, 1, &n, LOOM_F32, loom_cpu());
  loom_set_requires_grad(w, true);
  loom_tensor *loss = loom_sum_all(loom_mul(x, w));   /* mul saves x and w */
  cr_assert_eq(loom_fill_(w, 3.0), LOOM_OK);
  cr_assert_eq(loom_backward(loss), LOOM_ERR_STATE);
  cr_assert(strstr(loom_last_error(), "modified in place") && strstr(loom_last_error(), "mul"), "%s", loom_last_error());
  cr_assert_null(loom_grad(w), "nothing ran");

  loom_tensor *loss2 = loom_sum_all(loom_mul(x, w));
  loom_optimizer *o = loom_sgd_new(&w, 1, NULL);
  loom_tensor *loss3 = loom_sum_all(loom_mul(x, w));
  cr_assert_eq(loom_backward(loss2), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_optimizer_step(o), LOOM_OK);
  cr_assert_eq(loom_backward(loss3), LOOM_ERR_STATE, "w changed by the optimizer after loss3's forward");
  cr_assert(strstr(loom_last_error(), "optimizer step"), "%s", loom_last_error());
  loom_optimizer_free(o);
  loom_scope_end();
  tk_leak_check();
}
