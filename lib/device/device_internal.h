/* device_internal.h (internal) — stream/event objects and CUDA error checks. */
#ifndef LOOM_DEVICE_INTERNAL_H
#define LOOM_DEVICE_INTERNAL_H

#include <stddef.h>
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

/* ---- logical CUDA devices (visible filter + virtual split) ------------------ */
#define LOOM_MAX_LOGICAL_GPUS 64
#define LOOM_MAX_VIRTUAL_PER_GPU 16

/* Physical GPU behind logical CUDA device `index` (-1 if none). */
int loom_device_physical(int index);
/* Memory limit of a virtual device in bytes (0: not virtual, no limit). */
size_t loom_device_memory_limit(int index);
/* Tests only: pretend there are n physical GPUs of mem bytes each, before
 * any device is used. No CUDA call is made for them: their streams and events
 * behave like the CPU's, and the allocator takes their memory from the
 * provider factory the test registers (alloc/provider.h; tests/support/
 * fake_gpus.c does both). LOOM_ERR_STATE after first use. */
loom_status loom_device_testing_fake_gpus(int n, size_t mem);
/* n > 0 when fake GPUs are active (mem: their size). */
int loom_device_fake_gpus(size_t *mem);
/* A CUDA device backed by the CUDA runtime (not a fake one). */
int loom_device_is_real_cuda(loom_device dev);

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
/* Turn a failed CUDA runtime call into a loom error naming call, file, line. */
loom_status loom_cuda_error(cudaError_t e, const char *call, const char *file, int line);
#define LOOM_CUDA_CHECK(call)                                                  \
  do {                                                                         \
    cudaError_t loom_ce_ = (call);                                             \
    if (loom_ce_ != cudaSuccess) return loom_cuda_error(loom_ce_, #call, __FILE__, __LINE__); \
  } while (0)
/* Make logical device index's physical GPU current for this thread (a
 * cudaSetDevice only when this thread's current GPU is another one). */
loom_status loom_cuda_set_device(int index);

/* Errors that kernels find (an out-of-range label or index) without the host waiting
 * for them: reported at the next call that waits for the GPU anyway
 * (loom_to_host/loom_item, stream/device synchronize) or at the next use of
 * the op that found them (deferred.c). */
typedef struct loom_deferred_error {
  unsigned long long row;  /* ~0ull: none; else the first bad row */
  long long label;         /* its label */
  long long classes;       /* the valid range is [0, classes) */
  long long op;            /* which check found it: LOOM_DEFERRED_* */
} loom_deferred_error;
/* The checks that publish into the record (its op field). */
enum {
  LOOM_DEFERRED_CROSS_ENTROPY = 0,        /* a label of cross_entropy */
  LOOM_DEFERRED_EMBEDDING = 1,            /* an index of embedding */
  LOOM_DEFERRED_EMBEDDING_BACKWARD = 2,   /* an index of embedding_backward */
  LOOM_DEFERRED_LINEAR_CROSS_ENTROPY = 3, /* a label of linear_cross_entropy */
};
/* Device-visible slots of dev, created on first use: a device word kernels
 * atomicMin a bad row into (~0ull when clear; the kernel that publishes it
 * resets it) and the record in mapped pinned host memory it is published
 * to (a device pointer). */
loom_status loom_deferred_slots(loom_device dev, unsigned long long **bad_row, loom_deferred_error **record);
/* LOOM_OK, or the published error as a loom error (then cleared). Never waits. */
loom_status loom_deferred_check(loom_device dev);
#endif

#endif
