/* offload.c — activation offload (loom_offload, see autograd.h): while a
 * marked region runs, every contiguous tensor an op saves for backward is
 * copied to host memory and the node keeps only that copy, so the device
 * copies die with the region's scope; backward copies them back to the
 * device a few nodes ahead of their use (engine.c calls
 * loom_offload_prefetch on the next nodes before running one).
 *
 * The copies go through loom's synchronous host<->device copies into
 * ordinary host memory: pinned buffers and an asynchronous copy stream (to
 * overlap the transfers with compute) are not done yet. On the CPU the
 * "host copy" is a second CPU buffer: nothing is saved, but the logic runs
 * and is tested there. */
#include <string.h>

#include "autograd/node.h"
#include "loom/autograd.h"
#include "tensor/tensor_internal.h"

static _Thread_local int tl_offload_depth;

int loom_offload_active(void) { return tl_offload_depth > 0; }

loom_tensor *loom_offload_to_host(loom_tensor *t) {
  if (!loom_tensor_is_contiguous(t)) return NULL;
  loom_tensor *h = loom_tensor_alloc_raw(t->ndim, t->shape, t->dtype, loom_cpu());
  if (!h) return NULL;
  loom_status st;
  if (t->storage->device.kind == LOOM_CPU) {
    memcpy(loom_tensor_ptr(h), loom_tensor_ptr(t), (size_t)loom_tensor_numel(t) * loom_dtype_size(t->dtype));
    st = LOOM_OK;
  } else {
    st = loom_copy_to_host_raw(t, loom_tensor_ptr(h));
  }
  if (st != LOOM_OK) {
    loom_tensor_release(h);
    return NULL;
  }
  return h;
}

/* Bring saved tensor *slot (a host copy) back to dev. */
static loom_status restore(loom_tensor **slot, unsigned *version, loom_device dev) {
  loom_tensor *h = *slot;
  loom_tensor *d = loom_tensor_alloc_raw(h->ndim, h->shape, h->dtype, dev);
  if (!d) return loom_last_status();
  loom_status st = LOOM_OK;
  if (dev.kind == LOOM_CPU)
    memcpy(loom_tensor_ptr(d), loom_tensor_ptr(h), (size_t)loom_tensor_numel(h) * loom_dtype_size(h->dtype));
  else
    st = loom_copy_from_host_raw(d, loom_tensor_ptr(h));
  if (st != LOOM_OK) {
    loom_tensor_release(d);
    return st;
  }
  /* A changed host copy (nobody else can reach it) would be a bug: the
   * version check carries over to the device copy. */
  if (atomic_load(&h->storage->version) != *version) atomic_fetch_add(&d->storage->version, 1u);
  *version = atomic_load(&d->storage->version);
  loom_tensor_release(h);
  *slot = d;
  return LOOM_OK;
}

loom_status loom_offload_prefetch(loom_node *n) {
  if (!n->offloaded || n->freed) return LOOM_OK;
  for (int k = 0; k < LOOM_OP_MAX_IN; k++)
    if (n->offloaded & (1u << k)) {
      LOOM_TRY(restore(&n->saved_in[k], &n->saved_in_version[k], n->offload_dev));
      n->offloaded &= ~(1u << k);
    }
  for (int k = 0; k < LOOM_OP_MAX_OUT; k++)
    if (n->offloaded & (1u << (8 + k))) {
      LOOM_TRY(restore(&n->saved_out[k], &n->saved_out_version[k], n->offload_dev));
      n->offloaded &= ~(1u << (8 + k));
    }
  return LOOM_OK;
}

loom_tensor *loom_offload(loom_checkpoint_fn fn, void *ctx, int n, loom_tensor *const *inputs) {
  if (!fn || n < 0 || (n > 0 && !inputs)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "offload: needs a function and its inputs");
    return NULL;
  }
  for (int k = 0; k < n; k++)
    if (!inputs[k]) {
      if (loom_last_status() == LOOM_OK) loom_set_error(LOOM_ERR_NULL_INPUT, "offload: input %d is NULL", k);
      return NULL;
    }
  if (!loom_is_grad_enabled()) return fn(ctx, n, inputs);
  tl_offload_depth++;
  loom_scope_begin();
  loom_tensor *y = fn(ctx, n, inputs);
  if (y) loom_keep(y);  /* the output stays; the region's intermediates go */
  loom_scope_end();
  tl_offload_depth--;
  if (!y) loom_error_prefix("offload");
  return y;
}
