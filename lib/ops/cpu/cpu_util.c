/* cpu_util.c — dtype conversion runs and strided iteration for CPU kernels. */
#include <stdint.h>

#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_util.h"
#include "ops/elementwise_math.h"
#include "core/half.h"

/* Contiguous f16 runs go through the CPU's F16C instructions when it has
 * them: they round to nearest even exactly like half.h (tests/test_dtype.c
 * checks half.h against F16C bit for bit), several times faster than the
 * portable bit manipulation. Contiguous bf16 runs use AVX2 integer code that
 * does half.h's arithmetic 8 lanes at a time (checked the same way). */
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#include "ops/cpu/bf16_simd.h"

/* F16C where the CPU has it and the kernels' instruction set is AVX2 or
 * wider (LOOM_CPU_ISA=scalar: the portable conversion). */
static int has_f16c(void) {
  static int cached = -1; /* (racy first write: every thread writes the same value) */
  if (cached < 0) {
    /* CPUID leaf 1 rather than __builtin_cpu_supports("f16c"), which clang
     * before 15 does not know (the clang build in CI). */
    unsigned a = 0, b = 0, c = 0, d = 0;
    cached = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && (c & bit_AVX);
  }
  return cached && loom_cpu_isa_level_now() >= LOOM_CPU_ISA_AVX2;
}

__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(const uint16_t *s, float *d, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(d + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + j))));
  for (; j < n; j++) d[j] = loom_half_to_f32(s[j]);
}

__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(const float *s, uint16_t *d, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    _mm_storeu_si128((__m128i *)(d + j), _mm256_cvtps_ph(_mm256_loadu_ps(s + j), _MM_FROUND_TO_NEAREST_INT));
  for (; j < n; j++) d[j] = loom_half_from_f32(s[j]);
}
/* bf16 runs, AVX2 (the same integer rounding as half.h, 8 at a time):
 * widening is a shift; narrowing adds 0x7fff plus the kept lsb (round to
 * nearest even) and maps every NaN to 0x7fff. Bit-identical to half.h. */
__attribute__((target("avx2"))) static void bf16_to_f32_avx2(const uint16_t *s, float *d, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + j)));
    _mm256_storeu_si256((__m256i *)(d + j), _mm256_slli_epi32(w, 16));
  }
  for (; j < n; j++) d[j] = loom_bfloat_to_f32(s[j]);
}

__attribute__((target("avx2"))) static void f32_to_bf16_avx2(const float *s, uint16_t *d, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm_storeu_si128((__m128i *)(d + j), loom_bf16x8_avx2(_mm256_loadu_ps(s + j)));
  for (; j < n; j++) d[j] = loom_bfloat_from_f32(s[j]);
}
static int has_avx2(void) { return loom_cpu_isa_level_now() >= LOOM_CPU_ISA_AVX2; }
#else
static int has_f16c(void) { return 0; }
static int has_avx2(void) { return 0; }
static void bf16_to_f32_avx2(const uint16_t *s, float *d, int64_t n) { (void)s, (void)d, (void)n; }
static void f32_to_bf16_avx2(const float *s, uint16_t *d, int64_t n) { (void)s, (void)d, (void)n; }
static void f16_to_f32_f16c(const uint16_t *s, float *d, int64_t n) { (void)s, (void)d, (void)n; }
static void f32_to_f16_f16c(const float *s, uint16_t *d, int64_t n) { (void)s, (void)d, (void)n; }
#endif

bool loom_cpu_f16c(void) { return has_f16c() != 0; }

void loom_cpu_load_f32(const void *src, loom_dtype dt, int64_t stride, int64_t n, float *dst) {
  if (stride == 1 && (dt == LOOM_F16 || dt == LOOM_BF16)) {
    loom_cpu_widen_fn_for(dt)(src, dst, n);
    return;
  }
  switch (dt) {
    case LOOM_F32: {
      const float *s = src;
      if (stride == 1) memcpy(dst, s, (size_t)n * sizeof(float));
      else for (int64_t j = 0; j < n; j++) dst[j] = s[j * stride];
      break;
    }
    case LOOM_F16: { const uint16_t *s = src; for (int64_t j = 0; j < n; j++) dst[j] = loom_half_to_f32(s[j * stride]); break; }
    case LOOM_BF16: { const uint16_t *s = src; for (int64_t j = 0; j < n; j++) dst[j] = loom_bfloat_to_f32(s[j * stride]); break; }
    case LOOM_I32: { const int32_t *s = src; for (int64_t j = 0; j < n; j++) dst[j] = (float)s[j * stride]; break; }
    case LOOM_I64: { const int64_t *s = src; for (int64_t j = 0; j < n; j++) dst[j] = (float)s[j * stride]; break; }
    case LOOM_U8: { const uint8_t *s = src; for (int64_t j = 0; j < n; j++) dst[j] = (float)s[j * stride]; break; }
  }
}

