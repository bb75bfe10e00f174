/* loss.cu — CUDA log-softmax (+backward) and the fused cross-entropy
 * (+backward), always computed in f32 whatever the input dtype, with the
 * same formulas as lib/ops/cpu/loss_cpu.c (max-subtracted log-sum-exp, sums
 * in double). One warp per row: rows are short in classifiers (10 to a few
 * thousand classes). Labels outside [0, C) are not waited for: the rows
 * kernel atomicMin's the first bad row into a device word and the mean
 * kernel publishes it to the mapped host record of device/deferred.c, which
 * the host reads when it next waits for the GPU (no sync in the step). */
#include <math.h>
#include "ops/cuda/cuda_dtype.cuh"
#include "ops/cuda/deferred.cuh"
#include "ops/cuda/row_reduce.cuh"

#define WARPS_PER_BLOCK 8

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* Row log-sum-exp split as m + log(s), like the CPU's row_max_logsum (NaN
 * is ignored by the max): returns m, *logsum = log(s). Callers form
 * (x - m) - logsum, never x - (m + logsum): with large logits (|x| ~ 1e3,
 * where an f32 ulp is 6e-5) rounding m + log(s) first loses the result's
 * precision and departs from the CPU kernel. */
static __device__ float row_max_logsum(const void *x, int dt, int64_t base, int64_t C, int lane, float *logsum) {
  float m = -INFINITY;
  for (int64_t j = lane; j < C; j += 32) {
    float v = loom_load_f(x, dt, base + j);
    m = v > m ? v : m;
  }
  m = warp_max(m);
  if (isinf(m) && m < 0) {
    *logsum = 0.0f;
    return m;
  }
  double s = 0.0;
  for (int64_t j = lane; j < C; j += 32) s += expf(loom_load_f(x, dt, base + j) - m);
  s = warp_sum(s);
  *logsum = (float)log(s);
  return m;
}

static unsigned blocks_for_rows(int64_t rows) { return (unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK); }

static __global__ void k_log_softmax(int dt, const void *x, void *y, int64_t rows, int64_t C) {
  const int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int64_t base = r * C;
  float ls;
  const float m = row_max_logsum(x, dt, base, C, lane, &ls);
  for (int64_t j = lane; j < C; j += 32) loom_store_f(y, dt, base + j, (loom_load_f(x, dt, base + j) - m) - ls);
}

extern "C" cudaError_t loom_cu_log_softmax(int dt, const void *x, void *y, int64_t rows, int64_t C, cudaStream_t s) {
  if (rows == 0 || C == 0) return cudaSuccess;
  k_log_softmax<<<blocks_for_rows(rows), WARPS_PER_BLOCK * 32, 0, s>>>(dt, x, y, rows, C);
  return cudaGetLastError();
}

static __global__ void k_log_softmax_bw(int dt, const void *dy, const void *y, void *dx, int64_t rows, int64_t C) {
  const int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int64_t base = r * C;
  double s = 0.0;
  for (int64_t j = lane; j < C; j += 32) s += loom_load_f(dy, dt, base + j);
  const float fs = (float)warp_sum(s);
  for (int64_t j = lane; j < C; j += 32)
    loom_store_f(dx, dt, base + j, loom_load_f(dy, dt, base + j) - expf(loom_load_f(y, dt, base + j)) * fs);
}

extern "C" cudaError_t loom_cu_log_softmax_bw(int dt, const void *dy, const void *y, void *dx, int64_t rows,
                                              int64_t C, cudaStream_t s) {
  if (rows == 0 || C == 0) return cudaSuccess;
  k_log_softmax_bw<<<blocks_for_rows(rows), WARPS_PER_BLOCK * 32, 0, s>>>(dt, dy, y, dx, rows, C);
  return cudaGetLastError();
}

__device__ __forceinline__ int64_t label_at(const void *l, int ldt, int64_t i) {
  switch (ldt) {
    case 3: return ((const int32_t *)l)[i];
    case 4: return ((const int64_t *)l)[i];
    default: return ((const uint8_t *)l)[i];
  }
}

static __global__ void k_ce_rows(int dt, const void *x, int ldt, const void *labels, int64_t lstride, int64_t N,
                                 int64_t C, float *row_loss, unsigned long long *bad) {
  const int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= N) return;
  const int64_t lab = label_at(labels, ldt, r * lstride);
  if (lab < 0 || lab >= C) {
    if (lane == 0) {
      atomicMin(bad, (unsigned long long)r);
      row_loss[r] = NAN;
    }
    return;
  }
  const int64_t base = r * C;
  float ls;
  const float m = row_max_logsum(x, dt, base, C, lane, &ls);
  /* As the CPU: (m - x[label]) + log(s), added in double. */
  if (lane == 0) row_loss[r] = (float)((double)(m - loom_load_f(x, dt, base + lab)) + (double)ls);
}

/* Mean of the per-row losses in double, by one block; then thread 0
 * publishes a bad label found by k_ce_rows (first one wins until the host
 * has reported it) and clears the device word for the next launch. */
static __global__ void k_mean(const float *v, int64_t n, float *out, unsigned long long *bad,
                              loom_cu_deferred_error *rec, int ldt, const void *labels, int64_t lstride, int64_t C) {
  __shared__ double sh[256];
  const double total = loom_block_sum256(v, n, sh);
  if (threadIdx.x == 0) {
    out[0] = n > 0 ? (float)(total / (double)n) : NAN;
    loom_cu_publish_bad(bad, rec, 0 /* LOOM_DEFERRED_CROSS_ENTROPY */, C,
                        [&](int64_t r) { return label_at(labels, ldt, r * lstride); });
  }
}

extern "C" cudaError_t loom_cu_cross_entropy(int dt, const void *x, int ldt, const void *labels, int64_t lstride,
                                             int64_t N, int64_t C, float *row_loss, float *out,
                                             unsigned long long *bad, loom_cu_deferred_error *rec, cudaStream_t s) {
  if (N > 0) {
    k_ce_rows<<<blocks_for_rows(N), WARPS_PER_BLOCK * 32, 0, s>>>(dt, x, ldt, labels, lstride, N, C, row_loss, bad);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  k_mean<<<1, 256, 0, s>>>(row_loss, N, out, bad, rec, ldt, labels, lstride, C);
  return cudaGetLastError();
}

static __global__ void k_ce_bw(int dt, const float *gy, const void *x, int ldt, const void *labels, int64_t lstride,
                               int64_t N, int64_t C, void *dx) {
  const int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= N) return;
  const float g = gy[0] / (float)N;
  const int64_t lab = label_at(labels, ldt, r * lstride);
  const int64_t base = r * C;
  float ls;
  const float m = row_max_logsum(x, dt, base, C, lane, &ls);
  for (int64_t j = lane; j < C; j += 32) {
    float v = expf((loom_load_f(x, dt, base + j) - m) - ls) * g;
    if (j == lab) v -= g;  /* an invalid label was already reported by the forward */
    loom_store_f(dx, dt, base + j, v);
  }
}

extern "C" cudaError_t loom_cu_cross_entropy_bw(int dt, const float *gy, const void *x, int ldt, const void *labels,
                                                int64_t lstride, int64_t N, int64_t C, void *dx, cudaStream_t s) {
  if (N == 0 || C == 0) return cudaSuccess;
  k_ce_bw<<<blocks_for_rows(N), WARPS_PER_BLOCK * 32, 0, s>>>(dt, gy, x, ldt, labels, lstride, N, C, dx);
  return cudaGetLastError();
}
