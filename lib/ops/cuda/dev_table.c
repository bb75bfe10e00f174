/* dev_table.c — kernel-argument tables kept in device memory (see
 * dev_table.h). Built on every device: on the CPU a table lives in the CPU
 * pool and an upload is a memcpy, so the bookkeeping — which buffer a
 * graph capture keeps, what an eager upload may free — is tested without a
 * GPU (tests/test_graph.c). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "device/device_internal.h"
#include "loom/graph.h"
#ifdef LOOM_HAVE_CUDA
#include "ops/cuda/cuda_launch.h"
#endif
#include "ops/cuda/dev_table.h"
#include "core/sys.h"

struct loom_dev_table {
  loom_device dev;
  /* The eager table: its bytes (host) and device copy. */
  void *dptr;       /* from the device's caching allocator */
  bool dptr_kept;   /* a captured graph reads dptr too: it is in kept[] */
  void *host;       /* the bytes last uploaded eagerly */
  size_t bytes, cap;
  int64_t uploads;
  /* Buffers a graph capture bakes into its kernels: never rewritten by an
   * eager upload and never freed before the table, so a replay — before or
   * after any eager step that changed the table — reads the table of the
   * step it captured. */
  void **kept;
  int nkept, kept_cap;
};

/* n host bytes into the table buffer d, in the order of stream s. From
 * pageable memory the copy is staged before the call returns; captured,
 * the bytes travel as kernel arguments instead (a recorded copy from host
 * memory would re-read it at every replay: write_bytes.cu). */
static loom_status put_bytes(loom_device dev, loom_stream *s, void *d, const void *host, size_t n, bool captured) {
  if (n == 0) return LOOM_OK;
  if (dev.kind == LOOM_CPU) {
    memcpy(d, host, n);
    return LOOM_OK;
  }
#ifdef LOOM_HAVE_CUDA
  cudaStream_t cs = (cudaStream_t)loom_stream_native(s);
  cudaError_t e = captured ? loom_cu_write_bytes(d, host, n, cs) : cudaMemcpyAsync(d, host, n, cudaMemcpyHostToDevice, cs);
  if (e != cudaSuccess)
    return loom_cuda_error(e, captured ? "loom_cu_write_bytes(kernel argument table)" : "cudaMemcpyAsync(kernel argument table)",
                           __FILE__, __LINE__);
  return LOOM_OK;
#else
  (void)s;
  (void)captured;
  return loom_set_error(LOOM_ERR_DEVICE, "kernel argument table: built without CUDA");
#endif
}

static loom_status reserve_kept(loom_dev_table *t) {
  if (t->nkept < t->kept_cap) return LOOM_OK;
  int cap = t->kept_cap ? 2 * t->kept_cap : 4;
  void **k = loom_sys_realloc(t->kept, (size_t)cap * sizeof *k);
  if (!k) return loom_set_error(LOOM_ERR_OOM, "kernel argument table: out of host memory");
  t->kept = k;
  t->kept_cap = cap;
  return LOOM_OK;
}

/* Inside a graph capture: the table the captured kernels read. The eager
 * buffer when it already holds these bytes (then kept from now on); else a
 * buffer of the graph's own, written by a captured kernel (the bytes travel
 * as its arguments, so every replay rewrites them: write_bytes.cu) and
 * left out of the eager state, which stays what the eager steps uploaded. */
static loom_status sync_captured(loom_dev_table *t, loom_device dev, const void *host, size_t bytes, void **dptr) {
  LOOM_TRY(reserve_kept(t));
  if (t->dptr && t->bytes == bytes && memcmp(t->host, host, bytes) == 0) {
    if (!t->dptr_kept) t->kept[t->nkept++] = t->dptr, t->dptr_kept = true;
    *dptr = t->dptr;
    return LOOM_OK;
  }
  loom_stream *s = loom_stream_current(dev);
  if (!s) return loom_last_status();
  /* From the device's own pool even inside the capture: the table belongs
   * to its optimizer or scaler, so it must not hold the graph's private
   * pool alive (issue 22, prediction 9). */
  void *d = NULL;
  LOOM_TRY(loom_alloc_malloc_uncaptured(dev, bytes ? bytes : 1, s, &d));
  loom_status st = put_bytes(dev, s, d, host, bytes, true);
  if (st != LOOM_OK) {
    loom_alloc_free(dev, d);
    return st;
  }
  t->kept[t->nkept++] = d;
  t->uploads++;
  *dptr = d;
  return LOOM_OK;
}

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
  if (loom_graph_capturing()) return sync_captured(t, dev, host, bytes, dptr);
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
   * old one, which the allocator reuses only for work ordered after them
   * (a buffer a graph captured is not given back at all). */
  void *d = NULL;
  LOOM_TRY(loom_alloc_malloc_uncaptured(dev, bytes ? bytes : 1, s, &d));
  memcpy(t->host, host, bytes);
  /* Staged before the call returns: t->host may change next time without
   * waiting. */
  loom_status st = put_bytes(dev, s, d, t->host, bytes, false);
  if (st != LOOM_OK) {
    loom_alloc_free(dev, d);
    t->bytes = 0;
    return st;
  }
  if (!t->dptr_kept) loom_alloc_free(dev, t->dptr);
  t->dptr = d;
  t->dptr_kept = false;
  t->bytes = bytes;
  t->uploads++;
  *dptr = d;
  return LOOM_OK;
}

int64_t loom_dev_table_uploads(const loom_dev_table *t) { return t ? t->uploads : 0; }

void loom_dev_table_free(loom_dev_table *t) {
  if (!t) return;
  if (!t->dptr_kept) loom_alloc_free(t->dev, t->dptr);
  for (int i = 0; i < t->nkept; i++) loom_alloc_free(t->dev, t->kept[i]);
  loom_sys_free(t->kept);
  loom_sys_free(t->host);
  loom_sys_free(t);
}
