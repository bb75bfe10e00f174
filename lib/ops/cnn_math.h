/* cnn_math.h (internal) — the arithmetic the CNN ops (batch norm, pooling,
 * dropout) share between their CPU kernels and their CUDA kernels: pooling
 * windows and output sizes, batch norm's per-channel coefficients and
 * dropout's keep bits. Header-only and LOOM_HD, like elementwise_math.h, so
 * both backends run the very same expressions and CI tests them without a GPU. */
#ifndef LOOM_OPS_CNN_MATH_H
#define LOOM_OPS_CNN_MATH_H

#include <stdint.h>
#include "core/half.h"   /* LOOM_HD */
#include "core/philox.h"

/* Explicitly rounded f32 multiply / add: nvcc would otherwise contract
 * a * b + c into an FMA and the two backends would round differently. */
#if defined(__CUDA_ARCH__)
#define LOOM_FMUL(a, b) __fmul_rn((a), (b))
#define LOOM_FADD(a, b) __fadd_rn((a), (b))
#else
#define LOOM_FMUL(a, b) ((a) * (b))
#define LOOM_FADD(a, b) ((a) + (b))
#endif

/* ---- pooling ---------------------------------------------------------------- */

/* Output length of a pooling window sweep, PyTorch's rule: floor (or ceil)
 * of (in + 2p - k) / s, plus one; in ceil mode the last window must start
 * inside the input or its left padding. Can be < 1 (the shape rule's error). */
static inline LOOM_HD int64_t loom_pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int ceil_mode) {
  int64_t num = in + 2 * p - k + (ceil_mode ? s - 1 : 0);
  int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil_mode && o > 0 && (o - 1) * s >= in + p) o--;
  return o;
}

/* Window of output o along one dim, clipped to the input: [*start, *end).
 * *span counts the window as avg_pool2d with count_include_pad divides by it
 * (padding included, clipped at in + p). Adaptive windows (adaptive != 0;
 * k, s, p unused) are PyTorch's: [floor(o*in/out), ceil((o+1)*in/out)). */
static inline LOOM_HD void loom_pool_window(int64_t o, int64_t in, int64_t out, int64_t k, int64_t s, int64_t p,
                                            int adaptive, int64_t *start, int64_t *end, int64_t *span) {
  if (adaptive) {
    *start = o * in / out;
    *end = ((o + 1) * in + out - 1) / out;
    *span = *end - *start;
    return;
  }
  int64_t st = o * s - p;
  int64_t en = st + k < in + p ? st + k : in + p;
  *span = en - st;
  *start = st > 0 ? st : 0;
  *end = en < in ? en : in;
}

/* Outputs whose windows may contain input index i: [*lo, *hi] (callers
 * still test membership with loom_pool_window; the range may be empty). */
static inline LOOM_HD void loom_pool_outputs_of(int64_t i, int64_t in, int64_t out, int64_t k, int64_t s, int64_t p,
                                                int adaptive, int64_t *lo, int64_t *hi) {
  if (adaptive) {
    *lo = i * out / in;
    *hi = ((i + 1) * out + in - 1) / in - 1;
  } else {
    *lo = i + p < k ? 0 : (i + p - k) / s + 1;
    *hi = (i + p) / s;
  }
  if (*lo < 0) *lo = 0;
  if (*hi > out - 1) *hi = out - 1;
}

/* ---- batch norm ---------------------------------------------------------------- */

/* y = x * scale + shift, the apply pass of batch norm for one channel:
 * scale = w * invstd, shift = b - mean * scale. The fused ReLU's backward
 * recomputes the same f32 pre-activation from x instead of saving y. */
static inline LOOM_HD void loom_bn_coef(float w, float b, float mean, float invstd, float *scale, float *shift) {
  float sc = LOOM_FMUL(w, invstd);
  *scale = sc;
  *shift = LOOM_FADD(b, -LOOM_FMUL(mean, sc));
}

static inline LOOM_HD float loom_bn_pre(float x, float scale, float shift) {
  return LOOM_FADD(LOOM_FMUL(x, scale), shift);
}

/* The channel of a grid-stride loop over a channels-last [rows, C] buffer
 * taken V elements at a time (C a multiple of V): vector i starts at
 * channel (i·V) mod C, and each step of S vectors moves it by (S·V) mod C,
 * wrapping at most once. So the CUDA apply and dx passes divide once per
 * thread instead of once per element (a 64-bit modulo is tens of
 * instructions on a GPU). */
typedef struct loom_bn_walk {
  int64_t c, step, C;
} loom_bn_walk;

static inline LOOM_HD loom_bn_walk loom_bn_walk_start(int64_t i, int64_t S, int64_t V, int64_t C) {
  loom_bn_walk w;
  w.c = (i * V) % C;
  w.step = (S * V) % C;
  w.C = C;
  return w;
}

static inline LOOM_HD void loom_bn_walk_next(loom_bn_walk *w) {
  w->c += w->step;
  if (w->c >= w->C) w->c -= w->C;
}

/* ---- dropout ------------------------------------------------------------------------ */

/* Dropout keeps element i when u_i >= p, u_i being element i of
 * loom_rng_fill_uniform at (seed, offset) — the number loom_rand draws.
 * With u = (k + 0.5) 2^-23, k = x >> 9 for the 32 random bits x, that is
 * k >= ceil(p 2^23 - 0.5) (exact in double): an integer test on the raw
 * Philox output. */
static inline LOOM_HD uint32_t loom_dropout_threshold(double p) {
  double t = ceil(p * 8388608.0 - 0.5);
  return t <= 0.0 ? 0u : t >= 8388608.0 ? 8388608u : (uint32_t)t;
}

/* Keep bits of elements 32*word .. 32*word+31 (bit j: element 32*word + j),
 * for threshold thr = loom_dropout_threshold(p). */
static inline LOOM_HD uint32_t loom_dropout_word(uint64_t seed, uint64_t offset, int64_t word, uint32_t thr) {
  uint32_t bits = 0;
  for (int b = 0; b < 8; b++) {
    const loom_philox_u4 r = loom_philox_at(seed, offset + (uint64_t)word * 8u + (uint64_t)b);
    for (int l = 0; l < 4; l++) bits |= (uint32_t)((r.v[l] >> 9) >= thr) << (b * 4 + l);
  }
  return bits;
}

#endif
