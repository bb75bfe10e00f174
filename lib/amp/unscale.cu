/* unscale.cu — the GPU kernel of the one-pass unscale + non-finite check:
 * one launch over every gradient of the step (a multi-tensor kernel, as in
 * apex/PyTorch's _amp_foreach_non_finite_check_and_unscale_), with the
 * found-inf flag kept in device memory and read back once per step.
 *
 * Work list: the host splits every tensor into chunks of CHUNK elements and
 * uploads {items, chunk table, flag} as one buffer (one H2D copy); block b
 * handles chunk b. Conversions use lib/core/half.h, bit-identical to the CPU
 * kernel (unscale_cpu.c).
 *
 * NOTE: compiled in CUDA builds, but never run on the development machines
 * (no GPU there); it is exercised only when the suite runs on a GPU host. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "amp/unscale_kernels.h"
#include "core/half.h"

extern "C" {
/* From alloc/alloc.h and device/device_internal.h (C headers). */
loom_status loom_alloc_malloc(loom_device dev, size_t nbytes, loom_stream *stream, void **out);
void loom_alloc_free(loom_device dev, void *ptr);
loom_status loom_cuda_error(cudaError_t e, const char *call, const char *file, int line);
loom_status loom_cuda_set_device(int index);
const char *loom_last_error(void);
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
  if (dt == LOOM_F16) return loom_half_to_f32(((const uint16_t *)src)[j]);
  if (dt == LOOM_BF16) return loom_bfloat_to_f32(((const uint16_t *)src)[j]);
  return ((const float *)src)[j];
}

__global__ static void unscale_kernel(const loom_amp_unscale_item *items, const chunk_desc *chunks, float inv,
                                      int *found_inf) {
  const chunk_desc c = chunks[blockIdx.x];
  const loom_amp_unscale_item it = items[c.item];
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
  /* Any thread that saw a bad value sets the flag; the race is benign (all
   * writers store 1). */
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1;
}

extern "C" loom_status loom_cuda_amp_unscale(loom_device dev, const loom_amp_unscale_item *items, int n,
                                             float inv_scale, int *found_inf) {
  loom_status st0 = loom_cuda_set_device(dev.index);
  if (st0 != LOOM_OK) return st0;
  loom_stream *ls = loom_stream_current(dev);
  if (!ls) return loom_last_status();
  cudaStream_t stream = (cudaStream_t)loom_stream_native(ls);

  int64_t total = 0;
  for (int i = 0; i < n; i++) total += (items[i].numel + CHUNK - 1) / CHUNK;
  if (total == 0) return LOOM_OK;
  if (total > 0x7fffffff)
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "amp unscale: %lld chunks exceed one launch", (long long)total);

  /* One host staging buffer -> one device buffer: [flag | items | chunks]. */
  size_t off_items = 256, off_chunks = off_items + (size_t)n * sizeof(loom_amp_unscale_item);
  off_chunks = (off_chunks + 15) & ~(size_t)15;
  size_t bytes = off_chunks + (size_t)total * sizeof(chunk_desc);
  char *host = (char *)malloc(bytes);
  if (!host) return loom_set_error(LOOM_ERR_OOM, "amp unscale: out of host memory for the work list");
  memset(host, 0, off_items);  /* the flag starts at 0 */
  memcpy(host + off_items, items, (size_t)n * sizeof(loom_amp_unscale_item));
  chunk_desc *ch = (chunk_desc *)(host + off_chunks);
  int64_t k = 0;
  for (int i = 0; i < n; i++)
    for (int64_t s = 0; s < items[i].numel; s += CHUNK) ch[k++] = chunk_desc{i, 0, s};

  void *dbuf = NULL;
  loom_status st = loom_alloc_malloc(dev, bytes, ls, &dbuf);
  if (st != LOOM_OK) {
    free(host);
    return st;
  }
  char *d = (char *)dbuf;
  int flag = 0;
  cudaError_t e = cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess) {
    unscale_kernel<<<(unsigned)total, THREADS, 0, stream>>>((const loom_amp_unscale_item *)(d + off_items),
                                                             (const chunk_desc *)(d + off_chunks), inv_scale, (int *)d);
    e = cudaGetLastError();
  }
  /* The one read-back of the step: it also orders the staging buffer's reuse. */
  if (e == cudaSuccess) e = cudaMemcpyAsync(&flag, d, sizeof flag, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  loom_alloc_free(dev, dbuf);
  free(host);
  if (e != cudaSuccess) return loom_cuda_error(e, "amp unscale kernel", __FILE__, __LINE__);
  if (flag && found_inf) *found_inf = 1;
  return LOOM_OK;
}
