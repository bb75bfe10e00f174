/* gemm_bf16_internal.h (internal) — the contract between the bf16 GEMM
 * driver (gemm_bf16.c) and its AVX512_BF16 kernels (gemm_bf16_x86.c) and
 * AMX-BF16 kernels (gemm_amx_x86.c).
 *
 * Packed layout ("pair-interleaved", what vdpbf16ps multiplies): a 32-bit
 * word holds the bf16 values of two consecutive k, the even k in the low
 * half. A sliver of A is kp groups of MR words (rows of the tile), a sliver
 * of B kp groups of NR words (columns), kp = ceil(kc / 2); a missing odd k
 * at the end of K is a zero half. */
#ifndef LOOM_OPS_CPU_GEMM_BF16_INTERNAL_H
#define LOOM_OPS_CPU_GEMM_BF16_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/cpu/gemm_bf16.h"

enum { LOOM_BF16_MR = 12, LOOM_BF16_NR = 32, LOOM_AMX_MR = 32 };

#if defined(__x86_64__)
/* The MR x NR tile over kp pairs: c = a·b (accumulate: c += a·b), f32,
 * leading dim ldc. b is 64-byte aligned. */
void loom_gemm_bf16_ukr_12x32(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc,
                              bool accumulate);

/* Pack the B sliver of columns [j0, j0+n) (n <= NR, zeros past n) over k in
 * [k0, k0+kc) (k0 even) into kp = ceil(kc/2) groups of NR words. bt: B is
 * [N,K] (the pair is adjacent in a row); else B is [K,N] (two rows
 * interleaved). K is B's full depth: halves at k >= K are zero. */
void loom_gemm_bf16_pack_b(bool bt, const uint16_t *B, int64_t ldb, int64_t K, int64_t k0, int64_t kc, int64_t j0,
                           int64_t n, uint32_t *dst);
/* Same for an A sliver of rows [i0, i0+m) (m <= MR): at: A is [K,M]. */
void loom_gemm_bf16_pack_a(bool at, const uint16_t *A, int64_t lda, int64_t K, int64_t k0, int64_t kc, int64_t i0,
                           int64_t m, uint32_t *dst);

/* The epilogue of loom_gemm_bf16_out on a rows x cols block (cols <= NR) of
 * f32 sums t (leading dim ldt) whose top-left is result element (i, j). */
void loom_gemm_bf16_epilogue(const float *t, int64_t ldt, int64_t rows, int64_t cols, int64_t i, int64_t j,
                             const loom_gemm_bf16_out *out);

/* AMX (gemm_amx_x86.c). The 32 x 32 block c (leading dim 32) = a·b over kpp
 * pairs (a multiple of 16): a is an A block packed by loom_gemm_amx_pack_a,
 * b a B sliver of kpp groups of 32 words (loom_gemm_bf16_pack_b, zero groups
 * past K). The tile kernel needs loom_amx_tiles_begin on the calling thread
 * first (and loom_amx_tiles_end after); the model is the same block in
 * plain C, for tests on CPUs without AMX. */
bool loom_amx_request_permission(void);
void loom_amx_tiles_begin(void);
void loom_amx_tiles_end(void);
void loom_gemm_amx_ukr_32x32(int64_t kpp, const uint32_t *a, const uint32_t *b, float *c);
void loom_gemm_amx_ukr_model(int64_t kpp, const uint32_t *a, const uint32_t *b, float *c);
void loom_gemm_amx_pack_a(bool at, const uint16_t *A, int64_t lda, int64_t K, int64_t k0, int64_t kc, int64_t i0,
                          int64_t m, int64_t kpp, uint32_t *dst);
#endif

#endif
