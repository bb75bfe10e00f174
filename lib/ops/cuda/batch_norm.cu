/* batch_norm.cu — batch norm on the GPU with loom's own kernels (not
 * cuDNN's): the same shifted-sum statistics, the same f32 apply expression
 * and the same recomputed ReLU mask as the CPU kernels (cnn_math.h), any
 * of f32/f16/bf16 data with f32 statistics, NCHW and NHWC, affine on or
 * off, and running statistics updated by the kernel that finishes the
 * statistics. cuDNN 9's batch-norm entry points are the deprecated legacy
 * API or graph-API engines with layout and dtype restrictions; batch norm is
 * bandwidth-bound, and these kernels read x twice and write y once in
 * training (the minimum without keeping a channel on chip), like cuDNN's.
 *
 * Forward (training): k_partial_* reduce each channel in `splits` slices
 * into doubles; k_finish_fwd (one thread per channel) combines them in a
 * fixed order (deterministic), writes mean / invstd, updates the running
 * statistics and the apply coefficients; k_apply writes y. Eval skips the
 * reduction. Backward: the same reduction of dy' and dy'(x - mean), dy'
 * being dy masked by the fused ReLU; k_finish_bwd writes dweight / dbias
 * and the dx coefficients; k_dx writes dx.
 * Planar layouts use one block per (channel, slice); interleaved ones
 * (NHWC) one block per (32 channels, slice), lanes on adjacent channels so
 * loads coalesce, four rows' loads in flight per thread. NHWC's apply and
 * dx passes (k_apply_rows, k_dx_rows) take 16-byte vectors and walk the
 * channel instead of dividing per element. The H200 run of 2026-11-28 found
 * batch norm at 58 % of a ResNet-50 fp16 step's device time before these
 * changes, which have not run on a GPU yet. */
#include "ops/cnn_math.h"
#include "ops/cuda/cuda_dtype.cuh"

#define BN_THREADS 256

/* Element t (0 <= t < outer * inner) of channel c. */
__device__ __forceinline__ int64_t bn_index(int64_t C, int64_t inner, int64_t c, int64_t t) {
  if (inner == 1) return t * C + c;
  const int64_t o = t / inner;
  return (o * C + c) * inner + (t - o * inner);
}

__device__ __forceinline__ void bn_wb(const loom_cu_bn &p, int64_t c, float *w, float *b) {
  *w = p.w ? loom_load_f(p.w, p.wdt, c) : 1.0f;
  *b = p.b ? loom_load_f(p.b, p.bdt, c) : 0.0f;
}

/* MODE 0: shifted sums of x; MODE 1: sums of dy' and dy' (x - mean).
 * bn_acc_v takes the values loaded (g unused in MODE 0). */
template <int MODE>
__device__ __forceinline__ void bn_acc_v(const loom_cu_bn &p, float xv, float g, float K, float mean, float sc,
                                         float sh, float &a1, float &a2) {
  if (MODE == 0) {
    const float d = xv - K;
    a1 += d;
    a2 += d * d;
  } else {
    if (p.relu && !(loom_bn_pre(xv, sc, sh) > 0.0f)) g = 0.0f;
    a1 += g;
    a2 += g * (xv - mean);
  }
}

template <int MODE>
__device__ __forceinline__ void bn_acc(const loom_cu_bn &p, int64_t idx, float K, float mean, float sc, float sh,
                                       float &a1, float &a2) {
  const float xv = loom_load_f(p.x, p.dt, idx);
  bn_acc_v<MODE>(p, xv, MODE == 0 ? 0.0f : loom_load_f(p.gy, p.dt, idx), K, mean, sc, sh, a1, a2);
}

template <int MODE>
__device__ __forceinline__ void bn_channel_consts(const loom_cu_bn &p, int64_t c, float *K, float *mean, float *sc,
                                                  float *sh) {
  *K = *mean = *sc = *sh = 0.0f;
  if (MODE == 0) {
    *K = loom_load_f(p.x, p.dt, bn_index(p.C, p.inner, c, 0));
  } else {
    float w, b;
    bn_wb(p, c, &w, &b);
    *mean = p.stats[c];
    loom_bn_coef(w, b, *mean, p.stats[p.C + c], sc, sh);
  }
}

