/* test_module_custom.c — modules defined outside loom (loom_module_new, the
 * path of the Python package's loom.nn.Module subclasses): registered
 * parameters, buffers and sub-modules get PyTorch's dotted names in
 * registration order; the caller's forward runs in a scope of its own
 * (intermediates die, the result follows the ownership rule, also when it is
 * x itself); gradients, optimizers, precision policies and train/eval reach
 * what is inside; misuse (duplicate names, a module inside its own tree,
 * registering on loom's own layers, a failing forward) is an error with a
 * message. Also loom_build_info's format. */
#include <math.h>
#include <string.h>

#include "support/testkit.h"

typedef struct probe {
  int forwards, destroyed;
  bool identity; /* return x itself */
  bool fail;     /* fail through loom_module_fail */
  bool null;     /* return NULL without an error */
} probe;

/* y = fc(x) * scale (scale: the module's own parameter), or the probe's misbehaviour. */
static loom_tensor *scaled_forward(void *user, loom_module *m, loom_tensor *x) {
  probe *p = user;
  p->forwards++;
  if (p->identity) return x;
  if (p->fail) return loom_module_fail(LOOM_ERR_SHAPE, "scaled: x has the wrong width");
  if (p->null) return NULL;
  return loom_mul(loom_module_forward(loom_module_child(m, 0), x), loom_module_param(m, 0));
}

static void on_destroy(void *user) { ((probe *)user)->destroyed++; }

static int64_t allocated(void) {
  loom_memory_stats s = {.struct_size = sizeof s};
  cr_assert_eq(loom_memory_stats_get(loom_cpu(), &s), LOOM_OK, "%s", loom_last_error());
  return s.allocated_bytes[0].current;
}

/* Scaled(fc: Linear(3, 2), scale [2], count buffer). */
static loom_module *make_scaled(probe *p) {
  loom_module *m = loom_module_new("Scaled", scaled_forward, p, on_destroy);
  cr_assert_not_null(m, "%s", loom_last_error());
  int64_t s2[1] = {2};
  loom_tensor *scale = loom_full(1, s2, 2.0, LOOM_F32, loom_cpu());
  cr_assert_eq(loom_set_requires_grad(scale, true), LOOM_OK);
  cr_assert_eq(loom_module_register_parameter(m, "scale", scale), LOOM_OK, "%s", loom_last_error());
  loom_tensor_release(scale); /* the module holds its own reference */
  loom_tensor *count = loom_zeros(0, NULL, LOOM_I64, loom_cpu());
  cr_assert_eq(loom_module_register_buffer(m, "count", count), LOOM_OK, "%s", loom_last_error());
  loom_tensor_release(count);
  cr_assert_eq(loom_module_register_module(m, "fc", loom_linear_new(3, 2, true, LOOM_INIT_DEFAULT, loom_cpu())),
               LOOM_OK, "%s", loom_last_error());
  return m;
}

Test(module_custom, names_forward_and_gradients) {
  loom_manual_seed(3);
  probe p = {0};
  loom_module *m = make_scaled(&p);
  cr_assert_str_eq(loom_module_name(m), "Scaled");
  char buf[64];
  const char *want[3] = {"scale", "fc.weight", "fc.bias"};
  cr_assert_eq(loom_module_num_params(m), 3);
  for (int i = 0; i < 3; i++) cr_assert_str_eq(loom_module_param_name(m, i, buf, sizeof buf), want[i]);
  cr_assert_eq(loom_module_num_buffers(m), 1);
  cr_assert_str_eq(loom_module_buffer_name(m, 0, buf, sizeof buf), "count");

  loom_scope_begin();
  int64_t sx[2] = {4, 3};
  loom_tensor *x = loom_randn(2, sx, LOOM_F32, loom_cpu());
  loom_tensor *y = loom_module_forward(m, x);
  cr_assert_not_null(y, "%s", loom_last_error());
  cr_assert_eq(p.forwards, 1);
  loom_module *fc = loom_module_child(m, 0);
  double *got = tk_read(y), *ref = tk_read(loom_mul_scalar(loom_module_forward(fc, x), 2.0));
  tk_assert_close(got, ref, 8, 0, 1e-6, "fc(x) * scale");
  free(got);
  free(ref);
  /* d(sum y)/d scale = column sums of fc(x). */
  cr_assert_eq(loom_backward(loom_sum_all(y)), LOOM_OK, "%s", loom_last_error());
  int dim0[1] = {0};
  double *g = tk_read(loom_grad(loom_module_param(m, 0)));
  double *cs = tk_read(loom_sum(loom_module_forward(fc, x), 1, dim0, false));
  tk_assert_close(g, cs, 2, 1e-5, 1e-5, "gradient of scale");
  free(g);
  free(cs);
  cr_assert_not_null(loom_grad(loom_module_param(m, 1)), "fc.weight got no gradient");
  /* An optimizer over the walked parameters steps the registered one. */
  loom_tensor *params[3] = {loom_module_param(m, 0), loom_module_param(m, 1), loom_module_param(m, 2)};
  loom_sgd_options so;
  loom_sgd_options_init(&so);
  so.lr = 0.5;
  loom_optimizer *opt = loom_sgd_new(params, 3, &so);
  cr_assert_not_null(opt, "%s", loom_last_error());
  cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
  double *s = tk_read(loom_module_param(m, 0));
  g = tk_read(loom_grad(loom_module_param(m, 0)));
  for (int i = 0; i < 2; i++) cr_assert_float_eq(s[i], 2.0 - 0.5 * g[i], 1e-5);
  free(s);
  free(g);
  loom_optimizer_free(opt);
  loom_scope_end();
  loom_module_free(m);
  cr_assert_eq(p.destroyed, 1, "destroy ran %d times", p.destroyed);
  tk_leak_check();
}

