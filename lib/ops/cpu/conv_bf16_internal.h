/* conv_bf16_internal.h (internal) — the contract between the bf16
 * convolution driver (conv_bf16.c) and its AVX512_BF16 micro-kernels
 * (conv_bf16_x86.c).
 *
 * B: kp groups of LOOM_BF16_NR words as loom_gemm_bf16_pack_b makes them,
 * 64-byte aligned. c: the f32 tile, overwritten (no accumulation). */
#ifndef LOOM_OPS_CPU_CONV_BF16_INTERNAL_H
#define LOOM_OPS_CPU_CONV_BF16_INTERNAL_H

#include <stdint.h>

#include "ops/cpu/gemm_bf16_internal.h"

#if defined(__x86_64__)
/* 12 rows x 32 columns (both halves of a B group) and 24 rows x 16 columns
 * (the low half of each), without an im2col buffer: row i of the tile is the pixel
 * whose first tap starts at word off[i] of x (a zero-padded NHWC input with
 * an even channel count, 2*cp values per pixel); tap t adds tapoff[t]
 * words, and its cp pairs meet B groups t*cp .. t*cp+cp-1. */
void loom_conv_bf16_ukr_taps_12x32(const uint32_t *x, const int64_t *off, const int64_t *tapoff, int64_t ntaps,
                                   int64_t cp, const uint32_t *b, float *c, int64_t ldc);
void loom_conv_bf16_ukr_taps_24x16(const uint32_t *x, const int64_t *off, const int64_t *tapoff, int64_t ntaps,
                                   int64_t cp, const uint32_t *b, float *c, int64_t ldc);

/* Weight-gradient tiles, k over pixel pairs: c[i][j] (ld 32) = sum over
 * q < nq of dzp[q*ldo + i] (the dZ values of pixels 2q and 2q+1 for output
 * channel i, pair-interleaved) times x[off[2q] + j] and x[off[2q+1] + j]
 * (input channel j of those pixels under one tap; j < nc, the rest zero).
 * 12 x 32: 12 output channels x up to 32 input channels; 16 x 16. */
void loom_conv_bf16_ukr_dw_12x32(const uint32_t *dzp, int64_t ldo, const uint16_t *x, const int64_t *off, int64_t nq,
                                 int64_t nc, float *c);
void loom_conv_bf16_ukr_dw_16x16(const uint32_t *dzp, int64_t ldo, const uint16_t *x, const int64_t *off, int64_t nq,
                                 int64_t nc, float *c);
#endif

#endif
