/* clip_grad.c — gradient clipping by global norm (loom_clip_grad_norm,
 * PyTorch's torch.nn.utils.clip_grad_norm_ with norm_type 2): the L2 norm
 * of all the gradients together, and every gradient scaled in place by
 * max_norm / (norm + 1e-6) when that is below 1. */
#include <math.h>

#include "loom/autograd.h"
#include "loom/optim.h"
#include "loom/ops.h"
#include "core/error.h"
#include "core/sys.h"

/* Sum of squares of g: computed in f32 on g's device (16-bit gradients
 * widened first), a 0-d f32 tensor there. */
static loom_tensor *sum_squares(loom_tensor *g) {
  loom_tensor *gf = loom_tensor_dtype(g) == LOOM_F32 ? g : loom_cast(g, LOOM_F32);
  return loom_sum_all(loom_mul(gf, gf));
}

/* The total of the parameters' sums of squares, in double. Each sum is
 * written into one f32 vector on the first gradient's device and the
 * vector comes back in a single read, so a GPU is waited for once per
 * call rather than once per parameter (GPT-2 has ~150); the sums are then
 * added on the host in parameter order, in double, exactly as reading each
 * back would. A gradient on another device is read back on its own. */
static loom_status total_squares(loom_tensor *const *params, int n, double *out) {
  loom_device dev0 = loom_cpu();
  int first = -1;
  for (int i = 0; i < n && first < 0; i++)
    if (loom_grad(params[i])) first = i, dev0 = loom_tensor_device(loom_grad(params[i]));
  *out = 0;
  if (first < 0) return LOOM_OK;
  int64_t len = n;
  loom_tensor *buf = loom_zeros(1, &len, LOOM_F32, dev0);
  float *host = loom_sys_malloc((size_t)n * sizeof *host);
  double *other = loom_sys_calloc((size_t)n, sizeof *other);
  loom_status st = buf && host && other ? LOOM_OK : loom_set_error(LOOM_ERR_OOM, "clip_grad_norm: %d sums", n);
  const int64_t one = 1;
  for (int i = first; i < n && st == LOOM_OK; i++) {
    loom_tensor *g = loom_grad(params[i]);
    if (!g) continue;
    loom_tensor *s = sum_squares(g);
    if (!s)
      st = loom_last_status();
    else if (loom_device_eq(loom_tensor_device(g), dev0))
      st = loom_copy_(loom_slice(buf, 0, i, i + 1, 1), loom_reshape(s, 1, &one));
    else
      st = loom_item(s, &other[i]);
    if (st != LOOM_OK) loom_error_prefix("clip_grad_norm: parameter %d", i);
  }
  if (st == LOOM_OK && (st = loom_to_host(buf, host, (size_t)n * sizeof *host, LOOM_F32)) != LOOM_OK)
    loom_error_prefix("clip_grad_norm: reading the sums back");
  double total = 0;
  for (int i = 0; i < n && st == LOOM_OK; i++) total += (double)host[i] + other[i];  /* one of the two is 0 */
  loom_sys_free(host), loom_sys_free(other);
  *out = total;
  return st;
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
  st = total_squares(params, n, &total);
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
