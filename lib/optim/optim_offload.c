/* optim_offload.c — optimizer offload (loom_adamw_offload_new): the AdamW
 * state and update live on the host, beside host f32 copies of the
 * parameters; each step brings the gradients to the host, runs the CPU
 * AdamW on the copies and writes the updated values back to the device
 * parameters. Copies are synchronous through loom's host<->device copies
 * (pinned buffers and overlap with the backward pass are not done yet). */
#include <string.h>

#include "loom/autograd.h"
#include "ops/op.h"
#include "optim/optim_internal.h"
#include "amp/amp_internal.h"

/* dst (host, contiguous) <- src (any device, contiguous), or the reverse. */
static loom_status to_host(loom_tensor *src, loom_tensor *dst) {
  if (src->storage->device.kind == LOOM_CPU) {
    memcpy(loom_tensor_ptr(dst), loom_tensor_ptr(src), (size_t)loom_tensor_numel(src) * loom_dtype_size(src->dtype));
    return LOOM_OK;
  }
  return loom_copy_to_host_raw(src, loom_tensor_ptr(dst));
}

static loom_status from_host(loom_tensor *src, loom_tensor *dst) {
  if (dst->storage->device.kind == LOOM_CPU) {
    memcpy(loom_tensor_ptr(dst), loom_tensor_ptr(src), (size_t)loom_tensor_numel(src) * loom_dtype_size(src->dtype));
    return LOOM_OK;
  }
  return loom_copy_from_host_raw(dst, loom_tensor_ptr(src));
}

loom_tensor *loom_offload_param_copy(loom_tensor *p) {
  if (p->dtype != LOOM_F32 || !loom_tensor_is_contiguous(p)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "adamw_offload: parameters must be contiguous f32 tensors");
    return NULL;
  }
  loom_tensor *h = loom_tensor_alloc_raw(p->ndim, p->shape, LOOM_F32, loom_cpu());
  if (h && to_host(p, h) != LOOM_OK) {
    loom_tensor_release(h);
    return NULL;
  }
  return h;
}

loom_status loom_offload_optimizer_step(loom_optimizer *o, const int32_t *skip) {
  if (skip)
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "adamw_offload: the loss scaler's device-side skip is not supported "
                          "with an offloaded optimizer; use bf16 or fp32, or loom_adamw_new");
  loom_optimizer *in = o->offload_inner;
  for (int i = 0; i < o->n; i++) {
    loom_tensor *p = o->params[i], *h = o->host_params[i];
    if (loom_amp_lowp_copy(p))
      return loom_set_error(LOOM_ERR_UNSUPPORTED, "adamw_offload: parameter %d has a low-precision copy (mixed "
                            "precision); offloading covers f32 models for now", i);
    loom_zero_grad(h);
    if (!p->grad) continue;
    loom_tensor *g = loom_tensor_alloc_raw(h->ndim, h->shape, LOOM_F32, loom_cpu());
    if (!g) return loom_last_status();
    loom_tensor *src = loom_tensor_is_contiguous(p->grad) ? loom_tensor_retain(p->grad) : NULL;
    loom_status st = src ? to_host(src, g)
                         : loom_set_error(LOOM_ERR_INTERNAL, "adamw_offload: gradient %d is not contiguous", i);
    loom_tensor_release(src);
    if (st != LOOM_OK) {
      loom_tensor_release(g);
      return st;
    }
    h->grad = g;
  }
  in->lr = o->lr;
  LOOM_TRY(loom_optimizer_step(in));
  for (int i = 0; i < o->n; i++) {
    if (!o->params[i]->grad) continue;
    LOOM_TRY(from_host(o->host_params[i], o->params[i]));
    loom_tensor_bump_version(o->params[i]);
    o->param_steps[i]++;
  }
  o->steps = in->steps;
  return LOOM_OK;
}
