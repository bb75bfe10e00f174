/* test_amp.c — mixed precision (lib/amp): the precision policy and its
 * master/low-precision weight copies, the dynamic loss scaler's state
 * machine, fault injection (an inf/NaN in one gradient skips the step and
 * leaves every parameter, copy and optimizer moment bit-identical), the
 * underflow that loss scaling exists to prevent, and a short Fashion-MNIST
 * run where fp16 and bf16 reach the fp32 accuracy within 0.5 points.
 *
 * Everything runs on the CPU, whose f16/bf16 arithmetic rounds exactly like
 * the GPU's (lib/core/half.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp/amp_internal.h"
#include "loom/loom.h"
#include "optim/optim_internal.h"

static loom_device cpu(void) { return loom_cpu(); }

/* ---- helpers --------------------------------------------------------------- */

static loom_tensor *vec_f32(int n, const float *v) {
  int64_t s = n;
  return loom_from_host(v, 1, &s, LOOM_F32, cpu());
}

/* A gradient for leaf p (accumulated into p->grad like backward does). */
static void give_grad(loom_tensor *p, float value) {
  int64_t n = loom_tensor_numel(p);
  float *g = malloc((size_t)n * sizeof *g);
  for (int64_t i = 0; i < n; i++) g[i] = value * (float)(i + 1);
  loom_tensor *gt = loom_from_host(g, loom_tensor_ndim(p), loom_tensor_shape(p), LOOM_F32, cpu());
  cr_assert_eq(loom_backward_with(p, gt), LOOM_OK, "%s", loom_last_error());
  loom_tensor_release(gt);
  free(g);
}

/* One scaler step on a single f32 parameter whose gradient is finite or not. */
static bool scaler_step_with(loom_grad_scaler *s, loom_optimizer *o, loom_tensor *p, float grad_value) {
  loom_optimizer_zero_grad(o);
  give_grad(p, grad_value);
  bool skipped = true;
  cr_assert_eq(loom_scaler_step(s, o, &skipped), LOOM_OK, "%s", loom_last_error());
  return skipped;
}

typedef struct one_param {
  loom_tensor *p;
  loom_optimizer *o;
} one_param;

static one_param make_one_param(void) {
  float v[4] = {1, 2, 3, 4};
  one_param r = {vec_f32(4, v), NULL};
  loom_set_requires_grad(r.p, true);
  loom_sgd_options so;
  loom_sgd_options_init(&so);
  so.lr = 1e-3;
  r.o = loom_sgd_new(&r.p, 1, &so);
  cr_assert_not_null(r.o, "%s", loom_last_error());
  return r;
}

static void free_one_param(one_param *r) {
  loom_optimizer_free(r->o);
  loom_tensor_release(r->p);
}

/* ---- policy ------------------------------------------------------------------ */

Test(amp_policy, parse_and_names) {
  loom_precision p;
  cr_assert_eq(loom_precision_parse("fp16", &p), LOOM_OK);
  cr_assert_eq(p, LOOM_PRECISION_MIXED_FP16);
  cr_assert_eq(loom_precision_parse("mixed-bf16", &p), LOOM_OK);
  cr_assert_eq(p, LOOM_PRECISION_MIXED_BF16);
  cr_assert_eq(loom_precision_parse("fp32", &p), LOOM_OK);
  cr_assert_eq(p, LOOM_PRECISION_FP32);
  cr_assert_eq(loom_precision_parse("fp8", &p), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "fp8") && strstr(loom_last_error(), "bf16"), "message: %s", loom_last_error());
  cr_assert_str_eq(loom_precision_name(LOOM_PRECISION_MIXED_FP16), "mixed-fp16");
  cr_assert_eq(loom_precision_compute_dtype(LOOM_PRECISION_MIXED_BF16), LOOM_BF16);
}

