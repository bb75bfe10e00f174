/* precision.c — the names of loom's precisions (fp32, mixed-fp16,
 * mixed-bf16) and the dtype each computes in. */
#include <string.h>

#include "loom/amp.h"
#include "core/error.h"

loom_status loom_precision_parse(const char *text, loom_precision *out) {
  if (!text || !out) return loom_set_error(LOOM_ERR_INVALID_ARG, "precision_parse: text and out must not be NULL");
  static const struct { const char *name; loom_precision p; } names[] = {
    {"fp32", LOOM_PRECISION_FP32}, {"f32", LOOM_PRECISION_FP32}, {"float32", LOOM_PRECISION_FP32},
    {"fp16", LOOM_PRECISION_MIXED_FP16}, {"f16", LOOM_PRECISION_MIXED_FP16}, {"mixed-fp16", LOOM_PRECISION_MIXED_FP16},
    {"float16", LOOM_PRECISION_MIXED_FP16},
    {"bf16", LOOM_PRECISION_MIXED_BF16}, {"mixed-bf16", LOOM_PRECISION_MIXED_BF16}, {"bfloat16", LOOM_PRECISION_MIXED_BF16},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!strcmp(text, names[i].name)) {
      *out = names[i].p;
      return LOOM_OK;
    }
  }
  return loom_set_error(LOOM_ERR_INVALID_ARG, "precision: unknown precision '%s'; use fp32, fp16 (mixed-fp16) or bf16 (mixed-bf16)",
                        text);
}

const char *loom_precision_name(loom_precision p) {
  switch (p) {
    case LOOM_PRECISION_FP32: return "fp32";
    case LOOM_PRECISION_MIXED_FP16: return "mixed-fp16";
    case LOOM_PRECISION_MIXED_BF16: return "mixed-bf16";
    default: return "?";
  }
}

loom_dtype loom_precision_compute_dtype(loom_precision p) {
  return p == LOOM_PRECISION_MIXED_FP16 ? LOOM_F16 : p == LOOM_PRECISION_MIXED_BF16 ? LOOM_BF16 : LOOM_F32;
}
