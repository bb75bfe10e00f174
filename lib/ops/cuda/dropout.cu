/* dropout.cu — dropout on the GPU: the keep bits are loom_dropout_word
 * (cnn_math.h), the very Philox numbers and comparison the CPU kernel uses,
 * so a seed gives the same mask on both. A block draws 256 mask words
 * (8192 elements; one word per thread), stages them in shared memory and
 * then scales the elements with coalesced loads and stores. */
#include "ops/cnn_math.h"
#include "ops/cuda/cuda_dtype.cuh"

#define DROP_WORDS 256

static __global__ void k_dropout_fwd(int dt, const void *x, void *y, uint32_t *mask, int64_t n, uint64_t seed,
                                     uint64_t offset, uint32_t thr, float scale) {
  __shared__ uint32_t bits[DROP_WORDS];
  const int64_t nwords = (n + 31) / 32;
  for (int64_t w0 = (int64_t)blockIdx.x * DROP_WORDS; w0 < nwords; w0 += (int64_t)gridDim.x * DROP_WORDS) {
    const int64_t w = w0 + threadIdx.x;
    if (w < nwords) {
      const uint32_t b = loom_dropout_word(seed, offset, w, thr);
      bits[threadIdx.x] = b;
      mask[w] = b;
    }
    __syncthreads();
    const int64_t e0 = w0 * 32, e1 = e0 + DROP_WORDS * 32 < n ? e0 + DROP_WORDS * 32 : n;
    for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
      const int64_t j = e - e0;
      const bool keep = bits[j / 32] >> (j % 32) & 1u;
      loom_store_f(y, dt, e, keep ? loom_load_f(x, dt, e) * scale : 0.0f);
    }
    __syncthreads();
  }
}

static __global__ void k_dropout_bwd(int dt, const void *gy, const uint32_t *mask, void *dx, int64_t n, float scale) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const bool keep = mask[e / 32] >> (e % 32) & 1u;
    loom_store_f(dx, dt, e, keep ? loom_load_f(gy, dt, e) * scale : 0.0f);
  }
}

static float keep_scale(double p) { return p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f; }

extern "C" cudaError_t loom_cu_dropout_fwd(int dt, const void *x, void *y, uint32_t *mask, int64_t n, uint64_t seed,
                                           uint64_t offset, double p, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  int64_t blocks = ((n + 31) / 32 + DROP_WORDS - 1) / DROP_WORDS;
  if (blocks > 65536) blocks = 65536;
  k_dropout_fwd<<<(unsigned)blocks, DROP_WORDS, 0, s>>>(dt, x, y, mask, n, seed, offset, loom_dropout_threshold(p),
                                                        keep_scale(p));
  return cudaGetLastError();
}

extern "C" cudaError_t loom_cu_dropout_bwd(int dt, const void *gy, const uint32_t *mask, void *dx, int64_t n, double p,
                                           cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  k_dropout_bwd<<<loom_grid_for(n), 256, 0, s>>>(dt, gy, mask, dx, n, keep_scale(p));
  return cudaGetLastError();
}
