/* add_relu.cu — the residual join relu(a + b) on the GPU and its backward:
 * operands and results share one shape and dense layout (the C side sees to
 * it), so both are flat passes over memory. Same expressions as the CPU
 * (the f32 sum, v > 0 ? v : 0; the mask y > 0). Where every pointer is
 * 16-byte aligned the body moves 16-byte vectors (8 f16/bf16 or 4 f32 per
 * thread; 2-byte accesses left HBM half idle, and the H200 profile of a
 * ResNet-50 fp16 step put these passes at 10 % of it), the last n mod V
 * elements one by one. The vector path has not run on a GPU yet. */
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

template <typename T, int V>
static __global__ void k_add_relu_v(const T *a, const T *b, T *y, int64_t nv) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv; i += (int64_t)gridDim.x * blockDim.x) {
    loom_vec<T, V> va, vb, vy;
    loom_vload(va, a + i * V);
    loom_vload(vb, b + i * V);
#pragma unroll
    for (int k = 0; k < V; k++) {
      const float v = loom_to_f(va.e[k]) + loom_to_f(vb.e[k]);
      vy.e[k] = loom_from_f<T>(v > 0.0f ? v : 0.0f);
    }
    loom_vstore(y + i * V, vy);
  }
}

template <typename T, int V>
static __global__ void k_add_relu_bwd_v(const T *gy, const T *y, T *d0, T *d1, int64_t nv) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv; i += (int64_t)gridDim.x * blockDim.x) {
    loom_vec<T, V> vg, vy, vd;
    loom_vload(vg, gy + i * V);
    loom_vload(vy, y + i * V);
#pragma unroll
    for (int k = 0; k < V; k++) vd.e[k] = loom_to_f(vy.e[k]) > 0.0f ? vg.e[k] : loom_from_f<T>(0.0f);
    loom_vstore(d0 + i * V, vd);
    if (d1) loom_vstore(d1 + i * V, vd);
  }
}

template <typename T>
static void fwd_t(const T *a, const T *b, T *y, int64_t n, cudaStream_t s) {
  constexpr int V = 16 / (int)sizeof(T);
  int64_t body = 0;
  if (loom_aligned16(a) && loom_aligned16(b) && loom_aligned16(y)) {
    body = n / V * V;
    if (body > 0) k_add_relu_v<T, V><<<loom_grid_for(body / V), 256, 0, s>>>(a, b, y, body / V);
  }
  if (n > body) k_add_relu<T><<<loom_grid_for(n - body), 256, 0, s>>>(a + body, b + body, y + body, n - body);
}

template <typename T>
static void bwd_t(const T *gy, const T *y, T *d0, T *d1, int64_t n, cudaStream_t s) {
  constexpr int V = 16 / (int)sizeof(T);
  int64_t body = 0;
  if (loom_aligned16(gy) && loom_aligned16(y) && loom_aligned16(d0) && (!d1 || loom_aligned16(d1))) {
    body = n / V * V;
    if (body > 0) k_add_relu_bwd_v<T, V><<<loom_grid_for(body / V), 256, 0, s>>>(gy, y, d0, d1, body / V);
  }
  if (n > body)
    k_add_relu_bwd<T><<<loom_grid_for(n - body), 256, 0, s>>>(gy + body, y + body, d0 + body, d1 ? d1 + body : NULL,
                                                             n - body);
}

extern "C" cudaError_t loom_cu_add_relu_fwd(int dt, const void *a, const void *b, void *y, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  switch (dt) {
    case 1: fwd_t((const loom_h16 *)a, (const loom_h16 *)b, (loom_h16 *)y, n, s); break;
    case 2: fwd_t((const loom_b16 *)a, (const loom_b16 *)b, (loom_b16 *)y, n, s); break;
    default: fwd_t((const float *)a, (const float *)b, (float *)y, n, s); break;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t loom_cu_add_relu_bwd(int dt, const void *gy, const void *y, void *d0, void *d1, int64_t n,
                                            cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  switch (dt) {
    case 1: bwd_t((const loom_h16 *)gy, (const loom_h16 *)y, (loom_h16 *)d0, (loom_h16 *)d1, n, s); break;
    case 2: bwd_t((const loom_b16 *)gy, (const loom_b16 *)y, (loom_b16 *)d0, (loom_b16 *)d1, n, s); break;
    default: bwd_t((const float *)gy, (const float *)y, (float *)d0, (float *)d1, n, s); break;
  }
  return cudaGetLastError();
}
