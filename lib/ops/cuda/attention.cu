/* attention.cu — loom's fused scaled-dot-product attention on CUDA, in the
 * manner of FlashAttention (same contract as lib/ops/cpu/attention_cpu.c):
 * the T x T score matrix is never stored.
 *
 * Forward: one block per (head, tile of query rows). A group of TPR
 * neighbouring threads owns one query row: each holds a slice of q and of
 * the output accumulator in registers, dot products are summed across the
 * group with xor shuffles (every lane ends with the same bits). K and V
 * tiles pass through shared memory (widened to f32 once); keys are taken
 * 16 at a time for the online softmax (running max and sum per row). The
 * logsumexp of each row is kept for backward.
 *
 * Backward recomputes the probabilities from q, k and that logsumexp, in two
 * kernels so that every output element has one writer (no atomics: the
 * same bits on every run, in deterministic mode or not): dk and dv with one
 * block per key tile walking the query tiles that see it, dq with one block
 * per query tile walking its key tiles.
 *
 * Scores are kept in base 2 (q is pre-multiplied by scale * log2(e), so
 * exp2f replaces expf); lse is stored in base e like the CPU kernel's.
 * Head dims are padded with zeros up to 32, 64, 128 or 256 (64 and 128 are
 * the unpadded fast paths). SIMT f32 arithmetic throughout: no tensor cores
 * (mma/wmma) yet. */
#include <math.h>
#include "ops/cuda/attention_launch.h"
#include "ops/cuda/cuda_dtype.cuh"

/* Kernel launches go through this macro so that tests/cuda_emu can run the
 * same kernels on the CPU (it defines its own before including this file). */
#ifndef LOOM_CU_LAUNCH
#define LOOM_CU_LAUNCH(kern, grid, block, stream, ...) kern<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif

#define NT 256   /* threads per block */
#define CH 16    /* keys per online-softmax step */
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

/* Forward geometry for padded head dim DP: SLICE columns per thread, TPR
 * threads per row, BR rows per block, BC keys per shared tile (K and V
 * tiles: 2 * BC * DP floats = 32 KB at most). */
template <int DP> struct fwd_cfg {
  static constexpr int SLICE = DP >= 128 ? 32 : 16;
  static constexpr int TPR = DP / SLICE;
  static constexpr int BR = NT / TPR;
  static constexpr int BC = DP >= 256 ? 16 : (DP >= 128 ? 32 : 64);
};
/* Backward: 16 columns per thread (4 row slices live in registers), BT
 * rows per shared tile of the other side (two tiles, 32 KB at most). */
template <int DP> struct bwd_cfg {
  static constexpr int SLICE = 16;
  static constexpr int TPR = DP / SLICE;
  static constexpr int BR = NT / TPR;
  static constexpr int BT = DP >= 256 ? 16 : (DP >= 128 ? 32 : 64);
};

/* Column of element e of float4 m of a thread at lane g of its group: the
 * group reads 4 * TPR consecutive floats per step (no bank conflicts; the
 * other groups of the warp read the same row: a broadcast). */
template <int TPR> __device__ __forceinline__ int col_of(int g, int m, int e) { return 4 * (g + TPR * m) + e; }

template <int TPR> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = TPR / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* dst[SLICE] <- row `row` of a [T, D] matrix at base (times mul), zeros
 * past D or past T. */
template <typename T, int TPR, int SLICE>
__device__ __forceinline__ void load_slice(float *dst, const T *src, int64_t row, int64_t nrows, int64_t D, int g,
                                           float mul) {
#pragma unroll
  for (int m = 0; m < SLICE / 4; m++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int c = col_of<TPR>(g, m, e);
      dst[4 * m + e] = (row < nrows && c < D) ? loom_to_f(src[row * D + c]) * mul : 0.0f;
    }
}

template <typename T, int TPR, int SLICE>
__device__ __forceinline__ void store_slice(T *dst, const float *src, int64_t row, int64_t D, int g, float mul) {
#pragma unroll
  for (int m = 0; m < SLICE / 4; m++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int c = col_of<TPR>(g, m, e);
      if (c < D) dst[row * D + c] = loom_from_f<T>(src[4 * m + e] * mul);
    }
}

