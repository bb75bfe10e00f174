/* unscale.c — turning the scaled, low-precision gradients of the copies into
 * the f32 gradients of the master weights, in one pass over all of them (a
 * parameter list: whose parameters they are is the caller's business).
 * The per-element work is in unscale_cpu.c / unscale.cu; this file builds
 * the work list and dispatches by device. */
#include <stdlib.h>

#include "amp/amp_internal.h"
#include "loom/autograd.h"
#include "ops/op.h"
#include "core/sys.h"
#ifdef LOOM_HAVE_CUDA
#include "alloc/alloc.h"
#endif

/* A gradient the kernels can read as a dense array: g itself, or a
 * contiguous copy (owned by the open scope). */
static loom_tensor *dense(loom_tensor *g) { return loom_tensor_is_contiguous(g) ? g : loom_contiguous(g); }

/* The pass, wherever its scale and verdict live: inv_scale / *bad on the
 * host, or (CUDA) *inv_dev / *found_dev on the device (then nothing waits). */
static loom_status unscale_pass(loom_tensor *const *params, int n, float inv_scale, const float *inv_dev, bool check,
                                int32_t *found_dev, int *bad, struct loom_dev_table **table, const uint16_t **defer,
                                loom_dtype *defer_dt) {
  if (n <= 0) return LOOM_OK;
  loom_amp_unscale_item *items = loom_sys_malloc((size_t)n * sizeof *items);
  if (!items) return loom_set_error(LOOM_ERR_OOM, "amp unscale: out of host memory for %d gradients", n);
  loom_status st = LOOM_OK;
  int k = 0;
  loom_device dev = params[0]->storage->device;
  bool prev = loom_set_grad_enabled(false);
  loom_scope_begin();
  for (int i = 0; i < n && st == LOOM_OK; i++) {
    loom_tensor *p = params[i];
    loom_tensor *c = loom_amp_copy_of(p);
    int64_t numel = loom_shape_numel(p->ndim, p->shape);
    if (defer) defer[i] = NULL;
    if (c && c->grad && defer && !p->grad && dev.kind == LOOM_CPU && loom_tensor_is_contiguous(c->grad) &&
        (c->grad->dtype == LOOM_F16 || c->grad->dtype == LOOM_BF16) &&
        (*defer_dt == LOOM_F32 || *defer_dt == c->grad->dtype) && loom_device_eq(p->storage->device, dev)) {
      /* Left for the caller's update to widen, block by block. */
      p->grad = loom_tensor_alloc_raw(p->ndim, p->shape, LOOM_F32, p->storage->device);
      if (!p->grad) { st = loom_last_status(); break; }
      defer[i] = loom_tensor_ptr(c->grad);
      *defer_dt = c->grad->dtype;
    } else if (c && c->grad) {
      loom_tensor *src = dense(c->grad);
      if (!src) { st = loom_last_status(); break; }
      bool acc = p->grad != NULL;
      if (!p->grad) {
        p->grad = loom_tensor_alloc_raw(p->ndim, p->shape, LOOM_F32, p->storage->device);
        if (!p->grad) { st = loom_last_status(); break; }
      } else if (p->grad->dtype != LOOM_F32 || !loom_tensor_is_contiguous(p->grad)) {
        st = loom_set_error(LOOM_ERR_INTERNAL, "amp unscale: gradient of master %d is not a dense f32 tensor", i);
        break;
      }
      items[k++] = (loom_amp_unscale_item){loom_tensor_ptr(src), loom_tensor_ptr(p->grad), numel, (int32_t)src->dtype,
                                           acc};
    } else if (p->grad && (check || inv_dev || inv_scale != 1.0f)) {
      if (p->grad->dtype != LOOM_F32 || !loom_tensor_is_contiguous(p->grad)) {
        st = loom_set_error(LOOM_ERR_INTERNAL, "amp unscale: gradient of parameter %d is not a dense f32 tensor", i);
        break;
      }
      items[k++] = (loom_amp_unscale_item){loom_tensor_ptr(p->grad), loom_tensor_ptr(p->grad), numel, LOOM_F32, 0};
    }
    if (st == LOOM_OK && !loom_device_eq(p->storage->device, dev))
      st = loom_set_error(LOOM_ERR_DEVICE, "amp unscale: parameter %d is on another device than parameter 0", i);
  }
  if (st == LOOM_OK && k > 0) {
#ifdef LOOM_HAVE_CUDA
    if (dev.kind == LOOM_CUDA) {
      int32_t *flag = found_dev;
      void *tmp = NULL;
      if (check && !flag) {
        /* A host verdict on the GPU: a temporary device flag, read back
         * (only loom_scaler_unscale with found_inf asked for does this). */
        loom_stream *s = loom_stream_current(dev);
        st = s ? loom_alloc_malloc(dev, sizeof(int32_t), s, &tmp) : loom_last_status();
        if (st == LOOM_OK) st = loom_cuda_fill_zero(dev, tmp, sizeof(int32_t));
        flag = tmp;
      }
      if (st == LOOM_OK) st = loom_cuda_amp_unscale(dev, items, k, inv_scale, inv_dev, check ? flag : NULL, table);
      if (st == LOOM_OK && tmp) st = loom_cuda_read_flag(dev, tmp, bad);
      loom_alloc_free(dev, tmp);
    } else
#endif
      st = loom_cpu_amp_unscale(items, k, inv_scale, bad);
  }
  loom_scope_end();
  loom_set_grad_enabled(prev);
  loom_sys_free(items);
  if (st != LOOM_OK) return st;
  /* The copies' gradients now live in the masters: drop them, so a second
   * call (or the optimizer's own gather) does not count them twice. */
  for (int i = 0; i < n; i++) {
    loom_tensor *c = loom_amp_copy_of(params[i]);
    if (c && c->grad && !(defer && defer[i])) loom_zero_grad(c);
  }
  return LOOM_OK;
}

