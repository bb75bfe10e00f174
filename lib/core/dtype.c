/* dtype.c — element type properties and the public fp16/bf16 conversions
 * (thin wrappers over the shared header-only code in half.h). */
#include "core/half.h"
#include "loom/dtype.h"

size_t loom_dtype_size(loom_dtype dt) {
  switch (dt) {
    case LOOM_F32: return 4;
    case LOOM_F16: return 2;
    case LOOM_BF16: return 2;
    case LOOM_I32: return 4;
    case LOOM_I64: return 8;
    case LOOM_U8: return 1;
  }
  return 0;
}

const char *loom_dtype_name(loom_dtype dt) {
  switch (dt) {
    case LOOM_F32: return "f32";
    case LOOM_F16: return "f16";
    case LOOM_BF16: return "bf16";
    case LOOM_I32: return "i32";
    case LOOM_I64: return "i64";
    case LOOM_U8: return "u8";
  }
  return "?";
}

bool loom_dtype_is_float(loom_dtype dt) { return dt == LOOM_F32 || dt == LOOM_F16 || dt == LOOM_BF16; }

bool loom_dtype_valid(int dt) { return dt >= 0 && dt < LOOM_DTYPE_COUNT; }

uint16_t loom_f32_to_f16(float f) { return loom_half_from_f32(f); }
float loom_f16_to_f32(uint16_t h) { return loom_half_to_f32(h); }
uint16_t loom_f32_to_bf16(float f) { return loom_bfloat_from_f32(f); }
float loom_bf16_to_f32(uint16_t b) { return loom_bfloat_to_f32(b); }