/* Rows [r0, r0 + ROWS) of a [T, D] matrix into a shared [ROWS, DP] f32
 * tile, zeros past D and past T (coalesced when D == DP). vec (D == DP and
 * src 16-byte aligned, so every row is): 16 bytes per load. */
template <typename T, int ROWS, int DP>
__device__ __forceinline__ void load_tile(float *tile, const T *src, int64_t r0, int64_t nrows, int64_t D, bool vec) {
  if (vec) {
    constexpr int E = 16 / sizeof(T), PER_ROW = DP / E;
    for (int idx = threadIdx.x; idx < ROWS * PER_ROW; idx += NT) {
      const int r = idx / PER_ROW, c = (idx % PER_ROW) * E;
      const int64_t row = r0 + r;
      float *dst = tile + r * DP + c;
      loom_vec<T, E> w;
      if (row < nrows) loom_vload(w, src + row * D + c);
#pragma unroll
      for (int e = 0; e < E; e += 4) {  /* 16-byte stores: no bank conflicts */
        float4 f;
        f.x = row < nrows ? loom_to_f(w.e[e]) : 0.0f;
        f.y = row < nrows ? loom_to_f(w.e[e + 1]) : 0.0f;
        f.z = row < nrows ? loom_to_f(w.e[e + 2]) : 0.0f;
        f.w = row < nrows ? loom_to_f(w.e[e + 3]) : 0.0f;
        *reinterpret_cast<float4 *>(dst + e) = f;
      }
    }
    return;
  }
  for (int idx = threadIdx.x; idx < ROWS * DP; idx += NT) {
    const int r = idx / DP, c = idx % DP;
    const int64_t row = r0 + r;
    tile[idx] = (row < nrows && c < D) ? loom_to_f(src[row * D + c]) : 0.0f;
  }
}

/* Partial dot product of a register slice with a shared row. */
template <int TPR, int SLICE>
__device__ __forceinline__ float dot_slice(const float *x, const float *row, int g) {
  const float4 *r4 = reinterpret_cast<const float4 *>(row);
  float acc = 0.0f;
#pragma unroll
  for (int m = 0; m < SLICE / 4; m++) {
    const float4 w = r4[g + TPR * m];
    acc = fmaf(x[4 * m], w.x, acc);
    acc = fmaf(x[4 * m + 1], w.y, acc);
    acc = fmaf(x[4 * m + 2], w.z, acc);
    acc = fmaf(x[4 * m + 3], w.w, acc);
  }
  return acc;
}

/* acc += a * row (register slice += scalar times a shared row's slice). */
template <int TPR, int SLICE>
__device__ __forceinline__ void axpy_slice(float *acc, float a, const float *row, int g) {
  const float4 *r4 = reinterpret_cast<const float4 *>(row);
#pragma unroll
  for (int m = 0; m < SLICE / 4; m++) {
    const float4 w = r4[g + TPR * m];
    acc[4 * m] = fmaf(a, w.x, acc[4 * m]);
    acc[4 * m + 1] = fmaf(a, w.y, acc[4 * m + 1]);
    acc[4 * m + 2] = fmaf(a, w.z, acc[4 * m + 2]);
    acc[4 * m + 3] = fmaf(a, w.w, acc[4 * m + 3]);
  }
}

/* ---- forward ---------------------------------------------------------------------------- */