template <int MODE>
static __global__ void k_partial_planar(loom_cu_bn p) {
  __shared__ double s1[BN_THREADS], s2[BN_THREADS];
  const int64_t c = blockIdx.x;
  const int split = blockIdx.y;
  const int64_t M = p.outer * p.inner;
  const int64_t t0 = M * split / p.splits, t1 = M * (split + 1) / p.splits;
  float K, mean, sc, sh, a1 = 0.0f, a2 = 0.0f;
  bn_channel_consts<MODE>(p, c, &K, &mean, &sc, &sh);
  for (int64_t t = t0 + threadIdx.x; t < t1; t += blockDim.x)
    bn_acc<MODE>(p, bn_index(p.C, p.inner, c, t), K, mean, sc, sh, a1, a2);
  s1[threadIdx.x] = a1;
  s2[threadIdx.x] = a2;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) {
      s1[threadIdx.x] += s1[threadIdx.x + w];
      s2[threadIdx.x] += s2[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    p.partial[(int64_t)split * 2 * p.C + c] = s1[0];
    p.partial[((int64_t)split * 2 + 1) * p.C + c] = s2[0];
  }
}

/* Interleaved: block (32, 8): lane x = channel, y = row phase. */
template <int MODE>
static __global__ void k_partial_rows(loom_cu_bn p) {
  __shared__ double s1[8][33], s2[8][33];
  const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
  const int split = blockIdx.y;
  const int64_t r0 = p.outer * split / p.splits, r1 = p.outer * (split + 1) / p.splits;
  float a1 = 0.0f, a2 = 0.0f;
  if (c < p.C) {
    float K, mean, sc, sh;
    bn_channel_consts<MODE>(p, c, &K, &mean, &sc, &sh);
    int64_t r = r0 + threadIdx.y;
    /* Four rows' loads in flight before their adds (in the same order as
       one at a time, so the sums keep their bits): one load per warp at a
       time left HBM mostly idle. */
    for (; r + 24 < r1; r += 32) {
      float xv[4], gv[4];
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const int64_t idx = (r + 8 * u) * p.C + c;
        xv[u] = loom_load_f(p.x, p.dt, idx);
        gv[u] = MODE == 0 ? 0.0f : loom_load_f(p.gy, p.dt, idx);
      }
#pragma unroll
      for (int u = 0; u < 4; u++) bn_acc_v<MODE>(p, xv[u], gv[u], K, mean, sc, sh, a1, a2);
    }
    for (; r < r1; r += 8) bn_acc<MODE>(p, r * p.C + c, K, mean, sc, sh, a1, a2);
  }
  s1[threadIdx.y][threadIdx.x] = a1;
  s2[threadIdx.y][threadIdx.x] = a2;
  __syncthreads();
  if (threadIdx.y == 0 && c < p.C) {
    double t1 = 0.0, t2 = 0.0;
    for (int k = 0; k < 8; k++) t1 += s1[k][threadIdx.x], t2 += s2[k][threadIdx.x];
    p.partial[(int64_t)split * 2 * p.C + c] = t1;
    p.partial[((int64_t)split * 2 + 1) * p.C + c] = t2;
  }
}

__device__ __forceinline__ void bn_sums(const loom_cu_bn &p, int64_t c, double *s1, double *s2) {
  *s1 = *s2 = 0.0;
  for (int s = 0; s < p.splits; s++) {
    *s1 += p.partial[(int64_t)s * 2 * p.C + c];
    *s2 += p.partial[((int64_t)s * 2 + 1) * p.C + c];
  }
}

static __global__ void k_finish_fwd(loom_cu_bn p) {
  const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= p.C) return;
  float w, b, meanf, invstdf;
  bn_wb(p, c, &w, &b);
  if (p.training) {
    double s1, s2;
    bn_sums(p, c, &s1, &s2);
    const double M = (double)(p.outer * p.inner);
    const double K = loom_load_f(p.x, p.dt, bn_index(p.C, p.inner, c, 0));
    const double d1 = s1 / M;
    double var = s2 / M - d1 * d1;
    if (var < 0.0) var = 0.0;
    const double mean = K + d1;
    meanf = (float)mean;
    invstdf = (float)(1.0 / sqrt(var + p.eps));
    if (p.rmean) {
      const double m = p.momentum;
      p.rmean[c] = (float)((1.0 - m) * p.rmean[c] + m * mean);
      p.rvar[c] = (float)((1.0 - m) * p.rvar[c] + m * var * M / (M - 1.0));
    }
  } else {
    meanf = p.rmean[c];
    invstdf = (float)(1.0 / sqrt((double)p.rvar[c] + p.eps));
  }
  p.stats[c] = meanf;
  p.stats[p.C + c] = invstdf;
  loom_bn_coef(w, b, meanf, invstdf, &p.coef[c], &p.coef[p.C + c]);
}

