/* test_activation_checkpoint.c — activation checkpointing (loom_checkpoint, the
 * module/Sequential switches, the MLP builder's checkpoint_every): gradients
 * bit-identical to the plain run (recompute runs the same kernels on the
 * same inputs), dropout masks replayed from the forward pass's random state
 * without moving the global generator, peak allocated memory lower, inputs
 * that need no grad, identity segments, in-place writes to saved inputs
 * refused, errors; ResNet-20 with loom_resnet_options.checkpoint_every
 * trained a few SGD steps: gradients, parameters and batch norm buffers
 * (running statistics, num_batches_tracked) bit-identical to the plain run,
 * peak allocated lower. Bits are compared in deterministic mode (see
 * bit_identical_mode). */
#include <criterion/criterion.h>
#include <stddef.h>
#include <string.h>

#include "core/error.h"
#include "nn/module_internal.h"
#include "support/testkit.h"

#define IN 24
#define HID 32
#define OUT 8
#define BATCH 16

/* One training step's gradients of an MLP: loss = sum(y * r). Returns a
 * malloc'd concatenation of every parameter's gradient and (if x_grad) x's. */
static double *mlp_grads(loom_device dev, int n_hidden, int every, bool x_grad, int *n_out) {
  loom_manual_seed(7);
  int64_t hidden[16];
  for (int i = 0; i < n_hidden; i++) hidden[i] = HID;
  loom_mlp_options o;
  loom_mlp_options_init(&o);
  o.checkpoint_every = every;
  loom_module *m = loom_mlp_new_ex(IN, n_hidden, hidden, OUT, dev, &o);
  cr_assert_not_null(m, "%s", loom_last_error());
  int64_t xs[2] = {BATCH, IN}, ys[2] = {BATCH, OUT};
  loom_tensor *x = loom_randn(2, xs, LOOM_F32, dev), *r = loom_randn(2, ys, LOOM_F32, dev);
  cr_assert(x && r);
  if (x_grad) cr_assert_eq(loom_set_requires_grad(x, true), LOOM_OK);
  loom_tensor *loss = loom_sum_all(loom_mul(loom_module_forward(m, x), r));
  cr_assert_not_null(loss, "%s", loom_last_error());
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
  int np = loom_module_num_params(m), total = 0;
  double *all = NULL;
  for (int i = 0; i <= np; i++) {
    loom_tensor *t = i < np ? loom_module_param(m, i) : (x_grad ? x : NULL);
    if (!t) break;
    loom_tensor *g = loom_grad(t);
    cr_assert_not_null(g, "parameter %d has no gradient", i);
    double *v = tk_read(g);
    int64_t n = loom_tensor_numel(g);
    all = realloc(all, (size_t)(total + n) * sizeof *all);
    memcpy(all + total, v, (size_t)n * sizeof *v);
    total += (int)n;
    free(v);
  }
  loom_module_free(m);
  *n_out = total;
  return all;
}

/* Bit-identity is loom's promise in deterministic mode (loom_set_deterministic,
 * ops.h): on a GPU, without it cuDNN may sum with atomics and the fused
 * Linear layers' cuBLASLt epilogues depend on the graph, which checkpoint
 * segments cut (the first GPU run: b1 of the MLP one ulp off, ResNet-20's
 * first weight gradient). Every test comparing bits turns it on (each
 * Criterion test is its own process); on the CPU it changes nothing. */
static void bit_identical_mode(void) { loom_set_deterministic(true); }

static void assert_same_bits(const double *a, const double *b, int n, const char *what) {
  for (int i = 0; i < n; i++)
    cr_assert(a[i] == b[i], "%s: element %d differs: %.9g vs %.9g", what, i, a[i], b[i]);
}

