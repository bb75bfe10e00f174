/* layer_norm.cu — LayerNorm over the last dim on CUDA, with the CPU
 * kernel's formulas (lib/ops/cpu/layer_norm_cpu.c), in f32 whatever the
 * storage dtype:
 *   forward, one row per warp (or block, rows past 1024): mean and the
 *     variance about it in double, saved as f32 mean and rstd;
 *   backward dx, one row per warp / block: g = gy * weight,
 *     dx = rstd (g - mean(g) - xhat mean(g xhat)), row sums in double;
 *   dweight = sum of gy xhat and dbias = sum of gy over rows, in two
 *     passes: f32 partial sums over fixed blocks of LN_BLOCK_ROWS rows (one
 *     thread per column, rows in order: the CPU's blocks), then one thread
 *     per column adds the blocks in order in double. No atomics: the same
 *     bits every run, whatever the GPU. */
#include "ops/cuda/cuda_dtype.cuh"
#include "ops/cuda/row_reduce.cuh"
#include "ops/cuda/transformer_launch.h"

#define LN_BLOCK_ROWS 32

extern "C" int64_t loom_cu_ln_partial_floats(int64_t rows, int64_t D) {
  return (rows + LN_BLOCK_ROWS - 1) / LN_BLOCK_ROWS * 2 * D;
}

template <typename T, int RT>
static __global__ void k_ln_fwd(loom_cu_ln p) {
  __shared__ double shd[8];
  const int64_t r = (int64_t)blockIdx.x * (LOOM_ROW_BLOCK / RT) + threadIdx.x / RT;
  const int lane = threadIdx.x % RT;
  if (r >= p.rows) return;
  const int64_t D = p.D;
  const T *x = (const T *)p.x + r * D;
  T *y = (T *)p.y + r * D;
  double s = 0;
  for (int64_t j = lane; j < D; j += RT) s += loom_to_f(x[j]);
  const double mean = loom_row_sum<RT>(s, shd) / (double)D;
  double q = 0;
  for (int64_t j = lane; j < D; j += RT) {
    double d = (double)loom_to_f(x[j]) - mean;
    q += d * d;
  }
  q = loom_row_sum<RT>(q, shd);
  const float fm = (float)mean, rstd = (float)(1.0 / sqrt(q / (double)D + p.eps));
  for (int64_t j = lane; j < D; j += RT) {
    float v = (loom_to_f(x[j]) - fm) * rstd;
    if (p.w) v *= loom_load_f(p.w, p.wdt, j);
    if (p.b) v += loom_load_f(p.b, p.bdt, j);
    y[j] = loom_from_f<T>(v);
  }
  if (lane == 0) {
    p.stats[2 * r] = fm;
    p.stats[2 * r + 1] = rstd;
  }
}

template <typename T, int RT>
static __global__ void k_ln_dx(loom_cu_ln p) {
  __shared__ double shd[8];
  const int64_t r = (int64_t)blockIdx.x * (LOOM_ROW_BLOCK / RT) + threadIdx.x / RT;
  const int lane = threadIdx.x % RT;
  if (r >= p.rows) return;
  const int64_t D = p.D;
  const T *x = (const T *)p.x + r * D, *gy = (const T *)p.gy + r * D;
  const float mean = p.stats[2 * r], rstd = p.stats[2 * r + 1];
  double sg = 0, sgx = 0;
  for (int64_t j = lane; j < D; j += RT) {
    float xh = (loom_to_f(x[j]) - mean) * rstd, g = loom_to_f(gy[j]);
    if (p.w) g *= loom_load_f(p.w, p.wdt, j);
    sg += g;
    sgx += (double)g * xh;
  }
  const float mg = (float)(loom_row_sum<RT>(sg, shd) / (double)D);
  const float mgx = (float)(loom_row_sum<RT>(sgx, shd) / (double)D);
  T *dx = (T *)p.dx + r * D;
  for (int64_t j = lane; j < D; j += RT) {
    float xh = (loom_to_f(x[j]) - mean) * rstd, g = loom_to_f(gy[j]);
    if (p.w) g *= loom_load_f(p.w, p.wdt, j);
    dx[j] = loom_from_f<T>(rstd * (g - mg - xh * mgx));
  }
}

