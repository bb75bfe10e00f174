/* gemm_bf16.h (internal) — bf16 x bf16 -> f32 CPU matrix multiply on
 * AVX512_BF16 (vdpbf16ps: two bf16 products per f32 lane, f32
 * accumulation) or, under the instruction set amxbf16, on AMX-BF16 tiles
 * (TDPBF16PS: a 16 x 16 x 32 block per instruction), for the ops whose
 * operands are already bf16 (linear and matmul under a mixed-bf16 policy).
 * It replaces widening both operands to f32 and running the f32 GEMM: half
 * the bytes packed and moved, twice the multiply-adds per instruction
 * (AMX: sixteen times a 512-bit FMA's).
 *
 * Numerics: every bf16 x bf16 product is exact in f32, so the result is the
 * f32 sum of the exact products in the kernel's order (pairs (k+1, k), then
 * k ascending; AMX: pairs in k order, its own grouping) — not bit-identical
 * to the widening path (k ascending, one FMA each) nor to a GPU, but within
 * the error of f32 accumulation:
 *   |C - sum_k a_k b_k| <= K * 2^-24 * sum_k |a_k b_k|   (+ output rounding).
 * vdpbf16ps and TDPBF16PS treat bf16 subnormal inputs and f32 subnormal partial sums as
 * zero (magnitudes below 2^-126). tests/test_gemm_bf16.c checks this bound
 * against a float64 reference. The widening path stays selectable with
 * LOOM_CPU_ISA=avx512 (or any narrower set), the AVX512_BF16 kernel with
 * LOOM_CPU_ISA=avx512bf16 on an AMX CPU.
 *
 * Threads: loom_cpu_gemm_bf16 may be called from several threads at once. */
#ifndef LOOM_OPS_CPU_GEMM_BF16_H
#define LOOM_OPS_CPU_GEMM_BF16_H

#include <stdbool.h>
#include <stdint.h>

#include "loom/status.h"

/* What happens to each result element v = op(A)·op(B) [i][j] once all of K
 * is summed: v += bias[j] (when bias), v = max(v, 0) (when relu); then
 * c[i*ldc + j] = v (f32, when c) and y[i*ldy + j] = bf16(v) rounded to
 * nearest even like loom_f32_to_bf16 (when y). At least one of c, y. */
typedef struct loom_gemm_bf16_out {
  float *c;
  int64_t ldc;
  uint16_t *y;
  int64_t ldy;
  const float *bias;
  bool relu;
} loom_gemm_bf16_out;

/* Whether the bf16 kernel runs under the current instruction set
 * (cpu_isa.h: avx512bf16). When false, callers widen to f32. */
bool loom_cpu_gemm_bf16_runs(void);

/* out = epilogue(op(A) · op(B)) with A [M,K] (or [K,M] if ta, leading dim
 * lda) and B [K,N] (or [N,K] if tb, ldb) as bf16 bit patterns. M, N, K > 0.
 * Call only when loom_cpu_gemm_bf16_runs(). LOOM_ERR_OOM (message set) when
 * the packing buffers cannot be allocated; the outputs are then untouched. */
loom_status loom_cpu_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                               const uint16_t *B, int64_t ldb, const loom_gemm_bf16_out *out);

/* Tests: the cache blocking's K depth (even, >= 2; 0 restores the default),
 * so that small shapes also cover the multi-slice accumulation. The AMX
 * path rounds it up to a multiple of 32. */
void loom_cpu_gemm_bf16_set_kc(int64_t kc);

/* Tests: run the AMX path's blocking and packing with the plain-C model of
 * its tile kernel (gemm_amx_x86.c), on CPUs with AVX512_BF16 but no AMX. */
void loom_cpu_gemm_bf16_test_amx_model(bool on);

#endif
