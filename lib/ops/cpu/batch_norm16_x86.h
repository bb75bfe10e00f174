/* batch_norm16_x86.h (internal) — batch norm's row loops for interleaved
 * (NHWC) f16/bf16 data on AVX2 (batch_norm16_x86.c): 8 channels of a row
 * widened in registers, the f32 arithmetic of batch_norm_cpu.c's loops in
 * the same order (no FMA contraction), the outputs rounded in registers.
 * The same bits as converting each block into f32 buffers first, without
 * the buffers' passes. rows x C values from p (row stride C); the
 * per-channel vectors have C entries.
 *
 * Call only when loom_bn16_avx2_ok(dt, C): loom_ew16_avx2_ok(dt) and C a
 * multiple of 8. */
#ifndef LOOM_OPS_CPU_BATCH_NORM16_X86_H
#define LOOM_OPS_CPU_BATCH_NORM16_X86_H

#include <stdbool.h>
#include <stdint.h>

#include "loom/dtype.h"

bool loom_bn16_avx2_ok(loom_dtype dt, int64_t C);

/* a1[c] += x - K[c], a2[c] += (x - K[c])^2 over the rows. */
void loom_bn16_acc_rows_shifted(const uint16_t *p, int64_t rows, int64_t C, const float *K, float *a1, float *a2,
                                loom_dtype dt);
/* q = x * sc[c] + sh[c] (then ReLU when relu). */
void loom_bn16_apply_rows(const uint16_t *p, uint16_t *q, int64_t rows, int64_t C, const float *sc, const float *sh,
                          bool relu, loom_dtype dt);
/* g' = g masked by x * sc + sh > 0 when relu; a1[c] += g', a2[c] += g' (x - mean[c]). */
void loom_bn16_acc_grad_rows(const uint16_t *g, const uint16_t *x, int64_t rows, int64_t C, const float *mean,
                             const float *sc, const float *sh, bool relu, float *a1, float *a2, loom_dtype dt);
/* dx = k g' - q (x - mean) - r, per channel. */
void loom_bn16_dx_rows(const uint16_t *g, const uint16_t *x, uint16_t *dx, int64_t rows, int64_t C, const float *mean,
                       const float *sc, const float *sh, bool relu, const float *k, const float *q, const float *r,
                       loom_dtype dt);

#endif
