/* device_internal.h (internal) — stream/event objects and CUDA error checks. */
#ifndef LOOM_DEVICE_INTERNAL_H
#define LOOM_DEVICE_INTERNAL_H

#include "loom/device.h"
#include "core/error.h"

struct loom_stream {
  loom_device device;
  void *native;      /* cudaStream_t for CUDA, NULL on the CPU */
  int owned;         /* created by loom_stream_create (not a default stream) */
};

struct loom_event {
  loom_device device;
  void *native;      /* cudaEvent_t for CUDA */
  int recorded;
};

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
/* Turn a failed CUDA runtime call into a loom error naming call, file, line. */
loom_status loom_cuda_error(cudaError_t e, const char *call, const char *file, int line);
#define LOOM_CUDA_CHECK(call)                                                  \
  do {                                                                         \
    cudaError_t loom_ce_ = (call);                                             \
    if (loom_ce_ != cudaSuccess) return loom_cuda_error(loom_ce_, #call, __FILE__, __LINE__); \
  } while (0)
/* Make dev's GPU current for this thread. */
loom_status loom_cuda_set_device(int index);
#endif

#endif