Test(amp_policy, copies_forward_dtypes_and_keep_last) {
  loom_manual_seed(1);
  int64_t hidden[1] = {16};
  loom_module *m = loom_mlp_new(8, 1, hidden, 4, cpu());
  cr_assert_not_null(m);
  cr_assert_eq(loom_module_set_precision(m, (loom_precision)7, false), LOOM_ERR_INVALID_ARG);
  cr_assert_eq(loom_module_set_precision(m, LOOM_PRECISION_MIXED_FP16, true), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_module_get_precision(m), LOOM_PRECISION_MIXED_FP16);
  /* Params stay f32 masters; the hidden layer has f16 copies equal to the
   * rounded masters; the kept-f32 last layer has none. */
  cr_assert_eq(loom_module_num_params(m), 4);
  for (int i = 0; i < 4; i++) {
    loom_tensor *p = loom_module_param(m, i);
    cr_assert_eq(loom_tensor_dtype(p), LOOM_F32);
    loom_tensor *c = loom_amp_lowp_copy(p);
    if (i < 2) {
      cr_assert_not_null(c, "param %d has no copy", i);
      cr_assert_eq(loom_tensor_dtype(c), LOOM_F16);
      cr_assert(loom_requires_grad(c));
      const float *pm = loom_tensor_data(p);
      const uint16_t *pc = loom_tensor_data(c);
      for (int64_t j = 0; j < loom_tensor_numel(p); j++) cr_assert_eq(pc[j], loom_f32_to_f16(pm[j]));
    } else {
      cr_assert_null(c, "the kept-f32 last layer must use its masters");
    }
  }
  loom_scope_begin();
  loom_tensor *x = loom_randn(2, (int64_t[]){5, 8}, LOOM_F32, cpu());
  loom_tensor *y = loom_module_forward(m, x);
  cr_assert_not_null(y, "%s", loom_last_error());
  cr_assert_eq(loom_tensor_dtype(y), LOOM_F32, "kept-f32 last layer gives f32 logits");
  /* Without keep_last the logits stay in the compute dtype. */
  cr_assert_eq(loom_module_set_precision(m, LOOM_PRECISION_MIXED_BF16, false), LOOM_OK);
  loom_tensor *yb = loom_module_forward(m, x);
  cr_assert_eq(loom_tensor_dtype(yb), LOOM_BF16);
  cr_assert_eq(loom_tensor_dtype(loom_amp_lowp_copy(loom_module_param(m, 3))), LOOM_BF16);
  /* And the loss is computed in f32 from bf16 logits. */
  loom_tensor *lab = loom_from_host((int64_t[]){0, 1, 2, 3, 0}, 1, (int64_t[]){5}, LOOM_I64, cpu());
  loom_tensor *loss = loom_cross_entropy(yb, lab);
  cr_assert_eq(loom_tensor_dtype(loss), LOOM_F32);
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
  cr_assert_null(loom_grad(loom_module_param(m, 0)), "masters get no gradient from the tape directly");
  cr_assert_eq(loom_tensor_dtype(loom_grad(loom_amp_lowp_copy(loom_module_param(m, 0)))), LOOM_BF16);
  loom_scope_end();
  /* Back to fp32: copies gone, forward in f32. */
  cr_assert_eq(loom_module_set_precision(m, LOOM_PRECISION_FP32, false), LOOM_OK);
  for (int i = 0; i < 4; i++) cr_assert_null(loom_amp_lowp_copy(loom_module_param(m, i)));
  loom_scope_begin();
  cr_assert_eq(loom_tensor_dtype(loom_module_forward(m, loom_randn(2, (int64_t[]){3, 8}, LOOM_F32, cpu()))), LOOM_F32);
  loom_scope_end();
  loom_module_free(m);
}

/* The optimizer refreshes the copies inside its step (no re-cast per use),
 * and optimizer_step alone (no scaler) moves the copies' gradients to the
 * masters in f32. */
Test(amp_policy, optimizer_step_refreshes_copies) {
  loom_manual_seed(2);
  int64_t hidden[1] = {32};
  loom_module *m = loom_mlp_new(8, 1, hidden, 3, cpu());
  cr_assert_eq(loom_module_set_precision(m, LOOM_PRECISION_MIXED_BF16, false), LOOM_OK);
  int np = loom_module_num_params(m);
  loom_tensor *ps[8];
  for (int i = 0; i < np; i++) ps[i] = loom_module_param(m, i);
  loom_optimizer *o = loom_adamw_new(ps, np, NULL);
  for (int step = 0; step < 3; step++) {
    loom_scope_begin();
    loom_tensor *x = loom_randn(2, (int64_t[]){6, 8}, LOOM_F32, cpu());
    loom_tensor *lab = loom_from_host((int64_t[]){0, 1, 2, 0, 1, 2}, 1, (int64_t[]){6}, LOOM_I64, cpu());
    loom_optimizer_zero_grad(o);
    cr_assert_eq(loom_backward(loom_cross_entropy(loom_module_forward(m, x), lab)), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_optimizer_step(o), LOOM_OK, "%s", loom_last_error());
    loom_scope_end();
  }
  cr_assert_eq(loom_optimizer_steps(o), 3);
  for (int i = 0; i < np; i++) {
    loom_tensor *g = loom_grad(ps[i]);
    cr_assert_not_null(g, "master %d has an f32 gradient after the step", i);
    cr_assert_eq(loom_tensor_dtype(g), LOOM_F32);
    loom_tensor *c = loom_amp_lowp_copy(ps[i]);
    cr_assert_null(loom_grad(c), "the copy's gradient was consumed");
    const float *pm = loom_tensor_data(ps[i]);
    const uint16_t *pc = loom_tensor_data(c);
    for (int64_t j = 0; j < loom_tensor_numel(ps[i]); j++)
      cr_assert_eq(pc[j], loom_f32_to_bf16(pm[j]), "param %d elem %lld: copy is not the rounded master", i, (long long)j);
  }
  loom_optimizer_free(o);
  loom_module_free(m);
}

