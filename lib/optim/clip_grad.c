/* clip_grad.c — gradient clipping by global norm (loom_clip_grad_norm,
 * PyTorch's torch.nn.utils.clip_grad_norm_ with norm_type 2): the L2 norm
 * of all the gradients together, and every gradient scaled in place by
 * max_norm / (norm + 1e-6) when that is below 1. */
#include <math.h>

#include "loom/autograd.h"
#include "loom/optim.h"
#include "loom/ops.h"
#include "core/error.h"

/* Sum of squares of g as a double: computed in f32 on g's device (16-bit
 * gradients widened first), read back once. */
static loom_status sum_squares(loom_tensor *g, double *out) {
  loom_tensor *gf = loom_tensor_dtype(g) == LOOM_F32 ? g : loom_cast(g, LOOM_F32);
  return loom_item(loom_sum_all(loom_mul(gf, gf)), out);
}

loom_status loom_clip_grad_norm(loom_tensor *const *params, int n, double max_norm, double *total_norm) {
  if (n < 0 || (n > 0 && !params))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "clip_grad_norm: %d parameters at %p", n, (const void *)params);
  if (!(max_norm >= 0))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "clip_grad_norm: max_norm must be >= 0, got %g", max_norm);
  for (int i = 0; i < n; i++)
    if (!params[i]) return loom_set_error(LOOM_ERR_NULL_INPUT, "clip_grad_norm: parameter %d is NULL", i);
  bool prev = loom_set_grad_enabled(false);
  loom_scope_begin();
  loom_status st = LOOM_OK;
  double total = 0;
  for (int i = 0; i < n && st == LOOM_OK; i++) {
    loom_tensor *g = loom_grad(params[i]);
    double s = 0;
    if (g && (st = sum_squares(g, &s)) != LOOM_OK) loom_error_prefix("clip_grad_norm: parameter %d", i);
    total += s;
  }
  double norm = sqrt(total);
  double coef = max_norm / (norm + 1e-6);
  /* A non-finite norm (inf or NaN) leaves the gradients alone, where
   * PyTorch's default would turn them into NaN or zeros: the returned norm
   * says so, and the caller skips the step as the loss scaler does. */
  for (int i = 0; i < n && st == LOOM_OK && isfinite(norm) && coef < 1.0; i++) {
    loom_tensor *g = loom_grad(params[i]);
    if (g && (st = loom_copy_(g, loom_mul_scalar(g, coef))) != LOOM_OK)
      loom_error_prefix("clip_grad_norm: scaling the gradient of parameter %d", i);
  }
  loom_scope_end();
  loom_set_grad_enabled(prev);
  if (st == LOOM_OK && total_norm) *total_norm = norm;
  return st;
}
