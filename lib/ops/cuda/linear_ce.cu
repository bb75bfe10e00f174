/* linear_ce.cu — the row kernels of the fused projection + cross-entropy on
 * CUDA, run between the GEMMs of linear_ce_cuda.c on one chunk of logits at
 * a time, with the CPU kernel's formulas (lib/ops/cpu/linear_ce_cpu.c):
 * lse = max + log(sum exp(l - max)) with the sum in double, the row's loss
 * (max - l[label]) + log(sum) in double, their mean in double; backward
 * dlogits = exp(l - lse) * g - onehot(label) * g with g = gy / N. A block
 * per row (vocabularies are long). A label outside [0, V) gives a NaN loss
 * and is reported through the deferred error record, as cross_entropy's. */
#include "ops/cuda/cuda_dtype.cuh"
#include "ops/cuda/deferred.cuh"
#include "ops/cuda/row_reduce.cuh"
#include "ops/cuda/transformer_launch.h"

#define DEFERRED_LINEAR_CROSS_ENTROPY 3 /* LOOM_DEFERRED_LINEAR_CROSS_ENTROPY (device_internal.h) */

static __global__ void k_rows(const float *L, int64_t r0, int64_t V, int ldt, const void *labels, float *lse,
                              double *row_loss, unsigned long long *bad) {
  __shared__ float shf[8];
  __shared__ double shd[8];
  const int64_t i = blockIdx.x;
  const float *row = L + i * V;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += LOOM_ROW_BLOCK) m = row[j] > m ? row[j] : m;
  m = loom_row_max<LOOM_ROW_BLOCK>(m, shf);
  double s = 0;
  for (int64_t j = threadIdx.x; j < V; j += LOOM_ROW_BLOCK) s += expf(row[j] - m);
  s = loom_row_sum<LOOM_ROW_BLOCK>(s, shd);
  if (threadIdx.x != 0) return;
  const float ls = (float)log(s);
  const int64_t lab = loom_index_at(labels, ldt, r0 + i);
  lse[r0 + i] = m + ls;
  if (lab < 0 || lab >= V) {
    row_loss[r0 + i] = NAN;
    atomicMin(bad, (unsigned long long)(r0 + i));
  } else {
    row_loss[r0 + i] = (double)(m - row[lab]) + (double)ls;
  }
}

extern "C" cudaError_t loom_cu_lce_rows(const float *L, int64_t r0, int64_t nr, int64_t V, int ldt,
                                        const void *labels, float *lse, double *row_loss, unsigned long long *bad,
                                        cudaStream_t s) {
  if (nr == 0) return cudaSuccess;
  k_rows<<<(unsigned)nr, LOOM_ROW_BLOCK, 0, s>>>(L, r0, V, ldt, labels, lse, row_loss, bad);
  return cudaGetLastError();
}

/* One block: the mean in double in a fixed order, then the bad label. */
static __global__ void k_mean(const double *v, int64_t n, float *out, int64_t V, int ldt, const void *labels,
                              unsigned long long *bad, loom_cu_deferred_error *rec) {
  __shared__ double sh[256];
  const double total = loom_block_sum256(v, n, sh);
  if (threadIdx.x != 0) return;
  out[0] = n > 0 ? (float)(total / (double)n) : NAN;
  loom_cu_publish_bad(bad, rec, DEFERRED_LINEAR_CROSS_ENTROPY, V,
                      [&](int64_t r) { return loom_index_at(labels, ldt, r); });
}

extern "C" cudaError_t loom_cu_lce_mean(const double *row_loss, int64_t N, float *out, int64_t V, int ldt,
                                        const void *labels, unsigned long long *bad, loom_cu_deferred_error *rec,
                                        cudaStream_t s) {
  k_mean<<<1, 256, 0, s>>>(row_loss, N, out, V, ldt, labels, bad, rec);
  return cudaGetLastError();
}

/* 16-bit dlogits are scaled by 2^pre_exp before they are rounded: the power
 * of two that puts |gy|/N in [0.5, 1), so that (softmax - onehot)·gy/N,
 * about 1/(V·N) for most classes, keeps its bits in f16 instead of falling
 * into the subnormals (the GPU run of 2026-11-28 measured dx 6 f16 steps
 * off float64 at V = 20000, N = 1000 with gy = 1). The GEMMs sum in f32 and
 * k_unscale multiplies back by 2^-pre_exp (exact) before rounding once.
 * Computed on the device from gy, so nothing waits for it; 0 for a gy of 0,
 * inf or NaN. */
static __device__ __forceinline__ int pre_exp(const float *gy, int64_t N) {
  const float g = fabsf(gy[0]) / (float)(N > 0 ? N : 1);
  if (!(g > 0.0f) || isinf(g)) return 0;
  int e;
  (void)frexpf(g, &e); /* g = m·2^e, m in [0.5, 1) */
  return -max(-126, min(126, e));
}

static __global__ void k_dlogits(float *L, int64_t r0, int64_t nr, int64_t V, int ldt, const void *labels,
                                 const float *lse, const float *gy, int64_t N, bool scaled) {
  float g = gy[0] / (float)(N > 0 ? N : 1);
  if (scaled) g = ldexpf(g, pre_exp(gy, N));
  const int64_t total = nr * V;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e / V, j = e % V;
    float v = expf(L[e] - lse[r0 + i]) * g;
    if (j == loom_index_at(labels, ldt, r0 + i)) v -= g; /* a bad label matches no column */
    L[e] = v;
  }
}

extern "C" cudaError_t loom_cu_lce_dlogits(float *L, int64_t r0, int64_t nr, int64_t V, int ldt,
                                           const void *labels, const float *lse, const float *gy, int64_t N,
                                           bool scaled, cudaStream_t s) {
  if (nr == 0 || V == 0) return cudaSuccess;
  k_dlogits<<<loom_grid_for(nr * V), 256, 0, s>>>(L, r0, nr, V, ldt, labels, lse, gy, N, scaled);
  return cudaGetLastError();
}

static __global__ void k_unscale(void *dst, int dt, const float *src, int64_t n, const float *gy, int64_t N) {
  const int p = pre_exp(gy, N);
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
    loom_store_f(dst, dt, e, ldexpf(src[e], -p));
}

extern "C" cudaError_t loom_cu_lce_unscale(void *dst, int dt, const float *src, int64_t n, const float *gy, int64_t N,
                                           cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  k_unscale<<<loom_grid_for(n), 256, 0, s>>>(dst, dt, src, n, gy, N);
  return cudaGetLastError();
}
