/* scaled_step.c — the loss scaler's steps of an optimizer (loom_scaler_unscale,
 * loom_scaler_step; optim.h): lib/amp's scaler works on parameter lists, so
 * this file hands it the optimizer's parameters and runs the step it asks
 * for between loom_amp_scaler_step_begin and _end — a plain step, a step
 * the host's found-inf verdict allows or skips, or (CUDA) a step vetoed on
 * the device by the scaler's found-inf word. */
#include "amp/amp_internal.h"
#include "optim/optim_internal.h"

loom_status loom_scaler_unscale(loom_grad_scaler *s, loom_optimizer *o, bool *found_inf) {
  if (!s || !o) return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_unscale: scaler and optimizer must not be NULL");
  return loom_amp_scaler_unscale(s, o->params, o->n, o->device, o, found_inf);
}

loom_status loom_scaler_step(loom_grad_scaler *s, loom_optimizer *o, bool *skipped) {
  if (skipped) *skipped = false;
  if (!s || !o) return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_step: scaler and optimizer must not be NULL");
  loom_amp_step step;
  LOOM_TRY(loom_amp_scaler_step_begin(s, o->params, o->n, o->device, o, &step));
  switch (step.kind) {
    case LOOM_AMP_STEP_PLAIN:
      return loom_optimizer_step(o);  /* gathers the copies' gradients itself */
    case LOOM_AMP_STEP_DEVICE:
      LOOM_TRY(loom_optimizer_step_guarded(o, step.skip_dev));
      break;
    case LOOM_AMP_STEP_HOST:
      if (!step.found_inf) LOOM_TRY(loom_optimizer_step(o));
      else loom_optimizer_schedule_skip(o);  /* an attached schedule counts skipped steps too */
      break;
  }
  return loom_amp_scaler_step_end(s, &step, skipped);
}
