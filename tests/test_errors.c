/* test_errors.c — bad input of every kind the tensor / ops / autograd / nn /
 * optim API takes returns an error: the status code AND a loom_last_error()
 * message that names the op and the problem (shapes, dtypes, devices, dims).
 * Also: NULL propagation keeps the root cause, and nothing here aborts. */
#include <math.h>
#include <stdlib.h>

#include "support/testkit.h"

static loom_tensor *mk(int nd, const int64_t *s, loom_dtype dt) {
  loom_tensor *t = loom_zeros(nd, s, dt, loom_cpu());
  cr_assert_not_null(t, "%s", loom_last_error());
  return t;
}

static void nothing(void *data, void *ctx) {
  (void)data;
  (void)ctx;
}

#include "tensor/tensor_internal.h" /* loom_tensor_wrap: a tensor claiming to live on a GPU */

Test(errors, binary_ops_shape_dtype_null) {
  loom_scope_begin();
  int64_t s23[2] = {2, 3}, s4 = 4;
  loom_tensor *a = mk(2, s23, LOOM_F32), *b = mk(1, &s4, LOOM_F32);
  tk_assert_fails(loom_add(a, b), LOOM_ERR_SHAPE, "add", "[2, 3]", "[4]", "broadcast");
  tk_assert_fails(loom_mul(b, a), LOOM_ERR_SHAPE, "mul", "[4]", "[2, 3]");
  tk_assert_fails(loom_add(a, mk(2, s23, LOOM_F16)), LOOM_ERR_DTYPE, "add", "f32", "f16");
  tk_assert_fails(loom_div(mk(2, s23, LOOM_I32), mk(2, s23, LOOM_I32)), LOOM_ERR_DTYPE, "div", "i32");
  tk_assert_fails(loom_exp(mk(2, s23, LOOM_I64)), LOOM_ERR_DTYPE, "exp", "i64");
  loom_clear_error();
  tk_assert_fails(loom_sub(NULL, a), LOOM_ERR_NULL_INPUT, "sub", "NULL");
  loom_clear_error();
  tk_assert_fails(loom_relu(NULL), LOOM_ERR_NULL_INPUT, "relu");
  loom_scope_end();
  tk_leak_check();
}

Test(errors, null_propagation_keeps_the_root_cause) {
  loom_scope_begin();
  int64_t sa[2] = {3, 4}, sb[2] = {5, 6};
  loom_tensor *a = mk(2, sa, LOOM_F32), *b = mk(2, sb, LOOM_F32);
  /* one line, checked once: the matmul failure travels through four ops */
  loom_tensor *y = loom_sum_all(loom_relu(loom_add_scalar(loom_exp(loom_matmul(a, b)), 1.0)));
  tk_assert_fails(y, LOOM_ERR_SHAPE, "matmul", "[3, 4]", "[5, 6]", "inner dimension");
  /* the status-returning calls down the line keep it too */
  tk_assert_error(loom_backward(y), LOOM_ERR_SHAPE, "matmul");
  double v;
  tk_assert_error(loom_item(y, &v), LOOM_ERR_SHAPE, "matmul");
  loom_scope_end();
  tk_leak_check();
}