/* ---- scaler state machine ------------------------------------------------------- */

Test(amp_scaler, defaults_and_bad_options) {
  loom_scaler_options d;
  loom_scaler_options_init(&d);
  cr_assert_eq(d.init_scale, 65536.0);
  cr_assert_eq(d.growth_factor, 2.0);
  cr_assert_eq(d.backoff_factor, 0.5);
  cr_assert_eq(d.growth_interval, 2000);
  cr_assert(d.enabled);
  loom_grad_scaler *s = loom_scaler_new(NULL);
  cr_assert_eq(loom_scaler_get_scale(s), 65536.0);
  cr_assert_eq(loom_scaler_last_overflow_step(s), -1);
  loom_scaler_free(s);
  loom_scaler_options o = d;
  o.backoff_factor = 1.5;
  cr_assert_null(loom_scaler_new(&o));
  cr_assert(strstr(loom_last_error(), "backoff_factor"), "%s", loom_last_error());
  o = d;
  o.growth_interval = 0;
  cr_assert_null(loom_scaler_new(&o));
  o = d;
  o.init_scale = 1e9;  /* above max_scale */
  cr_assert_null(loom_scaler_new(&o));
  cr_assert(strstr(loom_last_error(), "max_scale"), "%s", loom_last_error());
  o = d;
  o.struct_size = 3;
  cr_assert_null(loom_scaler_new(&o));
}

Test(amp_scaler, growth_after_exactly_n_good_steps) {
  one_param r = make_one_param();
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  so.init_scale = 1024;
  so.growth_interval = 5;
  loom_grad_scaler *s = loom_scaler_new(&so);
  for (int i = 1; i <= 4; i++) {
    cr_assert_not(scaler_step_with(s, r.o, r.p, 1.0f));
    cr_assert_eq(loom_scaler_get_scale(s), 1024.0, "grew after %d good steps, interval is 5", i);
    cr_assert_eq(loom_scaler_good_steps(s), i);
  }
  cr_assert_not(scaler_step_with(s, r.o, r.p, 1.0f));
  cr_assert_eq(loom_scaler_get_scale(s), 2048.0, "must grow on the 5th good step");
  cr_assert_eq(loom_scaler_good_steps(s), 0);
  for (int i = 0; i < 5; i++) scaler_step_with(s, r.o, r.p, 1.0f);
  cr_assert_eq(loom_scaler_get_scale(s), 4096.0);
  cr_assert_eq(loom_scaler_steps(s), 10);
  cr_assert_eq(loom_scaler_steps_skipped(s), 0);
  cr_assert_eq(loom_optimizer_steps(r.o), 10, "every good step stepped the optimizer");
  loom_scaler_free(s);
  free_one_param(&r);
}

/* A schedule attached to the optimizer moves on at skipped steps too (as
 * a host loop calling set_lr(lr_at(step)) every iteration does), so both
 * runs take every step with the same lr. */
Test(amp_scaler, attached_schedule_counts_skipped_steps) {
  one_param a = make_one_param(), b = make_one_param();
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  so.init_scale = 1024;
  so.growth_interval = 2;
  loom_grad_scaler *sa = loom_scaler_new(&so), *sb = loom_scaler_new(&so);
  loom_lr_schedule sc = loom_lr_cosine(0.5, 3, 12, 0.01);
  cr_assert_eq(loom_optimizer_set_schedule(a.o, &sc, 0), LOOM_OK, "%s", loom_last_error());
  const float grads[12] = {1, 1, INFINITY, 1, NAN, 1, 1, 1, INFINITY, 1, 1, 1};
  int skipped = 0;
  for (int step = 0; step < 12; step++) {
    loom_optimizer_set_lr(b.o, loom_lr_at(&sc, step));
    bool ka = scaler_step_with(sa, a.o, a.p, grads[step]), kb = scaler_step_with(sb, b.o, b.p, grads[step]);
    cr_assert_eq(ka, kb);
    skipped += ka;
    float va[4], vb[4];
    cr_assert_eq(loom_to_host(a.p, va, sizeof va, LOOM_F32), LOOM_OK);
    cr_assert_eq(loom_to_host(b.p, vb, sizeof vb, LOOM_F32), LOOM_OK);
    for (int i = 0; i < 4; i++) cr_assert_eq(va[i], vb[i], "step %d element %d: %.9g vs %.9g", step, i, va[i], vb[i]);
  }
  cr_assert_eq(skipped, 3);
  /* Skipped steps counted: the next step takes position 12's lr. */
  loom_optimizer_zero_grad(a.o);
  give_grad(a.p, 1.0f);
  cr_assert_eq(loom_optimizer_step(a.o), LOOM_OK);
  cr_assert_eq(loom_optimizer_get_lr(a.o), loom_lr_at(&sc, 12));
  loom_scaler_free(sa);
  loom_scaler_free(sb);
  free_one_param(&a);
  free_one_param(&b);
}