template <typename T, int DP>
static __global__ void __launch_bounds__(NT) k_attn_fwd(const T *__restrict__ q, const T *__restrict__ k,
                                                 const T *__restrict__ v, T *__restrict__ out, float *__restrict__ lse,
                                                 int64_t nT, int64_t D, int64_t nqt, float qmul, int causal) {
  using C = fwd_cfg<DP>;
  __shared__ __align__(16) float Ks[C::BC * DP];
  __shared__ __align__(16) float Vs[C::BC * DP];
  const int64_t h = blockIdx.x / nqt;
  const int64_t q0 = (nqt - 1 - (int64_t)blockIdx.x % nqt) * C::BR;  /* causal: longest rows first */
  const int g = threadIdx.x % C::TPR;
  const int64_t i = q0 + threadIdx.x / C::TPR;
  const int64_t base = h * nT * D;
  q += base, k += base, v += base, out += base;
  const bool vec = D == DP && loom_aligned16(k) && loom_aligned16(v);

  float qr[C::SLICE], acc[C::SLICE];
  load_slice<T, C::TPR, C::SLICE>(qr, q, i, nT, D, g, qmul);
#pragma unroll
  for (int c = 0; c < C::SLICE; c++) acc[c] = 0.0f;
  float mrow = -INFINITY, l = 0.0f;

  const int64_t kend = causal ? (q0 + C::BR < nT ? q0 + C::BR : nT) : nT;
  for (int64_t k0 = 0; k0 < kend; k0 += C::BC) {
    __syncthreads();  /* the previous tile is no longer read */
    load_tile<T, C::BC, DP>(Ks, k, k0, nT, D, vec);
    load_tile<T, C::BC, DP>(Vs, v, k0, nT, D, vec);
    __syncthreads();
#pragma unroll 1
    for (int c0 = 0; c0 < C::BC; c0 += CH) {
      float s[CH];
      float mx = mrow;
#pragma unroll
      for (int c = 0; c < CH; c++) {
        const float part = group_sum<C::TPR>(dot_slice<C::TPR, C::SLICE>(qr, Ks + (c0 + c) * DP, g));
        const int64_t j = k0 + c0 + c;
        s[c] = (j < nT && (!causal || j <= i)) ? part : -INFINITY;
        mx = fmaxf(mx, s[c]);
      }
      /* No key seen yet: keep everything 0 (exp2f(-inf - 0) = 0). */
      const float mref = mx == -INFINITY ? 0.0f : mx;
      const float corr = exp2f(mrow - mref);
      l *= corr;
#pragma unroll
      for (int d = 0; d < C::SLICE; d++) acc[d] *= corr;
#pragma unroll
      for (int c = 0; c < CH; c++) {
        const float p = exp2f(s[c] - mref);
        l += p;
        axpy_slice<C::TPR, C::SLICE>(acc, p, Vs + (c0 + c) * DP, g);
      }
      mrow = mx;
    }
  }
  if (i < nT) {
    store_slice<T, C::TPR, C::SLICE>(out, acc, i, D, g, 1.0f / l);
    if (g == 0) lse[h * nT + i] = (mrow + log2f(l)) * LN2;
  }
}

/* ---- backward ----------------------------------------------------------------------------- */

/* dk, dv of the key rows [k0, k0 + BR): each group holds its key's k
 * (times scale * log2 e) and v slices and accumulates dk and dv over the
 * query rows that see the key, one shared tile of q and gy at a time. */