Test(errors, devices) {
  loom_scope_begin();
  int64_t s = 4;
  if (loom_device_count(LOOM_CUDA) == 0) {
    /* asking for a CUDA tensor where there is none */
    tk_assert_fails(loom_zeros(1, &s, LOOM_F32, loom_cuda(0)), LOOM_ERR_DEVICE, "CUDA");
    tk_assert_fails(loom_to_device(mk(1, &s, LOOM_F32), loom_cuda(0)), LOOM_ERR_DEVICE, "CUDA");
    tk_assert_fails(loom_rand(1, &s, LOOM_F32, loom_cuda(0)), LOOM_ERR_DEVICE, "CUDA");
    cr_assert_null(loom_linear_new(3, 4, true, LOOM_INIT_DEFAULT, loom_cuda(0)));
    tk_assert_error(loom_last_status(), LOOM_ERR_DEVICE, "CUDA");
  }
  tk_assert_fails(loom_zeros(1, &s, LOOM_F32, loom_cuda(99)), LOOM_ERR_DEVICE, loom_device_count(LOOM_CUDA) ? "cuda:99" : "CUDA");
  tk_assert_fails(loom_zeros(1, &s, LOOM_F32, (loom_device){LOOM_CPU, 3}), LOOM_ERR_DEVICE, "cpu:3");
  tk_assert_fails(loom_zeros(1, &s, LOOM_F32, (loom_device){7, 0}), LOOM_ERR_DEVICE, "device kind");
  /* a mismatch between inputs: a header that claims to live on cuda:0 (never dereferenced) */
  float fake[4];
  loom_tensor *g = loom_tensor_wrap(fake, sizeof fake, loom_cuda(0), 1, &s, LOOM_F32, nothing, NULL);
  cr_assert_not_null(g);
  loom_tensor *c = mk(1, &s, LOOM_F32);
  tk_assert_fails(loom_add(c, g), LOOM_ERR_DEVICE, "add", "cpu", "cuda:0");
  tk_assert_fails(loom_matmul(loom_reshape(c, 2, (int64_t[]){2, 2}), loom_reshape(g, 2, (int64_t[]){2, 2})),
                  LOOM_ERR_DEVICE, "matmul", "cuda:0");
  int64_t ls = 4;
  tk_assert_fails(loom_cross_entropy(loom_reshape(c, 2, (int64_t[]){4, 1}), loom_tensor_wrap(fake, sizeof fake, loom_cuda(0), 1, &ls, LOOM_I32, nothing, NULL)),
                  LOOM_ERR_DEVICE, "cross_entropy", "cuda:0");
  loom_scope_end();
  tk_leak_check();
}

