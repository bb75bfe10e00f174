/* batch_norm_x86.h (internal) — batch norm's row loops for interleaved
 * (NHWC) f32, f16 and bf16 data on AVX2 (batch_norm_x86.c): 8 channels of a
 * row at a time, 16-bit values widened and rounded in registers, the f32
 * arithmetic of batch_norm_cpu.c's portable loops in the same order per
 * channel (no FMA contraction), so the same bits as those loops (on 16-bit
 * data, as converting each block through f32 buffers first), without the
 * buffers' passes and with the per-channel sums kept in registers across
 * rows. rows x C values from p (row stride C); the per-channel vectors
 * have C entries.
 *
 * Call only when loom_bn_avx2_ok(dt, C): the CPU kernels' instruction set
 * avx2 or wider, F16C for f16, and C a multiple of 8. */
#ifndef LOOM_OPS_CPU_BATCH_NORM_X86_H
#define LOOM_OPS_CPU_BATCH_NORM_X86_H

#include <stdbool.h>
#include <stdint.h>

#include "loom/dtype.h"

bool loom_bn_avx2_ok(loom_dtype dt, int64_t C);

/* a1[c] += x - K[c], a2[c] += (x - K[c])^2 over the rows. */
void loom_bn_acc_rows_shifted_avx2(const void *p, int64_t rows, int64_t C, const float *K, float *a1, float *a2,
                                   loom_dtype dt);
/* q = x * sc[c] + sh[c] (then ReLU when relu). */
void loom_bn_apply_rows_avx2(const void *p, void *q, int64_t rows, int64_t C, const float *sc, const float *sh,
                             bool relu, loom_dtype dt);
/* g' = g masked by x * sc + sh > 0 when relu; a1[c] += g', a2[c] += g' (x - mean[c]). */
void loom_bn_acc_grad_rows_avx2(const void *g, const void *x, int64_t rows, int64_t C, const float *mean,
                                const float *sc, const float *sh, bool relu, float *a1, float *a2, loom_dtype dt);
/* dx = k g' - q (x - mean) - r, per channel. */
void loom_bn_dx_rows_avx2(const void *g, const void *x, void *dx, int64_t rows, int64_t C, const float *mean,
                          const float *sc, const float *sh, bool relu, const float *k, const float *q, const float *r,
                          loom_dtype dt);

#endif
