/* linear_bf16.h (internal) — the fused linear layer on bf16 operands with
 * the AVX512_BF16 GEMM (linear_bf16.c); linear_cpu.c hands a call over when
 * loom_cpu_linear_bf16_applies. Same op arguments as loom_cpu_linear and
 * loom_cpu_linear_backward. */
#ifndef LOOM_OPS_CPU_LINEAR_BF16_H
#define LOOM_OPS_CPU_LINEAR_BF16_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/op.h"

/* The instruction set in force is avx512bf16, the GEMM operands (x, w, and
 * for backward dy and the ReLU's y) are dense bf16, the outputs dense bf16
 * or f32, and no dimension is empty. */
bool loom_cpu_linear_bf16_applies(const loom_op_args *a, bool backward);
loom_status loom_cpu_linear_bf16(loom_op_args *a);
loom_status loom_cpu_linear_bf16_backward(loom_op_args *a);

/* dz [M][N] (bf16) = dz where y > 0 (bits of a positive, non-NaN bf16:
 * 0x0001..0x7f80), else 0, in place (y NULL: no mask); db[j] (when db) =
 * column sums of dz in double, as the f32 paths. Shared with conv_bf16.c. */
void loom_cpu_bf16_mask_bias_grad(uint16_t *dz, const uint16_t *y, int64_t M, int64_t N, float *db);

#endif
