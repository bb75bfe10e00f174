/* loader_into.c — loom_loader_next_into: the next batch copied into tensors
 * the caller owns (the static input buffers of a captured CUDA graph),
 * instead of fresh tensors over the loader's ring.
 *
 * It takes the batch through the same raw layer as loom_loader_next (so the
 * stream of batches, the position and the stats are shared by both calls),
 * copies the first n rows and hands the buffer straight back. The arguments
 * are checked before the batch is taken: a bad call consumes nothing.
 *
 * The accepted destinations (contiguous, or channels-last exactly when the
 * loader writes channels-last) have the batch's own memory layout, so the
 * copy is one byte range for x and one for y: memcpy on the CPU; on a GPU a
 * device-to-device cudaMemcpyAsync on the device's current stream. That
 * stream already waits (loom_loader_next_raw) for the loader's upload on its
 * copy stream, the copy is ordered after earlier work on it (a graph replay
 * still reading x) and before later work (the next replay), and releasing
 * the buffer records on that same stream that the ring block may be reused
 * once the copy has run. The host never waits for the device. */
#include <string.h>

#include "data/data_internal.h"
#include "device/device_internal.h"
#include "loom/ops.h"
#include "tensor/tensor_internal.h"

#define FN "loom_loader_next_into"

/* dst must be what a batch of the loader would be, with batch_size rows. */
static loom_status check_dest(const char *arg, const loom_tensor *t, loom_dtype dt, int ndim, const int64_t *shape,
                              loom_device dev, bool channels_last) {
  char want[160], got[160];
  loom_device tdev = t->storage->device;
  if (!loom_device_eq(tdev, dev))
    return loom_set_error(LOOM_ERR_INVALID_ARG, FN ": %s is on %s but the loader delivers to %s", arg,
                          loom_device_str(tdev, got, sizeof got), loom_device_str(dev, want, sizeof want));
  if (t->dtype != dt)
    return loom_set_error(LOOM_ERR_INVALID_ARG, FN ": %s has dtype %s but the loader's batches are %s", arg,
                          loom_dtype_name(t->dtype), loom_dtype_name(dt));
  bool same = t->ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
  if (!same)
    return loom_set_error(LOOM_ERR_INVALID_ARG, FN ": %s has shape %s but must be %s ([batch_size, sample shape...])",
                          arg, loom_shape_str(t->ndim, t->shape, got, sizeof got),
                          loom_shape_str(ndim, shape, want, sizeof want));
  if (channels_last ? !loom_tensor_is_channels_last(t) : !loom_tensor_is_contiguous(t))
    return loom_set_error(LOOM_ERR_INVALID_ARG, FN ": %s must be %s like the loader's batches (strides %s)", arg,
                          channels_last ? "channels-last (NHWC strides)" : "contiguous",
                          loom_shape_str(t->ndim, t->strides, got, sizeof got));
  return LOOM_OK;
}

/* nbytes from src (the ring block) to dst, in the order described above. */
static loom_status copy_bytes(void *dst, const void *src, size_t nbytes, loom_device dev) {
  if (nbytes == 0) return LOOM_OK;
  if (dev.kind == LOOM_CPU) {
    memcpy(dst, src, nbytes);
    return LOOM_OK;
  }
#ifdef LOOM_HAVE_CUDA
  LOOM_TRY(loom_cuda_set_device(dev.index));
  loom_stream *s = loom_stream_current(dev);
  if (!s) return loom_last_status();
  cudaError_t e = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, (cudaStream_t)loom_stream_native(s));
  if (e != cudaSuccess) return loom_cuda_error(e, FN ": cudaMemcpyAsync (device to device)", __FILE__, __LINE__);
  return LOOM_OK;
#else
  return loom_set_error(LOOM_ERR_DEVICE, FN ": built without CUDA");
#endif
}

loom_status loom_loader_next_into(loom_loader *l, loom_tensor *x, loom_tensor *y, int64_t *n) {
  if (n) *n = 0;
  if (!l) return loom_set_error(LOOM_ERR_INVALID_ARG, FN ": loader is NULL");
  if (!x) return loom_set_error(LOOM_ERR_INVALID_ARG, FN ": x is NULL (pass the tensor to fill)");
  if (!n) return loom_set_error(LOOM_ERR_INVALID_ARG, FN ": n is NULL (it receives the number of samples)");
  loom_dtype xdt, ydt;
  int xnd;
  int64_t shape[LOOM_MAX_DIMS];
  bool has_y;
  loom_device dev;
  loom_loader_out_info(l, &xdt, &xnd, shape + 1, &ydt, &has_y, &dev);
  int64_t bs = loom_loader_get_options(l)->batch_size;
  shape[0] = bs;
  bool cl = loom_loader_channels_last(l) && xnd + 1 == 4;
  LOOM_TRY(check_dest("x", x, xdt, xnd + 1, shape, dev, cl));
  bool want_y = has_y && y;
  if (want_y) LOOM_TRY(check_dest("y", y, ydt, 1, &bs, dev, false));

  loom_raw_batch rb;
  loom_status st = loom_loader_next_raw(l, &rb, 1);
  if (st != LOOM_OK) return loom_error_prefix(FN);
  if (rb.n == 0) return LOOM_OK;  /* end of epoch; the next call starts the following one */
  size_t row = loom_dtype_size(xdt);
  for (int i = 1; i <= xnd; i++) row *= (size_t)shape[i];
  /* Contiguous and channels-last batches alike: row i is bytes [i*row, (i+1)*row). */
  st = copy_bytes(loom_tensor_ptr(x), rb.x, (size_t)rb.n * row, dev);
  if (st == LOOM_OK && want_y) st = copy_bytes(loom_tensor_ptr(y), rb.y, (size_t)rb.n * loom_dtype_size(ydt), dev);
  /* In-place writes: tensors saved for backward from x/y are now stale. */
  loom_tensor_bump_version(x);
  if (want_y) loom_tensor_bump_version(y);
  /* After the copy is queued: on a GPU the block is reused only once the
   * current stream has run it. */
  loom_loader_release_raw(rb.buf);
  if (st != LOOM_OK) return st;
  *n = rb.n;
  return LOOM_OK;
}