Test(errors, shapes_dims_and_reshapes) {
  loom_scope_begin();
  int64_t neg[2] = {2, -3}, nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, s23[2] = {2, 3}, s4 = 4;
  tk_assert_fails(loom_zeros(2, neg, LOOM_F32, loom_cpu()), LOOM_ERR_SHAPE, "negative", "-3");
  tk_assert_fails(loom_empty(9, nine, LOOM_F32, loom_cpu()), LOOM_ERR_SHAPE, "9 dimensions", "8");
  tk_assert_fails(loom_ones(-1, nine, LOOM_F32, loom_cpu()), LOOM_ERR_SHAPE, "-1 dimensions");
  tk_assert_fails(loom_zeros(2, NULL, LOOM_F32, loom_cpu()), LOOM_ERR_INVALID_ARG, "shape is NULL");
  tk_assert_fails(loom_zeros(1, &s4, (loom_dtype)42, loom_cpu()), LOOM_ERR_DTYPE, "dtype");
  loom_tensor *x = mk(2, s23, LOOM_F32);
  tk_assert_fails(loom_reshape(x, 1, &s4), LOOM_ERR_SHAPE, "reshape", "[2, 3]", "[4]");
  tk_assert_fails(loom_view(x, 2, (int64_t[]){-1, -1}), LOOM_ERR_SHAPE, "view", "-1");
  tk_assert_fails(loom_view(x, 2, (int64_t[]){-1, 4}), LOOM_ERR_SHAPE, "view", "[2, 3]");
  tk_assert_fails(loom_reshape(x, 9, nine), LOOM_ERR_SHAPE, "reshape", "9 dimensions");
  tk_assert_fails(loom_reshape(x, 2, (int64_t[]){-2, 3}), LOOM_ERR_SHAPE, "negative");
  tk_assert_fails(loom_transpose(x, 0, 2), LOOM_ERR_SHAPE, "transpose", "dim 2");
  tk_assert_fails(loom_transpose(x, -3, 0), LOOM_ERR_SHAPE, "transpose", "dim -3");
  tk_assert_fails(loom_permute(x, (int[]){0, 0}), LOOM_ERR_SHAPE, "permute");
  tk_assert_fails(loom_expand(x, 2, (int64_t[]){4, 3}), LOOM_ERR_SHAPE, "expand", "[2, 3]", "[4, 3]");
  tk_assert_fails(loom_expand(x, 1, &s4), LOOM_ERR_SHAPE, "expand", "2 dims to 1");
  tk_assert_fails(loom_expand(x, 3, NULL), LOOM_ERR_INVALID_ARG, "expand", "NULL");
  tk_assert_fails(loom_expand(x, 3, (int64_t[]){-1, 2, 3}), LOOM_ERR_SHAPE, "expand", "negative");
  tk_assert_fails(loom_permute(x, NULL), LOOM_ERR_INVALID_ARG, "permute", "NULL");
  tk_assert_fails(loom_slice(x, 2, 0, 1, 1), LOOM_ERR_SHAPE, "slice", "dim 2");
  tk_assert_fails(loom_slice(x, 0, 0, 1, 0), LOOM_ERR_INVALID_ARG, "slice", "step");
  tk_assert_fails(loom_sum(x, 1, (int[]){2}, false), LOOM_ERR_SHAPE, "sum", "dim 2");
  tk_assert_fails(loom_mean(x, 1, (int[]){-3}, false), LOOM_ERR_SHAPE, "mean", "dim -3");
  tk_assert_fails(loom_max(x, 2, (int[]){1, -1}, false), LOOM_ERR_INVALID_ARG, "max", "twice");
  tk_assert_fails(loom_sum(x, 1, NULL, false), LOOM_ERR_INVALID_ARG, "sum", "dims");
  tk_assert_fails(loom_argmax(x, 5, false), LOOM_ERR_SHAPE, "argmax", "dim 5");
  tk_assert_fails(loom_argmax(mk(2, (int64_t[]){3, 0}, LOOM_F32), 1, false), LOOM_ERR_SHAPE, "argmax", "empty");
  tk_assert_fails(loom_log_softmax(x, 2), LOOM_ERR_SHAPE, "log_softmax", "dim 2");
  tk_assert_fails(loom_log_softmax(mk(0, NULL, LOOM_F32), 0), LOOM_ERR_SHAPE, "log_softmax");
  tk_assert_fails(loom_from_host(NULL, 2, s23, LOOM_F32, loom_cpu()), LOOM_ERR_INVALID_ARG, "from_host", "NULL");
  tk_assert_fails(loom_cast(x, (loom_dtype)9), LOOM_ERR_DTYPE, "dtype", "9");
  float small[2];
  tk_assert_error(loom_to_host(x, small, sizeof small, LOOM_F32), LOOM_ERR_INVALID_ARG, "to_host", "24", "8");
  tk_assert_error(loom_to_host(x, NULL, 100, LOOM_F32), LOOM_ERR_INVALID_ARG, "to_host", "NULL");
  tk_assert_error(loom_copy_(x, mk(1, &s4, LOOM_F32)), LOOM_ERR_SHAPE, "copy_", "[2, 3]", "[4]");
  tk_assert_error(loom_copy_(x, loom_transpose(mk(2, s23, LOOM_F32), 0, 1)), LOOM_ERR_SHAPE, "copy_", "non-contiguous");
  loom_scope_end();
  tk_leak_check();
}

