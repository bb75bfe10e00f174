/* ew16_x86.h (internal) — contiguous f16/bf16 elementwise runs on AVX2, in
 * one pass: 8 values of each operand widened in registers, the f32
 * arithmetic, the result rounded in registers (ew16_x86.c). The same bits
 * as the buffered runs (widen a run into f32 buffers, compute, round:
 * cpu_util.h's conversions), in one pass instead of four, except for which
 * NaN an f16 NaN op NaN returns (IEEE 754 leaves it open; in the buffered
 * loop it is the compiler's operand order; bf16 rounds every NaN to one).
 * The buffered runs stay for strides, broadcasts and CPUs without AVX2.
 *
 * Call only when loom_ew16_avx2_ok(dt). Outputs may alias an input exactly
 * (in-place accumulation), not partially. */
#ifndef LOOM_OPS_CPU_EW16_X86_H
#define LOOM_OPS_CPU_EW16_X86_H

#include <stdbool.h>
#include <stdint.h>

#include "loom/dtype.h"

/* Whether the runs below apply to dt here: f16 or bf16, the CPU kernels'
 * instruction set avx2 or wider, F16C for f16. */
bool loom_ew16_avx2_ok(loom_dtype dt);

/* o = a op b for op LOOM_EW_ADD, _SUB, _MUL or _DIV (elementwise_math.h);
 * false (nothing written) for any other op. */
bool loom_ew16_binary_avx2(int op, const uint16_t *a, const uint16_t *b, uint16_t *o, int64_t n, loom_dtype dt);

/* o = relu(a + b) (a + b > 0 ? a + b : 0). */
void loom_ew16_add_relu_avx2(const uint16_t *a, const uint16_t *b, uint16_t *o, int64_t n, loom_dtype dt);

/* o = y > 0 ? g : 0, g and y widened, the result rounded (as the buffered
 * run: a NaN gradient comes out as the rounding makes it). o1 (NULL: none)
 * receives the same values. */
void loom_ew16_relu_mask_avx2(const uint16_t *g, const uint16_t *y, uint16_t *o, uint16_t *o1, int64_t n,
                              loom_dtype dt);

#endif
