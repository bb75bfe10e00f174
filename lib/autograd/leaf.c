/* leaf.c — the leaf side of autograd: which tensors require grad, their
 * grad-ready hooks, dropping their gradients. */
#include "autograd/node.h"
#include "loom/autograd.h"

loom_status loom_set_requires_grad(loom_tensor *t, bool requires_grad) {
  /* The way a tensor comes to require grad: make sure ops record (this
   * call also links node.c into a static program, see there). */
  loom_autograd_install();
  if (!t) return loom_set_error(LOOM_ERR_NULL_INPUT, "loom_set_requires_grad: tensor is NULL");
  if (requires_grad && !loom_dtype_is_float(t->dtype))
    return loom_set_error(LOOM_ERR_DTYPE, "loom_set_requires_grad: only float tensors can require grad (got %s)",
                          loom_dtype_name(t->dtype));
  if (!requires_grad && t->grad_fn)
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "loom_set_requires_grad: cannot turn off grad on a non-leaf tensor (use loom_detach)");
  t->requires_grad = requires_grad;
  return LOOM_OK;
}

loom_status loom_set_grad_hook(loom_tensor *t, loom_grad_hook hook, void *user) {
  if (!t) return loom_set_error(LOOM_ERR_NULL_INPUT, "loom_set_grad_hook: tensor is NULL");
  if (t->grad_fn)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_set_grad_hook: hooks go on leaf tensors (parameters), not results");
  t->hook = hook;
  t->hook_user = user;
  return LOOM_OK;
}

loom_status loom_zero_grad(loom_tensor *t) {
  if (!t) return loom_set_error(LOOM_ERR_NULL_INPUT, "loom_zero_grad: tensor is NULL");
  loom_tensor_release(t->grad);
  t->grad = NULL;
  return LOOM_OK;
}
