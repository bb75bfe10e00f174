/* cuda_dtype.cuh (internal, device code) — element types of the CUDA kernels
 * and their f32 conversions, 16-byte vector loads/stores, and the
 * strided-offset helper shared by the elementwise kernels.
 *
 * Conversions use the hardware (__float2half_rn, __half2float,
 * __float2bfloat16_rn: one cvt instruction each) and fall back to
 * core/half.h only for NaN f16 values, where the hardware and loom's
 * documented choice differ (loom keeps an f16 NaN's payload, like F16C):
 * so the GPU produces exactly the CPU backend's bits, quickly. */
#ifndef LOOM_OPS_CUDA_DTYPE_CUH
#define LOOM_OPS_CUDA_DTYPE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include "core/half.h"
#include "ops/cuda/cuda_launch.h"

/* ---- scalar conversions ----------------------------------------------------- */
__device__ __forceinline__ float loom_cu_h2f(uint16_t b) {
  if ((b & 0x7c00u) == 0x7c00u && (b & 0x3ffu)) return loom_half_to_f32(b);  /* NaN: payload kept */
  return __half2float(__ushort_as_half(b));
}
__device__ __forceinline__ uint16_t loom_cu_f2h(float f) {
  if (f != f) return loom_half_from_f32(f);  /* NaN: payload kept */
  return __half_as_ushort(__float2half_rn(f));
}
__device__ __forceinline__ float loom_cu_bf2f(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }
/* NaN -> 0x7fff, as core/half.h. */
__device__ __forceinline__ uint16_t loom_cu_f2bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

/* Distinct storage types for the two 16-bit formats. */
struct loom_h16 { uint16_t x; };
struct loom_b16 { uint16_t x; };

__device__ __forceinline__ float loom_to_f(float v) { return v; }
__device__ __forceinline__ float loom_to_f(loom_h16 v) { return loom_cu_h2f(v.x); }
__device__ __forceinline__ float loom_to_f(loom_b16 v) { return loom_cu_bf2f(v.x); }

template <typename T> __device__ __forceinline__ T loom_from_f(float v);
template <> __device__ __forceinline__ float loom_from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ loom_h16 loom_from_f<loom_h16>(float v) { loom_h16 r; r.x = loom_cu_f2h(v); return r; }
template <> __device__ __forceinline__ loom_b16 loom_from_f<loom_b16>(float v) { loom_b16 r; r.x = loom_cu_f2bf(v); return r; }

/* Load element i of a float-dtype buffer given the dtype at run time. */
__device__ __forceinline__ float loom_load_f(const void *p, int dt, int64_t i) {
  switch (dt) {
    case 1: return loom_cu_h2f(((const uint16_t *)p)[i]);
    case 2: return loom_cu_bf2f(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
  }
}

__device__ __forceinline__ void loom_store_f(void *p, int dt, int64_t i, float v) {
  switch (dt) {
    case 1: ((uint16_t *)p)[i] = loom_cu_f2h(v); break;
    case 2: ((uint16_t *)p)[i] = loom_cu_f2bf(v); break;
    default: ((float *)p)[i] = v; break;
  }
}

/* ---- 16-byte vectors ---------------------------------------------------------- */
/* N elements of T through N*sizeof(T)/16 aligned 16-byte accesses (the
 * caller checks the pointers' alignment). */
template <typename T, int N>
struct loom_vec {
  static_assert((N * sizeof(T)) % 16 == 0, "whole 16-byte words");
  union {
    uint4 w[N * sizeof(T) / 16];
    T e[N];
  };
};

template <typename T, int N>
__device__ __forceinline__ void loom_vload(loom_vec<T, N> &v, const T *p) {
  const uint4 *q = reinterpret_cast<const uint4 *>(p);
#pragma unroll
  for (int k = 0; k < (int)(N * sizeof(T) / 16); k++) v.w[k] = q[k];
}

template <typename T, int N>
__device__ __forceinline__ void loom_vstore(T *p, const loom_vec<T, N> &v) {
  uint4 *q = reinterpret_cast<uint4 *>(p);
#pragma unroll
  for (int k = 0; k < (int)(N * sizeof(T) / 16); k++) q[k] = v.w[k];
}

__host__ __device__ __forceinline__ bool loom_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* ---- strided iteration ------------------------------------------------------------ */
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

/* Grid for n work items with a grid-stride loop (256 threads per block). */
static inline unsigned loom_grid_for(int64_t n) {
  int64_t b = (n + 255) / 256;
  if (b < 1) b = 1;
  if (b > 65536) b = 65536;
  return (unsigned)b;
}

#endif