DEVICE_TEST(checkpoint, mlp_gradients_equal_the_plain_run_for_every_segment_length) {
  bit_identical_mode();
  int n0 = 0;
  double *plain = mlp_grads(dev, 5, 0, true, &n0);
  for (int every = 1; every <= 7; every += 2) {
    int n = 0;
    double *ck = mlp_grads(dev, 5, every, true, &n);
    cr_assert_eq(n, n0);
    char what[64];
    snprintf(what, sizeof what, "checkpoint_every=%d", every);
    assert_same_bits(ck, plain, n, what);
    free(ck);
  }
  free(plain);
}

DEVICE_TEST(checkpoint, inputs_that_need_no_grad_still_give_parameter_gradients) {
  bit_identical_mode();
  int n0 = 0, n1 = 0;
  double *plain = mlp_grads(dev, 3, 0, false, &n0), *ck = mlp_grads(dev, 3, 1, false, &n1);
  cr_assert_eq(n0, n1);
  assert_same_bits(ck, plain, n0, "x without grad");
  free(plain);
  free(ck);
}

/* A segment with dropout: (dropout(x * w, 0.5)) summed with weights. */
static loom_tensor *drop_seg(void *ctx, int n, loom_tensor *const *in) {
  cr_assert_eq(n, 2);
  (void)ctx;
  return loom_dropout(loom_relu(loom_mul(in[0], in[1])), 0.5, true);
}

