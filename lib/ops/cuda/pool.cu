/* pool.cu — max, average and adaptive average pooling on the GPU, NCHW and
 * NHWC, with loom's own kernels (windows, output sizes and tie rules shared
 * with the CPU through cnn_math.h; cuDNN's pooling has no adaptive windows
 * and no saved argmax, and these bandwidth-bound loops need nothing it
 * offers).
 *
 * Forward: one thread per output element, in the output's memory order (so
 * NHWC threads walk channels, coalesced). Max pooling writes the argmax
 * (i32, h * W + w; first on ties, a NaN wins). Backward: one thread per
 * input element gathers from the outputs whose windows hold it, in
 * ascending (oh, ow) order — the order the CPU scatters in — so there are no
 * atomics and the sums are deterministic. */
#include <math.h>

#include "ops/cnn_math.h"
#include "ops/cuda/cuda_dtype.cuh"

/* (n, c, h, w) of element i of a [N, C, h_, w_] tensor in p's layout. */
__device__ __forceinline__ void pool_coords(const loom_cu_pool &p, int64_t i, int64_t h_, int64_t w_, int64_t *n,
                                            int64_t *c, int64_t *h, int64_t *w) {
  if (p.nhwc) {
    *c = i % p.C;
    i /= p.C;
    *w = i % w_;
    i /= w_;
    *h = i % h_;
    *n = i / h_;
  } else {
    *w = i % w_;
    i /= w_;
    *h = i % h_;
    i /= h_;
    *c = i % p.C;
    *n = i / p.C;
  }
}

__device__ __forceinline__ int64_t pool_at(const loom_cu_pool &p, int64_t n, int64_t c, int64_t h, int64_t w,
                                           int64_t h_, int64_t w_) {
  return p.nhwc ? ((n * h_ + h) * w_ + w) * p.C + c : ((n * p.C + c) * h_ + h) * w_ + w;
}

__device__ __forceinline__ void pool_window(const loom_cu_pool &p, int64_t oh, int64_t ow, int64_t *h0, int64_t *h1,
                                            int64_t *w0, int64_t *w1, float *div) {
  int64_t sph, spw;
  loom_pool_window(oh, p.H, p.OH, p.kh, p.sh, p.ph, p.adaptive, h0, h1, &sph);
  loom_pool_window(ow, p.W, p.OW, p.kw, p.sw, p.pw, p.adaptive, w0, w1, &spw);
  *div = (float)((p.adaptive || !p.cip) ? (*h1 - *h0) * (*w1 - *w0) : sph * spw);
}

static __global__ void k_max_fwd(loom_cu_pool p, const void *x, void *y, int32_t *idx, int64_t total) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t n, c, oh, ow, h0, h1, w0, w1;
    float div;
    pool_coords(p, i, p.OH, p.OW, &n, &c, &oh, &ow);
    pool_window(p, oh, ow, &h0, &h1, &w0, &w1, &div);
    float m = -INFINITY;
    int32_t best = (int32_t)(h0 * p.W + w0);
    for (int64_t h = h0; h < h1; h++)
      for (int64_t w = w0; w < w1; w++) {
        const float v = loom_load_f(x, p.dt, pool_at(p, n, c, h, w, p.H, p.W));
        if (v > m || isnan(v)) m = v, best = (int32_t)(h * p.W + w);
      }
    loom_store_f(y, p.dt, i, m);
    idx[i] = best;
  }
}

static __global__ void k_avg_fwd(loom_cu_pool p, const void *x, void *y, int64_t total) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t n, c, oh, ow, h0, h1, w0, w1;
    float div, s = 0.0f;
    pool_coords(p, i, p.OH, p.OW, &n, &c, &oh, &ow);
    pool_window(p, oh, ow, &h0, &h1, &w0, &w1, &div);
    for (int64_t h = h0; h < h1; h++)
      for (int64_t w = w0; w < w1; w++) s += loom_load_f(x, p.dt, pool_at(p, n, c, h, w, p.H, p.W));
    loom_store_f(y, p.dt, i, s / div);
  }
}

/* MAX: sum gy over the outputs whose argmax is this element; else the
 * average pool's share gy / div of every window holding it. */
template <bool MAX>
static __global__ void k_pool_bwd(loom_cu_pool p, const void *gy, const int32_t *idx, void *dx, int64_t total) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t n, c, h, w, oh0, oh1, ow0, ow1;
    pool_coords(p, i, p.H, p.W, &n, &c, &h, &w);
    loom_pool_outputs_of(h, p.H, p.OH, p.kh, p.sh, p.ph, p.adaptive, &oh0, &oh1);
    loom_pool_outputs_of(w, p.W, p.OW, p.kw, p.sw, p.pw, p.adaptive, &ow0, &ow1);
    const int32_t pos = (int32_t)(h * p.W + w);
    float acc = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; oh++)
      for (int64_t ow = ow0; ow <= ow1; ow++) {
        const int64_t o = pool_at(p, n, c, oh, ow, p.OH, p.OW);
        if (MAX) {
          if (idx[o] == pos) acc += loom_load_f(gy, p.dt, o);
        } else {
          int64_t h0, h1, w0, w1;
          float div;
          pool_window(p, oh, ow, &h0, &h1, &w0, &w1, &div);
          if (h >= h0 && h < h1 && w >= w0 && w < w1) acc += loom_load_f(gy, p.dt, o) / div;
        }
      }
    loom_store_f(dx, p.dt, i, acc);
  }
}

extern "C" cudaError_t loom_cu_max_pool_fwd(const loom_cu_pool *p, const void *x, void *y, int32_t *idx,
                                            cudaStream_t s) {
  const int64_t total = p->N * p->C * p->OH * p->OW;
  if (total == 0) return cudaSuccess;
  k_max_fwd<<<loom_grid_for(total), 256, 0, s>>>(*p, x, y, idx, total);
  return cudaGetLastError();
}

extern "C" cudaError_t loom_cu_avg_pool_fwd(const loom_cu_pool *p, const void *x, void *y, cudaStream_t s) {
  const int64_t total = p->N * p->C * p->OH * p->OW;
  if (total == 0) return cudaSuccess;
  k_avg_fwd<<<loom_grid_for(total), 256, 0, s>>>(*p, x, y, total);
  return cudaGetLastError();
}

extern "C" cudaError_t loom_cu_max_pool_bwd(const loom_cu_pool *p, const void *gy, const int32_t *idx, void *dx,
                                            cudaStream_t s) {
  const int64_t total = p->N * p->C * p->H * p->W;
  if (total == 0) return cudaSuccess;
  k_pool_bwd<true><<<loom_grid_for(total), 256, 0, s>>>(*p, gy, idx, dx, total);
  return cudaGetLastError();
}

extern "C" cudaError_t loom_cu_avg_pool_bwd(const loom_cu_pool *p, const void *gy, void *dx, cudaStream_t s) {
  const int64_t total = p->N * p->C * p->H * p->W;
  if (total == 0) return cudaSuccess;
  k_pool_bwd<false><<<loom_grid_for(total), 256, 0, s>>>(*p, gy, nullptr, dx, total);
  return cudaGetLastError();
}
