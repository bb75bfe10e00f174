/* reduce.cu — CUDA sum / max / argmax over a 2-D view [rows, len] of any
 * float dtype (the C side moves the reduced dims last, gathering into a
 * scratch buffer only when the dims do not form such a view). Sums use a
 * double accumulator like the CPU kernel; max propagates NaN; argmax returns
 * the first index of the maximum, a NaN counting as the maximum.
 *
 * A reduction over few long rows (a full sum or max: rows = 1) would leave
 * one block per row and the rest of the GPU idle: it is split over up to
 * ~1024 blocks per call that write partial results (double for sums, so
 * nothing is lost), and a second kernel combines each row's partials in a
 * fixed order (deterministic). */
#include <math.h>
#include "ops/cuda/cuda_dtype.cuh"

#define RED_THREADS 256

__device__ __forceinline__ float max_comb(float m, float v) {
  if (isnan(m)) return m;
  return (isnan(v) || v > m) ? v : m;
}

/* Better (value, index) of two candidates: NaN wins, then larger value,
 * then the smaller index. */
__device__ __forceinline__ void arg_comb(float &bv, int64_t &bi, float v, int64_t i) {
  bool bn = isnan(bv), vn = isnan(v);
  bool take;
  if (bn || vn) take = vn && (!bn || i < bi);
  else take = v > bv || (v == bv && i < bi);
  if (take) { bv = v; bi = i; }
}

/* One block per row (used when the row is contiguous or rows are few). */
static __global__ void k_reduce_block(int kind, int idt, const void *x, int64_t len, int64_t rs, int64_t js, int odt,
                                      void *out) {
  __shared__ double ssum[RED_THREADS];
  __shared__ float smax[RED_THREADS];
  const int64_t r = blockIdx.x;
  const int64_t base = r * rs;
  double acc = 0.0;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    float v = loom_load_f(x, idt, base + j * js);
    if (kind == 0) acc += v;
    else m = max_comb(m, v);
  }
  ssum[threadIdx.x] = acc;
  smax[threadIdx.x] = m;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) {
      ssum[threadIdx.x] += ssum[threadIdx.x + w];
      smax[threadIdx.x] = max_comb(smax[threadIdx.x], smax[threadIdx.x + w]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) loom_store_f(out, odt, r, kind == 0 ? (float)ssum[0] : smax[0]);
}

/* One thread per row (column reductions: adjacent threads read adjacent
 * addresses when rs == 1). */
static __global__ void k_reduce_thread(int kind, int idt, const void *x, int64_t rows, int64_t len, int64_t rs,
                                       int64_t js, int odt, void *out) {
  for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
    double acc = 0.0;
    float m = -INFINITY;
    for (int64_t j = 0; j < len; j++) {
      float v = loom_load_f(x, idt, r * rs + j * js);
      if (kind == 0) acc += v;
      else m = max_comb(m, v);
    }
    loom_store_f(out, odt, r, kind == 0 ? (float)acc : m);
  }
}

/* Column reductions (rs == 1: adjacent outputs are adjacent in memory, as
 * for bias gradients): a block covers 32 outputs; its 8 warps split the
 * reduced dim, each lane reading one output's column, so every warp load is
 * coalesced; shared memory combines the 8 partial results. */
static __global__ void k_reduce_cols(int kind, int idt, const void *x, int64_t rows, int64_t len, int64_t js, int odt,
                                     void *out) {
  __shared__ double ssum[8][33];
  __shared__ float smax[8][33];
  const int64_t r = (int64_t)blockIdx.x * 32 + threadIdx.x;
  double acc = 0.0;
  float m = -INFINITY;
  if (r < rows) {
    for (int64_t j = threadIdx.y; j < len; j += 8) {
      float v = loom_load_f(x, idt, r + j * js);
      if (kind == 0) acc += v;
      else m = max_comb(m, v);
    }
  }
  ssum[threadIdx.y][threadIdx.x] = acc;
  smax[threadIdx.y][threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.y == 0 && r < rows) {
    for (int k = 1; k < 8; k++) {
      acc += ssum[k][threadIdx.x];
      m = max_comb(m, smax[k][threadIdx.x]);
    }
    loom_store_f(out, odt, r, kind == 0 ? (float)acc : m);
  }
}

/* ---- the split path: first pass per (row, part), second pass per row ---- */

#define SPLIT_MIN_LEN 16384      /* shorter rows: one block each is plenty */
#define SPLIT_MAX_ROWS 256       /* more rows: they fill the GPU by themselves */
#define SPLIT_TARGET_BLOCKS 1024
#define SPLIT_MIN_PART 4096      /* elements per block at least */

static int64_t split_parts(int64_t rows, int64_t len, int64_t rs, int64_t js) {
  if (rows == 0 || rows >= SPLIT_MAX_ROWS || len < SPLIT_MIN_LEN || (rs == 1 && js != 1)) return 1;
  int64_t per_row = SPLIT_TARGET_BLOCKS / rows;
  int64_t by_len = (len + SPLIT_MIN_PART - 1) / SPLIT_MIN_PART;
  int64_t p = per_row < by_len ? per_row : by_len;
  return p < 2 ? 1 : p;
}

