/* bf16_simd.h (internal) — core/half.h's f32 -> bf16 rounding on SIMD lanes
 * for the x86 kernels that store bf16 (conversion runs, GEMM epilogues, the
 * Winograd transforms, the optimizers' low-precision copies): one copy of
 * the integer sequence instead of one per kernel file. Round to nearest
 * even by adding 0x7fff plus the kept lsb and keeping the high half; every
 * NaN becomes 0x7fff. Not vcvtneps2bf16 (AVX512_BF16), which flushes
 * subnormal inputs to zero. x86-64 only. */
#ifndef LOOM_OPS_CPU_BF16_SIMD_H
#define LOOM_OPS_CPU_BF16_SIMD_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

/* 8 lanes; the 8 bf16 results are the low 128 bits. */
__attribute__((target("avx2"))) static inline __m128i loom_bf16x8_avx2(__m256 v) {
  const __m256i x = _mm256_castps_si256(v), bias = _mm256_set1_epi32(0x7fff);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
  /* |x| > inf as a signed compare: |x| < 2^31, so it is exact. */
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  r = _mm256_blendv_epi8(r, bias, nan);
  /* r < 2^16: the saturating pack is exact; it interleaves 128-bit lanes. */
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
}

/* 8 consecutive 16-bit values (f16 when is_f16, else bf16) as f32, exact:
 * F16C for f16, a shift for bf16. */
__attribute__((target("avx2,f16c"))) static inline __m256 loom_widen8_16_avx2(const uint16_t *p, bool is_f16) {
  const __m128i h = _mm_loadu_si128((const __m128i *)p);
  if (is_f16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 8 f32 lanes rounded to f16 (is_f16: F16C, round to nearest even) or bf16
 * (loom_bf16x8_avx2) and stored at p: loom_widen8_16_avx2's inverse. */
__attribute__((target("avx2,f16c"))) static inline void loom_narrow8_16_avx2(uint16_t *p, __m256 x, bool is_f16) {
  _mm_storeu_si128((__m128i *)p, is_f16 ? _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT) : loom_bf16x8_avx2(x));
}

/* 16 lanes. */
__attribute__((target("avx512f"))) static inline __m256i loom_bf16x16_avx512(__m512 v) {
  const __m512i x = _mm512_castps_si512(v), bias = _mm512_set1_epi32(0x7fff);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(bias, lsb)), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_mov_epi32(r, nan, bias);
  return _mm512_cvtepi32_epi16(r);
}

#endif