Test(errors, matmul_and_linear) {
  loom_scope_begin();
  int64_t a2[2] = {3, 4}, b2[2] = {5, 6}, v1 = 4, ba[3] = {2, 3, 4}, bb[3] = {3, 4, 5};
  loom_tensor *a = mk(2, a2, LOOM_F32);
  tk_assert_fails(loom_matmul(a, mk(2, b2, LOOM_F32)), LOOM_ERR_SHAPE, "matmul", "[3, 4]", "[5, 6]", "inner");
  tk_assert_fails(loom_matmul_ex(a, mk(2, a2, LOOM_F32), false, false), LOOM_ERR_SHAPE, "matmul", "[3, 4]");
  tk_assert_fails(loom_matmul(a, mk(1, &v1, LOOM_F32)), LOOM_ERR_SHAPE, "matmul", "2 dims", "[4]");
  tk_assert_fails(loom_matmul(mk(3, ba, LOOM_F32), mk(3, bb, LOOM_F32)), LOOM_ERR_SHAPE, "matmul", "batch", "[2]", "[3]");
  tk_assert_fails(loom_matmul(a, mk(2, (int64_t[]){4, 2}, LOOM_BF16)), LOOM_ERR_DTYPE, "matmul", "f32", "bf16");
  int64_t x2[2] = {8, 4}, w2[2] = {5, 3}, wok[2] = {5, 4}, b3 = 3, b5 = 5;
  loom_tensor *x = mk(2, x2, LOOM_F32);
  tk_assert_fails(loom_linear(x, mk(2, w2, LOOM_F32), NULL, LOOM_ACT_NONE), LOOM_ERR_SHAPE, "linear", "[8, 4]", "[5, 3]");
  tk_assert_fails(loom_linear(x, mk(2, wok, LOOM_F32), mk(1, &b3, LOOM_F32), LOOM_ACT_RELU), LOOM_ERR_SHAPE, "linear", "bias", "[3]", "5");
  tk_assert_fails(loom_linear(x, mk(1, &v1, LOOM_F32), NULL, LOOM_ACT_NONE), LOOM_ERR_SHAPE, "linear", "[4]");
  tk_assert_fails(loom_linear(x, mk(2, wok, LOOM_F32), mk(1, &b5, LOOM_F16), LOOM_ACT_NONE), LOOM_ERR_DTYPE, "linear", "bias", "f16");
  tk_assert_fails(loom_linear(x, mk(2, wok, LOOM_F16), NULL, LOOM_ACT_NONE), LOOM_ERR_DTYPE, "linear", "f32", "f16");
  tk_assert_fails(loom_linear(x, mk(2, wok, LOOM_F32), NULL, (loom_activation)7), LOOM_ERR_INVALID_ARG, "linear", "activation");
  loom_scope_end();
  tk_leak_check();
}

Test(errors, losses_and_labels) {
  loom_scope_begin();
  int64_t s[2] = {3, 4}, n3 = 3, n2 = 2;
  loom_tensor *x = mk(2, s, LOOM_F32);
  int32_t bad[3] = {0, 4, 1};
  tk_assert_fails(loom_cross_entropy(x, loom_from_host(bad, 1, &n3, LOOM_I32, loom_cpu())), LOOM_ERR_INVALID_ARG,
                  "cross_entropy", "label 4", "row 1", "[0, 4)");
  int64_t neg[3] = {0, 1, -1};
  tk_assert_fails(loom_cross_entropy(x, loom_from_host(neg, 1, &n3, LOOM_I64, loom_cpu())), LOOM_ERR_INVALID_ARG,
                  "cross_entropy", "label -1", "row 2");
  uint8_t big[3] = {0, 1, 200};
  tk_assert_fails(loom_cross_entropy(x, loom_from_host(big, 1, &n3, LOOM_U8, loom_cpu())), LOOM_ERR_INVALID_ARG, "label 200");
  tk_assert_fails(loom_cross_entropy(x, mk(1, &n3, LOOM_F32)), LOOM_ERR_DTYPE, "cross_entropy", "labels", "f32");
  tk_assert_fails(loom_cross_entropy(x, mk(1, &n2, LOOM_I64)), LOOM_ERR_SHAPE, "cross_entropy", "[3, 4]", "[2]");
  tk_assert_fails(loom_cross_entropy(mk(1, &n3, LOOM_F32), mk(1, &n3, LOOM_I64)), LOOM_ERR_SHAPE, "cross_entropy", "[N, C]");
  tk_assert_fails(loom_cross_entropy(mk(2, (int64_t[]){3, 0}, LOOM_F32), mk(1, &n3, LOOM_I64)), LOOM_ERR_SHAPE, "0 classes");
  tk_assert_fails(loom_cross_entropy(mk(2, s, LOOM_I32), mk(1, &n3, LOOM_I64)), LOOM_ERR_DTYPE, "cross_entropy", "i32");
  double acc;
  int64_t cnt;
  tk_assert_error(loom_accuracy(x, mk(1, &n2, LOOM_I64), &acc), LOOM_ERR_SHAPE, "accuracy", "[3, 4]", "[2]");
  tk_assert_error(loom_accuracy(x, mk(1, &n3, LOOM_I64), NULL), LOOM_ERR_INVALID_ARG, "accuracy", "NULL");
  tk_assert_error(loom_count_correct(x, mk(1, &n3, LOOM_I64), NULL), LOOM_ERR_INVALID_ARG, "accuracy", "NULL");
  loom_clear_error();
  tk_assert_error(loom_count_correct(NULL, x, &cnt), LOOM_ERR_NULL_INPUT, "NULL");
  loom_scope_end();
  tk_leak_check();
}