extern "C" size_t loom_cu_reduce2d_scratch(int64_t rows, int64_t len, int64_t rs, int64_t js) {
  int64_t p = split_parts(rows, len, rs, js);
  return p > 1 ? (size_t)(rows * p) * sizeof(double) : 0;
}

__device__ __forceinline__ void block_combine(int kind, double *ssum, float *smax, double &acc, float &m) {
  ssum[threadIdx.x] = acc;
  smax[threadIdx.x] = m;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) {
      ssum[threadIdx.x] += ssum[threadIdx.x + w];
      smax[threadIdx.x] = max_comb(smax[threadIdx.x], smax[threadIdx.x + w]);
    }
    __syncthreads();
  }
  acc = ssum[0];
  m = smax[0];
}

/* grid (parts, rows): part p of row r covers [p*chunk, min(len, (p+1)*chunk)). */
static __global__ void k_reduce_split(int kind, int idt, const void *x, int64_t len, int64_t rs, int64_t js,
                                      double *partial) {
  __shared__ double ssum[RED_THREADS];
  __shared__ float smax[RED_THREADS];
  const int64_t r = blockIdx.y, parts = gridDim.x;
  const int64_t chunk = (len + parts - 1) / parts;
  const int64_t j0 = blockIdx.x * chunk, j1 = j0 + chunk < len ? j0 + chunk : len;
  double acc = 0.0;
  float m = -INFINITY;
  for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
    float v = loom_load_f(x, idt, r * rs + j * js);
    if (kind == 0) acc += v;
    else m = max_comb(m, v);
  }
  block_combine(kind, ssum, smax, acc, m);
  if (threadIdx.x == 0) partial[r * parts + blockIdx.x] = kind == 0 ? acc : (double)m;
}

static __global__ void k_reduce_finish(int kind, const double *partial, int64_t parts, int odt, void *out) {
  __shared__ double ssum[RED_THREADS];
  __shared__ float smax[RED_THREADS];
  const int64_t r = blockIdx.x;
  double acc = 0.0;
  float m = -INFINITY;
  for (int64_t p = threadIdx.x; p < parts; p += blockDim.x) {
    double v = partial[r * parts + p];
    if (kind == 0) acc += v;
    else m = max_comb(m, (float)v);
  }
  block_combine(kind, ssum, smax, acc, m);
  if (threadIdx.x == 0) loom_store_f(out, odt, r, kind == 0 ? (float)acc : m);
}

extern "C" cudaError_t loom_cu_reduce2d(int kind, int idt, const void *x, int64_t rows, int64_t len, int64_t rs,
                                        int64_t js, int odt, void *out, void *scratch, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  int64_t parts = split_parts(rows, len, rs, js);
  if (parts > 1 && scratch) {
    k_reduce_split<<<dim3((unsigned)parts, (unsigned)rows), RED_THREADS, 0, s>>>(kind, idt, x, len, rs, js,
                                                                                (double *)scratch);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    k_reduce_finish<<<(unsigned)rows, RED_THREADS, 0, s>>>(kind, (const double *)scratch, parts, odt, out);
    return cudaGetLastError();
  }
  if (rs == 1 && js != 1) {
    k_reduce_cols<<<(unsigned)((rows + 31) / 32), dim3(32, 8), 0, s>>>(kind, idt, x, rows, len, js, odt, out);
  } else if (js == 1 || rows < 2048) {
    k_reduce_block<<<(unsigned)rows, RED_THREADS, 0, s>>>(kind, idt, x, len, rs, js, odt, out);
  } else {
    k_reduce_thread<<<loom_grid_for(rows), 256, 0, s>>>(kind, idt, x, rows, len, rs, js, odt, out);
  }
  return cudaGetLastError();
}

static __global__ void k_argmax_block(int idt, const void *x, int64_t len, int64_t rs, int64_t js, int64_t *out) {
  __shared__ float sv[RED_THREADS];
  __shared__ int64_t si[RED_THREADS];
  const int64_t r = blockIdx.x;
  float bv = -INFINITY;
  int64_t bi = -1;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    float v = loom_load_f(x, idt, r * rs + j * js);
    if (bi < 0) { bv = v; bi = j; }
    else arg_comb(bv, bi, v, j);
  }
  sv[threadIdx.x] = bv;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w && si[threadIdx.x + w] >= 0) {
      float v = sv[threadIdx.x + w];
      int64_t i = si[threadIdx.x + w];
      if (si[threadIdx.x] < 0) { sv[threadIdx.x] = v; si[threadIdx.x] = i; }
      else {
        float b = sv[threadIdx.x];
        int64_t bj = si[threadIdx.x];
        arg_comb(b, bj, v, i);
        sv[threadIdx.x] = b;
        si[threadIdx.x] = bj;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[r] = si[0] < 0 ? 0 : si[0];
}

extern "C" cudaError_t loom_cu_argmax2d(int idt, const void *x, int64_t rows, int64_t len, int64_t rs, int64_t js,
                                        int64_t *out, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  k_argmax_block<<<(unsigned)rows, RED_THREADS, 0, s>>>(idt, x, len, rs, js, out);
  return cudaGetLastError();
}