static __global__ void k_apply(loom_cu_bn p, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = p.inner == 1 ? i % p.C : (i / p.inner) % p.C;
    float v = loom_bn_pre(loom_load_f(p.x, p.dt, i), p.coef[c], p.coef[p.C + c]);
    if (p.relu) v = v > 0.0f ? v : 0.0f;
    loom_store_f(p.y, p.dt, i, v);
  }
}

/* coef: [0] scale, [1] shift (the ReLU mask), [2] k, [3] q, [4] r of
 * dx = k dy' - q (x - mean) - r. */
static __global__ void k_finish_bwd(loom_cu_bn p, int have_sums) {
  const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= p.C) return;
  double s1 = 0.0, s2 = 0.0;
  if (have_sums) bn_sums(p, c, &s1, &s2);
  float w, b;
  bn_wb(p, c, &w, &b);
  const double M = (double)(p.outer * p.inner), invstd = p.stats[p.C + c], k = (double)w * invstd;
  if (p.dw) loom_store_f(p.dw, p.dwdt, c, (float)(s2 * invstd));
  if (p.db) loom_store_f(p.db, p.dbdt, c, (float)s1);
  loom_bn_coef(w, b, p.stats[c], p.stats[p.C + c], &p.coef[c], &p.coef[p.C + c]);
  p.coef[2 * p.C + c] = (float)k;
  p.coef[3 * p.C + c] = p.training ? (float)(k * invstd * invstd * s2 / M) : 0.0f;
  p.coef[4 * p.C + c] = p.training ? (float)(k * s1 / M) : 0.0f;
}

static __global__ void k_dx(loom_cu_bn p, int64_t n) {
  const int64_t C = p.C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = p.inner == 1 ? i % C : (i / p.inner) % C;
    const float xv = loom_load_f(p.x, p.dt, i);
    float g = loom_load_f(p.gy, p.dt, i);
    if (p.relu && !(loom_bn_pre(xv, p.coef[c], p.coef[C + c]) > 0.0f)) g = 0.0f;
    loom_store_f(p.dx, p.dt, i, p.coef[2 * C + c] * g - p.coef[3 * C + c] * (xv - p.stats[c]) - p.coef[4 * C + c]);
  }
}

/* Channels-last apply and dx: V elements of one row per thread (16-byte
 * vectors where C and the pointers allow, else 1) and the channel walked
 * (loom_bn_walk) instead of a 64-bit modulo per element; the same
 * expressions as k_apply / k_dx, so the same bits. */
template <typename T, int V, bool VEC = (V > 1)>
struct bn_io;
template <typename T, int V>
struct bn_io<T, V, true> {
  static __device__ __forceinline__ void load(float (&d)[V], const void *p, int64_t i) {
    loom_vec<T, V> v;
    loom_vload(v, (const T *)p + i * V);
#pragma unroll
    for (int k = 0; k < V; k++) d[k] = loom_to_f(v.e[k]);
  }
  static __device__ __forceinline__ void store(void *p, int64_t i, const float (&d)[V]) {
    loom_vec<T, V> v;
#pragma unroll
    for (int k = 0; k < V; k++) v.e[k] = loom_from_f<T>(d[k]);
    loom_vstore((T *)p + i * V, v);
  }
};
template <typename T>
struct bn_io<T, 1, false> {
  static __device__ __forceinline__ void load(float (&d)[1], const void *p, int64_t i) { d[0] = loom_to_f(((const T *)p)[i]); }
  static __device__ __forceinline__ void store(void *p, int64_t i, const float (&d)[1]) { ((T *)p)[i] = loom_from_f<T>(d[0]); }
};

template <typename T, int V>
static __global__ void k_apply_rows(loom_cu_bn p, int64_t nv) {
  const int64_t S = (int64_t)gridDim.x * blockDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  loom_bn_walk w = loom_bn_walk_start(i, S, V, p.C);
  for (; i < nv; i += S, loom_bn_walk_next(&w)) {
    float v[V];
    bn_io<T, V>::load(v, p.x, i);
#pragma unroll
    for (int k = 0; k < V; k++) {
      float u = loom_bn_pre(v[k], p.coef[w.c + k], p.coef[p.C + w.c + k]);
      if (p.relu) u = u > 0.0f ? u : 0.0f;
      v[k] = u;
    }
    bn_io<T, V>::store(p.y, i, v);
  }
}