Test(amp_scaler, backoff_on_inf_and_nan_resets_streak) {
  one_param r = make_one_param();
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  so.init_scale = 1024;
  so.growth_interval = 3;
  loom_grad_scaler *s = loom_scaler_new(&so);
  scaler_step_with(s, r.o, r.p, 1.0f);
  scaler_step_with(s, r.o, r.p, 1.0f);
  cr_assert_eq(loom_scaler_good_steps(s), 2);
  cr_assert(scaler_step_with(s, r.o, r.p, INFINITY), "inf must skip");
  cr_assert_eq(loom_scaler_get_scale(s), 512.0);
  cr_assert_eq(loom_scaler_good_steps(s), 0, "overflow resets the streak");
  cr_assert_eq(loom_scaler_last_overflow_step(s), 2);
  cr_assert(scaler_step_with(s, r.o, r.p, NAN), "NaN must skip");
  cr_assert_eq(loom_scaler_get_scale(s), 256.0);
  cr_assert_eq(loom_scaler_last_overflow_step(s), 3);
  /* A huge but finite gradient is not an overflow. */
  cr_assert_not(scaler_step_with(s, r.o, r.p, 3e38f / 4));
  cr_assert_eq(loom_scaler_steps_skipped(s), 2);
  cr_assert_eq(loom_scaler_steps(s), 5);
  cr_assert_eq(loom_optimizer_steps(r.o), 3, "skipped steps do not step the optimizer");
  /* Three good steps after the overflow: growth again. */
  scaler_step_with(s, r.o, r.p, 1.0f);
  scaler_step_with(s, r.o, r.p, 1.0f);
  cr_assert_eq(loom_scaler_get_scale(s), 512.0);
  loom_scaler_free(s);
  free_one_param(&r);
}

Test(amp_scaler, bounds) {
  one_param r = make_one_param();
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  so.init_scale = 8;
  so.min_scale = 2;
  so.max_scale = 32;
  so.growth_interval = 1;
  so.growth_factor = 4;
  loom_grad_scaler *s = loom_scaler_new(&so);
  scaler_step_with(s, r.o, r.p, 1.0f);
  cr_assert_eq(loom_scaler_get_scale(s), 32.0);
  scaler_step_with(s, r.o, r.p, 1.0f);
  cr_assert_eq(loom_scaler_get_scale(s), 32.0, "growth is capped at max_scale");
  for (int i = 0; i < 6; i++) cr_assert(scaler_step_with(s, r.o, r.p, INFINITY));
  cr_assert_eq(loom_scaler_get_scale(s), 2.0, "backoff stops at min_scale");
  cr_assert_eq(loom_scaler_steps_skipped(s), 6);
  loom_scaler_free(s);
  free_one_param(&r);
}

