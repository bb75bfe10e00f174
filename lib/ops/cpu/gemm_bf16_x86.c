/* gemm_bf16_x86.c — the AVX512_BF16 pieces of the bf16 GEMM: the 12 x 32
 * micro-kernel on vdpbf16ps, the packing of bf16 operands into the
 * pair-interleaved layout it multiplies, and the epilogue (bias, ReLU,
 * rounding to bf16) applied to finished tiles.
 *
 * The library is compiled for baseline x86-64: every function carries its
 * own target attribute and gemm_bf16.c calls them only when the instruction
 * set in force is avx512bf16 (cpu_isa.h), which checks AVX-512F/BW/VL and
 * AVX512_BF16 through CPUID. */
#include "ops/cpu/gemm_bf16_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/cpu/bf16_simd.h"
#include <string.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

enum { MR = LOOM_BF16_MR, NR = LOOM_BF16_NR };

/* ---- micro-kernel: 24 zmm accumulators (12 rows x 2 x 16 columns), 2 for
 * the B pair-row, 1 for the broadcast A pair: the f32 kernel's shape, with
 * each step covering two k. */
BF16_TARGET void loom_gemm_bf16_ukr_12x32(int64_t kp, const uint32_t *restrict a, const uint32_t *restrict b,
                                          float *restrict c, int64_t ldc, bool accumulate) {
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++) {
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++) _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);

  for (int64_t p = 0; p < kp; p++) {
    _mm_prefetch((const char *)(b + NR * 8), _MM_HINT_T0);
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[i]);
      acc0[i] = _mm512_dpbf16_ps(acc0[i], av, b0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], av, b1);
    }
    a += MR;
    b += NR;
  }

  if (accumulate) {
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
      float *r = c + i * ldc;
      _mm512_storeu_ps(r, _mm512_add_ps(acc0[i], _mm512_loadu_ps(r)));
      _mm512_storeu_ps(r + 16, _mm512_add_ps(acc1[i], _mm512_loadu_ps(r + 16)));
    }
  } else {
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
      _mm512_storeu_ps(c + i * ldc, acc0[i]);
      _mm512_storeu_ps(c + i * ldc + 16, acc1[i]);
    }
  }
}

/* ---- packing --------------------------------------------------------------- */
static inline uint32_t pair_of(const uint16_t *lo, const uint16_t *hi) {
  return (uint32_t)*lo | (hi ? (uint32_t)*hi << 16 : 0u);
}

static inline __mmask32 mask32(int64_t n) { return n >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << n) - 1u); }

/* Interleave n <= 32 values of rows r0 and r1 (r1 NULL: zeros) into n
 * words at dst, zeros up to `width` (16 or 32) words. */
BF16_TARGET static inline void interleave_rows(const uint16_t *r0, const uint16_t *r1, int64_t n, int width,
                                              uint32_t *dst) {
  static const uint16_t idx_lo[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __mmask32 m = mask32(n);
  const __m512i x0 = _mm512_maskz_loadu_epi16(m, r0);
  const __m512i x1 = r1 ? _mm512_maskz_loadu_epi16(m, r1) : _mm512_setzero_si512();
  const __m512i lo = _mm512_loadu_si512(idx_lo);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  _mm512_storeu_si512(dst, _mm512_permutex2var_epi16(x0, lo, x1));
  if (width > 16) _mm512_storeu_si512(dst + 16, _mm512_permutex2var_epi16(x0, hi, x1));
}

/* 8x8 transpose of 32-bit words in AVX registers. */
BF16_TARGET static inline void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Rows [r0, r0+n) of a [R][K] bf16 matrix whose pairs are adjacent: group p
 * of dst (width words each) gets word p of every row. Words wholly inside K
 * are copied as 32-bit units (8x8 transposes); a last odd k gets a zero high
 * half. */
BF16_TARGET static void pack_adjacent(const uint16_t *X, int64_t ld, int64_t K, int64_t k0, int64_t kc, int64_t r0,
                                      int64_t n, int width, uint32_t *dst) {
  const int64_t kp = (kc + 1) / 2;
  const int64_t kfull = (k0 + kc <= K ? kc : K - k0) / 2; /* pairs with both halves inside K */
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    int64_t p = 0;
    for (; p + 8 <= kfull; p += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; i++)
        r[i] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(X + (r0 + c + i) * ld + k0 + 2 * p)));
      transpose8(r);
      for (int i = 0; i < 8; i++) _mm256_storeu_si256((__m256i *)(dst + (p + i) * width + c), _mm256_castps_si256(r[i]));
    }
    for (; p < kp; p++)
      for (int i = 0; i < 8; i++) {
        const uint16_t *s = X + (r0 + c + i) * ld + k0 + 2 * p;
        dst[p * width + c + i] = pair_of(s, k0 + 2 * p + 1 < K ? s + 1 : NULL);
      }
  }
  for (; c < n; c++) {
    const uint16_t *s = X + (r0 + c) * ld + k0;
    for (int64_t p = 0; p < kp; p++) dst[p * width + c] = pair_of(s + 2 * p, k0 + 2 * p + 1 < K ? s + 2 * p + 1 : NULL);
  }
  for (; c < width; c++)
    for (int64_t p = 0; p < kp; p++) dst[p * width + c] = 0;
}

