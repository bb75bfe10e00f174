/* dtype.h — element types and exact fp16 / bf16 conversion.
 *
 * Conversions to fp16/bf16 round to nearest even, handle subnormals,
 * overflow to inf and keep NaN a NaN (quiet); they are bit-exact with the
 * hardware conversions (x86 F16C, CUDA __float2half_rn / __float2bfloat16_rn).
 * Pure functions: thread-safe. */
#ifndef LOOM_DTYPE_H
#define LOOM_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "export.h"

LOOM_EXTERN_C_BEGIN

/* Append-only. */
typedef enum loom_dtype {
  LOOM_F32 = 0,
  LOOM_F16 = 1,
  LOOM_BF16 = 2,
  LOOM_I32 = 3,
  LOOM_I64 = 4,
  LOOM_U8 = 5,
} loom_dtype;
#define LOOM_BOOL LOOM_U8
#define LOOM_DTYPE_COUNT 6

LOOM_API size_t loom_dtype_size(loom_dtype dt);     /* 0 for an invalid dtype */
LOOM_API const char *loom_dtype_name(loom_dtype dt); /* "f32", "?" if invalid */
LOOM_API bool loom_dtype_is_float(loom_dtype dt);    /* f32, f16, bf16 */
LOOM_API bool loom_dtype_valid(int dt);

LOOM_API uint16_t loom_f32_to_f16(float f);
LOOM_API float loom_f16_to_f32(uint16_t h);
LOOM_API uint16_t loom_f32_to_bf16(float f);
LOOM_API float loom_bf16_to_f32(uint16_t b);

LOOM_EXTERN_C_END
#endif
