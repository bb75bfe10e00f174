/* elementwise_math.h (internal) — the per-element math of every elementwise
 * op, written once and shared by the CPU kernels and the CUDA kernels (so CI
 * exercises the same expressions without a GPU). */
#ifndef LOOM_OPS_ELEMENTWISE_MATH_H
#define LOOM_OPS_ELEMENTWISE_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "core/half.h"   /* LOOM_HD */

/* Elementwise op codes (the table's LOOM_OP_* map onto these). */
enum {
  LOOM_EW_ADD, LOOM_EW_SUB, LOOM_EW_MUL, LOOM_EW_DIV, LOOM_EW_EQ, LOOM_EW_RELU_BW,
  LOOM_EW_ADD_S, LOOM_EW_MUL_S, LOOM_EW_RSUB_S, LOOM_EW_RDIV_S, LOOM_EW_POW_S,
  LOOM_EW_NEG, LOOM_EW_EXP, LOOM_EW_LOG, LOOM_EW_SQRT, LOOM_EW_RELU,
  LOOM_EW_GELU, LOOM_EW_GELU_BW,
};

/* exp(z) on the host written with arithmetic and bit moves only, so CPU
 * loops over it vectorize (libm's expf/tanhf are one call per element:
 * GELU ran at 0.4x PyTorch's vectorized one). Cephes' expf: round z/ln2 to
 * n, reduce with ln2 split in two, a degree-6 polynomial, scale by 2^n
 * through the exponent bits. Within 2 ulp of exp for z in [-87, 88]; 0
 * below -87 (where exp is under the smallest normal, and for -inf), exp(88)
 * above 88 (and +inf); NaN stays NaN. No float-to-int conversion: the
 * integer n is read from the bits of z/ln2 + 1.5 * 2^23. The GPU uses its
 * own expf. */
static inline float loom_exp_host_f(float z) {
  float zc = z < -87.0f ? -87.0f : z; /* NaN passes both */
  zc = zc > 88.0f ? 88.0f : zc;
  const float magic = 12582912.0f; /* 1.5 * 2^23, bits 0x4B400000 */
  float t = zc * 1.44269504088896341f + magic, n = t - magic;
  float r = zc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t tb, bits;
  memcpy(&tb, &t, sizeof tb);
  bits = (tb - 0x4B400000u + 127u) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  float e = p * scale;
  return z < -87.0f ? 0.0f : e;
}
#ifdef __CUDA_ARCH__
#define LOOM_GELU_EXP(z) expf(z)
#else
#define LOOM_GELU_EXP(z) loom_exp_host_f(z)
#endif

/* GELU, tanh approximation (GPT-2; PyTorch's approximate="tanh"):
 * 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as
 * x * sigmoid(2u) = x / (1 + exp(-2u)) — the same function without the
 * cancellation of 1 + tanh(u) in the negative tail (where tanhf's 1 ulp
 * near -1 was a relative error of 1e-3 in the result). */
#define LOOM_GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define LOOM_GELU_K1 0.044715f
static inline LOOM_HD float loom_gelu_f(float x) {
  float u = LOOM_GELU_K0 * (x + LOOM_GELU_K1 * x * x * x);
  return x / (1.0f + LOOM_GELU_EXP(-2.0f * u));
}
/* d/dx with s = sigmoid(2u): s + 2 x s (1 - s) du/dx (= 0.5 (1 + t) +
 * 0.5 x (1 - t^2) du/dx, t = tanh(u) = 2s - 1). */
static inline LOOM_HD float loom_gelu_grad_f(float x) {
  float u = LOOM_GELU_K0 * (x + LOOM_GELU_K1 * x * x * x);
  float s = 1.0f / (1.0f + LOOM_GELU_EXP(-2.0f * u));
  return s + 2.0f * x * s * (1.0f - s) * LOOM_GELU_K0 * (1.0f + 3.0f * LOOM_GELU_K1 * x * x);
}

static inline LOOM_HD float loom_ew_binary(int op, float a, float b) {
  switch (op) {
    case LOOM_EW_ADD: return a + b;
    case LOOM_EW_SUB: return a - b;
    case LOOM_EW_MUL: return a * b;
    case LOOM_EW_DIV: return a / b;
    case LOOM_EW_EQ: return a == b ? 1.0f : 0.0f;
    case LOOM_EW_RELU_BW: return b > 0.0f ? a : 0.0f;  /* a = dy, b = y */
    case LOOM_EW_GELU_BW: return a * loom_gelu_grad_f(b);  /* a = dy, b = x */
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
    case LOOM_EW_GELU: return loom_gelu_f(a);
    default: return 0.0f;
  }
}

/* Float to integer like the GPU's cvt.rzi.sat: truncate toward zero,
 * saturate at the type's bounds, NaN -> 0 (a plain C cast is undefined
 * there). Used by the CPU and the CUDA copy/cast kernels alike. */
static inline LOOM_HD int64_t loom_sat_i64(double v, double lo, double hi) {
  if (v != v) return 0;
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return (int64_t)hi;
  return (int64_t)v;
}
static inline LOOM_HD int32_t loom_to_i32(double v) { return (int32_t)loom_sat_i64(v, -2147483648.0, 2147483647.0); }
static inline LOOM_HD uint8_t loom_to_u8(double v) { return (uint8_t)loom_sat_i64(v, 0.0, 255.0); }
static inline LOOM_HD int64_t loom_to_i64(double v) {
  if (v != v) return 0;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  if (v >= 9223372036854775808.0) return INT64_MAX;
  return (int64_t)v;
}

#endif