/* Columns [c0, c0+n) of a [K][C] bf16 matrix: group p of dst gets rows
 * k0+2p and k0+2p+1 interleaved. */
BF16_TARGET static void pack_strided(const uint16_t *X, int64_t ld, int64_t K, int64_t k0, int64_t kc, int64_t c0,
                                     int64_t n, int width, uint32_t *dst) {
  const int64_t kp = (kc + 1) / 2;
  for (int64_t p = 0; p < kp; p++) {
    const int64_t k = k0 + 2 * p;
    const uint16_t *r0 = X + k * ld + c0;
    const uint16_t *r1 = k + 1 < K ? r0 + ld : NULL;
    if (width == NR) {
      interleave_rows(r0, r1, n, NR, dst + p * width);
    } else {
      uint32_t tmp[32] __attribute__((aligned(64)));
      interleave_rows(r0, r1, n, 16, tmp);
      memcpy(dst + p * width, tmp, (size_t)width * sizeof(uint32_t));
    }
  }
}

BF16_TARGET void loom_gemm_bf16_pack_b(bool bt, const uint16_t *B, int64_t ldb, int64_t K, int64_t k0, int64_t kc,
                                       int64_t j0, int64_t n, uint32_t *dst) {
  if (bt) pack_adjacent(B, ldb, K, k0, kc, j0, n, NR, dst);
  else pack_strided(B, ldb, K, k0, kc, j0, n, NR, dst);
}

BF16_TARGET void loom_gemm_bf16_pack_a(bool at, const uint16_t *A, int64_t lda, int64_t K, int64_t k0, int64_t kc,
                                       int64_t i0, int64_t m, uint32_t *dst) {
  if (at) pack_strided(A, lda, K, k0, kc, i0, m, MR, dst);
  else pack_adjacent(A, lda, K, k0, kc, i0, m, MR, dst);
}

/* ---- epilogue ----------------------------------------------------------------- */

BF16_TARGET void loom_gemm_bf16_epilogue(const float *t, int64_t ldt, int64_t rows, int64_t cols, int64_t i, int64_t j,
                                         const loom_gemm_bf16_out *out) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t h = 0; h < cols; h += 16) {
    const int64_t w = cols - h < 16 ? cols - h : 16;
    const __mmask16 m = (__mmask16)(w >= 16 ? 0xFFFFu : (1u << w) - 1u);
    const __m512 bias = out->bias ? _mm512_maskz_loadu_ps(m, out->bias + j + h) : zero;
    for (int64_t r = 0; r < rows; r++) {
      __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, t + r * ldt + h), bias);
      if (out->relu) v = _mm512_max_ps(v, zero); /* NaN -> 0, as v > 0 ? v : 0 */
      if (out->c) _mm512_mask_storeu_ps(out->c + (i + r) * out->ldc + j + h, m, v);
      if (out->y) _mm256_mask_storeu_epi16(out->y + (i + r) * out->ldy + j + h, m, loom_bf16x16_avx512(v));
    }
  }
}

#else
typedef int loom_gemm_bf16_x86_unused; /* ISO C forbids an empty translation unit. */
#endif