template <typename T, int V>
static __global__ void k_dx_rows(loom_cu_bn p, int64_t nv) {
  const int64_t S = (int64_t)gridDim.x * blockDim.x, C = p.C;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  loom_bn_walk w = loom_bn_walk_start(i, S, V, C);
  for (; i < nv; i += S, loom_bn_walk_next(&w)) {
    float xv[V], g[V];
    bn_io<T, V>::load(xv, p.x, i);
    bn_io<T, V>::load(g, p.gy, i);
#pragma unroll
    for (int k = 0; k < V; k++) {
      const int64_t c = w.c + k;
      if (p.relu && !(loom_bn_pre(xv[k], p.coef[c], p.coef[C + c]) > 0.0f)) g[k] = 0.0f;
      g[k] = p.coef[2 * C + c] * g[k] - p.coef[3 * C + c] * (xv[k] - p.stats[c]) - p.coef[4 * C + c];
    }
    bn_io<T, V>::store(p.dx, i, g);
  }
}

/* The rows kernels for p's dtype: 16-byte vectors when C is a multiple of
 * their length and every pointer is 16-byte aligned. */
template <bool DX, typename T>
static void launch_rows_t(const loom_cu_bn &p, int64_t n, cudaStream_t s) {
  constexpr int V = 16 / (int)sizeof(T);
  const bool vec = p.C % V == 0 && loom_aligned16(p.x) && loom_aligned16(DX ? p.gy : p.x) &&
                   loom_aligned16(DX ? (const void *)p.dx : (const void *)p.y);
  if (vec) {
    if (DX) k_dx_rows<T, V><<<loom_grid_for(n / V), 256, 0, s>>>(p, n / V);
    else k_apply_rows<T, V><<<loom_grid_for(n / V), 256, 0, s>>>(p, n / V);
  } else {
    if (DX) k_dx_rows<T, 1><<<loom_grid_for(n), 256, 0, s>>>(p, n);
    else k_apply_rows<T, 1><<<loom_grid_for(n), 256, 0, s>>>(p, n);
  }
}

template <bool DX>
static void launch_rows(const loom_cu_bn &p, int64_t n, cudaStream_t s) {
  if (p.dt == 1) launch_rows_t<DX, loom_h16>(p, n, s);
  else if (p.dt == 2) launch_rows_t<DX, loom_b16>(p, n, s);
  else launch_rows_t<DX, float>(p, n, s);
}

extern "C" int loom_cu_bn_splits(int64_t outer, int64_t C, int64_t inner) {
  (void)C;
  const int64_t M = outer * inner;
  int64_t s = (M + 4095) / 4096;
  if (s > 256) s = 256;
  if (s > M) s = M;
  return s < 1 ? 1 : (int)s;
}

template <int MODE>
static void launch_partial(const loom_cu_bn &p, cudaStream_t s) {
  if (p.inner == 1)
    k_partial_rows<MODE><<<dim3((unsigned)((p.C + 31) / 32), (unsigned)p.splits), dim3(32, 8), 0, s>>>(p);
  else
    k_partial_planar<MODE><<<dim3((unsigned)p.C, (unsigned)p.splits), BN_THREADS, 0, s>>>(p);
}

extern "C" cudaError_t loom_cu_bn_forward(const loom_cu_bn *pp, cudaStream_t s) {
  const loom_cu_bn p = *pp;
  const int64_t n = p.outer * p.C * p.inner;
  if (p.C == 0) return cudaSuccess;
  if (p.training && n > 0) launch_partial<0>(p, s);
  k_finish_fwd<<<(unsigned)((p.C + 255) / 256), 256, 0, s>>>(p);
  if (n > 0 && p.inner == 1) launch_rows<false>(p, n, s);
  else if (n > 0) k_apply<<<loom_grid_for(n), 256, 0, s>>>(p, n);
  return cudaGetLastError();
}

extern "C" cudaError_t loom_cu_bn_backward(const loom_cu_bn *pp, cudaStream_t s) {
  const loom_cu_bn p = *pp;
  const int64_t n = p.outer * p.C * p.inner;
  if (p.C == 0) return cudaSuccess;
  const int sums = (p.training || p.dw || p.db) && n > 0;
  if (sums) launch_partial<1>(p, s);
  k_finish_bwd<<<(unsigned)((p.C + 255) / 256), 256, 0, s>>>(p, sums);
  if (p.dx && n > 0 && p.inner == 1) launch_rows<true>(p, n, s);
  else if (p.dx && n > 0) k_dx<<<loom_grid_for(n), 256, 0, s>>>(p, n);
  return cudaGetLastError();
}