static void dropout_run(loom_device dev, bool ckpt, double **gx, double **gw, double *after) {
  loom_manual_seed(99);
  int64_t s[2] = {64, 33};
  loom_tensor *x = loom_randn(2, s, LOOM_F32, dev), *w = loom_randn(2, s, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  loom_set_requires_grad(w, true);
  loom_tensor *in[2] = {x, w};
  loom_tensor *y = ckpt ? loom_checkpoint(drop_seg, NULL, 2, in) : drop_seg(NULL, 2, in);
  cr_assert_not_null(y, "%s", loom_last_error());
  /* Draw between forward and backward: the replay must not depend on it. */
  loom_tensor *noise = loom_rand(2, s, LOOM_F32, dev);
  loom_tensor *loss = loom_sum_all(loom_mul(loom_mul(y, y), noise));
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
  *gx = tk_read(loom_grad(x));
  *gw = tk_read(loom_grad(w));
  /* Where the global generator stands after backward. */
  int64_t one[1] = {1};
  double *v = tk_read(loom_rand(1, one, LOOM_F32, dev));
  *after = v[0];
  free(v);
}

DEVICE_TEST(checkpoint, dropout_masks_are_replayed_and_the_generator_does_not_move) {
  bit_identical_mode();
  double *px, *pw, *cx, *cw, pa, ca;
  dropout_run(dev, false, &px, &pw, &pa);
  dropout_run(dev, true, &cx, &cw, &ca);
  int n = 64 * 33, zeros = 0;
  assert_same_bits(cx, px, n, "dx");
  assert_same_bits(cw, pw, n, "dw");
  for (int i = 0; i < n; i++) zeros += px[i] == 0;
  cr_assert(zeros > n / 4 && zeros < n, "dropout and relu zeroed %d of %d gradients", zeros, n);
  cr_assert(ca == pa, "the recompute moved the global generator (%g vs %g)", ca, pa);
  free(px);
  free(pw);
  free(cx);
  free(cw);
}

/* Peak allocated during forward + backward of a deep, narrow MLP at a large
 * batch (activations dominate), above what the model and input hold. */
static int64_t step_peak(loom_device dev, int every) {
  loom_manual_seed(1);
  int64_t hidden[16];
  for (int i = 0; i < 16; i++) hidden[i] = 64;
  loom_mlp_options o;
  loom_mlp_options_init(&o);
  o.checkpoint_every = every;
  loom_module *m = loom_mlp_new_ex(64, 16, hidden, 10, dev, &o);
  int64_t xs[2] = {2048, 64};
  loom_tensor *x = loom_randn(2, xs, LOOM_F32, dev);
  cr_assert_eq(loom_memory_reset_peaks(dev), LOOM_OK);
  loom_memory_stats before = {.struct_size = sizeof before}, st = {.struct_size = sizeof st};
  loom_memory_stats_get(dev, &before);
  loom_scope_begin();
  loom_tensor *loss = loom_sum_all(loom_module_forward(m, x));
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
  loom_memory_stats_get(dev, &st);
  loom_module_free(m);
  return st.allocated_bytes[0].peak - before.allocated_bytes[0].current;
}

DEVICE_TEST(checkpoint, peak_allocated_drops_with_segments_of_four_layers) {
  int64_t plain = step_peak(dev, 0), every4 = step_peak(dev, 4);
  cr_log_info("checkpoint peak allocated above the model: plain %lld, every 4: %lld (ratio %.3f)", (long long)plain,
              (long long)every4, (double)every4 / (double)plain);
  /* 17 layers' 2048x64 f32 activations (512 KiB each) stay alive through
   * the plain step; checkpointed, 5 segment inputs and one segment's 4
   * recomputed activations (plus the gradients in flight). */
  cr_assert_lt(every4, plain * 7 / 10, "every 4: %lld vs plain %lld", (long long)every4, (long long)plain);
}

static loom_tensor *identity(void *ctx, int n, loom_tensor *const *in) {
  (void)ctx;
  (void)n;
  return loom_dropout(in[0], 0.5, false);  /* the input itself */
}

static loom_tensor *square_counting(void *ctx, int n, loom_tensor *const *in) {
  (void)n;
  (*(int *)ctx)++;
  return loom_mul(in[0], in[0]);
}

static loom_tensor *returns_null(void *ctx, int n, loom_tensor *const *in) {
  (void)ctx;
  (void)n;
  (void)in;
  return NULL;
}

Test(checkpoint, identity_segment_gets_a_fresh_tensor_and_passes_the_gradient) {
  loom_scope_begin();
  int64_t s[1] = {5};
  double v[5] = {1, -2, 3, -4, 5};
  loom_tensor *x = tk_tensor(v, 1, s, LOOM_F32, loom_cpu());
  loom_set_requires_grad(x, true);
  loom_tensor *in[1] = {x};
  loom_tensor *y = loom_checkpoint(identity, NULL, 1, in);
  cr_assert_not_null(y, "%s", loom_last_error());
  cr_assert_neq(y, x, "a fresh tensor, not the input");
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul_scalar(y, 3.0))), LOOM_OK, "%s", loom_last_error());
  double *g = tk_read(loom_grad(x));
  for (int i = 0; i < 5; i++) cr_assert_float_eq(g[i], 3.0, 0);
  free(g);
  loom_scope_end();
  tk_leak_check();
}

