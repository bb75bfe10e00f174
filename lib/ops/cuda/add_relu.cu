/* add_relu.cu — the residual join relu(a + b) on the GPU and its backward:
 * operands and results share one shape and dense layout (the C side sees to
 * it), so both are flat passes over memory. Same expressions as the CPU
 * (the f32 sum, v > 0 ? v : 0; the mask y > 0). */
#include "ops/cuda/cuda_dtype.cuh"

template <typename T>
static __global__ void k_add_relu(const T *a, const T *b, T *y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = loom_to_f(a[i]) + loom_to_f(b[i]);
    y[i] = loom_from_f<T>(v > 0.0f ? v : 0.0f);
  }
}

template <typename T>
static __global__ void k_add_relu_bwd(const T *gy, const T *y, T *d0, T *d1, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const T g = loom_to_f(y[i]) > 0.0f ? gy[i] : loom_from_f<T>(0.0f);
    d0[i] = g;
    if (d1) d1[i] = g;
  }
}

extern "C" cudaError_t loom_cu_add_relu_fwd(int dt, const void *a, const void *b, void *y, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned g = loom_grid_for(n);
  switch (dt) {
    case 1: k_add_relu<loom_h16><<<g, 256, 0, s>>>((const loom_h16 *)a, (const loom_h16 *)b, (loom_h16 *)y, n); break;
    case 2: k_add_relu<loom_b16><<<g, 256, 0, s>>>((const loom_b16 *)a, (const loom_b16 *)b, (loom_b16 *)y, n); break;
    default: k_add_relu<float><<<g, 256, 0, s>>>((const float *)a, (const float *)b, (float *)y, n); break;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t loom_cu_add_relu_bwd(int dt, const void *gy, const void *y, void *d0, void *d1, int64_t n,
                                            cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned g = loom_grid_for(n);
  switch (dt) {
    case 1: k_add_relu_bwd<loom_h16><<<g, 256, 0, s>>>((const loom_h16 *)gy, (const loom_h16 *)y, (loom_h16 *)d0, (loom_h16 *)d1, n); break;
    case 2: k_add_relu_bwd<loom_b16><<<g, 256, 0, s>>>((const loom_b16 *)gy, (const loom_b16 *)y, (loom_b16 *)d0, (loom_b16 *)d1, n); break;
    default: k_add_relu_bwd<float><<<g, 256, 0, s>>>((const float *)gy, (const float *)y, (float *)d0, (float *)d1, n); break;
  }
  return cudaGetLastError();
}
