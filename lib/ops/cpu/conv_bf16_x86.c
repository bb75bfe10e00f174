/* conv_bf16_x86.c — the AVX512_BF16 micro-kernels of the bf16 convolution
 * (conv_bf16.c). Unlike the GEMM's (gemm_bf16_x86.c) they read the im2col
 * rows where im2col wrote them — row i's pair p is the 32-bit word
 * a[i*lda + p] — instead of a repacked copy: the pairs of a row are already
 * adjacent, so the GEMM's A packing (a second pass over every column
 * value) is left out. B is the weight in the GEMM's packed layout
 * (loom_gemm_bf16_pack_b, groups of LOOM_BF16_NR words).
 *
 * Two shapes: 12 rows x 32 columns (24 accumulators) for O > 16, and 24
 * rows x 16 columns (24 accumulators) for O <= 16, where the 32-wide tile
 * would multiply half zeros. Both compiled with their own target attribute;
 * called only when the instruction set in force is avx512bf16. */
#include "ops/cpu/conv_bf16_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

BF16_TARGET void loom_conv_bf16_ukr_12x32(int64_t kp, const uint32_t *restrict a, int64_t lda,
                                          const uint32_t *restrict b, float *restrict c, int64_t ldc) {
  __m512 acc0[12], acc1[12];
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) acc0[i] = _mm512_setzero_ps(), acc1[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; p++) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b + p * LOOM_BF16_NR);
    const __m512bh b1 = (__m512bh)_mm512_load_si512(b + p * LOOM_BF16_NR + 16);
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[i * lda + p]);
      acc0[i] = _mm512_dpbf16_ps(acc0[i], av, b0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], av, b1);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) {
    _mm512_storeu_ps(c + i * ldc, acc0[i]);
    _mm512_storeu_ps(c + i * ldc + 16, acc1[i]);
  }
}

BF16_TARGET void loom_conv_bf16_ukr_24x16(int64_t kp, const uint32_t *restrict a, int64_t lda,
                                          const uint32_t *restrict b, float *restrict c, int64_t ldc) {
  __m512 acc[24];
#pragma GCC unroll 24
  for (int i = 0; i < 24; i++) acc[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; p++) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b + p * LOOM_BF16_NR);
#pragma GCC unroll 24
    for (int i = 0; i < 24; i++)
      acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_set1_epi32((int)a[i * lda + p]), b0);
  }
#pragma GCC unroll 24
  for (int i = 0; i < 24; i++) _mm512_storeu_ps(c + i * ldc, acc[i]);
}

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
        acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_set1_epi32((int)xt[off[i] + p]), b0);
    }
  }
#pragma GCC unroll 24
  for (int i = 0; i < 24; i++) _mm512_storeu_ps(c + i * ldc, acc[i]);
}
#else
typedef int loom_conv_bf16_x86_unused; /* ISO C forbids an empty translation unit. */
#endif
