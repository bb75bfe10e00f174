/* conv_bf16_x86.c — the AVX512_BF16 micro-kernels of the bf16 convolution
 * (conv_bf16.c). Unlike the GEMM's (gemm_bf16_x86.c) they read the input
 * where the driver's zero-padded NHWC chunk holds it — a pixel's channel
 * pairs are already adjacent 32-bit words — instead of a packed copy, so
 * the GEMM's A packing (a second pass over every value) is left out. B is
 * the weight in the GEMM's packed layout (loom_gemm_bf16_pack_b, groups of
 * LOOM_BF16_NR words).
 *
 * Two forward shapes: 12 rows x 32 columns (24 accumulators) for O > 16,
 * and 24 rows x 16 columns (24 accumulators) for O <= 16, where the 32-wide
 * tile would multiply half zeros; two weight-gradient shapes, 12x32 and
 * 16x16. Compiled with their own target attribute; called only when the
 * instruction set in force is avx512bf16. */
#include "ops/cpu/conv_bf16_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* acc += b . {pair at m}x16, the broadcast folded into the instruction
 * ({1to16}). Where each broadcast feeds one dot product (the 16-column
 * kernels) GCC's separate vpbroadcastd per product held the 24x16 kernel
 * at 87 % of the 12x32's throughput on Zen 4; folded, 98 %. Same
 * instruction, same bits. */
#define DP_BCAST(acc, b, m) \
  __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(b), "m"(*(const uint32_t *)(m)))

/* ---- implicit im2col: the rows are pixels of a zero-padded NHWC input ---- */
BF16_TARGET void loom_conv_bf16_ukr_taps_12x32(const uint32_t *restrict x, const int64_t *restrict off,
                                               const int64_t *restrict tapoff, int64_t ntaps, int64_t cp,
                                               const uint32_t *restrict b, float *restrict c, int64_t ldc) {
  __m512 acc0[12], acc1[12];
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) acc0[i] = _mm512_setzero_ps(), acc1[i] = _mm512_setzero_ps();
  for (int64_t t = 0; t < ntaps; t++) {
    const uint32_t *xt = x + tapoff[t];
    for (int64_t p = 0; p < cp; p++, b += LOOM_BF16_NR) {
      const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 12
      for (int i = 0; i < 12; i++) {
        const __m512bh av = (__m512bh)_mm512_set1_epi32((int)xt[off[i] + p]);
        acc0[i] = _mm512_dpbf16_ps(acc0[i], av, b0);
        acc1[i] = _mm512_dpbf16_ps(acc1[i], av, b1);
      }
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) {
    _mm512_storeu_ps(c + i * ldc, acc0[i]);
    _mm512_storeu_ps(c + i * ldc + 16, acc1[i]);
  }
}

BF16_TARGET void loom_conv_bf16_ukr_taps_24x16(const uint32_t *restrict x, const int64_t *restrict off,
                                               const int64_t *restrict tapoff, int64_t ntaps, int64_t cp,
                                               const uint32_t *restrict b, float *restrict c, int64_t ldc) {
  __m512 acc[24];
#pragma GCC unroll 24
  for (int i = 0; i < 24; i++) acc[i] = _mm512_setzero_ps();
  for (int64_t t = 0; t < ntaps; t++) {
    const uint32_t *xt = x + tapoff[t];
    for (int64_t p = 0; p < cp; p++, b += LOOM_BF16_NR) {
      const __m512bh b0 = (__m512bh)_mm512_load_si512(b);
#pragma GCC unroll 24
      for (int i = 0; i < 24; i++)
        DP_BCAST(acc[i], b0, xt + off[i] + p);
    }
  }
#pragma GCC unroll 24
  for (int i = 0; i < 24; i++) _mm512_storeu_ps(c + i * ldc, acc[i]);
}

/* ---- weight gradient: k runs over pixel pairs ----------------------------- */
/* word j of the result: (x0[j], x1[j]), x0's value in the low half. */
static const uint16_t pair_idx[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};

BF16_TARGET void loom_conv_bf16_ukr_dw_12x32(const uint32_t *restrict dzp, int64_t ldo, const uint16_t *restrict x,
                                             const int64_t *restrict off, int64_t nq, int64_t nc, float *restrict c) {
  const __mmask32 m = nc >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << nc) - 1u);
  const __m512i lo = _mm512_loadu_si512(pair_idx), hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  __m512 acc0[12], acc1[12];
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) acc0[i] = _mm512_setzero_ps(), acc1[i] = _mm512_setzero_ps();
  for (int64_t q = 0; q < nq; q++, dzp += ldo) {
    const __m512i x0 = _mm512_maskz_loadu_epi16(m, x + off[2 * q]), x1 = _mm512_maskz_loadu_epi16(m, x + off[2 * q + 1]);
    const __m512bh b0 = (__m512bh)_mm512_permutex2var_epi16(x0, lo, x1);
    const __m512bh b1 = (__m512bh)_mm512_permutex2var_epi16(x0, hi, x1);
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32((int)dzp[i]);
      acc0[i] = _mm512_dpbf16_ps(acc0[i], av, b0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], av, b1);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) {
    _mm512_storeu_ps(c + i * 32, acc0[i]);
    _mm512_storeu_ps(c + i * 32 + 16, acc1[i]);
  }
}

BF16_TARGET void loom_conv_bf16_ukr_dw_16x16(const uint32_t *restrict dzp, int64_t ldo, const uint16_t *restrict x,
                                             const int64_t *restrict off, int64_t nq, int64_t nc, float *restrict c) {
  const __mmask32 m = (__mmask32)((1u << (nc >= 16 ? 16 : nc)) - 1u);
  const __m512i lo = _mm512_loadu_si512(pair_idx);
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
  for (int64_t q = 0; q < nq; q++, dzp += ldo) {
    const __m512i x0 = _mm512_maskz_loadu_epi16(m, x + off[2 * q]), x1 = _mm512_maskz_loadu_epi16(m, x + off[2 * q + 1]);
    const __m512bh b0 = (__m512bh)_mm512_permutex2var_epi16(x0, lo, x1);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) DP_BCAST(acc[i], b0, dzp + i);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) _mm512_storeu_ps(c + i * 32, acc[i]);
}
#else
typedef int loom_conv_bf16_x86_unused; /* ISO C forbids an empty translation unit. */
#endif
