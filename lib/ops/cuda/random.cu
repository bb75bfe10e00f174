/* random.cu — Philox fills on the GPU, element for element identical to the
 * CPU fills of lib/core/rng.c: both run core/philox.h, and element i of a
 * fill at (seed, offset) comes from counter block offset + i/4, lane i%4.
 * One thread per block of four elements. */
#include "core/philox.h"
#include "ops/cuda/cuda_dtype.cuh"

static __global__ void k_rng(int normal, uint64_t seed, uint64_t offset, void *out, int dt, int64_t n, float a,
                             float b) {
  const int64_t nb = (n + 3) / 4;
  for (int64_t blk = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; blk < nb; blk += (int64_t)gridDim.x * blockDim.x) {
    const int64_t base = blk * 4;
    const int m = n - base < 4 ? (int)(n - base) : 4;
    if (normal) {
      double z[4];
      loom_philox_normal4(seed, offset + (uint64_t)blk, z);
      for (int l = 0; l < m; l++) loom_store_f(out, dt, base + l, loom_philox_scale_normal(z[l], a, b));
    } else {
      float u[4];
      loom_philox_uniform4(seed, offset + (uint64_t)blk, u);
      for (int l = 0; l < m; l++) loom_store_f(out, dt, base + l, loom_philox_affine(u[l], a, b));
    }
  }
}

extern "C" cudaError_t loom_cu_rng_fill(int normal, uint64_t seed, uint64_t offset, void *out, int dt, int64_t n,
                                        float a, float b, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  k_rng<<<loom_grid_for((n + 3) / 4), 256, 0, s>>>(normal, seed, offset, out, dt, n, a, b);
  return cudaGetLastError();
}
