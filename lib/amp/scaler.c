/* scaler.c — the dynamic loss scaler: scale the loss, unscale and check all
 * gradients in one pass, skip the optimizer step on inf/NaN, and move the
 * scale (×growth after growth_interval good steps, ×backoff on overflow,
 * within [min_scale, max_scale]). The state machine is PyTorch GradScaler's,
 * with explicit bounds and counters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "loom/ops.h"
#include "optim/optim_internal.h"
#include "prof/prof.h"

struct loom_grad_scaler {
  loom_scaler_options opt;
  double scale;
  int64_t good_steps;
  int64_t steps;
  int64_t steps_skipped;
  int64_t last_overflow_step;
  /* unscale() ran since the last step(): its verdict, for step(). */
  bool unscaled;
  bool found_inf;
  const loom_optimizer *unscaled_for;
};

loom_scaler_options loom_scaler_defaults(void) {
  loom_scaler_options o = {sizeof(loom_scaler_options), 65536.0, 2.0, 0.5, 2000, 1.0, 16777216.0, true};
  return o;
}

static loom_status check_options(const loom_scaler_options *o) {
  if (!(o->init_scale > 0) || !isfinite(o->init_scale))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler: init_scale must be finite and > 0 (got %g)", o->init_scale);
  if (!(o->growth_factor > 1) || !isfinite(o->growth_factor))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler: growth_factor must be finite and > 1 (got %g)", o->growth_factor);
  if (!(o->backoff_factor > 0 && o->backoff_factor < 1))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler: backoff_factor must be in (0, 1) (got %g)", o->backoff_factor);
  if (o->growth_interval < 1)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler: growth_interval must be >= 1 (got %lld)",
                          (long long)o->growth_interval);
  if (!(o->min_scale > 0) || !(o->max_scale >= o->min_scale) || !isfinite(o->max_scale))
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "scaler: need 0 < min_scale <= max_scale < inf (got min %g, max %g)", o->min_scale, o->max_scale);
  if (o->init_scale < o->min_scale || o->init_scale > o->max_scale)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler: init_scale %g is outside [min_scale %g, max_scale %g]",
                          o->init_scale, o->min_scale, o->max_scale);
  return LOOM_OK;
}

loom_grad_scaler *loom_scaler_new(const loom_scaler_options *opt) {
  loom_scaler_options o = loom_scaler_defaults();
  if (opt) {
    if (opt->size < sizeof(uint32_t) || opt->size > sizeof o) {
      loom_set_error(LOOM_ERR_INVALID_ARG, "scaler: options.size is %u; fill options from loom_scaler_defaults()",
                     opt->size);
      return NULL;
    }
    memcpy(&o, opt, opt->size);
    o.size = sizeof o;
  }
  if (check_options(&o) != LOOM_OK) return NULL;
  loom_grad_scaler *s = calloc(1, sizeof *s);
  if (!s) {
    loom_set_error(LOOM_ERR_OOM, "scaler: out of host memory");
    return NULL;
  }
  s->opt = o;
  s->scale = o.enabled ? o.init_scale : 1.0;
  s->last_overflow_step = -1;
  return s;
}

void loom_scaler_free(loom_grad_scaler *s) { free(s); }

loom_tensor *loom_scaler_scale(loom_grad_scaler *s, loom_tensor *loss) {
  if (!s) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_scale: scaler is NULL");
    return NULL;
  }
  /* mul_scalar is recorded, so backward multiplies d(loss) by the scale. */
  return loom_mul_scalar(loss, s->scale);
}

static loom_status unscale(loom_grad_scaler *s, loom_optimizer *o) {
  bool inf = false;
  loom_prof_range pr = LOOM_PROF_RANGE_INIT;
  if (LOOM_PROF_ACTIVE()) loom_prof_begin_device(&pr, LOOM_PROF_CAT_AMP, "unscale + inf check", o->device);
  loom_status st = loom_amp_unscale_grads(o->params, o->n, (float)(1.0 / s->scale), true, &inf);
  loom_prof_end(&pr, 0.0, 0);
  LOOM_TRY(st);
  s->unscaled = true;
  s->found_inf = inf;
  s->unscaled_for = o;
  return LOOM_OK;
}

