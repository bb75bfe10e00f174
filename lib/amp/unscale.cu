/* unscale.cu — the GPU kernel of the one-pass unscale + non-finite check:
 * one launch over every gradient of the step (a multi-tensor kernel, as in
 * apex/PyTorch's _amp_foreach_non_finite_check_and_unscale_).
 *
 * Nothing here waits for the GPU. The inverse scale can come from a device
 * word and the verdict goes into one (the loss scaler's state, scaler.cu):
 * the optimizer kernel reads that flag and skips itself, and the host learns
 * of a skip only when it asks. The work list — items and a chunk map (block
 * b handles chunk b of CHUNK elements) — is kept in device memory by its
 * owner (dev_table.c) and re-uploaded only when it changes. Conversions use
 * lib/core/half.h, bit-identical to the CPU kernel (unscale_cpu.c). */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "amp/unscale_kernels.h"
#include "core/capture.h"
#include "device/sync_stats.h"
#include "ops/cuda/cuda_dtype.cuh"
#include "ops/cuda/dev_table.h"
#include "core/sys.h"

extern "C" {
/* From device/device_internal.h and core/error.h (C headers C++ cannot include). */
loom_status loom_cuda_error(cudaError_t e, const char *call, const char *file, int line);
loom_status loom_cuda_set_device(int index);
loom_status loom_set_error(loom_status code, const char *fmt, ...);
}

#define CHUNK 65536
#define THREADS 256

struct chunk_desc {
  int32_t item;
  int32_t pad;
  int64_t start;
};

__device__ static inline float load_one(const void *src, int dt, int64_t j) {
  if (dt == LOOM_F16) return loom_cu_h2f(((const uint16_t *)src)[j]);
  if (dt == LOOM_BF16) return loom_cu_bf2f(((const uint16_t *)src)[j]);
  return ((const float *)src)[j];
}

__global__ static void unscale_kernel(const loom_amp_unscale_item *items, const chunk_desc *chunks, float inv_value,
                                      const float *inv_dev, int32_t *found_inf) {
  const chunk_desc c = chunks[blockIdx.x];
  const loom_amp_unscale_item it = items[c.item];
  const float inv = inv_dev ? *inv_dev : inv_value;
  int64_t end = c.start + CHUNK < it.numel ? c.start + CHUNK : it.numel;
  int bad = 0;
  for (int64_t j = c.start + threadIdx.x; j < end; j += blockDim.x) {
    /* Explicitly rounded multiply and add: nvcc would otherwise contract
     * them into one FMA (--fmad=true is its default), which rounds once and
     * breaks the bit-identity with the CPU kernel (built without -mfma). */
    float v = __fmul_rn(load_one(it.src, it.src_dtype, j), inv);
    if (it.accumulate) v = __fadd_rn(it.dst[j], v);
    it.dst[j] = v;
    bad |= !isfinite(v);
  }
  /* Any block that saw a bad value sets the flag; the race is benign (all
   * writers store 1). */
  if (__syncthreads_or(bad) && threadIdx.x == 0 && found_inf) *found_inf = 1;
}

static cudaStream_t stream_of(loom_device dev, loom_status *st) {
  loom_stream *ls = loom_stream_current(dev);
  if (!ls) {
    *st = loom_last_status();
    return NULL;
  }
  *st = LOOM_OK;
  return (cudaStream_t)loom_stream_native(ls);
}

extern "C" loom_status loom_cuda_amp_unscale(loom_device dev, const loom_amp_unscale_item *items, int n,
                                             float inv_scale, const float *inv_dev, int32_t *found_dev,
                                             loom_dev_table **table) {
  loom_status st = loom_cuda_set_device(dev.index);
  if (st != LOOM_OK) return st;
  cudaStream_t stream = stream_of(dev, &st);
  if (st != LOOM_OK) return st;

  int64_t total = 0;
  for (int i = 0; i < n; i++) total += (items[i].numel + CHUNK - 1) / CHUNK;
  if (total == 0) return LOOM_OK;
  if (total > 0x7fffffff)
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "amp unscale: %lld chunks exceed one launch", (long long)total);

  /* [items | chunks] in one host buffer -> one device table. */
  size_t off_chunks = ((size_t)n * sizeof(loom_amp_unscale_item) + 15) & ~(size_t)15;
  size_t bytes = off_chunks + (size_t)total * sizeof(chunk_desc);
  char *host = (char *)loom_sys_calloc(1, bytes);  /* zeroed: padding too, the table is compared bytewise */
  if (!host) return loom_set_error(LOOM_ERR_OOM, "amp unscale: out of host memory for the work list");
  memcpy(host, items, (size_t)n * sizeof(loom_amp_unscale_item));
  chunk_desc *ch = (chunk_desc *)(host + off_chunks);
  int64_t k = 0;
  for (int i = 0; i < n; i++)
    for (int64_t s = 0; s < items[i].numel; s += CHUNK) ch[k++] = chunk_desc{i, 0, s};

  /* A table of the call's own dies with the call: a graph captured now
   * would read it at every replay. Callers inside a training step pass
   * theirs (the scaler's, the optimizer's). */
  if (!table)
    loom_capture_note_unsafe("an amp unscale without a kept kernel table (a replay would read a freed table)");
  loom_dev_table *own = NULL;
  void *d = NULL;
  st = loom_dev_table_sync(table ? table : &own, dev, host, bytes, &d);
  loom_sys_free(host);
  if (st == LOOM_OK) {
    unscale_kernel<<<(unsigned)total, THREADS, 0, stream>>>((const loom_amp_unscale_item *)d,
                                                             (const chunk_desc *)((char *)d + off_chunks), inv_scale,
                                                             inv_dev, found_dev);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) st = loom_cuda_error(e, "amp unscale kernel", __FILE__, __LINE__);
  }
  loom_dev_table_free(own);  /* stream-ordered: the kernel above still reads it */
  return st;
}

extern "C" loom_status loom_cuda_fill_zero(loom_device dev, void *p, size_t n) {
  loom_status st;
  cudaStream_t s = stream_of(dev, &st);
  if (st != LOOM_OK) return st;
  cudaError_t e = cudaMemsetAsync(p, 0, n, s);
  return e == cudaSuccess ? LOOM_OK : loom_cuda_error(e, "cudaMemsetAsync", __FILE__, __LINE__);
}

extern "C" loom_status loom_cuda_read_flag(loom_device dev, const void *flag, int *out) {
  loom_status st;
  cudaStream_t s = stream_of(dev, &st);
  if (st != LOOM_OK) return st;
  int32_t v = 0;
  loom_sync_count(LOOM_SYNC_D2H);
  cudaError_t e = cudaMemcpyAsync(&v, flag, sizeof v, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) {
    loom_sync_count(LOOM_SYNC_STREAM);
    e = cudaStreamSynchronize(s);
  }
  if (e != cudaSuccess) return loom_cuda_error(e, "reading an amp flag back", __FILE__, __LINE__);
  *out = v != 0;
  return LOOM_OK;
}
