/* attention_chunked.cu — scaled-dot-product attention as batched GEMMs
 * over chunks of query rows (attention_chunked.h), with the row kernels
 * between them. Same contract as attention.cu (out, lse [bh, T] in base e;
 * backward from stats = (lse, rowsum(gy * out))), so either path's forward
 * pairs with either backward.
 *
 * Per head group and chunk of n query rows i0..i0+n, against the nk keys
 * they can see (causal: nk = i0 + n, a prefix; else T):
 *   forward   S = Q Kᵀ (f32) → P = softmax(scale S) in the dtype, lse
 *             out rows = P V
 *   backward  S = Q Kᵀ → P = exp(scale S - lse)        (recomputed)
 *             dV += Pᵀ dO (f32 sums)                    S ← dP = dO Vᵀ
 *             P ← dS = P (dP - Δ) scale                 dQ rows = dS K
 *             dK += dSᵀ Q (f32 sums)
 * Keys past a row's own position (causal) get probability 0, so the GEMMs
 * may run over the whole prefix. P and dS are rounded to the dtype before
 * their GEMMs, as FlashAttention and PyTorch's math path do; every sum is
 * f32. Memory: the [hb, tq, T] blocks of S and P, linear in T. */
#include <math.h>
#include "ops/cuda/attention_chunked.h"
#include "ops/cuda/cuda_dtype.cuh"
#include "ops/cuda/row_reduce.cuh"

#ifndef LOOM_CU_LAUNCH
#define LOOM_CU_LAUNCH(kern, grid, block, stream, ...) kern<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif

#define CHUNK_EW 256 /* threads per block of the elementwise kernels */

/* Row `row` of a chunk: head h0 + row / n, query i0 + row % n; the keys it
 * sees are [0, jmax). */
struct chunk_geo {
  int64_t n, nk, i0, T, h0;
  int causal;
};

__device__ __forceinline__ int64_t seen(const chunk_geo &g, int64_t row) {
  const int64_t i = g.i0 + row % g.n;
  return g.causal ? (i + 1 < g.nk ? i + 1 : g.nk) : g.nk;
}

__device__ __forceinline__ int64_t stat_index(const chunk_geo &g, int64_t row) {
  return (g.h0 + row / g.n) * g.T + g.i0 + row % g.n;
}

/* Forward rows: P = softmax(scale S) over the seen keys (0 past them), lse
 * = max + log(sum) in base e; the sum in double, as softmax.cu. */
template <typename T, int RT>
static __global__ void k_rows_fwd(const float *S, T *P, float *lse, int64_t rows, chunk_geo g, float scale) {
  __shared__ float shf[8];
  __shared__ double shd[8];
  const int64_t row = (int64_t)blockIdx.x * (LOOM_ROW_BLOCK / RT) + threadIdx.x / RT;
  const int lane = threadIdx.x % RT;
  if (row >= rows) return; /* whole rows: RT = 256 has one row per block */
  const float *sr = S + row * g.nk;
  T *pr = P + row * g.nk;
  const int64_t jm = seen(g, row);
  float m = -INFINITY;
  for (int64_t j = lane; j < jm; j += RT) {
    const float v = sr[j] * scale;
    m = v > m ? v : m;
  }
  m = loom_row_max<RT>(m, shf);
  double s = 0;
  for (int64_t j = lane; j < jm; j += RT) s += expf(sr[j] * scale - m);
  s = loom_row_sum<RT>(s, shd);
  const float inv = (float)(1.0 / s);
  for (int64_t j = lane; j < g.nk; j += RT) pr[j] = loom_from_f<T>(j < jm ? expf(sr[j] * scale - m) * inv : 0.0f);
  if (lane == 0) lse[stat_index(g, row)] = m + (float)log(s);
}

/* Backward, elementwise over the chunk's rows × nk: P = exp(scale S - lse). */
template <typename T>
static __global__ void k_probs(const float *S, T *P, const float *stats, int64_t rows, chunk_geo g, float scale) {
  const int64_t n = rows * g.nk;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = e / g.nk, j = e % g.nk;
    const float l = stats[2 * stat_index(g, row)];
    P[e] = loom_from_f<T>(j < seen(g, row) ? expf(S[e] * scale - l) : 0.0f);
  }
}