Test(errors, autograd_misuse) {
  loom_scope_begin();
  int64_t s[2] = {2, 3}, s32[2] = {3, 2};
  loom_tensor *x = loom_rand(2, s, LOOM_F32, loom_cpu());
  tk_assert_error(loom_set_requires_grad(mk(2, s, LOOM_I32), true), LOOM_ERR_DTYPE, "requires_grad", "i32");
  tk_assert_error(loom_set_requires_grad(NULL, true), LOOM_ERR_NULL_INPUT, "NULL");
  loom_set_requires_grad(x, true);
  loom_tensor *y = loom_exp(x);
  tk_assert_error(loom_set_requires_grad(y, false), LOOM_ERR_INVALID_ARG, "non-leaf", "detach");
  tk_assert_error(loom_set_grad_hook(y, NULL, NULL), LOOM_ERR_INVALID_ARG, "hook", "leaf");
  /* backward on a non-scalar */
  tk_assert_error(loom_backward(y), LOOM_ERR_SHAPE, "backward", "one element", "[2, 3]");
  /* on something that does not require grad */
  tk_assert_error(loom_backward(loom_sum_all(mk(2, s, LOOM_F32))), LOOM_ERR_INVALID_ARG, "backward", "require grad");
  /* an output gradient of the wrong shape, dtype or NULL */
  tk_assert_error(loom_backward_with(y, mk(2, s32, LOOM_F32)), LOOM_ERR_SHAPE, "backward", "[2, 3]", "[3, 2]");
  tk_assert_error(loom_backward_with(y, mk(1, (int64_t[]){6}, LOOM_F32)), LOOM_ERR_SHAPE, "backward");
  tk_assert_error(loom_backward_with(y, mk(2, s, LOOM_F16)), LOOM_ERR_DTYPE, "backward", "f16", "f32");
  tk_assert_error(loom_backward_with(y, NULL), LOOM_ERR_NULL_INPUT, "backward");
  /* backward twice through a freed graph */
  loom_tensor *l = loom_sum_all(loom_mul(y, y));
  cr_assert_eq(loom_backward(l), LOOM_OK, "%s", loom_last_error());
  tk_assert_error(loom_backward(l), LOOM_ERR_STATE, "backward", "already", "forward");
  /* a new graph that reuses a part of the freed one fails the same way */
  tk_assert_error(loom_backward(loom_sum_all(loom_mul_scalar(y, 2))), LOOM_ERR_STATE, "exp");
  /* ...while a fresh forward works */
  cr_assert_eq(loom_backward(loom_sum_all(loom_exp(x))), LOOM_OK, "%s", loom_last_error());
  tk_assert_error(loom_zero_grad(NULL), LOOM_ERR_NULL_INPUT, "zero_grad");
  loom_scope_end();
  tk_leak_check();
}

