/* loader_tensor.c — loom_loader_next: the raw batch of loader.c as zero-copy
 * tensors. x and y wrap the loader's buffer (host on the CPU, device on a
 * GPU); each holds one reference on it, and the buffer goes back to the
 * loader's ring when both tensors have died (from any thread).
 *
 * Kept in its own file so that code using only the raw layer (tests of the
 * worker/ring logic) does not need the tensor implementation linked in. */
#include "data/data_internal.h"
#include "ops/op.h"
#include "tensor/tensor_internal.h"

static void batch_release(void *data, void *ctx) {
  (void)data;
  loom_loader_release_raw((loom_batch_buf *)ctx);
}

loom_status loom_loader_next(loom_loader *l, loom_tensor **x, loom_tensor **y) {
  if (!x) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_loader_next: x is NULL");
  *x = NULL;
  if (y) *y = NULL;
  if (!l) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_loader_next: loader is NULL");
  loom_dtype xdt, ydt;
  int xnd;
  int64_t shape[LOOM_MAX_DIMS];
  bool has_y;
  loom_device dev;
  loom_loader_out_info(l, &xdt, &xnd, shape + 1, &ydt, &has_y, &dev);
  bool want_y = has_y && y;
  loom_raw_batch rb;
  LOOM_TRY(loom_loader_next_raw(l, &rb, want_y ? 2 : 1));
  if (rb.n == 0) return LOOM_OK;  /* end of epoch */
  shape[0] = rb.n;
  int64_t numel = 1;
  for (int i = 0; i <= xnd; i++) numel *= shape[i];
  loom_tensor *tx = loom_tensor_wrap(rb.x, (size_t)numel * loom_dtype_size(xdt), dev, xnd + 1, shape, xdt,
                                     batch_release, rb.buf);
  if (!tx) {
    /* Neither tensor exists: drop both references ourselves. */
    loom_loader_release_raw(rb.buf);
    if (want_y) loom_loader_release_raw(rb.buf);
    loom_error_prefix("loom_loader_next: wrapping the batch");
    return loom_loader_fail(l);  /* the batch is gone: say so until the epoch restarts */
  }
  /* Samples were written HWC: the batch is [n, C, H, W] with NHWC strides. */
  if (loom_loader_channels_last(l) && tx->ndim == 4) loom_set_channels_last_strides(tx);
  if (want_y) {
    int64_t yshape[1] = {rb.n};
    loom_tensor *ty = loom_tensor_wrap(rb.y, (size_t)rb.n * loom_dtype_size(ydt), dev, 1, yshape, ydt,
                                       batch_release, rb.buf);
    if (!ty) {
      loom_loader_release_raw(rb.buf);  /* y's reference */
      /* x belongs to the open scope (it dies there) or to us. */
      if (loom_scope_depth() == 0) loom_tensor_release(tx);
      loom_error_prefix("loom_loader_next: wrapping the labels");
      return loom_loader_fail(l);
    }
    *y = ty;
  }
  *x = tx;
  return LOOM_OK;
}
