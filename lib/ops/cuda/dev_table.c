/* dev_table.c — kernel-argument tables kept in device memory (see
 * dev_table.h). */
#ifdef LOOM_HAVE_CUDA
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "device/device_internal.h"
#include "loom/graph.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/dev_table.h"
#include "core/sys.h"

struct loom_dev_table {
  loom_device dev;
  void *dptr;       /* device copy, from the device's caching allocator */
  void *host;       /* the bytes last uploaded */
  size_t bytes, cap;
  int64_t uploads;
};

loom_status loom_dev_table_sync(loom_dev_table **tp, loom_device dev, const void *host, size_t bytes, void **dptr) {
  loom_dev_table *t = *tp;
  if (!t) {
    t = loom_sys_calloc(1, sizeof *t);
    if (!t) return loom_set_error(LOOM_ERR_OOM, "kernel argument table: out of host memory");
    t->dev = dev;
    *tp = t;
  }
  if (!loom_device_eq(t->dev, dev))
    return loom_set_error(LOOM_ERR_DEVICE, "kernel argument table: made for another device");
  if (t->dptr && t->bytes == bytes && memcmp(t->host, host, bytes) == 0) {
    *dptr = t->dptr;
    return LOOM_OK;
  }
  if (bytes > t->cap) {
    void *h = loom_sys_realloc(t->host, bytes);
    if (!h) return loom_set_error(LOOM_ERR_OOM, "kernel argument table: out of host memory for %zu bytes", bytes);
    t->host = h;
    t->cap = bytes;
  }
  loom_stream *s = loom_stream_current(dev);
  if (!s) return loom_last_status();
  /* A new buffer rather than an overwrite: launches still queued read the
   * old one, which the allocator reuses only for work ordered after them.
   * From the device's own pool even inside a graph capture: the table
   * belongs to its optimizer or scaler and outlives the graph, so it must
   * not hold the graph's private pool alive (issue 22, prediction 9). */
  void *d = NULL;
  LOOM_TRY(loom_alloc_malloc_uncaptured(dev, bytes ? bytes : 1, s, &d));
  memcpy(t->host, host, bytes);
  /* From pageable memory: staged before the call returns, so t->host may
   * change next time without waiting. While a graph is captured the bytes
   * travel as kernel arguments instead (write_bytes.cu says why). */
  cudaStream_t cs = (cudaStream_t)loom_stream_native(s);
  cudaError_t e = !bytes                  ? cudaSuccess
                  : loom_graph_capturing() ? loom_cu_write_bytes(d, t->host, bytes, cs)
                                           : cudaMemcpyAsync(d, t->host, bytes, cudaMemcpyHostToDevice, cs);
  if (e != cudaSuccess) {
    loom_alloc_free(dev, d);
    t->bytes = 0;
    return loom_cuda_error(e, "cudaMemcpyAsync(kernel argument table)", __FILE__, __LINE__);
  }
  loom_alloc_free(dev, t->dptr);
  t->dptr = d;
  t->bytes = bytes;
  t->uploads++;
  *dptr = d;
  return LOOM_OK;
}

int64_t loom_dev_table_uploads(const loom_dev_table *t) { return t ? t->uploads : 0; }

void loom_dev_table_free(loom_dev_table *t) {
  if (!t) return;
  loom_alloc_free(t->dev, t->dptr);
  loom_sys_free(t->host);
  loom_sys_free(t);
}
#endif
