/* elementwise.cu — CUDA kernels of the elementwise ops (binary with
 * broadcasting via strides, unary/scalar, eq, relu_backward) and of strided
 * copies/casts between any two dtypes. The per-element math is
 * ops/elementwise_math.h, the same code the CPU kernels run; f16/bf16 are
 * widened to f32, computed and rounded once, as on the CPU. */
#include "ops/cuda/cuda_dtype.cuh"
#include "ops/elementwise_math.h"

template <typename T>
__global__ void k_binary(int op, loom_cu_iter it, T *out, const T *a, const T *b) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < it.numel; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[3];
    loom_iter_offsets(it, i, 3, off);
    out[off[0]] = loom_from_f<T>(loom_ew_binary(op, loom_to_f(a[off[1]]), loom_to_f(b[off[2]])));
  }
}

template <typename T>
__global__ void k_unary(int op, float s, loom_cu_iter it, T *out, const T *a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < it.numel; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    loom_iter_offsets(it, i, 2, off);
    out[off[0]] = loom_from_f<T>(loom_ew_unary(op, loom_to_f(a[off[1]]), s));
  }
}

extern "C" cudaError_t loom_cu_binary(int ew_op, int dt, const loom_cu_iter *it, void *out, const void *a,
                                      const void *b, cudaStream_t s) {
  if (it->numel == 0) return cudaSuccess;
  unsigned g = loom_grid_for(it->numel);
  switch (dt) {
    case 1: k_binary<loom_h16><<<g, 256, 0, s>>>(ew_op, *it, (loom_h16 *)out, (const loom_h16 *)a, (const loom_h16 *)b); break;
    case 2: k_binary<loom_b16><<<g, 256, 0, s>>>(ew_op, *it, (loom_b16 *)out, (const loom_b16 *)a, (const loom_b16 *)b); break;
    default: k_binary<float><<<g, 256, 0, s>>>(ew_op, *it, (float *)out, (const float *)a, (const float *)b); break;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t loom_cu_unary(int ew_op, int dt, float scalar, const loom_cu_iter *it, void *out,
                                     const void *a, cudaStream_t s) {
  if (it->numel == 0) return cudaSuccess;
  unsigned g = loom_grid_for(it->numel);
  switch (dt) {
    case 1: k_unary<loom_h16><<<g, 256, 0, s>>>(ew_op, scalar, *it, (loom_h16 *)out, (const loom_h16 *)a); break;
    case 2: k_unary<loom_b16><<<g, 256, 0, s>>>(ew_op, scalar, *it, (loom_b16 *)out, (const loom_b16 *)a); break;
    default: k_unary<float><<<g, 256, 0, s>>>(ew_op, scalar, *it, (float *)out, (const float *)a); break;
  }
  return cudaGetLastError();
}

/* ---- copies and casts ---------------------------------------------------- */

/* Same dtype: move the bits (exact for every dtype, including i64). */
template <typename U>
__global__ void k_copy_bits(loom_cu_iter it, U *out, const U *a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < it.numel; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    loom_iter_offsets(it, i, 2, off);
    out[off[0]] = a[off[1]];
  }
}

/* Float to float: through f32 (what the CPU does). */
__global__ void k_copy_float(int odt, int idt, loom_cu_iter it, void *out, const void *a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < it.numel; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    loom_iter_offsets(it, i, 2, off);
    loom_store_f(out, odt, off[0], loom_load_f(a, idt, off[1]));
  }
}

/* Anything involving an integer dtype travels through double, exactly like
 * the CPU's loom_cpu_load_f64 / loom_cpu_store_f64. */
__device__ double load_any(const void *p, int dt, int64_t i) {
  switch (dt) {
    case 0: return ((const float *)p)[i];
    case 1: return loom_half_to_f32(((const uint16_t *)p)[i]);
    case 2: return loom_bfloat_to_f32(((const uint16_t *)p)[i]);
    case 3: return ((const int32_t *)p)[i];
    case 4: return (double)((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
  }
}

__device__ void store_any(void *p, int dt, int64_t i, double v) {
  switch (dt) {
    case 0: ((float *)p)[i] = (float)v; break;
    case 1: ((uint16_t *)p)[i] = loom_half_from_f32((float)v); break;
    case 2: ((uint16_t *)p)[i] = loom_bfloat_from_f32((float)v); break;
    case 3: ((int32_t *)p)[i] = loom_to_i32(v); break;
    case 4: ((int64_t *)p)[i] = loom_to_i64(v); break;
    default: ((uint8_t *)p)[i] = loom_to_u8(v); break;
  }
}

__global__ void k_copy_any(int odt, int idt, loom_cu_iter it, void *out, const void *a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < it.numel; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    loom_iter_offsets(it, i, 2, off);
    store_any(out, odt, off[0], load_any(a, idt, off[1]));
  }
}

static int dt_size(int dt) { return dt == 0 || dt == 3 ? 4 : dt == 4 ? 8 : dt == 5 ? 1 : 2; }

extern "C" cudaError_t loom_cu_copy(int odt, int idt, const loom_cu_iter *it, void *out, const void *a,
                                    cudaStream_t s) {
  if (it->numel == 0) return cudaSuccess;
  unsigned g = loom_grid_for(it->numel);
  if (odt == idt) {
    switch (dt_size(odt)) {
      case 1: k_copy_bits<uint8_t><<<g, 256, 0, s>>>(*it, (uint8_t *)out, (const uint8_t *)a); break;
      case 2: k_copy_bits<uint16_t><<<g, 256, 0, s>>>(*it, (uint16_t *)out, (const uint16_t *)a); break;
      case 4: k_copy_bits<uint32_t><<<g, 256, 0, s>>>(*it, (uint32_t *)out, (const uint32_t *)a); break;
      default: k_copy_bits<uint64_t><<<g, 256, 0, s>>>(*it, (uint64_t *)out, (const uint64_t *)a); break;
    }
  } else if (odt <= 2 && idt <= 2) {
    k_copy_float<<<g, 256, 0, s>>>(odt, idt, *it, out, a);
  } else {
    k_copy_any<<<g, 256, 0, s>>>(odt, idt, *it, out, a);
  }
  return cudaGetLastError();
}