loom_status loom_amp_unscale_grads_deferred(loom_tensor *const *params, int n, const uint16_t **defer,
                                            loom_dtype *defer_dt) {
  int bad = 0;
  *defer_dt = LOOM_F32;
  /* Cleared first: the pass may stop at a failure before reaching an entry. */
  for (int i = 0; i < n; i++) defer[i] = NULL;
  loom_status st = unscale_pass(params, n, 1.0f, NULL, false, NULL, &bad, NULL, defer, defer_dt);
  if (st != LOOM_OK) loom_amp_deferred_finish(params, n, defer, *defer_dt, true);
  return st;
}

void loom_amp_deferred_finish(loom_tensor *const *params, int n, const uint16_t **defer, loom_dtype dt, bool widen) {
  for (int i = 0; i < n; i++) {
    if (!defer[i]) continue;
    loom_tensor *p = params[i];
    if (widen && p->grad)
      loom_cpu_amp_widen_grad(defer[i], dt, loom_tensor_ptr(p->grad), loom_shape_numel(p->ndim, p->shape));
    loom_tensor *c = loom_amp_copy_of(p);
    if (c && c->grad) loom_zero_grad(c);
    defer[i] = NULL;
  }
}

loom_status loom_amp_unscale_grads(loom_tensor *const *params, int n, float inv_scale, bool check, bool *found_inf,
                                   struct loom_dev_table **table) {
  if (found_inf) *found_inf = false;
  int bad = 0;
  LOOM_TRY(unscale_pass(params, n, inv_scale, NULL, check, NULL, &bad, table, NULL, NULL));
  if (found_inf) *found_inf = bad != 0;
  return LOOM_OK;
}

#ifdef LOOM_HAVE_CUDA
loom_status loom_amp_unscale_grads_device(loom_tensor *const *params, int n, const float *inv_dev, int32_t *found_dev,
                                          struct loom_dev_table **table) {
  int bad = 0;
  return unscale_pass(params, n, 1.0f, inv_dev, true, found_dev, &bad, table, NULL, NULL);
}
#endif

void loom_amp_zero_copy_grads(loom_tensor *const *params, int n) {
  for (int i = 0; i < n; i++) {
    loom_tensor *c = loom_amp_copy_of(params[i]);
    if (c) loom_zero_grad(c);
  }
}