loom_status loom_scaler_unscale(loom_grad_scaler *s, loom_optimizer *o, bool *found_inf) {
  if (!s || !o) return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_unscale: scaler and optimizer must not be NULL");
  if (s->unscaled)
    return loom_set_error(LOOM_ERR_STATE, "scaler_unscale: already called since the last scaler_step; call it once per step");
  if (s->opt.enabled) LOOM_TRY(unscale(s, o));
  else {
    LOOM_TRY(loom_amp_unscale_grads(o->params, o->n, 1.0f, false, NULL));
    s->unscaled = true;
    s->found_inf = false;
    s->unscaled_for = o;
  }
  if (found_inf) *found_inf = s->found_inf;
  return LOOM_OK;
}

static void update_scale(loom_grad_scaler *s, bool inf) {
  if (inf) {
    s->scale = fmax(s->scale * s->opt.backoff_factor, s->opt.min_scale);
    s->good_steps = 0;
    s->steps_skipped++;
    s->last_overflow_step = s->steps;
  } else if (++s->good_steps >= s->opt.growth_interval) {
    double next = s->scale * s->opt.growth_factor;
    s->scale = fmin(next, s->opt.max_scale);
    s->good_steps = 0;
  }
  s->steps++;
}

loom_status loom_scaler_step(loom_grad_scaler *s, loom_optimizer *o, bool *skipped) {
  if (skipped) *skipped = false;
  if (!s || !o) return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_step: scaler and optimizer must not be NULL");
  if (s->unscaled && s->unscaled_for != o) {
    s->unscaled = false;
    return loom_set_error(LOOM_ERR_STATE, "scaler_step: scaler_unscale ran for another optimizer; unscale and step the same one");
  }
  if (!s->opt.enabled) {
    s->unscaled = false;
    s->steps++;
    return loom_optimizer_step(o);  /* gathers the copies' gradients itself */
  }
  if (!s->unscaled) {
    loom_status st = unscale(s, o);
    if (st != LOOM_OK) return st;
  }
  bool inf = s->found_inf;
  s->unscaled = false;
  if (!inf) {
    /* The masters' gradients are unscaled f32 now: a plain fused step, which
     * also refreshes the low-precision copies. */
    loom_status st = loom_optimizer_step(o);
    if (st != LOOM_OK) return st;
  }
  update_scale(s, inf);
  if (skipped) *skipped = inf;
  return LOOM_OK;
}

double loom_scaler_get_scale(const loom_grad_scaler *s) { return s ? s->scale : 0.0; }
int64_t loom_scaler_steps(const loom_grad_scaler *s) { return s ? s->steps : 0; }
int64_t loom_scaler_steps_skipped(const loom_grad_scaler *s) { return s ? s->steps_skipped : 0; }
int64_t loom_scaler_last_overflow_step(const loom_grad_scaler *s) { return s ? s->last_overflow_step : -1; }
int64_t loom_scaler_good_steps(const loom_grad_scaler *s) { return s ? s->good_steps : 0; }

loom_status loom_scaler_state_save(const loom_grad_scaler *s, loom_scaler_state *out) {
  if (!s || !out) return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_state_save: scaler and out must not be NULL");
  if (out->size < sizeof(uint32_t) || out->size > sizeof *out)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_state_save: out->size is %u; set it to sizeof(loom_scaler_state)",
                          out->size);
  loom_scaler_state st = {sizeof st, s->scale, s->good_steps, s->steps, s->steps_skipped, s->last_overflow_step};
  uint32_t n = out->size;
  memcpy(out, &st, n);
  out->size = n;
  return LOOM_OK;
}

loom_status loom_scaler_state_restore(loom_grad_scaler *s, const loom_scaler_state *in) {
  if (!s || !in) return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_state_restore: scaler and state must not be NULL");
  if (in->size != sizeof *in)
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "scaler_state_restore: state.size is %u but this loom expects %zu; save it with this version",
                          in->size, sizeof *in);
  if (!(in->scale > 0) || !isfinite(in->scale) || in->good_steps < 0 || in->steps < 0 || in->steps_skipped < 0 ||
      in->steps_skipped > in->steps || in->last_overflow_step < -1 || in->last_overflow_step >= in->steps)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_state_restore: the state is inconsistent (scale %g, steps %lld, "
                          "skipped %lld, last overflow %lld); was it saved by loom_scaler_state_save?",
                          in->scale, (long long)in->steps, (long long)in->steps_skipped, (long long)in->last_overflow_step);
  s->scale = in->scale;
  s->good_steps = in->good_steps;
  s->steps = in->steps;
  s->steps_skipped = in->steps_skipped;
  s->last_overflow_step = in->last_overflow_step;
  s->unscaled = false;
  return LOOM_OK;
}
