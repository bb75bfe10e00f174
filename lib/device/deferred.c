/* deferred.c — errors found on the GPU, reported without a host wait.
 *
 * A kernel that validates its input (cross-entropy labels, embedding
 * indices) cannot stop the host, and reading a flag back after it would
 * cost a cudaStreamSynchronize per training step. Instead it atomicMin's
 * the offending row into a device word; a later kernel of the same op
 * publishes row, label, class count and which op into a record in mapped
 * pinned host memory and resets the word. The host
 * reads the record (a plain memory read, no CUDA call) whenever it waits for
 * the GPU anyway — loom_to_host/loom_item, stream and device synchronize —
 * and at the next launch of the op, and turns it into a loom error there.
 * The slots have fixed addresses, so a captured CUDA graph can replay them. */
#ifdef LOOM_HAVE_CUDA
#include <pthread.h>
#include <stdio.h>

#include "core/teardown.h"
#include "device/device_internal.h"

typedef struct slots {
  int ready;                      /* atomic: set once both slots exist */
  unsigned long long *bad_row;    /* device memory */
  loom_deferred_error *host;      /* mapped pinned host memory (host pointer) */
  loom_deferred_error *dev_view;  /* the same record, device pointer */
} slots;

static slots g_slots[LOOM_MAX_LOGICAL_GPUS];
static pthread_mutex_t g_slots_lock = PTHREAD_MUTEX_INITIALIZER;

static loom_status create(slots *s, loom_device dev) {
  LOOM_TRY(loom_cuda_set_device(dev.index));
  loom_stream *ls = loom_stream_current(dev);
  if (!ls) return loom_last_status();
  cudaError_t e = cudaHostAlloc((void **)&s->host, sizeof *s->host, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) return loom_cuda_error(e, "cudaHostAlloc(deferred error record)", __FILE__, __LINE__);
  s->host->row = ~0ull;
  s->host->label = s->host->classes = s->host->op = 0;
  e = cudaHostGetDevicePointer((void **)&s->dev_view, s->host, 0);
  if (e == cudaSuccess) e = cudaMalloc((void **)&s->bad_row, sizeof *s->bad_row);
  /* On the compute stream (non-blocking): ordered before every kernel that
   * will use the word. */
  if (e == cudaSuccess) e = cudaMemsetAsync(s->bad_row, 0xff, sizeof *s->bad_row, (cudaStream_t)loom_stream_native(ls));
  if (e != cudaSuccess) {
    loom_status st = loom_cuda_error(e, "setting up the deferred error slots", __FILE__, __LINE__);
    if (s->bad_row) cudaFree(s->bad_row);
    cudaFreeHost(s->host);
    s->bad_row = NULL;
    s->host = s->dev_view = NULL;
    return st;
  }
  return LOOM_OK;
}

loom_status loom_deferred_slots(loom_device dev, unsigned long long **bad_row, loom_deferred_error **record) {
  if (dev.kind != LOOM_CUDA || dev.index < 0 || dev.index >= LOOM_MAX_LOGICAL_GPUS)
    return loom_set_error(LOOM_ERR_DEVICE, "deferred errors: not a CUDA device");
  slots *s = &g_slots[dev.index];
  if (!__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE)) {
    pthread_mutex_lock(&g_slots_lock);
    loom_status st = LOOM_OK;
    if (!s->ready) {
      st = create(s, dev);
      if (st == LOOM_OK) __atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_slots_lock);
    LOOM_TRY(st);
  }
  *bad_row = s->bad_row;
  *record = s->dev_view;
  return LOOM_OK;
}

loom_status loom_deferred_check(loom_device dev) {
  if (dev.kind != LOOM_CUDA || dev.index < 0 || dev.index >= LOOM_MAX_LOGICAL_GPUS) return LOOM_OK;
  slots *s = &g_slots[dev.index];
  if (!__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE)) return LOOM_OK;
  unsigned long long row = __atomic_load_n(&s->host->row, __ATOMIC_ACQUIRE);
  if (row == ~0ull) return LOOM_OK;
  long long label = s->host->label, classes = s->host->classes, op = s->host->op;
  __atomic_store_n(&s->host->row, ~0ull, __ATOMIC_RELEASE);  /* reported once */
  /* The CPU kernels' words, so a message reads the same on either device. */
  static const char *const what[][3] = {
      [LOOM_DEFERRED_CROSS_ENTROPY] = {"cross_entropy", "label", "row"},
      [LOOM_DEFERRED_EMBEDDING] = {"embedding", "index", "position"},
      [LOOM_DEFERRED_EMBEDDING_BACKWARD] = {"embedding backward", "index", "position"},
      [LOOM_DEFERRED_LINEAR_CROSS_ENTROPY] = {"linear_cross_entropy", "label", "row"},
  };
  int k = op >= 0 && op < (long long)(sizeof what / sizeof what[0]) ? (int)op : 0;
  return loom_set_error(LOOM_ERR_INVALID_ARG,
                        "%s: %s %lld at %s %llu is outside [0, %lld) (found on cuda:%d by an earlier %s; GPU-side "
                        "checks are reported at the next call that waits for the GPU)",
                        what[k][0], what[k][1], label, what[k][2], row, classes, dev.index, what[k][0]);
}

/* loom_shutdown: free the word and the record of every device (made again
 * at the next launch that needs them). A report still pending is dropped. */
static loom_status deferred_teardown(void) {
  pthread_mutex_lock(&g_slots_lock);
  for (int i = 0; i < LOOM_MAX_LOGICAL_GPUS; i++) {
    slots *s = &g_slots[i];
    if (!s->ready) continue;
    if (loom_cuda_set_device(i) == LOOM_OK) {
      cudaFree(s->bad_row);
      cudaFreeHost(s->host);
    }
    (void)cudaGetLastError();
    s->bad_row = NULL;
    s->host = s->dev_view = NULL;
    __atomic_store_n(&s->ready, 0, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_slots_lock);
  return LOOM_OK;
}
LOOM_TEARDOWN(LOOM_LAYER_DEVICE, deferred_teardown)
#endif
