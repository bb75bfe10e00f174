/* alloc_passthrough.c — temporary pass-through behind alloc.h: CPU memory
 * from aligned_alloc, CUDA memory from cudaMalloc. Replaced by the caching
 * allocator (issue 3) behind the same interface. */
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "device/device_internal.h"

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

loom_status loom_alloc_malloc(loom_device dev, size_t nbytes, loom_stream *stream, void **out) {
  (void)stream;
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_malloc: out is NULL");
  *out = NULL;
  LOOM_TRY(loom_device_check(dev));
  if (dev.kind == LOOM_CPU) {
    void *p = aligned_alloc(64, round_up(nbytes ? nbytes : 1, 64));
    if (!p) return loom_set_error(LOOM_ERR_OOM, "out of host memory allocating %zu bytes on cpu", nbytes);
    *out = p;
    return LOOM_OK;
  }
#ifdef LOOM_HAVE_CUDA
  LOOM_TRY(loom_cuda_set_device(dev.index));
  cudaError_t e = cudaMalloc(out, nbytes ? nbytes : 1);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return loom_set_error(LOOM_ERR_OOM, "out of memory allocating %zu bytes on cuda:%d (%s)", nbytes, dev.index,
                          cudaGetErrorString(e));
  }
  return LOOM_OK;
#else
  return loom_set_error(LOOM_ERR_DEVICE, "built without CUDA");
#endif
}

void loom_alloc_free(loom_device dev, void *ptr) {
  if (!ptr) return;
  if (dev.kind == LOOM_CPU) { free(ptr); return; }
#ifdef LOOM_HAVE_CUDA
  cudaFree(ptr);
#endif
}

loom_status loom_alloc_pinned_malloc(size_t nbytes, void **out) {
  return loom_alloc_malloc(loom_cpu(), nbytes, NULL, out);
}

void loom_alloc_pinned_free(void *ptr) { free(ptr); }