Test(errors, nn_and_optim_options) {
  loom_scope_begin();
  cr_assert_null(loom_linear_new(0, 3, true, LOOM_INIT_DEFAULT, loom_cpu()));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "linear", "positive", "0");
  cr_assert_null(loom_linear_new(3, 4, true, (loom_init)42, loom_cpu()));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "init", "42");
  cr_assert_null(loom_mlp_new(4, 2, NULL, 3, loom_cpu()));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "mlp", "hidden");
  cr_assert_null(loom_mlp_new(4, 1, (int64_t[]){-5}, 3, loom_cpu()));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "linear", "-5");
  tk_assert_error(loom_sequential_add(NULL, loom_relu_new()), LOOM_ERR_INVALID_ARG, "Sequential");
  loom_module *lin = loom_linear_new(2, 2, false, LOOM_INIT_DEFAULT, loom_cpu());
  tk_assert_error(loom_linear_set_activation(lin, (loom_activation)5), LOOM_ERR_INVALID_ARG, "activation");
  tk_assert_error(loom_linear_set_activation(NULL, LOOM_ACT_RELU), LOOM_ERR_INVALID_ARG, "not a Linear");
  loom_tensor *lw = loom_module_param(lin, 0);
  tk_assert_error(loom_init_(lw, LOOM_INIT_DEFAULT, 0, 2), LOOM_ERR_INVALID_ARG, "init", "fan_in");
  cr_assert_null(loom_module_forward(NULL, lw));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "module");

  int64_t s[2] = {2, 2};
  loom_tensor *p = mk(2, s, LOOM_F32);
  loom_set_requires_grad(p, true);
  loom_tensor *ps[1] = {p};
  loom_sgd_options o;
  loom_sgd_options_init(&o);
  o.struct_size = 0;
  cr_assert_null(loom_sgd_new(ps, 1, &o));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "sgd", "size");
  loom_sgd_options_init(&o);
  o.struct_size = sizeof o + 64;
  cr_assert_null(loom_sgd_new(ps, 1, &o));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "sgd", "size");
  const struct {
    double lr, mom, damp, wd;
    bool nest;
    const char *frag;
  } bad[] = {{-0.1, 0, 0, 0, false, "lr"},      {0.1, -1, 0, 0, false, "momentum"}, {0.1, 0, 0, -1, false, "weight_decay"},
             {NAN, 0, 0, 0, false, "lr"},       {0.1, NAN, 0, 0, false, "momentum"}, {0.1, 0, 0, NAN, false, "weight_decay"},
             {0.1, 0.9, NAN, 0, false, "dampening"}, {0.1, 0, 0, 0, true, "nesterov"}, {0.1, 0.9, 0.5, 0, true, "nesterov"},
             {INFINITY, 0, 0, 0, false, "lr"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    loom_sgd_options_init(&o);
    o.lr = bad[i].lr;
    o.momentum = bad[i].mom;
    o.dampening = bad[i].damp;
    o.weight_decay = bad[i].wd;
    o.nesterov = bad[i].nest;
    cr_assert_null(loom_sgd_new(ps, 1, &o), "sgd case %zu accepted", i);
    tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "sgd", bad[i].frag);
  }
  loom_adamw_options ao;
  loom_adamw_options_init(&ao);
  const struct {
    double lr, b1, b2, eps, wd;
  } abad[] = {{-1, 0.9, 0.999, 1e-8, 0}, {1e-3, 1.0, 0.999, 1e-8, 0}, {1e-3, 0.9, -0.1, 1e-8, 0}, {1e-3, 0.9, 0.999, 0, 0},
              {1e-3, 0.9, 0.999, 1e-8, -1}, {1e-3, NAN, 0.999, 1e-8, 0}, {1e-3, 0.9, 0.999, 1e-8, NAN}, {INFINITY, 0.9, 0.999, 1e-8, 0}};
  for (size_t i = 0; i < sizeof abad / sizeof abad[0]; i++) {
    loom_adamw_options_init(&ao);
    ao.lr = abad[i].lr;
    ao.beta1 = abad[i].b1;
    ao.beta2 = abad[i].b2;
    ao.eps = abad[i].eps;
    ao.weight_decay = abad[i].wd;
    cr_assert_null(loom_adamw_new(ps, 1, &ao), "adamw case %zu accepted", i);
    tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "adamw");
  }
  cr_assert_null(loom_sgd_new(NULL, 1, NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "optimizer", "parameter");
  cr_assert_null(loom_sgd_new(ps, 0, NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "optimizer", "0");
  loom_tensor *with_null[2] = {p, NULL};
  cr_assert_null(loom_adamw_new(with_null, 2, NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_NULL_INPUT, "parameter 1");
  loom_tensor *half[1] = {mk(2, s, LOOM_F16)};
  cr_assert_null(loom_sgd_new(half, 1, NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "f32", "f16");
  loom_tensor *nonleaf[1] = {loom_exp(p)};
  cr_assert_null(loom_sgd_new(nonleaf, 1, NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "leaf");
  tk_assert_error(loom_optimizer_step(NULL), LOOM_ERR_INVALID_ARG, "optimizer");
  loom_module_free(lin);
  loom_scope_end();
  tk_leak_check();
}

/* ---- issue 10, part 7: messages a new user meets --------------------------------- */
#include "core/error.h"

Test(errors, each_place_is_named_once) {
  /* The dispatcher prefixes the op's name; the kernel's message already has it. */
  loom_scope_begin();
  int64_t xs[2] = {2, 3}, ls = 2;
  loom_tensor *x = mk(2, xs, LOOM_F32);
  loom_tensor *y = loom_from_host((int64_t[]){1, 7}, 1, &ls, LOOM_I64, loom_cpu());
  tk_assert_fails(loom_cross_entropy(x, y), LOOM_ERR_INVALID_ARG, "cross_entropy: label 7 at row 1");
  cr_assert_null(strstr(loom_last_error(), "cross_entropy: cross_entropy"), "doubled: %s", loom_last_error());
  loom_scope_end();
  /* loom_error_prefix itself: a repeated first component is said once, the rest is kept. */
  loom_set_error(LOOM_ERR_IO, "loader: disk on fire");
  loom_error_prefix("loader: epoch %d, batch %d", 2, 5);
  cr_assert_str_eq(loom_last_error(), "loader: epoch 2, batch 5: disk on fire");
  loom_set_error(LOOM_ERR_IO, "matmul: shapes differ");
  loom_error_prefix("%s", "matmul");
  cr_assert_str_eq(loom_last_error(), "matmul: shapes differ");
  cr_assert_eq(loom_last_status(), LOOM_ERR_IO, "the code is kept");
  loom_set_error(LOOM_ERR_IO, "shapes differ");
  loom_error_prefix("%s", "matmul");
  cr_assert_str_eq(loom_last_error(), "matmul: shapes differ");
  loom_set_error(LOOM_ERR_IO, "matmulx: y");   /* a longer word is another place */
  loom_error_prefix("%s", "matmul");
  cr_assert_str_eq(loom_last_error(), "matmul: matmulx: y");
  tk_leak_check();
}

Test(errors, arange_with_a_huge_count_names_the_overflow) {
  loom_scope_begin();
  tk_assert_fails(loom_arange(0, 1e30, 1, LOOM_F32, loom_cpu()), LOOM_ERR_INVALID_ARG, "loom_arange", "1e+30 elements",
                  "overflows");
  cr_assert_null(strstr(loom_last_error(), "negative"), "%s", loom_last_error());
  tk_assert_fails(loom_arange(0, 1, 1e-300, LOOM_F32, loom_cpu()), LOOM_ERR_INVALID_ARG, "overflows");
  tk_assert_fails(loom_arange(1e300, -1e300, -1e-10, LOOM_F32, loom_cpu()), LOOM_ERR_INVALID_ARG, "overflows");
  /* ordinary and empty ranges still work */
  loom_tensor *t = loom_arange(0, 5, 2, LOOM_I64, loom_cpu());
  int64_t s3 = 3;
  tk_assert_tensor(t, 1, &s3, LOOM_I64, (double[]){0, 2, 4}, 0, 0, "arange");
  int64_t s0 = 0;
  tk_assert_shape(loom_arange(5, 0, 1, LOOM_F32, loom_cpu()), 1, &s0, "empty arange");
  loom_scope_end();
  tk_leak_check();
}