Test(module_custom, forward_scope_and_ownership) {
  probe p = {0};
  loom_module *m = make_scaled(&p);
  int64_t sx[2] = {256, 3};
  loom_tensor *x = loom_randn(2, sx, LOOM_F32, loom_cpu()); /* no scope: the caller's */
  int64_t before = allocated();
  /* No scope: the result is the caller's, the intermediate fc(x) is gone
   * (under no-grad: with grad, y's graph keeps fc(x) for backward). */
  bool prev = loom_set_grad_enabled(false);
  loom_tensor *y = loom_module_forward(m, x);
  loom_set_grad_enabled(prev);
  cr_assert_not_null(y, "%s", loom_last_error());
  int64_t expect = before + 256 * 2 * 4; /* y alone; fc(x) would double it */
  cr_assert_leq(allocated(), expect + 512, "the forward's intermediates outlived it (%lld > %lld bytes)",
                (long long)allocated(), (long long)expect);
  loom_tensor_release(y);
  cr_assert_eq(allocated(), before);
  /* x itself: handed out as a new reference, so releasing it keeps x alive. */
  p.identity = true;
  loom_tensor *same = loom_module_forward(m, x);
  cr_assert_eq(same, x);
  loom_tensor_release(same);
  cr_assert_eq(loom_tensor_numel(x), 256 * 3);
  /* In a scope: the scope owns it. */
  loom_scope_begin();
  same = loom_module_forward(m, x);
  cr_assert_eq(same, x);
  loom_scope_end();
  cr_assert_eq(loom_tensor_dim(x, 0), 256);
  loom_tensor_release(x);
  loom_module_free(m);
  tk_leak_check();
}

Test(module_custom, policy_mode_and_containers) {
  probe p = {0};
  loom_module *m = make_scaled(&p);
  /* A precision policy reaches the Linear inside: its output is bf16, so
   * scale (f32) no longer matches — the dtype error comes back from forward. */
  cr_assert_eq(loom_module_set_precision(m, LOOM_PRECISION_MIXED_BF16, false), LOOM_OK, "%s", loom_last_error());
  loom_scope_begin();
  int64_t sx[2] = {2, 3};
  loom_tensor *x = loom_randn(2, sx, LOOM_F32, loom_cpu());
  cr_assert_eq(loom_tensor_dtype(loom_module_forward(loom_module_child(m, 0), x)), LOOM_BF16);
  tk_assert_fails(loom_module_forward(m, x), LOOM_ERR_DTYPE, "mul");
  cr_assert_eq(loom_module_set_precision(m, LOOM_PRECISION_FP32, false), LOOM_OK);
  cr_assert_not_null(loom_module_forward(m, x), "%s", loom_last_error());
  loom_scope_end();
  /* train/eval reaches the child; a custom module inside a Sequential runs. */
  cr_assert_eq(loom_module_train(m, false), LOOM_OK);
  cr_assert(!loom_module_is_training(loom_module_child(m, 0)));
  loom_module *seq = loom_sequential_new();
  cr_assert_eq(loom_sequential_add(seq, m), LOOM_OK);
  cr_assert_eq(loom_sequential_add(seq, loom_relu_new()), LOOM_OK);
  char buf[64];
  cr_assert_str_eq(loom_module_param_name(seq, 1, buf, sizeof buf), "0.fc.weight");
  loom_scope_begin();
  cr_assert_not_null(loom_module_forward(seq, loom_randn(2, sx, LOOM_F32, loom_cpu())), "%s", loom_last_error());
  loom_scope_end();
  loom_module_free(seq);
  cr_assert_eq(p.destroyed, 1);
  tk_leak_check();
}

