/* cpu_util.c — dtype conversion runs and strided iteration for CPU kernels. */
#include <stdint.h>

#include "ops/cpu/cpu_util.h"
#include "ops/elementwise_math.h"
#include "core/half.h"

void loom_cpu_load_f32(const void *src, loom_dtype dt, int64_t stride, int64_t n, float *dst) {
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