Test(amp_scaler, save_restore) {
  one_param r = make_one_param();
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  so.init_scale = 64;
  so.growth_interval = 4;
  loom_grad_scaler *s = loom_scaler_new(&so);
  scaler_step_with(s, r.o, r.p, 1.0f);
  scaler_step_with(s, r.o, r.p, INFINITY);
  scaler_step_with(s, r.o, r.p, 1.0f);
  scaler_step_with(s, r.o, r.p, 1.0f);
  loom_scaler_state st = {.struct_size = sizeof st};
  cr_assert_eq(loom_scaler_state_save(s, &st), LOOM_OK);
  cr_assert_eq(st.scale, 32.0);
  cr_assert_eq(st.good_steps, 2);
  cr_assert_eq(st.steps, 4);
  cr_assert_eq(st.steps_skipped, 1);
  cr_assert_eq(st.last_overflow_step, 1);
  /* A fresh scaler restored from the state continues identically. */
  loom_grad_scaler *t = loom_scaler_new(&so);
  cr_assert_eq(loom_scaler_state_restore(t, &st), LOOM_OK, "%s", loom_last_error());
  for (int i = 0; i < 3; i++) {
    scaler_step_with(s, r.o, r.p, 1.0f);
    scaler_step_with(t, r.o, r.p, 1.0f);
    cr_assert_eq(loom_scaler_get_scale(s), loom_scaler_get_scale(t));
    cr_assert_eq(loom_scaler_good_steps(s), loom_scaler_good_steps(t));
  }
  cr_assert_eq(loom_scaler_get_scale(t), 64.0, "grew after 4 good steps counting the restored streak");
  cr_assert_eq(loom_scaler_steps(t), 7);
  cr_assert_eq(loom_scaler_steps_skipped(t), 1);
  /* Garbage is refused with a message. */
  loom_scaler_state bad = st;
  bad.scale = -1;
  cr_assert_eq(loom_scaler_state_restore(t, &bad), LOOM_ERR_INVALID_ARG);
  bad = st;
  bad.struct_size = 0;
  cr_assert_eq(loom_scaler_state_restore(t, &bad), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "size"), "%s", loom_last_error());
  loom_scaler_free(s);
  loom_scaler_free(t);
  free_one_param(&r);
}

Test(amp_scaler, disabled_is_a_passthrough) {
  one_param r = make_one_param();
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  so.enabled = false;
  loom_grad_scaler *s = loom_scaler_new(&so);
  cr_assert_eq(loom_scaler_get_scale(s), 1.0);
  loom_scope_begin();
  double v = 0;
  loom_tensor *l = loom_full(0, NULL, 3.5, LOOM_F32, cpu());
  cr_assert_eq(loom_item(loom_scaler_scale(s, l), &v), LOOM_OK);
  cr_assert_eq(v, 3.5);
  loom_scope_end();
  cr_assert_not(scaler_step_with(s, r.o, r.p, 1.0f));
  cr_assert_eq(loom_optimizer_steps(r.o), 1);
  loom_scaler_free(s);
  free_one_param(&r);
}

/* ---- fault injection --------------------------------------------------------------- */

typedef struct snapshot {
  int n;
  void *bytes[32];
  size_t nbytes[32];
} snapshot;

static void snap_add(snapshot *s, loom_tensor *t) {
  if (!t) return;
  size_t nb = (size_t)loom_tensor_numel(t) * loom_dtype_size(loom_tensor_dtype(t));
  s->bytes[s->n] = malloc(nb);
  memcpy(s->bytes[s->n], loom_tensor_data(t), nb);
  s->nbytes[s->n++] = nb;
}

/* Masters, copies and optimizer moments, in a fixed order. */
static void snap_model(snapshot *s, loom_optimizer *o) {
  s->n = 0;
  for (int i = 0; i < o->n; i++) {
    snap_add(s, o->params[i]);
    snap_add(s, loom_amp_lowp_copy(o->params[i]));
    snap_add(s, o->buf1[i]);
    snap_add(s, o->buf2[i]);
  }
}

static void snap_free(snapshot *s) {
  for (int i = 0; i < s->n; i++) free(s->bytes[i]);
  s->n = 0;
}

static void forward_backward(loom_module *m, loom_grad_scaler *s, int64_t batch) {
  loom_tensor *x = loom_randn(2, (int64_t[]){batch, 8}, LOOM_F32, cpu());
  int64_t labs[64];
  for (int64_t i = 0; i < batch; i++) labs[i] = i % 4;
  loom_tensor *y = loom_from_host(labs, 1, &batch, LOOM_I64, cpu());
  loom_tensor *loss = loom_cross_entropy(loom_module_forward(m, x), y);
  cr_assert_eq(loom_backward(loom_scaler_scale(s, loss)), LOOM_OK, "%s", loom_last_error());
}

/* Put a non-finite value into the gradient the unscale pass will read for
 * master p: its copy's (f16/bf16) or its own (f32). */
static void inject(loom_tensor *p, float bad) {
  loom_tensor *c = loom_amp_lowp_copy(p);
  loom_tensor *g = loom_grad(c ? c : p);
  cr_assert_not_null(g, "no gradient to corrupt");
  int64_t j = loom_tensor_numel(g) / 2;
  switch (loom_tensor_dtype(g)) {
    case LOOM_F16: ((uint16_t *)loom_tensor_data(g))[j] = loom_f32_to_f16(bad); break;
    case LOOM_BF16: ((uint16_t *)loom_tensor_data(g))[j] = loom_f32_to_bf16(bad); break;
    default: ((float *)loom_tensor_data(g))[j] = bad; break;
  }
}