template <typename T, int DP>
static __global__ void __launch_bounds__(NT) k_attn_bwd_dkdv(const T *__restrict__ gy, const T *__restrict__ q,
                                                      const T *__restrict__ k, const T *__restrict__ v,
                                                      const float *__restrict__ stats, T *__restrict__ dk,
                                                      T *__restrict__ dv, int64_t nT, int64_t D, int64_t nkt,
                                                      float scale, float kmul, int causal) {
  using C = bwd_cfg<DP>;
  __shared__ __align__(16) float Qs[C::BT * DP];
  __shared__ __align__(16) float Gs[C::BT * DP];
  __shared__ float Ls[C::BT], Ds[C::BT];
  const int64_t h = blockIdx.x / nkt;
  const int64_t k0 = ((int64_t)blockIdx.x % nkt) * C::BR;  /* causal: longest columns first */
  const int g = threadIdx.x % C::TPR;
  const int64_t j = k0 + threadIdx.x / C::TPR;
  const int64_t base = h * nT * D;
  gy += base, q += base, k += base, v += base;
  stats += 2 * h * nT;
  const bool vec = D == DP && loom_aligned16(q) && loom_aligned16(gy);

  float kr[C::SLICE], vr[C::SLICE], dka[C::SLICE], dva[C::SLICE];
  load_slice<T, C::TPR, C::SLICE>(kr, k, j, nT, D, g, kmul);
  load_slice<T, C::TPR, C::SLICE>(vr, v, j, nT, D, g, 1.0f);
#pragma unroll
  for (int c = 0; c < C::SLICE; c++) dka[c] = dva[c] = 0.0f;

  for (int64_t i0 = causal ? k0 : 0; i0 < nT; i0 += C::BT) {
    __syncthreads();
    load_tile<T, C::BT, DP>(Qs, q, i0, nT, D, vec);
    load_tile<T, C::BT, DP>(Gs, gy, i0, nT, D, vec);
    for (int r = threadIdx.x; r < C::BT; r += NT) {
      const bool ok = i0 + r < nT;
      Ls[r] = ok ? stats[2 * (i0 + r)] * LOG2E : 0.0f;
      Ds[r] = ok ? stats[2 * (i0 + r) + 1] : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int r = 0; r < C::BT; r++) {
      const int64_t i = i0 + r;
      const float s = group_sum<C::TPR>(dot_slice<C::TPR, C::SLICE>(kr, Qs + r * DP, g));
      const float dp = group_sum<C::TPR>(dot_slice<C::TPR, C::SLICE>(vr, Gs + r * DP, g));
      const bool vis = i < nT && j < nT && (!causal || i >= j);
      const float p = vis ? exp2f(s - Ls[r]) : 0.0f;
      const float ds = p * (dp - Ds[r]);
      axpy_slice<C::TPR, C::SLICE>(dva, p, Gs + r * DP, g);
      axpy_slice<C::TPR, C::SLICE>(dka, ds, Qs + r * DP, g);
    }
  }
  if (j < nT) {
    if (dk) store_slice<T, C::TPR, C::SLICE>(dk + base, dka, j, D, g, scale);
    if (dv) store_slice<T, C::TPR, C::SLICE>(dv + base, dva, j, D, g, 1.0f);
  }
}

/* dq of the query rows [q0, q0 + BR): each group holds its row's q (times
 * scale * log2 e) and gy slices and accumulates dq over the key tiles the
 * row sees. */
template <typename T, int DP>
static __global__ void __launch_bounds__(NT) k_attn_bwd_dq(const T *__restrict__ gy, const T *__restrict__ q,
                                                    const T *__restrict__ k, const T *__restrict__ v,
                                                    const float *__restrict__ stats, T *__restrict__ dq, int64_t nT,
                                                    int64_t D, int64_t nqt, float scale, float qmul, int causal) {
  using C = bwd_cfg<DP>;
  __shared__ __align__(16) float Ks[C::BT * DP];
  __shared__ __align__(16) float Vs[C::BT * DP];
  const int64_t h = blockIdx.x / nqt;
  const int64_t q0 = (nqt - 1 - (int64_t)blockIdx.x % nqt) * C::BR;
  const int g = threadIdx.x % C::TPR;
  const int64_t i = q0 + threadIdx.x / C::TPR;
  const int64_t base = h * nT * D;
  gy += base, q += base, k += base, v += base;
  const bool vec = D == DP && loom_aligned16(k) && loom_aligned16(v);

  float qr[C::SLICE], gr[C::SLICE], dqa[C::SLICE];
  load_slice<T, C::TPR, C::SLICE>(qr, q, i, nT, D, g, qmul);
  load_slice<T, C::TPR, C::SLICE>(gr, gy, i, nT, D, g, 1.0f);
#pragma unroll
  for (int c = 0; c < C::SLICE; c++) dqa[c] = 0.0f;
  const float l2 = i < nT ? stats[2 * (h * nT + i)] * LOG2E : 0.0f;
  const float dst = i < nT ? stats[2 * (h * nT + i) + 1] : 0.0f;

  const int64_t kend = causal ? (q0 + C::BR < nT ? q0 + C::BR : nT) : nT;
  for (int64_t j0 = 0; j0 < kend; j0 += C::BT) {
    __syncthreads();
    load_tile<T, C::BT, DP>(Ks, k, j0, nT, D, vec);
    load_tile<T, C::BT, DP>(Vs, v, j0, nT, D, vec);
    __syncthreads();
#pragma unroll 4
    for (int c = 0; c < C::BT; c++) {
      const int64_t j = j0 + c;
      const float s = group_sum<C::TPR>(dot_slice<C::TPR, C::SLICE>(qr, Ks + c * DP, g));
      const float dp = group_sum<C::TPR>(dot_slice<C::TPR, C::SLICE>(gr, Vs + c * DP, g));
      const bool vis = i < nT && j < nT && (!causal || j <= i);
      const float p = vis ? exp2f(s - l2) : 0.0f;
      axpy_slice<C::TPR, C::SLICE>(dqa, p * (dp - dst), Ks + c * DP, g);
    }
  }
  if (i < nT) store_slice<T, C::TPR, C::SLICE>(dq + base, dqa, i, D, g, scale);
}