/* Block blockIdx.x of rows, column j: f32 sums of gy xhat and gy. */
template <typename T>
static __global__ void k_ln_partial(loom_cu_ln p) {
  const int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= p.D) return;
  const int64_t blk = blockIdx.x, D = p.D;
  const int64_t end = (blk + 1) * LN_BLOCK_ROWS < p.rows ? (blk + 1) * LN_BLOCK_ROWS : p.rows;
  const T *x = (const T *)p.x, *gy = (const T *)p.gy;
  float sw = 0, sb = 0;
  for (int64_t i = blk * LN_BLOCK_ROWS; i < end; i++) {
    const float g = loom_to_f(gy[i * D + j]);
    sw += g * ((loom_to_f(x[i * D + j]) - p.stats[2 * i]) * p.stats[2 * i + 1]);
    sb += g;
  }
  p.partial[blk * 2 * D + j] = sw;
  p.partial[blk * 2 * D + D + j] = sb;
}

static __global__ void k_ln_finish(loom_cu_ln p, int64_t blocks) {
  const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.D) return;
  double sw = 0, sb = 0;
  for (int64_t b = 0; b < blocks; b++) {
    sw += p.partial[b * 2 * p.D + j];
    sb += p.partial[b * 2 * p.D + p.D + j];
  }
  if (p.dw) loom_store_f(p.dw, p.dwdt, j, (float)sw);
  if (p.db) loom_store_f(p.db, p.dbdt, j, (float)sb);
}

template <typename T>
static cudaError_t fwd(const loom_cu_ln *p, cudaStream_t s) {
  const int rt = loom_row_threads(p->D);
  const unsigned g = loom_row_blocks(p->rows, rt);
  if (rt == 32) k_ln_fwd<T, 32><<<g, LOOM_ROW_BLOCK, 0, s>>>(*p);
  else k_ln_fwd<T, LOOM_ROW_BLOCK><<<g, LOOM_ROW_BLOCK, 0, s>>>(*p);
  return cudaGetLastError();
}

template <typename T>
static cudaError_t bwd(const loom_cu_ln *p, cudaStream_t s) {
  const int rt = loom_row_threads(p->D);
  if (p->dx && p->rows > 0) {
    const unsigned g = loom_row_blocks(p->rows, rt);
    if (rt == 32) k_ln_dx<T, 32><<<g, LOOM_ROW_BLOCK, 0, s>>>(*p);
    else k_ln_dx<T, LOOM_ROW_BLOCK><<<g, LOOM_ROW_BLOCK, 0, s>>>(*p);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (!p->dw && !p->db) return cudaSuccess;
  const int64_t blocks = (p->rows + LN_BLOCK_ROWS - 1) / LN_BLOCK_ROWS;
  const unsigned gc = (unsigned)((p->D + 255) / 256);
  if (blocks > 0) {
    if (gc > 65535) return cudaErrorInvalidConfiguration; /* grid y: D above 16M */
    k_ln_partial<T><<<dim3((unsigned)blocks, gc), 256, 0, s>>>(*p);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  k_ln_finish<<<gc, 256, 0, s>>>(*p, blocks);
  return cudaGetLastError();
}

extern "C" cudaError_t loom_cu_ln_forward(const loom_cu_ln *p, cudaStream_t s) {
  if (p->rows == 0 || p->D == 0) return cudaSuccess;
  switch (p->dt) {
    case 1: return fwd<loom_h16>(p, s);
    case 2: return fwd<loom_b16>(p, s);
    default: return fwd<float>(p, s);
  }
}

extern "C" cudaError_t loom_cu_ln_backward(const loom_cu_ln *p, cudaStream_t s) {
  if (p->D == 0) return cudaSuccess;
  switch (p->dt) {
    case 1: return bwd<loom_h16>(p, s);
    case 2: return bwd<loom_b16>(p, s);
    default: return bwd<float>(p, s);
  }
}
