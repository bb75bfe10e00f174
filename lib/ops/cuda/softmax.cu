/* softmax.cu — softmax over the last dim and its backward on CUDA, in f32
 * whatever the storage dtype, with the CPU kernel's formulas
 * (lib/ops/cpu/softmax_cpu.c): the row max, exp(x - max) summed in double,
 * times the f32 reciprocal of the sum; backward y * (gy - sum(gy * y)) with
 * the sum in double. A warp per row up to 1024 classes, a block per row
 * beyond (row_reduce.cuh). */
#include "ops/cuda/cuda_dtype.cuh"
#include "ops/cuda/row_reduce.cuh"
#include "ops/cuda/transformer_launch.h"

template <typename T, int RT>
static __global__ void k_softmax(const T *x, T *y, int64_t rows, int64_t C) {
  __shared__ float shf[8];
  __shared__ double shd[8];
  const int64_t r = (int64_t)blockIdx.x * (LOOM_ROW_BLOCK / RT) + threadIdx.x / RT;
  const int lane = threadIdx.x % RT;
  if (r >= rows) return; /* whole rows only: RT = 256 has one row per block */
  const T *xr = x + r * C;
  T *yr = y + r * C;
  float m = -INFINITY;
  for (int64_t j = lane; j < C; j += RT) {
    float v = loom_to_f(xr[j]);
    m = v > m ? v : m;
  }
  m = loom_row_max<RT>(m, shf);
  double s = 0;
  /* A row of -inf only: m is -inf and every exp is NaN, as on the CPU. */
  for (int64_t j = lane; j < C; j += RT) s += expf(loom_to_f(xr[j]) - m);
  s = loom_row_sum<RT>(s, shd);
  const float inv = (float)(1.0 / s);
  for (int64_t j = lane; j < C; j += RT) yr[j] = loom_from_f<T>(expf(loom_to_f(xr[j]) - m) * inv);
}

template <typename T, int RT>
static __global__ void k_softmax_bw(const T *gy, const T *y, T *dx, int64_t rows, int64_t C) {
  __shared__ double shd[8];
  const int64_t r = (int64_t)blockIdx.x * (LOOM_ROW_BLOCK / RT) + threadIdx.x / RT;
  const int lane = threadIdx.x % RT;
  if (r >= rows) return;
  const int64_t base = r * C;
  double s = 0;
  for (int64_t j = lane; j < C; j += RT) s += (double)loom_to_f(gy[base + j]) * (double)loom_to_f(y[base + j]);
  const float fs = (float)loom_row_sum<RT>(s, shd);
  for (int64_t j = lane; j < C; j += RT)
    dx[base + j] = loom_from_f<T>(loom_to_f(y[base + j]) * (loom_to_f(gy[base + j]) - fs));
}

template <typename T>
static cudaError_t launch(int bw, const void *a, const void *b, void *o, int64_t rows, int64_t C, cudaStream_t s) {
  const int rt = loom_row_threads(C);
  const unsigned g = loom_row_blocks(rows, rt);
  if (!bw && rt == 32) k_softmax<T, 32><<<g, LOOM_ROW_BLOCK, 0, s>>>((const T *)a, (T *)o, rows, C);
  else if (!bw) k_softmax<T, LOOM_ROW_BLOCK><<<g, LOOM_ROW_BLOCK, 0, s>>>((const T *)a, (T *)o, rows, C);
  else if (rt == 32) k_softmax_bw<T, 32><<<g, LOOM_ROW_BLOCK, 0, s>>>((const T *)a, (const T *)b, (T *)o, rows, C);
  else k_softmax_bw<T, LOOM_ROW_BLOCK><<<g, LOOM_ROW_BLOCK, 0, s>>>((const T *)a, (const T *)b, (T *)o, rows, C);
  return cudaGetLastError();
}

static cudaError_t dispatch(int dt, int bw, const void *a, const void *b, void *o, int64_t rows, int64_t C,
                            cudaStream_t s) {
  if (rows == 0 || C == 0) return cudaSuccess;
  switch (dt) {
    case 1: return launch<loom_h16>(bw, a, b, o, rows, C, s);
    case 2: return launch<loom_b16>(bw, a, b, o, rows, C, s);
    default: return launch<float>(bw, a, b, o, rows, C, s);
  }
}

extern "C" cudaError_t loom_cu_softmax(int dt, const void *x, void *y, int64_t rows, int64_t C, cudaStream_t s) {
  return dispatch(dt, 0, x, NULL, y, rows, C, s);
}

extern "C" cudaError_t loom_cu_softmax_bw(int dt, const void *gy, const void *y, void *dx, int64_t rows, int64_t C,
                                          cudaStream_t s) {
  return dispatch(dt, 1, gy, y, dx, rows, C, s);
}