/* Backward: P ← dS = P (dP - Δ) scale, dP in S. */
template <typename T>
static __global__ void k_dscores(const float *dP, T *P, const float *stats, int64_t rows, chunk_geo g, float scale) {
  const int64_t n = rows * g.nk;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = e / g.nk, j = e % g.nk;
    const float d = stats[2 * stat_index(g, row) + 1];
    P[e] = loom_from_f<T>(j < seen(g, row) ? loom_to_f(P[e]) * (dP[e] - d) * scale : 0.0f);
  }
}

template <typename T>
static __global__ void k_narrow(T *dst, const float *src, int64_t n) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
    dst[e] = loom_from_f<T>(src[e]);
}

static unsigned ew_grid(int64_t n) {
  int64_t b = (n + CHUNK_EW - 1) / CHUNK_EW;
  return (unsigned)(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

static size_t chunk_dt_bytes(int dt) { return dt == 0 ? 4 : 2; }

static const void *at(const void *base, int dt, int64_t elems) {
  return (const char *)base + (size_t)elems * chunk_dt_bytes(dt);
}

extern "C" int64_t loom_attn_chunk_bytes(int dt, int64_t tq, int64_t hb, int64_t T) {
  return hb * tq * T * (int64_t)(4 + chunk_dt_bytes(dt));
}

/* ---- the drivers ------------------------------------------------------------------------ */

template <typename T>
static int chunk_fwd(const loom_cu_attn *p, loom_attn_chunks *c, cudaStream_t s) {
  const int64_t T_ = p->T, D = p->D;
  for (int64_t h0 = 0; h0 < p->bh; h0 += c->hb) {
    const int64_t nb = p->bh - h0 < c->hb ? p->bh - h0 : c->hb;
    for (int64_t i0 = 0; i0 < T_; i0 += c->tq) {
      const int64_t n = T_ - i0 < c->tq ? T_ - i0 : c->tq, nk = p->causal ? i0 + n : T_;
      const chunk_geo g = {n, nk, i0, T_, h0, p->causal};
      loom_attn_gemm qk = {p->dt, 1, 0, 1, n, nk, D, at(p->q, p->dt, (h0 * T_ + i0) * D), D, T_ * D,
                           at(p->k, p->dt, h0 * T_ * D), D, T_ * D, c->S, nk, n * nk, nb, 0.0f};
      if (c->gemm(c->ctx, &qk)) return 1;
      const int rt = loom_row_threads(nk);
      const unsigned grid = loom_row_blocks(nb * n, rt);
      if (rt == 32) {
        auto kern = k_rows_fwd<T, 32>;
        LOOM_CU_LAUNCH(kern, grid, LOOM_ROW_BLOCK, s, c->S, (T *)c->P, p->lse, nb * n, g, p->scale);
      } else {
        auto kern = k_rows_fwd<T, LOOM_ROW_BLOCK>;
        LOOM_CU_LAUNCH(kern, grid, LOOM_ROW_BLOCK, s, c->S, (T *)c->P, p->lse, nb * n, g, p->scale);
      }
      if ((c->err = cudaGetLastError()) != cudaSuccess) return 2;
      loom_attn_gemm pv = {p->dt, 0, 0, 0, n, D, nk, c->P, nk, n * nk, at(p->v, p->dt, h0 * T_ * D), D, T_ * D,
                           (void *)at(p->out, p->dt, (h0 * T_ + i0) * D), D, T_ * D, nb, 0.0f};
      if (c->gemm(c->ctx, &pv)) return 1;
    }
  }
  return 0;
}

template <typename T>
static int chunk_bwd(const loom_cu_attn *p, loom_attn_chunks *c, cudaStream_t s) {
  const int64_t T_ = p->T, D = p->D, all = p->bh * T_ * D;
  const bool lowp = p->dt != 0;
  float *dkacc = p->dk ? (lowp ? c->dkf : (float *)p->dk) : NULL;
  float *dvacc = p->dv ? (lowp ? c->dvf : (float *)p->dv) : NULL;
  if (dkacc && (c->err = cudaMemsetAsync(dkacc, 0, (size_t)all * sizeof(float), s)) != cudaSuccess) return 2;
  if (dvacc && (c->err = cudaMemsetAsync(dvacc, 0, (size_t)all * sizeof(float), s)) != cudaSuccess) return 2;
  for (int64_t h0 = 0; h0 < p->bh; h0 += c->hb) {
    const int64_t nb = p->bh - h0 < c->hb ? p->bh - h0 : c->hb;
    const void *q = at(p->q, p->dt, h0 * T_ * D), *k = at(p->k, p->dt, h0 * T_ * D);
    const void *v = at(p->v, p->dt, h0 * T_ * D), *gy = at(p->gy, p->dt, h0 * T_ * D);
    for (int64_t i0 = 0; i0 < T_; i0 += c->tq) {
      const int64_t n = T_ - i0 < c->tq ? T_ - i0 : c->tq, nk = p->causal ? i0 + n : T_, rows = nb * n;
      const chunk_geo g = {n, nk, i0, T_, h0, p->causal};
      const void *qc = at(q, p->dt, i0 * D), *gyc = at(gy, p->dt, i0 * D);
      loom_attn_gemm qk = {p->dt, 1, 0, 1, n, nk, D, qc, D, T_ * D, k, D, T_ * D, c->S, nk, n * nk, nb, 0.0f};
      if (c->gemm(c->ctx, &qk)) return 1;
      LOOM_CU_LAUNCH(k_probs<T>, ew_grid(rows * nk), CHUNK_EW, s, c->S, (T *)c->P, p->stats, rows, g, p->scale);
      if ((c->err = cudaGetLastError()) != cudaSuccess) return 2;
      if (dvacc) {
        loom_attn_gemm dv = {p->dt, 1, 1, 0, nk, D, n, c->P, nk, n * nk, gyc, D, T_ * D,
                             dvacc + h0 * T_ * D, D, T_ * D, nb, 1.0f};
        if (c->gemm(c->ctx, &dv)) return 1;
      }
      if (!p->dq && !dkacc) continue;
      loom_attn_gemm dp = {p->dt, 1, 0, 1, n, nk, D, gyc, D, T_ * D, v, D, T_ * D, c->S, nk, n * nk, nb, 0.0f};
      if (c->gemm(c->ctx, &dp)) return 1;
      LOOM_CU_LAUNCH(k_dscores<T>, ew_grid(rows * nk), CHUNK_EW, s, c->S, (T *)c->P, p->stats, rows, g, p->scale);
      if ((c->err = cudaGetLastError()) != cudaSuccess) return 2;
      if (p->dq) {
        loom_attn_gemm dq = {p->dt, 0, 0, 0, n, D, nk, c->P, nk, n * nk, k, D, T_ * D,
                             (void *)at(p->dq, p->dt, (h0 * T_ + i0) * D), D, T_ * D, nb, 0.0f};
        if (c->gemm(c->ctx, &dq)) return 1;
      }
      if (dkacc) {
        loom_attn_gemm dk = {p->dt, 1, 1, 0, nk, D, n, c->P, nk, n * nk, qc, D, T_ * D,
                             dkacc + h0 * T_ * D, D, T_ * D, nb, 1.0f};
        if (c->gemm(c->ctx, &dk)) return 1;
      }
    }
  }
  if (lowp && p->dk) LOOM_CU_LAUNCH(k_narrow<T>, ew_grid(all), CHUNK_EW, s, (T *)p->dk, (const float *)dkacc, all);
  if (lowp && p->dv) LOOM_CU_LAUNCH(k_narrow<T>, ew_grid(all), CHUNK_EW, s, (T *)p->dv, (const float *)dvacc, all);
  return (c->err = cudaGetLastError()) != cudaSuccess ? 2 : 0;
}

template <bool BW>
static int chunk_by_dtype(const loom_cu_attn *p, loom_attn_chunks *c, cudaStream_t s) {
  c->err = cudaSuccess;
  if (p->bh == 0 || p->T == 0) return 0;
  switch (p->dt) {
    case 0: return BW ? chunk_bwd<float>(p, c, s) : chunk_fwd<float>(p, c, s);
    case 1: return BW ? chunk_bwd<loom_h16>(p, c, s) : chunk_fwd<loom_h16>(p, c, s);
    case 2: return BW ? chunk_bwd<loom_b16>(p, c, s) : chunk_fwd<loom_b16>(p, c, s);
    default: c->err = cudaErrorInvalidValue; return 2;
  }
}

extern "C" int loom_cu_attention_chunked_fwd(const loom_cu_attn *p, loom_attn_chunks *c, cudaStream_t s) {
  return chunk_by_dtype<false>(p, c, s);
}

extern "C" int loom_cu_attention_chunked_bwd(const loom_cu_attn *p, loom_attn_chunks *c, cudaStream_t s) {
  return chunk_by_dtype<true>(p, c, s);
}
