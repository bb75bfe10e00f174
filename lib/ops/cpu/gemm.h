/* gemm.h (internal) — single-precision CPU matrix multiply used by every CPU
 * op that reduces to a GEMM (matmul, linear, conv via im2col). One entry point
 * hides whether OpenBLAS or loom's own packed kernel does the work, so ops
 * never need to know how the library was built.
 *
 * Threads: loom_cpu_sgemm may be called from several threads at once (each
 * call uses its own packing buffers). The force/threads setters are global
 * switches meant to be flipped between calls, not during them. */
#ifndef LOOM_OPS_CPU_GEMM_H
#define LOOM_OPS_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "loom/dtype.h"

/* Row-major C[M,N] = alpha * op(A) · op(B) + beta * C, op = transpose when the flag is set.
   A is [M,K] (or [K,M] if trans_a) with leading dim lda; B is [K,N] (or [N,K] if trans_b) with ldb.
   beta == 0 means C is write-only (NaNs in C are ignored). Never fails: if the
   packing buffers cannot be allocated it falls back to a slow unpacked loop. */
void loom_cpu_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* loom_cpu_sgemm with A of dtype a_dt and B of dtype b_dt, each LOOM_F32,
   LOOM_F16 or LOOM_BF16 (lda/ldb in elements): 16-bit operands are widened
   to f32 exactly while they are packed, so C is bit-identical to
   loom_cpu_sgemm on widened copies, without the copies (the mixed precision
   Linear on CPUs without native 16-bit kernels). OpenBLAS, which takes only
   f32, gets widened copies. */
void loom_cpu_sgemm_widen(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                          loom_dtype a_dt, int64_t lda, const void *B, loom_dtype b_dt, int64_t ldb, float beta,
                          float *C, int64_t ldc);

/* loom_cpu_sgemm_widen with beta = 0 and a 16-bit C (c_dt LOOM_F16 or
   LOOM_BF16, ldc in elements), each tile rounded (to nearest even) as soon
   as it is finished, so no f32 C goes through memory: bit-identical to
   rounding loom_cpu_sgemm_widen's f32 C. Only where that is possible: the
   built-in kernels, 0 < K <= one K slice of the kernel (256), alpha != 0,
   packing buffers available; otherwise it returns false having written
   nothing, and the caller takes the f32 route. */
bool loom_cpu_sgemm_widen_to16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                               const void *A, loom_dtype a_dt, int64_t lda, const void *B, loom_dtype b_dt,
                               int64_t ldb, void *C, loom_dtype c_dt, int64_t ldc);

/* Which implementation runs: "openblas" or "builtin-avx512" / "builtin-avx2" / "builtin-generic". */
const char *loom_cpu_gemm_impl(void);
/* Policy "auto" | "builtin" | "openblas" (also env LOOM_CPU_GEMM, read at
 * first use). Returns 0, -1 for an unknown name, -2 for openblas in a build
 * without it. */
int loom_cpu_gemm_set_policy(const char *name);

/* Force the built-in kernel even when OpenBLAS is linked (tests, benchmarks). */
void loom_cpu_gemm_force_builtin(bool on);

/* Threads for the built-in GEMM and (when possible) OpenBLAS: set from
   loom_set_num_threads. n <= 0 restores the default (OpenMP's max threads). */
void loom_cpu_gemm_set_threads(int n);

/* Internal: pick the built-in micro-kernel by name ("avx512", "avx2",
   "generic"; "unpacked" = the no-memory fallback loop; NULL = the kernel of
   the current instruction set, cpu_isa.h: the default). Returns false,
   changing nothing, if the CPU cannot run it. Lets the tests cover every
   kernel the machine has. */
bool loom_cpu_gemm_select_builtin(const char *name);

#endif