static void fault_injection(loom_precision prec, bool keep_last, int victim, float bad) {
  loom_manual_seed(7);
  int64_t hidden[2] = {32, 16};
  loom_module *m = loom_mlp_new(8, 2, hidden, 4, cpu());
  cr_assert_eq(loom_module_set_precision(m, prec, keep_last), LOOM_OK);
  int np = loom_module_num_params(m);
  loom_tensor *ps[8];
  for (int i = 0; i < np; i++) ps[i] = loom_module_param(m, i);
  loom_optimizer *o = loom_adamw_new(ps, np, NULL);
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  so.init_scale = 1024;  /* small batch: keep the first steps finite */
  loom_grad_scaler *s = loom_scaler_new(&so);
  /* Two good steps so that the moments are non-zero. */
  for (int k = 0; k < 2; k++) {
    loom_scope_begin();
    loom_optimizer_zero_grad(o);
    forward_backward(m, s, 16);
    bool skipped = true;
    cr_assert_eq(loom_scaler_step(s, o, &skipped), LOOM_OK, "%s", loom_last_error());
    cr_assert_not(skipped, "a clean step was skipped");
    loom_scope_end();
  }
  snapshot before, after;
  snap_model(&before, o);
  int64_t opt_steps = loom_optimizer_steps(o);
  loom_scope_begin();
  loom_optimizer_zero_grad(o);
  forward_backward(m, s, 16);
  inject(ps[victim], bad);
  bool skipped = false;
  cr_assert_eq(loom_scaler_step(s, o, &skipped), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
  cr_assert(skipped, "the step with a %g in parameter %d was not skipped", (double)bad, victim);
  cr_assert_eq(loom_scaler_get_scale(s), 512.0, "the scale must halve");
  cr_assert_eq(loom_scaler_steps_skipped(s), 1);
  cr_assert_eq(loom_scaler_last_overflow_step(s), 2);
  cr_assert_eq(loom_optimizer_steps(o), opt_steps, "the optimizer's step count moved");
  snap_model(&after, o);
  cr_assert_eq(before.n, after.n);
  cr_assert_geq(before.n, np * 3, "snapshot covers masters, copies/moments");
  for (int i = 0; i < before.n; i++)
    cr_assert(before.nbytes[i] == after.nbytes[i] && !memcmp(before.bytes[i], after.bytes[i], before.nbytes[i]),
              "buffer %d (masters, copies, moments) changed on a skipped step", i);
  snap_free(&before);
  snap_free(&after);
  /* And training goes on: the next clean step is taken. */
  loom_scope_begin();
  loom_optimizer_zero_grad(o);
  forward_backward(m, s, 16);
  cr_assert_eq(loom_scaler_step(s, o, &skipped), LOOM_OK);
  cr_assert_not(skipped);
  loom_scope_end();
  loom_scaler_free(s);
  loom_optimizer_free(o);
  loom_module_free(m);
}

Test(amp_fault, inf_in_fp16_weight_grad) { fault_injection(LOOM_PRECISION_MIXED_FP16, false, 2, INFINITY); }
Test(amp_fault, nan_in_fp16_bias_grad) { fault_injection(LOOM_PRECISION_MIXED_FP16, false, 1, NAN); }
Test(amp_fault, neg_inf_in_bf16_grad) { fault_injection(LOOM_PRECISION_MIXED_BF16, false, 4, -INFINITY); }
Test(amp_fault, nan_in_kept_fp32_last_layer) { fault_injection(LOOM_PRECISION_MIXED_FP16, true, 5, NAN); }

/* ---- why the scaler exists --------------------------------------------------------------- */

/* d(loss)/d(logits) of 1e-9 per element is below f16's smallest subnormal
 * (2^-24 ~ 6e-8): unscaled, every weight gradient flushes to zero in f16;
 * with a 2^16 scale the same gradients survive and, unscaled in f32, match
 * the fp32 model's. */
static void grads_with(loom_precision prec, bool scaling, float *out, int64_t n_out) {
  loom_manual_seed(11);
  loom_module *m = loom_linear_new(16, 8, true, LOOM_INIT_DEFAULT, cpu());
  cr_assert_eq(loom_module_set_precision(m, prec, false), LOOM_OK);
  loom_tensor *ps[2] = {loom_module_param(m, 0), loom_module_param(m, 1)};
  loom_optimizer *o = loom_sgd_new(ps, 2, NULL);
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  so.enabled = scaling;
  loom_grad_scaler *s = loom_scaler_new(&so);
  loom_scope_begin();
  loom_manual_seed(12);
  loom_tensor *x = loom_rand(2, (int64_t[]){32, 16}, LOOM_F32, cpu());
  loom_tensor *y = loom_module_forward(m, x);
  loom_tensor *loss = loom_mul_scalar(loom_sum_all(loom_cast(y, LOOM_F32)), 1e-9);
  cr_assert_eq(loom_backward(loom_scaler_scale(s, loss)), LOOM_OK, "%s", loom_last_error());
  bool inf = true;
  cr_assert_eq(loom_scaler_unscale(s, o, &inf), LOOM_OK, "%s", loom_last_error());
  cr_assert_not(inf);
  loom_tensor *g = loom_grad(ps[0]);
  cr_assert_not_null(g);
  cr_assert_eq(loom_tensor_numel(g), n_out);
  cr_assert_eq(loom_to_host(g, out, (size_t)n_out * sizeof(float), LOOM_F32), LOOM_OK);
  loom_scope_end();
  loom_scaler_free(s);
  loom_optimizer_free(o);
  loom_module_free(m);
}

Test(amp_underflow, scaling_keeps_small_fp16_gradients_alive) {
  enum { N = 16 * 8 };
  float ref[N], raw[N], scaled[N];
  grads_with(LOOM_PRECISION_FP32, false, ref, N);
  grads_with(LOOM_PRECISION_MIXED_FP16, false, raw, N);
  grads_with(LOOM_PRECISION_MIXED_FP16, true, scaled, N);
  int zero_raw = 0, zero_scaled = 0;
  double max_rel = 0;
  for (int i = 0; i < N; i++) {
    cr_assert(ref[i] > 1e-9f && ref[i] < 1e-7f, "reference gradient %d = %g is not in the f16 underflow range", i,
              (double)ref[i]);
    zero_raw += raw[i] == 0.0f;
    zero_scaled += scaled[i] == 0.0f;
    double rel = fabs((double)scaled[i] - ref[i]) / ref[i];
    if (rel > max_rel) max_rel = rel;
  }
  cr_assert_eq(zero_raw, N, "without scaling all %d fp16 weight gradients should flush to zero (%d did)", N, zero_raw);
  cr_assert_eq(zero_scaled, 0, "with scaling no gradient may flush to zero (%d did)", zero_scaled);
  /* x and the weights were rounded to f16, and dy = 65536e-9 rounded too:
   * a few 1e-3 of relative error, not 100%. */
  cr_assert_lt(max_rel, 0.01, "scaled fp16 gradients differ from fp32 by %.3g", max_rel);
}

/* ---- accuracy: fp16 / bf16 within 0.5 points of fp32 --------------------------------------------- */

typedef struct fmnist {
  uint8_t *xtr, *ytr, *xte, *yte;
  int64_t ntr, nte;
} fmnist;

static int load_split(const char *dir, const char *prefix, uint8_t **x, uint8_t **y, int64_t *n) {
  char pi[512], pl[512];
  snprintf(pi, sizeof pi, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
  snprintf(pl, sizeof pl, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
  if (access(pi, R_OK) || access(pl, R_OK)) return 0;
  void *dx, *dy;
  loom_dtype tx, ty;
  int ndx, ndy;
  int64_t sx[LOOM_MAX_DIMS], sy[LOOM_MAX_DIMS];
  if (loom_idx_load(pi, &dx, &tx, &ndx, sx) != LOOM_OK || loom_idx_load(pl, &dy, &ty, &ndy, sy) != LOOM_OK) return 0;
  *x = dx;
  *y = dy;
  *n = sx[0];
  return 1;
}

/* Train an MLP 784-128-10 for one pass over ntrain samples and return the
 * test accuracy. Same seed => same init and batches for every precision. */
static double train_eval(const fmnist *d, int64_t ntrain, loom_precision prec) {
  const int64_t B = 64, F = 784;
  loom_manual_seed(123);
  int64_t hidden[1] = {128};
  loom_module *m = loom_mlp_new(F, 1, hidden, 10, cpu());
  if (prec != LOOM_PRECISION_FP32) cr_assert_eq(loom_module_set_precision(m, prec, false), LOOM_OK);
  int np = loom_module_num_params(m);
  loom_tensor *ps[4];
  for (int i = 0; i < np; i++) ps[i] = loom_module_param(m, i);
  loom_optimizer *o = loom_adamw_new(ps, np, NULL);
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  so.enabled = prec == LOOM_PRECISION_MIXED_FP16;
  loom_grad_scaler *s = loom_scaler_new(&so);
  float *xb = malloc((size_t)(B * F) * sizeof *xb);
  int64_t yb[64];
  for (int64_t b0 = 0; b0 + B <= ntrain; b0 += B) {
    for (int64_t i = 0; i < B; i++) {
      for (int64_t j = 0; j < F; j++) xb[i * F + j] = ((float)d->xtr[(b0 + i) * F + j] / 255.0f - 0.286f) / 0.353f;
      yb[i] = d->ytr[b0 + i];
    }
    loom_scope_begin();
    loom_tensor *x = loom_from_host(xb, 2, (int64_t[]){B, F}, LOOM_F32, cpu());
    loom_tensor *y = loom_from_host(yb, 1, (int64_t[]){B}, LOOM_I64, cpu());
    loom_optimizer_zero_grad(o);
    loom_tensor *loss = loom_cross_entropy(loom_module_forward(m, x), y);
    cr_assert_eq(loom_backward(loom_scaler_scale(s, loss)), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_scaler_step(s, o, NULL), LOOM_OK, "%s", loom_last_error());
    loom_scope_end();
  }
  int64_t correct = 0;
  const int64_t E = 1000;
  float *xe = malloc((size_t)(E * F) * sizeof *xe);
  int64_t ye[1000];
  bool prev = loom_set_grad_enabled(false);
  for (int64_t b0 = 0; b0 + E <= d->nte; b0 += E) {
    for (int64_t i = 0; i < E; i++) {
      for (int64_t j = 0; j < F; j++) xe[i * F + j] = ((float)d->xte[(b0 + i) * F + j] / 255.0f - 0.286f) / 0.353f;
      ye[i] = d->yte[b0 + i];
    }
    loom_scope_begin();
    int64_t c = 0;
    cr_assert_eq(loom_count_correct(loom_module_forward(m, loom_from_host(xe, 2, (int64_t[]){E, F}, LOOM_F32, cpu())),
                                    loom_from_host(ye, 1, (int64_t[]){E}, LOOM_I64, cpu()), &c),
                 LOOM_OK, "%s", loom_last_error());
    correct += c;
    loom_scope_end();
  }
  loom_set_grad_enabled(prev);
  if (prec == LOOM_PRECISION_MIXED_FP16)
    cr_log_info("fp16: final loss scale %g, %lld skipped steps", loom_scaler_get_scale(s),
                (long long)loom_scaler_steps_skipped(s));
  free(xb);
  free(xe);
  loom_scaler_free(s);
  loom_optimizer_free(o);
  loom_module_free(m);
  return (double)correct / (double)(d->nte / E * E);
}

Test(amp_accuracy, fashion_mnist_fp16_bf16_match_fp32, .timeout = 300) {
  const char *dir = getenv("LOOM_FASHION_MNIST") ? getenv("LOOM_FASHION_MNIST") : "/usr/share/datasets/fashion-mnist";
  fmnist d = {0};
  if (!load_split(dir, "train", &d.xtr, &d.ytr, &d.ntr) || !load_split(dir, "t10k", &d.xte, &d.yte, &d.nte))
    cr_skip_test("Fashion-MNIST not found in %s (install dataset-fashion-mnist): accuracy test skipped", dir);
  /* One thread: the result does not depend on it (deterministic kernels),
   * and OpenMP spinning on a loaded 2-core CI box costs 10x the time. */
  loom_set_num_threads(1);
  int64_t ntrain = d.ntr < 20000 ? d.ntr : 20000;
  double a32 = train_eval(&d, ntrain, LOOM_PRECISION_FP32);
  double a16 = train_eval(&d, ntrain, LOOM_PRECISION_MIXED_FP16);
  double ab16 = train_eval(&d, ntrain, LOOM_PRECISION_MIXED_BF16);
  cr_log_info("Fashion-MNIST 1 pass over %lld samples, 784-128-10, AdamW: fp32 %.4f fp16 %.4f bf16 %.4f",
              (long long)ntrain, a32, a16, ab16);
  fprintf(stderr, "amp accuracy: fp32 %.4f fp16 %.4f bf16 %.4f\n", a32, a16, ab16);
  cr_assert_gt(a32, 0.75, "fp32 baseline did not learn (%.4f)", a32);
  cr_assert_leq(fabs(a16 - a32), 0.005, "fp16 %.4f vs fp32 %.4f: more than 0.5 points apart", a16, a32);
  cr_assert_leq(fabs(ab16 - a32), 0.005, "bf16 %.4f vs fp32 %.4f: more than 0.5 points apart", ab16, a32);
  loom_free(d.xtr);
  loom_free(d.ytr);
  loom_free(d.xte);
  loom_free(d.yte);
}