Test(module_custom, misuse_is_an_error) {
  probe p = {0};
  loom_module *m = make_scaled(&p);
  int64_t s1[1] = {1};
  loom_tensor *t = loom_zeros(1, s1, LOOM_F32, loom_cpu());
  tk_assert_error(loom_module_register_parameter(m, "fc", t), LOOM_ERR_INVALID_ARG, "already has a member named 'fc'");
  tk_assert_error(loom_module_register_buffer(m, "scale", t), LOOM_ERR_INVALID_ARG, "'scale'");
  tk_assert_error(loom_module_register_parameter(m, "a.b", t), LOOM_ERR_INVALID_ARG, "without '.'");
  tk_assert_error(loom_module_register_parameter(m, "", t), LOOM_ERR_INVALID_ARG, "empty");
  tk_assert_error(loom_module_register_parameter(m, "w", NULL), LOOM_ERR_NULL_INPUT, "'w'");
  /* Only custom modules take registrations. */
  loom_module *lin = loom_linear_new(2, 2, true, LOOM_INIT_DEFAULT, loom_cpu());
  tk_assert_error(loom_module_register_parameter(lin, "extra", t), LOOM_ERR_INVALID_ARG, "not a custom module");
  /* A duplicate child name frees the child (ownership passed); a module
   * holding m is refused and left alone. */
  tk_assert_error(loom_module_register_module(m, "fc", lin), LOOM_ERR_INVALID_ARG, "'fc'");
  loom_module *outer = loom_module_new("Outer", scaled_forward, &p, NULL);
  cr_assert_eq(loom_module_register_module(outer, "inner", m), LOOM_OK);
  tk_assert_error(loom_module_register_module(m, "loop", outer), LOOM_ERR_INVALID_ARG, "would contain itself");
  tk_assert_error(loom_module_register_module(m, "self", m), LOOM_ERR_INVALID_ARG, "would contain itself");
  cr_assert_eq(loom_module_num_params(outer), 3);
  cr_assert_null(loom_module_new("NoForward", NULL, NULL, NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "forward is NULL");
  /* A failing forward: its message; NULL without one: said so. */
  loom_scope_begin();
  loom_tensor *x = loom_zeros(1, s1, LOOM_F32, loom_cpu());
  p.fail = true;
  tk_assert_fails(loom_module_forward(m, x), LOOM_ERR_SHAPE, "scaled: x has the wrong width");
  p.fail = false, p.null = true;
  tk_assert_fails(loom_module_forward(m, x), LOOM_ERR_STATE, "Scaled: forward returned NULL without setting an error");
  loom_scope_end();
  loom_tensor_release(t);
  loom_module_free(outer);
  cr_assert_eq(p.destroyed, 1); /* m's destroy; outer has none */
  tk_leak_check();
}

Test(build_info, says_what_was_built) {
  const char *info = loom_build_info();
  cr_assert_not_null(info);
  const char *keys[] = {"version=", " cuda=", " cudnn=", " nccl=", " nvtx=", " mpi=", " openblas=", " zlib=",
                        " jansson=", " profiler="};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) cr_assert(strstr(info, keys[i]), "no '%s' in '%s'", keys[i], info);
  cr_assert(strncmp(info, "version=unknown", 15) != 0, "the version did not reach the library: %s", info);
  bool cuda_built = strstr(info, "cuda=yes") != NULL;
  bool said_built_without = loom_cuda_unavailable_reason() && strstr(loom_cuda_unavailable_reason(), "built without");
  cr_assert(cuda_built != said_built_without, "'%s' disagrees with loom_cuda_unavailable_reason '%s'", info,
            loom_cuda_unavailable_reason() ? loom_cuda_unavailable_reason() : "(null)");
}
