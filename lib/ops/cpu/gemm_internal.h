/* gemm_internal.h (internal) — the contract between the blocked GEMM driver
 * (gemm.c) and its register-blocked micro-kernels (gemm_x86.c, and the
 * generic one in gemm.c). Kept separate so ISA-specific kernels can live in
 * their own file without the driver knowing about intrinsics. */
#ifndef LOOM_OPS_CPU_GEMM_INTERNAL_H
#define LOOM_OPS_CPU_GEMM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

/* Computes the full MR x NR tile C = alpha * (a · b) + beta * C over kc steps.
   a: packed A sliver, kc groups of MR floats (column k of the tile's rows).
   b: packed B sliver, kc groups of NR floats, 64-byte aligned.
   beta == 0: C is not read. */
typedef void (*loom_gemm_ukr_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                 float alpha, float beta);

typedef struct loom_gemm_kernel {
  const char *name;   /* "avx512", "avx2", "generic" */
  int mr, nr;         /* micro-tile */
  int mc, kc, nc;     /* cache blocking: A block mc x kc (L2), B panel kc x nc (L3) */
  loom_gemm_ukr_fn ukr;
} loom_gemm_kernel;

#include "loom/dtype.h"
/* Rows x cols of an f32 tile t (leading dim ldt) rounded to dt (f16/bf16)
 * into dst (leading dim ldd, in elements): the rounding of loom_cpu_store_f32.
 * The GEMM calls it where loom_gemm_store16_avx2 does not run (it decides
 * that once per call). */
void loom_gemm_store16(const float *t, int ldt, int64_t rows, int64_t cols, void *dst, int64_t ldd, loom_dtype dt);

#if defined(__x86_64__)
/* Its AVX2 version (f16 through F16C: the caller checks the CPU has it). */
void loom_gemm_store16_avx2(const float *t, int ldt, int64_t rows, int64_t cols, void *dst, int64_t ldd, bool is_f16);
void loom_gemm_ukr_avx2_6x16(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                             float alpha, float beta);
void loom_gemm_ukr_avx512_12x32(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                float alpha, float beta);
/* Pack a sliver of a transposed B ([N,K] row-major, ld ldb): dst[k*nr + c] =
 * B[(j0+c)*ldb + k0+k] for k < kc, c < n (n <= nr), zeros for c in [n, nr).
 * 8x8 register transposes; needs AVX (the caller checks avx2). */
void loom_gemm_pack_bt_avx2(const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t n, int nr,
                            float *dst);
/* The same for a 16-bit B (f16 when is_f16, else bf16), widened to f32 as it
 * is transposed. Needs AVX2, and F16C for f16 (the caller checks). */
void loom_gemm_pack_bt16_avx2(const void *B, bool is_f16, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t n,
                              int nr, float *dst);
/* Slivers [s_lo, s_hi) of a [K,N] B (f32, or f16/bf16 widened): for each
 * k < kc and sliver s, dst[s*bstride + k*nr + c] = B[(k0+k)*ldb + jc + s*nr
 * + c] for c < min(nr, nc - s*nr), zeros up to nr. nr a multiple of 8;
 * needs AVX2 (and F16C for f16: the caller checks). */
void loom_gemm_pack_b_avx2(const void *B, loom_dtype dt, int64_t ldb, int64_t k0, int64_t kc, int64_t jc, int64_t nc,
                           int64_t s_lo, int64_t s_hi, int nr, float *dst, int64_t bstride);
/* pack_a for the 6 x 16 kernel: rows [i0, i0+m) x k [k0, k0+kc) of op(A)
 * (A f32, or f16/bf16 widened; ta: A is [K,M]) into 6-row slivers, sliver s
 * at dst + s*6*kc holding kc groups of 6 (rows past m are 0). The caller
 * checks m <= LOOM_GEMM_PACK_A6_MAX_M, AVX2 and (for f16) F16C. */
enum { LOOM_GEMM_PACK_A6_MAX_M = 192 };
void loom_gemm_pack_a6_avx2(const void *A, loom_dtype dt, bool ta, int64_t lda, int64_t i0, int64_t m, int64_t k0,
                            int64_t kc, float *dst);
#endif

#endif