/* ---- launchers ---------------------------------------------------------------------------- */

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

extern "C" int64_t loom_cu_attention_blocks(int64_t bh, int64_t T, int64_t D) {
  (void)D;
  return bh * cdiv(T, bwd_cfg<256>::BR);  /* the smallest row tile of any kernel here */
}

template <typename T, int DP> static cudaError_t fwd(const loom_cu_attn *p, cudaStream_t s) {
  const int64_t nqt = cdiv(p->T, fwd_cfg<DP>::BR);
  auto kern = k_attn_fwd<T, DP>;
  LOOM_CU_LAUNCH(kern, (unsigned)(p->bh * nqt), NT, s, (const T *)p->q, (const T *)p->k, (const T *)p->v,
                 (T *)p->out, p->lse, p->T, p->D, nqt, p->scale * LOG2E, p->causal);
  return cudaGetLastError();
}

template <typename T, int DP> static cudaError_t bwd(const loom_cu_attn *p, cudaStream_t s) {
  using C = bwd_cfg<DP>;
  const int64_t nt = cdiv(p->T, C::BR);
  if (p->dk || p->dv) {
    auto kern = k_attn_bwd_dkdv<T, DP>;
    LOOM_CU_LAUNCH(kern, (unsigned)(p->bh * nt), NT, s, (const T *)p->gy, (const T *)p->q, (const T *)p->k,
                   (const T *)p->v, p->stats, (T *)p->dk, (T *)p->dv, p->T, p->D, nt, p->scale, p->scale * LOG2E,
                   p->causal);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (p->dq) {
    auto kern = k_attn_bwd_dq<T, DP>;
    LOOM_CU_LAUNCH(kern, (unsigned)(p->bh * nt), NT, s, (const T *)p->gy, (const T *)p->q, (const T *)p->k,
                   (const T *)p->v, p->stats, (T *)p->dq, p->T, p->D, nt, p->scale, p->scale * LOG2E, p->causal);
  }
  return cudaGetLastError();
}

/* The instance for (dtype, padded head dim). */
template <typename T, bool BW> static cudaError_t by_dim(const loom_cu_attn *p, cudaStream_t s) {
  if (p->D <= 32) return BW ? bwd<T, 32>(p, s) : fwd<T, 32>(p, s);
  if (p->D <= 64) return BW ? bwd<T, 64>(p, s) : fwd<T, 64>(p, s);
  if (p->D <= 128) return BW ? bwd<T, 128>(p, s) : fwd<T, 128>(p, s);
  if (p->D <= 256) return BW ? bwd<T, 256>(p, s) : fwd<T, 256>(p, s);
  return cudaErrorInvalidValue;  /* the C side refuses these first */
}

template <bool BW> static cudaError_t by_dtype(const loom_cu_attn *p, cudaStream_t s) {
  if (p->bh == 0 || p->T == 0) return cudaSuccess;
  switch (p->dt) {
    case 0: return by_dim<float, BW>(p, s);
    case 1: return by_dim<loom_h16, BW>(p, s);
    case 2: return by_dim<loom_b16, BW>(p, s);
    default: return cudaErrorInvalidValue;
  }
}

extern "C" cudaError_t loom_cu_attention_fwd(const loom_cu_attn *p, cudaStream_t s) { return by_dtype<false>(p, s); }
extern "C" cudaError_t loom_cu_attention_bwd(const loom_cu_attn *p, cudaStream_t s) { return by_dtype<true>(p, s); }