Test(checkpoint, runs_once_forward_once_in_backward_and_plainly_under_no_grad) {
  loom_scope_begin();
  int64_t s[1] = {4};
  double v[4] = {1, 2, 3, 4};
  loom_tensor *x = tk_tensor(v, 1, s, LOOM_F32, loom_cpu());
  loom_set_requires_grad(x, true);
  int calls = 0;
  loom_tensor *in[1] = {x};
  loom_tensor *y = loom_checkpoint(square_counting, &calls, 1, in);
  cr_assert_eq(calls, 1);
  cr_assert_eq(loom_backward(loom_sum_all(y)), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(calls, 2, "recomputed once in backward");
  double *g = tk_read(loom_grad(x));
  for (int i = 0; i < 4; i++) cr_assert_float_eq(g[i], 2 * v[i], 0);
  free(g);
  tk_assert_error(loom_backward(loom_sum_all(y)), LOOM_ERR_STATE, "already ran backward");
  bool prev = loom_no_grad_begin();
  loom_tensor *z = loom_checkpoint(square_counting, &calls, 1, in);
  loom_no_grad_end(prev);
  cr_assert_eq(calls, 3);
  cr_assert_not(loom_requires_grad(z), "no graph under no-grad");
  loom_scope_end();
  tk_leak_check();
}

Test(checkpoint, an_input_written_in_place_after_forward_is_refused) {
  loom_scope_begin();
  int64_t s[1] = {3};
  loom_tensor *w = loom_ones(1, s, LOOM_F32, loom_cpu());
  loom_set_requires_grad(w, true);
  loom_tensor *x = loom_mul_scalar(w, 2.0);  /* non-leaf input */
  int calls = 0;
  loom_tensor *in[1] = {x};
  loom_tensor *y = loom_checkpoint(square_counting, &calls, 1, in);
  cr_assert_not_null(y);
  bool prev = loom_no_grad_begin();
  cr_assert_eq(loom_fill_(x, 5.0), LOOM_OK);
  loom_no_grad_end(prev);
  tk_assert_error(loom_backward(loom_sum_all(y)), LOOM_ERR_STATE, "checkpoint");
  loom_scope_end();
  tk_leak_check();
}

Test(checkpoint, bad_arguments_and_failing_functions_are_errors) {
  loom_scope_begin();
  int64_t s[1] = {3};
  loom_tensor *x = loom_ones(1, s, LOOM_F32, loom_cpu());
  loom_set_requires_grad(x, true);
  loom_tensor *in[6] = {x, x, x, x, x, x};
  int calls = 0;
  cr_assert_null(loom_checkpoint(NULL, NULL, 1, in));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "needs a function");
  cr_assert_null(loom_checkpoint(square_counting, &calls, 0, in));
  cr_assert_null(loom_checkpoint(square_counting, &calls, 6, in));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "1 to 5 inputs");
  loom_tensor *nul[1] = {NULL};
  loom_set_error(LOOM_ERR_SHAPE, "an earlier op failed");
  cr_assert_null(loom_checkpoint(square_counting, &calls, 1, nul));
  tk_assert_error(loom_last_status(), LOOM_ERR_SHAPE, "earlier op");
  cr_assert_eq(calls, 0);
  loom_clear_error();
  cr_assert_null(loom_checkpoint(returns_null, NULL, 1, in));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "returned NULL");
  cr_assert_eq(loom_sequential_set_checkpoint_every(NULL, 1), LOOM_ERR_INVALID_ARG);
  loom_mlp_options o;
  loom_mlp_options_init(&o);
  o.checkpoint_every = -1;
  int64_t h[1] = {4};
  cr_assert_null(loom_mlp_new_ex(3, 1, h, 2, loom_cpu(), &o));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "checkpoint_every");
  loom_scope_end();
  tk_leak_check();
}

/* loom_module_set_checkpoint on a whole MLP: one segment, same gradients. */
DEVICE_TEST(checkpoint, module_switch_gives_the_same_gradients) {
  bit_identical_mode();
  int n0 = 0;
  double *plain = mlp_grads(dev, 2, 0, true, &n0);
  loom_manual_seed(7);
  int64_t hidden[2] = {HID, HID};
  loom_module *m = loom_mlp_new(IN, 2, hidden, OUT, dev);
  cr_assert_eq(loom_module_set_checkpoint(m, true), LOOM_OK);
  int64_t xs[2] = {BATCH, IN}, ys[2] = {BATCH, OUT};
  loom_tensor *x = loom_randn(2, xs, LOOM_F32, dev), *r = loom_randn(2, ys, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul(loom_module_forward(m, x), r))), LOOM_OK, "%s", loom_last_error());
  int at = 0;
  for (int i = 0; i <= loom_module_num_params(m); i++) {
    loom_tensor *t = i < loom_module_num_params(m) ? loom_module_param(m, i) : x;
    double *g = tk_read(loom_grad(t));
    int64_t n = loom_tensor_numel(t);
    assert_same_bits(g, plain + at, (int)n, "module checkpoint");
    at += (int)n;
    free(g);
  }
  cr_assert_eq(at, n0);
  free(plain);
  loom_module_free(m);
}

