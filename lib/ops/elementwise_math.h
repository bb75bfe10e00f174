/* elementwise_math.h (internal) — the per-element math of every elementwise
 * op, written once and shared by the CPU kernels and the CUDA kernels (so CI
 * exercises the same expressions without a GPU). */
#ifndef LOOM_OPS_ELEMENTWISE_MATH_H
#define LOOM_OPS_ELEMENTWISE_MATH_H

#include <math.h>
#include "core/half.h"   /* LOOM_HD */

/* Elementwise op codes (the table's LOOM_OP_* map onto these). */
enum {
  LOOM_EW_ADD, LOOM_EW_SUB, LOOM_EW_MUL, LOOM_EW_DIV, LOOM_EW_EQ, LOOM_EW_RELU_BW,
  LOOM_EW_ADD_S, LOOM_EW_MUL_S, LOOM_EW_RSUB_S, LOOM_EW_RDIV_S, LOOM_EW_POW_S,
  LOOM_EW_NEG, LOOM_EW_EXP, LOOM_EW_LOG, LOOM_EW_SQRT, LOOM_EW_RELU,
};

static inline LOOM_HD float loom_ew_binary(int op, float a, float b) {
  switch (op) {
    case LOOM_EW_ADD: return a + b;
    case LOOM_EW_SUB: return a - b;
    case LOOM_EW_MUL: return a * b;
    case LOOM_EW_DIV: return a / b;
    case LOOM_EW_EQ: return a == b ? 1.0f : 0.0f;
    case LOOM_EW_RELU_BW: return b > 0.0f ? a : 0.0f;  /* a = dy, b = y */
    default: return 0.0f;
  }
}

static inline LOOM_HD float loom_ew_unary(int op, float a, float s) {
  switch (op) {
    case LOOM_EW_ADD_S: return a + s;
    case LOOM_EW_MUL_S: return a * s;
    case LOOM_EW_RSUB_S: return s - a;
    case LOOM_EW_RDIV_S: return s / a;
    case LOOM_EW_POW_S: return powf(a, s);
    case LOOM_EW_NEG: return -a;
    case LOOM_EW_EXP: return expf(a);
    case LOOM_EW_LOG: return logf(a);
    case LOOM_EW_SQRT: return sqrtf(a);
    case LOOM_EW_RELU: return a > 0.0f ? a : 0.0f;  /* NaN -> 0, like a max(0, x) mask */
    default: return 0.0f;
  }
}

#endif
