/* cuda_context.c — per-device state of the CUDA backend, created lazily and
 * thread-safely on first use: the compute stream (the device's current
 * stream), a cuBLASLt handle, a GEMM workspace taken from the device
 * allocator. Also
 * the error conversion for cuBLAS(Lt) statuses and the helpers every CUDA
 * kernel wrapper uses (iteration spaces, scratch tensors, contiguous copies). */
#ifdef LOOM_HAVE_CUDA
#include <pthread.h>
#include <string.h>

#include "alloc/alloc.h"
#include "core/teardown.h"
#include "ops/cuda/cuda_internal.h"
#include "ops/iter.h"
#include "ops/cuda/cuda_kernels.h"

#define MAX_CTX 64
/* cuBLASLt recommends 32 MiB on Hopper for the best kernels. */
#define WORKSPACE_BYTES ((size_t)32 << 20)

static loom_cuda_ctx g_ctx[MAX_CTX];
static int g_ctx_ready[MAX_CTX];
static pthread_mutex_t g_ctx_lock = PTHREAD_MUTEX_INITIALIZER;

loom_status loom_cublas_error(cublasStatus_t s, const char *call, const char *file, int line) {
  return loom_set_error(LOOM_ERR_CUDA, "%s failed at %s:%d: %s (%s)", call, file, line, cublasLtGetStatusString(s),
                        cublasLtGetStatusName(s));
}

static loom_status ctx_init(loom_cuda_ctx *c, loom_device dev) {
  memset(c, 0, sizeof *c);
  c->dev = dev;
  loom_stream *s = loom_stream_current(dev);
  if (!s) return loom_last_status();
  c->stream = (cudaStream_t)loom_stream_native(s);
  LOOM_CUBLAS_CHECK(cublasLtCreate(&c->lt));
  /* Outside any graph capture's private pool: the workspace lives as long
   * as the context, not as long as the graph whose capture made it. */
  loom_status st = loom_alloc_malloc_uncaptured(dev, WORKSPACE_BYTES, s, &c->workspace);
  if (st != LOOM_OK) {
    cublasLtDestroy(c->lt);
    return st;
  }
  c->workspace_bytes = WORKSPACE_BYTES;
  return LOOM_OK;
}

loom_cuda_ctx *loom_cuda_ctx_get(loom_device dev) {
  if (dev.kind != LOOM_CUDA || dev.index < 0 || dev.index >= MAX_CTX) {
    loom_set_error(LOOM_ERR_DEVICE, "CUDA context: device %d:%d is not a supported CUDA device", dev.kind, dev.index);
    return NULL;
  }
  if (loom_cuda_set_device(dev.index) != LOOM_OK) return NULL;
  /* Double-checked: the ready flag is only set after the context is complete. */
  if (__atomic_load_n(&g_ctx_ready[dev.index], __ATOMIC_ACQUIRE)) return &g_ctx[dev.index];
  pthread_mutex_lock(&g_ctx_lock);
  loom_cuda_ctx *c = NULL;
  if (g_ctx_ready[dev.index]) {
    c = &g_ctx[dev.index];
  } else if (ctx_init(&g_ctx[dev.index], dev) == LOOM_OK) {
    c = &g_ctx[dev.index];
    __atomic_store_n(&g_ctx_ready[dev.index], 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_ctx_lock);
  if (!c) loom_error_prefix("cuda:%d: setting up the CUDA context", dev.index);
  return c;
}

/* loom_shutdown: each context's handles are destroyed and its workspace
 * goes back to the allocator (which alloc's own hook, run after this one,
 * returns to the device); the next loom_cuda_ctx_get makes a new context. */
static loom_status ctx_teardown(void) {
  pthread_mutex_lock(&g_ctx_lock);
  for (int i = 0; i < MAX_CTX; i++) {
    if (!g_ctx_ready[i]) continue;
    loom_cuda_ctx *c = &g_ctx[i];
    if (loom_cuda_set_device(c->dev.index) == LOOM_OK) {
      if (c->blas) cublasDestroy(c->blas);
      if (c->lt) cublasLtDestroy(c->lt);
    }
    loom_alloc_free(c->dev, c->workspace);
    memset(c, 0, sizeof *c);
    __atomic_store_n(&g_ctx_ready[i], 0, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_ctx_lock);
  return LOOM_OK;
}
LOOM_TEARDOWN(LOOM_LAYER_OPS, ctx_teardown)

void loom_cu_iter_build(loom_cu_iter *it, int nops, loom_tensor *const *ops) {
  /* The same coalescing as the CPU kernels, copied into the plain-C struct
   * the .cu launchers take. */
  loom_iter li;
  loom_iter_init(&li, nops, ops);
  memset(it, 0, sizeof *it);
  it->ndim = li.ndim;
  for (int d = 0; d < li.ndim; d++) {
    it->shape[d] = li.shape[d];
    for (int k = 0; k < nops; k++) it->strides[k][d] = li.strides[k][d];
  }
  it->numel = loom_shape_numel(ops[0]->ndim, ops[0]->shape);
}

loom_tensor *loom_cuda_scratch(const loom_tensor *like, int ndim, const int64_t *shape, loom_dtype dt) {
  return loom_tensor_alloc_raw(ndim, shape, dt, like->storage->device);
}

loom_status loom_cuda_copy_into(loom_tensor *dst, loom_tensor *src) {
  loom_op_args ca = {.in = {src}, .n_in = 1, .out = {dst}, .n_out = 1};
  return loom_cuda_copy(&ca);
}

loom_tensor *loom_cuda_contig(loom_tensor *t, loom_dtype dt) {
  if (t->dtype == dt && loom_cuda_dense(t)) return loom_tensor_retain(t);
  loom_tensor *c = loom_cuda_scratch(t, t->ndim, t->shape, dt);
  if (!c) return NULL;
  if (loom_cuda_copy_into(c, t) != LOOM_OK) {
    loom_tensor_release(c);
    return NULL;
  }
  return c;
}
#endif
