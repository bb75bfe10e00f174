/* init.c — parameter initializers (Kaiming by fan-in or fan-out, Xavier,
 * PyTorch's Linear/Conv default, constants), drawn from the global Philox
 * generator. */
#include <math.h>

#include "loom/autograd.h"
#include "nn/module_internal.h"

loom_status loom_init_(loom_tensor *t, loom_init kind, int64_t fan_in, int64_t fan_out) {
  if (!t) return loom_set_error(LOOM_ERR_NULL_INPUT, "init: tensor is NULL");
  if (fan_in <= 0 || fan_out <= 0)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "init: fan_in and fan_out must be positive (got %lld, %lld)",
                          (long long)fan_in, (long long)fan_out);
  int normal = 0;
  double bound = 0;
  switch (kind) {
    case LOOM_INIT_DEFAULT: bound = 1.0 / sqrt((double)fan_in); break;
    case LOOM_INIT_KAIMING_UNIFORM: bound = sqrt(6.0 / (double)fan_in); break;
    case LOOM_INIT_KAIMING_NORMAL: normal = 1; bound = sqrt(2.0 / (double)fan_in); break;
    case LOOM_INIT_XAVIER_UNIFORM: bound = sqrt(6.0 / (double)(fan_in + fan_out)); break;
    case LOOM_INIT_XAVIER_NORMAL: normal = 1; bound = sqrt(2.0 / (double)(fan_in + fan_out)); break;
    case LOOM_INIT_KAIMING_NORMAL_FAN_OUT: normal = 1; bound = sqrt(2.0 / (double)fan_out); break;
    case LOOM_INIT_ZEROS: return loom_fill_(t, 0.0);
    case LOOM_INIT_ONES: return loom_fill_(t, 1.0);
    default: return loom_set_error(LOOM_ERR_INVALID_ARG, "init: unknown initializer %d", (int)kind);
  }
  bool prev = loom_set_grad_enabled(false);
  loom_scope_begin();
  loom_tensor *r = normal ? loom_randn(t->ndim, t->shape, t->dtype, t->storage->device)
                          : loom_rand(t->ndim, t->shape, t->dtype, t->storage->device);
  /* uniform: (2u - 1) * bound; normal: z * std */
  loom_tensor *v = normal ? loom_mul_scalar(r, bound) : loom_mul_scalar(loom_add_scalar(r, -0.5), 2.0 * bound);
  loom_status st = v ? loom_copy_(t, v) : loom_last_status();
  loom_scope_end();
  loom_set_grad_enabled(prev);
  return st;
}
