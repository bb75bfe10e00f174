/* row_reduce.cuh (internal, device code) — reductions over one row shared
 * by RT threads of a 256-thread block, for the row kernels of the
 * transformer ops: RT = 32 (a warp per row, 8 rows per block) for short
 * rows, RT = 256 (the block is the row) for long ones. The combining order
 * is fixed (butterfly shuffles, then the warps' partials in warp order), so
 * a row's sum has the same bits every run. With RT = 256 every thread of
 * the block must call these (they synchronize the block). */
#ifndef LOOM_OPS_CUDA_ROW_REDUCE_CUH
#define LOOM_OPS_CUDA_ROW_REDUCE_CUH

#include <math.h>

#define LOOM_ROW_BLOCK 256 /* threads per block of every row kernel */

/* Threads per row for rows of n elements. */
static inline int loom_row_threads(int64_t n) { return n <= 1024 ? 32 : LOOM_ROW_BLOCK; }

/* Blocks for rows of RT threads. */
static inline unsigned loom_row_blocks(int64_t rows, int rt) {
  int64_t per = LOOM_ROW_BLOCK / rt;
  return (unsigned)((rows + per - 1) / per);
}

/* Max that ignores NaN (as the CPU's `v > m ? v : m` from -inf). */
template <int RT>
__device__ __forceinline__ float loom_row_max(float v, float *sh /* [8] shared */) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  if (RT == 32) return v;
  __syncthreads(); /* earlier readers of sh are done */
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  float m = sh[0];
  for (int k = 1; k < RT / 32; k++) m = sh[k] > m ? sh[k] : m;
  return m;
}

template <int RT>
__device__ __forceinline__ double loom_row_sum(double v, double *sh /* [8] shared */) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (RT == 32) return v;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  double t = 0;
  for (int k = 0; k < RT / 32; k++) t += sh[k];
  return t;
}

/* One block of 256 threads: the sum of v[0..n) in double, strided per
 * thread then a shared-memory tree (a fixed order: the same bits every
 * run); thread 0 gets the total. sh: 256 shared doubles. */
template <typename T>
__device__ __forceinline__ double loom_block_sum256(const T *v, int64_t n, double *sh) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += v[i];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  return sh[0];
}

/* Element i of an index tensor of dtype idt (3 i32, 4 i64, 5 u8). */
__device__ __forceinline__ int64_t loom_index_at(const void *p, int idt, int64_t i) {
  switch (idt) {
    case 3: return ((const int32_t *)p)[i];
    case 4: return ((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
  }
}

#endif
