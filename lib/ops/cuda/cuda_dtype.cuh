/* cuda_dtype.cuh (internal, device code) — element types of the CUDA kernels
 * and their f32 conversions, built on core/half.h so the GPU rounds f16/bf16
 * with exactly the bits the CPU backend produces. Also the strided-offset
 * helper shared by the elementwise kernels. */
#ifndef LOOM_OPS_CUDA_DTYPE_CUH
#define LOOM_OPS_CUDA_DTYPE_CUH

#include <stdint.h>
#include "core/half.h"
#include "ops/cuda/cuda_launch.h"

/* Distinct storage types for the two 16-bit formats. */
struct loom_h16 { uint16_t x; };
struct loom_b16 { uint16_t x; };

__device__ __forceinline__ float loom_to_f(float v) { return v; }
__device__ __forceinline__ float loom_to_f(loom_h16 v) { return loom_half_to_f32(v.x); }
__device__ __forceinline__ float loom_to_f(loom_b16 v) { return loom_bfloat_to_f32(v.x); }

template <typename T> __device__ __forceinline__ T loom_from_f(float v);
template <> __device__ __forceinline__ float loom_from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ loom_h16 loom_from_f<loom_h16>(float v) { loom_h16 r; r.x = loom_half_from_f32(v); return r; }
template <> __device__ __forceinline__ loom_b16 loom_from_f<loom_b16>(float v) { loom_b16 r; r.x = loom_bfloat_from_f32(v); return r; }

/* Load element i of a float-dtype buffer given the dtype at run time. */
__device__ __forceinline__ float loom_load_f(const void *p, int dt, int64_t i) {
  switch (dt) {
    case 1: return loom_half_to_f32(((const uint16_t *)p)[i]);
    case 2: return loom_bfloat_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
  }
}

__device__ __forceinline__ void loom_store_f(void *p, int dt, int64_t i, float v) {
  switch (dt) {
    case 1: ((uint16_t *)p)[i] = loom_half_from_f32(v); break;
    case 2: ((uint16_t *)p)[i] = loom_bfloat_from_f32(v); break;
    default: ((float *)p)[i] = v; break;
  }
}

/* Element offsets of linear index i for operands 0..nops-1. */
__device__ __forceinline__ void loom_iter_offsets(const loom_cu_iter &it, int64_t i, int nops, int64_t *off) {
  for (int k = 0; k < nops; k++) off[k] = 0;
  if (it.ndim == 1) {
    for (int k = 0; k < nops; k++) off[k] = i * it.strides[k][0];
    return;
  }
  for (int d = it.ndim - 1; d >= 0; d--) {
    const int64_t n = it.shape[d];
    const int64_t idx = i % n;
    i /= n;
    for (int k = 0; k < nops; k++) off[k] += idx * it.strides[k][d];
  }
}

/* Grid for n elements with a grid-stride loop (256 threads per block). */
static inline unsigned loom_grid_for(int64_t n) {
  int64_t b = (n + 255) / 256;
  if (b < 1) b = 1;
  if (b > 65536) b = 65536;
  return (unsigned)b;
}

#endif