void loom_cpu_store_f32(void *dst, loom_dtype dt, int64_t stride, int64_t n, const float *src) {
  if (stride == 1 && (dt == LOOM_F16 || dt == LOOM_BF16)) {
    loom_cpu_round_fn_for(dt)(src, dst, n);
    return;
  }
  switch (dt) {
    case LOOM_F32: {
      float *d = dst;
      if (stride == 1) memcpy(d, src, (size_t)n * sizeof(float));
      else for (int64_t j = 0; j < n; j++) d[j * stride] = src[j];
      break;
    }
    case LOOM_F16: { uint16_t *d = dst; for (int64_t j = 0; j < n; j++) d[j * stride] = loom_half_from_f32(src[j]); break; }
    case LOOM_BF16: { uint16_t *d = dst; for (int64_t j = 0; j < n; j++) d[j * stride] = loom_bfloat_from_f32(src[j]); break; }
    case LOOM_I32: { int32_t *d = dst; for (int64_t j = 0; j < n; j++) d[j * stride] = loom_to_i32(src[j]); break; }
    case LOOM_I64: { int64_t *d = dst; for (int64_t j = 0; j < n; j++) d[j * stride] = loom_to_i64(src[j]); break; }
    case LOOM_U8: { uint8_t *d = dst; for (int64_t j = 0; j < n; j++) d[j * stride] = loom_to_u8(src[j]); break; }
  }
}

/* Run converters for loom_cpu_widen_fn_for / loom_cpu_round_fn_for (and
 * so for loom_cpu_load_f32 / loom_cpu_store_f32's contiguous 16-bit runs). */
static void widen_f32(const void *s, float *d, int64_t n) { memcpy(d, s, (size_t)n * sizeof(float)); }
static void widen_f16(const void *s, float *d, int64_t n) {
  const uint16_t *h = s;
  for (int64_t j = 0; j < n; j++) d[j] = loom_half_to_f32(h[j]);
}
static void widen_bf16(const void *s, float *d, int64_t n) {
  const uint16_t *h = s;
  for (int64_t j = 0; j < n; j++) d[j] = loom_bfloat_to_f32(h[j]);
}
static void widen_f16c(const void *s, float *d, int64_t n) { f16_to_f32_f16c(s, d, n); }
static void widen_bf16_avx2(const void *s, float *d, int64_t n) { bf16_to_f32_avx2(s, d, n); }
static void round_f32(const float *s, void *d, int64_t n) { memcpy(d, s, (size_t)n * sizeof(float)); }
static void round_f16(const float *s, void *d, int64_t n) {
  uint16_t *h = d;
  for (int64_t j = 0; j < n; j++) h[j] = loom_half_from_f32(s[j]);
}
static void round_bf16(const float *s, void *d, int64_t n) {
  uint16_t *h = d;
  for (int64_t j = 0; j < n; j++) h[j] = loom_bfloat_from_f32(s[j]);
}
static void round_f16c(const float *s, void *d, int64_t n) { f32_to_f16_f16c(s, d, n); }
static void round_bf16_avx2(const float *s, void *d, int64_t n) { f32_to_bf16_avx2(s, d, n); }

loom_cpu_widen_fn loom_cpu_widen_fn_for(loom_dtype dt) {
  switch (dt) {
    case LOOM_F16: return has_f16c() ? widen_f16c : widen_f16;
    case LOOM_BF16: return has_avx2() ? widen_bf16_avx2 : widen_bf16;
    case LOOM_F32: return widen_f32;
    default: return NULL;
  }
}

loom_cpu_round_fn loom_cpu_round_fn_for(loom_dtype dt) {
  switch (dt) {
    case LOOM_F16: return has_f16c() ? round_f16c : round_f16;
    case LOOM_BF16: return has_avx2() ? round_bf16_avx2 : round_bf16;
    case LOOM_F32: return round_f32;
    default: return NULL;
  }
}

double loom_cpu_load_f64(const void *base, loom_dtype dt, int64_t i) {
  switch (dt) {
    case LOOM_F32: return ((const float *)base)[i];
    case LOOM_F16: return loom_half_to_f32(((const uint16_t *)base)[i]);
    case LOOM_BF16: return loom_bfloat_to_f32(((const uint16_t *)base)[i]);
    case LOOM_I32: return ((const int32_t *)base)[i];
    case LOOM_I64: return (double)((const int64_t *)base)[i];
    case LOOM_U8: return ((const uint8_t *)base)[i];
  }
  return 0;
}

void loom_cpu_store_f64(void *base, loom_dtype dt, int64_t i, double v) {
  switch (dt) {
    case LOOM_F32: ((float *)base)[i] = (float)v; break;
    case LOOM_F16: ((uint16_t *)base)[i] = loom_half_from_f32((float)v); break;
    case LOOM_BF16: ((uint16_t *)base)[i] = loom_bfloat_from_f32((float)v); break;
    case LOOM_I32: ((int32_t *)base)[i] = loom_to_i32(v); break;
    case LOOM_I64: ((int64_t *)base)[i] = loom_to_i64(v); break;
    case LOOM_U8: ((uint8_t *)base)[i] = loom_to_u8(v); break;
  }
}

