/* host_copy.c — byte copies between host memory and a contiguous tensor on
 * any device: no kernel, no dtype conversion (those are ops: api_copy.c).
 * The ops that fill, move and read back tensors build on these, and so do
 * activation / optimizer offload and the safetensors writer. */
#include <string.h>

#include "core/capture.h"
#include "device/device_internal.h"
#include "device/sync_stats.h"
#include "tensor/tensor_internal.h"

#ifdef LOOM_HAVE_CUDA
/* Contiguous byte copy between host and device on dev's current stream.
 * Device-to-host waits for the copy (the caller reads the bytes next). */
static loom_status cuda_copy_bytes(void *dst, const void *src, size_t n, loom_device dev, enum cudaMemcpyKind kind) {
  LOOM_TRY(loom_cuda_set_device(dev.index));
  loom_stream *s = loom_stream_current(dev);
  if (!s) return loom_last_status();
  cudaStream_t cs = (cudaStream_t)loom_stream_native(s);
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, cs));
  if (kind == cudaMemcpyDeviceToHost) {
    LOOM_CUDA_CHECK(cudaStreamSynchronize(cs));
    /* The host waited for the GPU: report what its kernels found meanwhile
     * (an out-of-range label, ...). */
    return loom_deferred_check(dev);
  }
  return LOOM_OK;
}
#endif

loom_status loom_copy_from_host_raw(loom_tensor *dst, const void *src) {
  size_t n = (size_t)loom_shape_numel(dst->ndim, dst->shape) * loom_dtype_size(dst->dtype);
  /* A graph capture records a copy from host memory as a copy from that
   * address: every replay would read it again, long after the caller
   * reused or freed it. Invalid on every device, so that a capture on the
   * CPU catches what a GPU replay would get wrong. */
  loom_capture_note_unsafe("a copy from host memory (a replay would copy from that host address again, after it "
                           "was reused; copy inputs into the captured tensors before replaying)");
  if (dst->storage->device.kind == LOOM_CPU) {
    if (n) memcpy(loom_tensor_ptr(dst), src, n);
    return LOOM_OK;
  }
#ifdef LOOM_HAVE_CUDA
  return cuda_copy_bytes(loom_tensor_ptr(dst), src, n, dst->storage->device, cudaMemcpyHostToDevice);
#else
  return loom_set_error(LOOM_ERR_DEVICE, "copy: built without CUDA");
#endif
}

loom_status loom_copy_to_host_raw(loom_tensor *src, void *dst) {
  size_t n = (size_t)loom_shape_numel(src->ndim, src->shape) * loom_dtype_size(src->dtype);
  loom_sync_count(LOOM_SYNC_D2H);  /* on the CPU too: the step code must not read back either way */
  if (src->storage->device.kind == LOOM_CPU) {
    if (n) memcpy(dst, loom_tensor_ptr(src), n);
    return LOOM_OK;
  }
#ifdef LOOM_HAVE_CUDA
  return cuda_copy_bytes(dst, loom_tensor_ptr(src), n, src->storage->device, cudaMemcpyDeviceToHost);
#else
  return loom_set_error(LOOM_ERR_DEVICE, "copy: built without CUDA");
#endif
}