/* Batch norm inside a checkpointed segment: the running statistics are
 * updated once (by the forward pass), not again by the recompute. */
typedef struct bn_ctx {
  loom_tensor *rm, *rv, *w, *b;
} bn_ctx;

static loom_tensor *bn_seg(void *ctx, int n, loom_tensor *const *in) {
  (void)n;
  bn_ctx *c = ctx;
  loom_batch_norm_options o;
  loom_batch_norm_options_init(&o);
  o.training = true;
  o.act = LOOM_ACT_RELU;
  return loom_mul(loom_batch_norm(in[0], c->rm, c->rv, c->w, c->b, &o), in[0]);
}

static void bn_run(loom_device dev, bool ckpt, double **gx, double **rm, double **rv) {
  loom_manual_seed(11);
  int64_t xs[4] = {6, 3, 4, 4}, cs[1] = {3};
  loom_tensor *x = loom_randn(4, xs, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  bn_ctx c = {loom_zeros(1, cs, LOOM_F32, dev), loom_ones(1, cs, LOOM_F32, dev), loom_randn(1, cs, LOOM_F32, dev),
              loom_randn(1, cs, LOOM_F32, dev)};
  loom_set_requires_grad(c.w, true);
  loom_set_requires_grad(c.b, true);
  loom_tensor *in[1] = {x};
  loom_tensor *y = ckpt ? loom_checkpoint(bn_seg, &c, 1, in) : bn_seg(&c, 1, in);
  cr_assert_not_null(y, "%s", loom_last_error());
  cr_assert_eq(loom_backward(loom_sum_all(y)), LOOM_OK, "%s", loom_last_error());
  *gx = tk_read(loom_grad(x));
  *rm = tk_read(c.rm);
  *rv = tk_read(c.rv);
}

DEVICE_TEST(checkpoint, batch_norm_running_stats_are_updated_once) {
  bit_identical_mode();
  double *pg, *pm, *pv, *cg, *cm, *cv;
  bn_run(dev, false, &pg, &pm, &pv);
  bn_run(dev, true, &cg, &cm, &cv);
  assert_same_bits(cg, pg, 6 * 3 * 16, "dx through batch norm");
  assert_same_bits(cm, pm, 3, "running mean");
  assert_same_bits(cv, pv, 3, "running var");
  cr_assert(pm[0] != 0.0, "the running mean moved");
  free(pg);
  free(pm);
  free(pv);
  free(cg);
  free(cm);
  free(cv);
}

/* ---- ResNet: loom_resnet_options.checkpoint_every ---------------------------- */

/* A ResNet-20 (CIFAR-style: three stages of 3 BasicBlocks, 16/32/64
 * channels) on 3x16x16 inputs, batch 4, trained a few SGD steps (momentum,
 * weight decay). Everything it produced is read back: each step's gradients
 * (all parameters, in order), the final parameters and every buffer (BN
 * running mean / var and num_batches_tracked, as f64 — exact for i64 counts
 * this small), and the peak allocated bytes of the first step above what the
 * model, optimizer and data held before it. */
#define RN_BATCH 4
#define RN_HW 12
#define RN_STEPS 2

typedef struct rn_run {
  double *grads[RN_STEPS], *params, *buffers;
  int64_t n_grads, n_params, n_buffers;
  int64_t peak;
} rn_run;

static double *append(double *all, int64_t *total, loom_tensor *t) {
  double *v = tk_read(t);
  int64_t n = loom_tensor_numel(t);
  all = realloc(all, (size_t)(*total + n) * sizeof *all);
  memcpy(all + *total, v, (size_t)n * sizeof *v);
  *total += n;
  free(v);
  return all;
}

static void resnet_run(loom_device dev, int64_t every, rn_run *out) {
  memset(out, 0, sizeof *out);
  loom_manual_seed(2026);
  loom_resnet_options o;
  loom_resnet_options_init(&o, LOOM_RESNET20);
  o.checkpoint_every = every;
  loom_module *m = loom_resnet_new(LOOM_RESNET20, &o, dev);
  cr_assert_not_null(m, "%s", loom_last_error());
  loom_sgd_options so;
  loom_sgd_options_init(&so);
  so.lr = 0.1, so.momentum = 0.9, so.weight_decay = 5e-4;
  loom_optimizer *opt = loom_sgd_new_for_module(m, &so);
  cr_assert_not_null(opt, "%s", loom_last_error());
  int64_t xs[4] = {RN_BATCH, 3, RN_HW, RN_HW}, ys[1] = {RN_BATCH};
  int64_t lab[RN_BATCH] = {3, 1, 4, 1};
  loom_tensor *y = loom_from_host(lab, 1, ys, LOOM_I64, dev);
  cr_assert_not_null(y, "%s", loom_last_error());
  for (int s = 0; s < RN_STEPS; s++) {
    /* A new batch each step, the same in every run (x and y belong to the
     * test's scope). */
    loom_tensor *x = loom_randn(4, xs, LOOM_F32, dev);
    cr_assert_not_null(x, "%s", loom_last_error());
    loom_device_synchronize(dev);
    loom_memory_stats before = {.struct_size = sizeof before}, st = {.struct_size = sizeof st};
    if (s == 0) {
      cr_assert_eq(loom_memory_reset_peaks(dev), LOOM_OK);
      loom_memory_stats_get(dev, &before);
    }
    loom_scope_begin();
    cr_assert_eq(loom_optimizer_zero_grad(opt), LOOM_OK);
    loom_tensor *loss = loom_cross_entropy(loom_module_forward(m, x), y);
    cr_assert_not_null(loss, "%s", loom_last_error());
    cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
    loom_scope_end();
    if (s == 0) {
      loom_device_synchronize(dev);
      loom_memory_stats_get(dev, &st);
      out->peak = st.allocated_bytes[0].peak - before.allocated_bytes[0].current;
    }
    int64_t n = 0;
    for (int i = 0; i < loom_module_num_params(m); i++) {
      loom_tensor *g = loom_grad(loom_module_param(m, i));
      cr_assert_not_null(g, "step %d: parameter %d has no gradient", s, i);
      out->grads[s] = append(out->grads[s], &n, g);
    }
    out->n_grads = n;
    cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
  }
  for (int i = 0; i < loom_module_num_params(m); i++) out->params = append(out->params, &out->n_params, loom_module_param(m, i));
  for (int i = 0; i < loom_module_num_buffers(m); i++)
    out->buffers = append(out->buffers, &out->n_buffers, loom_module_buffer(m, i));
  loom_optimizer_free(opt);
  loom_module_free(m);
}

static void rn_free(rn_run *r) {
  for (int s = 0; s < RN_STEPS; s++) free(r->grads[s]);
  free(r->params);
  free(r->buffers);
}

DEVICE_TEST(checkpoint, resnet20_training_is_bit_identical_and_peak_memory_drops) {
  bit_identical_mode();
  rn_run plain, ck1, ck2;
  resnet_run(dev, 0, &plain);
  resnet_run(dev, 1, &ck1);
  resnet_run(dev, 2, &ck2);  /* runs of 2 and a last run of 1 in each 3-block stage */
  const rn_run *cks[2] = {&ck1, &ck2};
  for (int k = 0; k < 2; k++) {
    const rn_run *c = cks[k];
    char what[96];
    cr_assert_eq(c->n_grads, plain.n_grads);
    for (int s = 0; s < RN_STEPS; s++) {
      snprintf(what, sizeof what, "checkpoint_every=%d, step %d gradients", k + 1, s);
      assert_same_bits(c->grads[s], plain.grads[s], (int)plain.n_grads, what);
    }
    snprintf(what, sizeof what, "checkpoint_every=%d, parameters after %d steps", k + 1, RN_STEPS);
    cr_assert_eq(c->n_params, plain.n_params);
    assert_same_bits(c->params, plain.params, (int)plain.n_params, what);
    /* Running mean / var updated once per forward, num_batches_tracked
     * counted once per step (not again by the recompute). */
    snprintf(what, sizeof what, "checkpoint_every=%d, BN buffers after %d steps", k + 1, RN_STEPS);
    cr_assert_eq(c->n_buffers, plain.n_buffers);
    assert_same_bits(c->buffers, plain.buffers, (int)plain.n_buffers, what);
  }
  /* bn1's buffers come first: running_mean (16), running_var (16), num_batches_tracked. */
  cr_assert_eq(plain.buffers[32], (double)RN_STEPS, "num_batches_tracked = %g", plain.buffers[32]);
  cr_assert(plain.buffers[0] != 0.0, "the running mean moved");
  cr_log_info("resnet20 %dx3x%dx%d step peak allocated above the model: plain %lld, every 1: %lld (%.3f), every 2: "
              "%lld (%.3f)", RN_BATCH, RN_HW, RN_HW, (long long)plain.peak, (long long)ck1.peak,
              (double)ck1.peak / (double)plain.peak, (long long)ck2.peak, (double)ck2.peak / (double)plain.peak);
  /* 0.74 and 0.79 of plain at this size (the parameters' gradients, ~1 MiB,
   * weigh as much as the activations here; bench_memory_step --model
   * resnet56 measures a real batch). */
  cr_assert_lt(ck1.peak, plain.peak * 85 / 100, "every 1: %lld vs plain %lld", (long long)ck1.peak, (long long)plain.peak);
  cr_assert_lt(ck2.peak, plain.peak, "every 2: %lld vs plain %lld", (long long)ck2.peak, (long long)plain.peak);
  rn_free(&plain);
  rn_free(&ck1);
  rn_free(&ck2);
}

/* Each stage (layer1..3) is a Sequential checkpointing runs of N blocks; an
 * options struct from before the field (size 40) leaves it off whatever lies
 * past its end; a negative N is refused. */
Test(checkpoint, resnet_option_reaches_each_stage_and_old_option_sizes_leave_it_off) {
  loom_resnet_options o;
  loom_resnet_options_init(&o, LOOM_RESNET20);
  cr_assert_eq(o.checkpoint_every, 0);
  cr_assert_eq(o.struct_size, sizeof o);
  o.checkpoint_every = 3;
  loom_module *m = loom_resnet_new(LOOM_RESNET20, &o, loom_cpu());
  cr_assert_not_null(m, "%s", loom_last_error());
  int stages = 0;
  for (int i = 0; i < loom_module_num_children(m); i++) {
    loom_module *c = loom_module_child(m, i);
    if (c->kind != LOOM_MOD_SEQUENTIAL) continue;
    cr_assert_eq(c->checkpoint_every, 3, "%s", loom_module_name(c));
    stages++;
  }
  cr_assert_eq(stages, 3);
  loom_module_free(m);
  o.struct_size = offsetof(loom_resnet_options, checkpoint_every);  /* an older caller's struct */
  cr_assert_eq(o.struct_size, 40);
  m = loom_resnet_new(LOOM_RESNET20, &o, loom_cpu());
  cr_assert_not_null(m, "%s", loom_last_error());
  for (int i = 0; i < loom_module_num_children(m); i++)
    cr_assert_eq(loom_module_child(m, i)->checkpoint_every, 0);
  loom_module_free(m);
  o.struct_size = sizeof o;
  o.checkpoint_every = -1;
  cr_assert_null(loom_resnet_new(LOOM_RESNET20, &o, loom_cpu()));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "checkpoint_every = -1");
  tk_leak_check();
}
