/* gemm_x86.c — AVX2+FMA and AVX-512 micro-kernels for the built-in GEMM.
 *
 * The library is compiled for baseline x86-64, so each kernel carries its own
 * target attribute and gemm.c only calls it after __builtin_cpu_supports says
 * the CPU (and OS) can run it. Nothing here may be called unconditionally.
 *
 * Both kernels keep the whole C tile in registers for the kc loop: each step
 * loads one row of the packed B sliver (NR floats, aligned) and broadcasts MR
 * values of the packed A sliver, so every loaded byte feeds several FMAs. */

#include "ops/cpu/gemm_internal.h"
#include "core/half.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/cpu/bf16_simd.h"

/* ---- AVX2 + FMA: 6 x 16 tile = 12 ymm accumulators (+2 for B, 1 for A). */
#if defined(__GNUC__)
/* The kc loop in assembly. From intrinsics, GCC 12 shuffles the accumulators
 * between registers and spills two of them to the stack on every 4-step pass
 * (15 live ymm of 16): measured about 10 % of the kernel's speed. Fixed
 * registers: ymm0-11 accumulate (row i in ymm 2i, 2i+1), ymm12-13 hold the B
 * row, ymm14 the broadcast A value. Each FMA is the intrinsic's
 * fmadd(a, b, c), so the products are those of the C loop below. */
#define LOOM_ASM_STEP(ao, bo)                                                                   \
  "vmovaps " #bo "(%[b]), %%ymm12\n\t"                                                        \
  "vmovaps " #bo "+32(%[b]), %%ymm13\n\t"                                                     \
  "vbroadcastss " #ao "(%[a]), %%ymm14\n\t"                                                   \
  "vfmadd231ps %%ymm12, %%ymm14, %%ymm0\n\t"                                                  \
  "vfmadd231ps %%ymm13, %%ymm14, %%ymm1\n\t"                                                  \
  "vbroadcastss " #ao "+4(%[a]), %%ymm14\n\t"                                                 \
  "vfmadd231ps %%ymm12, %%ymm14, %%ymm2\n\t"                                                  \
  "vfmadd231ps %%ymm13, %%ymm14, %%ymm3\n\t"                                                  \
  "vbroadcastss " #ao "+8(%[a]), %%ymm14\n\t"                                                 \
  "vfmadd231ps %%ymm12, %%ymm14, %%ymm4\n\t"                                                  \
  "vfmadd231ps %%ymm13, %%ymm14, %%ymm5\n\t"                                                  \
  "vbroadcastss " #ao "+12(%[a]), %%ymm14\n\t"                                                \
  "vfmadd231ps %%ymm12, %%ymm14, %%ymm6\n\t"                                                  \
  "vfmadd231ps %%ymm13, %%ymm14, %%ymm7\n\t"                                                  \
  "vbroadcastss " #ao "+16(%[a]), %%ymm14\n\t"                                                \
  "vfmadd231ps %%ymm12, %%ymm14, %%ymm8\n\t"                                                  \
  "vfmadd231ps %%ymm13, %%ymm14, %%ymm9\n\t"                                                  \
  "vbroadcastss " #ao "+20(%[a]), %%ymm14\n\t"                                                \
  "vfmadd231ps %%ymm12, %%ymm14, %%ymm10\n\t"                                                 \
  "vfmadd231ps %%ymm13, %%ymm14, %%ymm11\n\t"

__attribute__((target("avx2,fma"))) static void ukr_avx2_6x16_loop(int64_t kc, const float *a, const float *b,
                                                                    float acc[96])
{
  int64_t n4 = kc >> 2, n1 = kc & 3;
  __asm__ volatile("vxorps %%ymm0, %%ymm0, %%ymm0\n\t"
                   "vxorps %%ymm1, %%ymm1, %%ymm1\n\t"
                   "vxorps %%ymm2, %%ymm2, %%ymm2\n\t"
                   "vxorps %%ymm3, %%ymm3, %%ymm3\n\t"
                   "vxorps %%ymm4, %%ymm4, %%ymm4\n\t"
                   "vxorps %%ymm5, %%ymm5, %%ymm5\n\t"
                   "vxorps %%ymm6, %%ymm6, %%ymm6\n\t"
                   "vxorps %%ymm7, %%ymm7, %%ymm7\n\t"
                   "vxorps %%ymm8, %%ymm8, %%ymm8\n\t"
                   "vxorps %%ymm9, %%ymm9, %%ymm9\n\t"
                   "vxorps %%ymm10, %%ymm10, %%ymm10\n\t"
                   "vxorps %%ymm11, %%ymm11, %%ymm11\n\t"
                   "testq %[n4], %[n4]\n\t"
                   "jz 2f\n\t"
                   "1:\n\t"
                   "prefetcht0 1024(%[b])\n\t"
                   LOOM_ASM_STEP(0, 0) LOOM_ASM_STEP(24, 64) LOOM_ASM_STEP(48, 128) LOOM_ASM_STEP(72, 192)
                   "addq $96, %[a]\n\t"
                   "addq $256, %[b]\n\t"
                   "decq %[n4]\n\t"
                   "jnz 1b\n\t"
                   "2:\n\t"
                   "testq %[n1], %[n1]\n\t"
                   "jz 4f\n\t"
                   "3:\n\t"
                   LOOM_ASM_STEP(0, 0)
                   "addq $24, %[a]\n\t"
                   "addq $64, %[b]\n\t"
                   "decq %[n1]\n\t"
                   "jnz 3b\n\t"
                   "4:\n\t"
                   "vmovaps %%ymm0, 0(%[acc])\n\t"
                   "vmovaps %%ymm1, 32(%[acc])\n\t"
                   "vmovaps %%ymm2, 64(%[acc])\n\t"
                   "vmovaps %%ymm3, 96(%[acc])\n\t"
                   "vmovaps %%ymm4, 128(%[acc])\n\t"
                   "vmovaps %%ymm5, 160(%[acc])\n\t"
                   "vmovaps %%ymm6, 192(%[acc])\n\t"
                   "vmovaps %%ymm7, 224(%[acc])\n\t"
                   "vmovaps %%ymm8, 256(%[acc])\n\t"
                   "vmovaps %%ymm9, 288(%[acc])\n\t"
                   "vmovaps %%ymm10, 320(%[acc])\n\t"
                   "vmovaps %%ymm11, 352(%[acc])\n\t"
                   : [a] "+r"(a), [b] "+r"(b), [n4] "+r"(n4), [n1] "+r"(n1)
                   : [acc] "r"(acc)
                   : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                     "xmm11", "xmm12", "xmm13", "xmm14", "memory", "cc");
}
#undef LOOM_ASM_STEP
#else
/* The same loop from intrinsics (compilers without GNU inline assembly). */
__attribute__((target("avx2,fma"))) static void ukr_avx2_6x16_loop(int64_t kc, const float *a, const float *b,
                                                                    float acc[96])
{
  __m256 c[12];
  for (int i = 0; i < 12; i++) c[i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; k++, a += 6, b += 16) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    for (int i = 0; i < 6; i++) {
      const __m256 av = _mm256_broadcast_ss(a + i);
      c[2 * i] = _mm256_fmadd_ps(av, b0, c[2 * i]);
      c[2 * i + 1] = _mm256_fmadd_ps(av, b1, c[2 * i + 1]);
    }
  }
  for (int i = 0; i < 12; i++) _mm256_store_ps(acc + 8 * i, c[i]);
}
#endif

__attribute__((target("avx2,fma")))
void loom_gemm_ukr_avx2_6x16(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c,
                             int64_t ldc, float alpha, float beta)
{
  /* Touch the C rows early so the write-back does not stall on misses. */
  for (int i = 0; i < 6; i++) _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
  float acc[96] __attribute__((aligned(32)));
  ukr_avx2_6x16_loop(kc, a, b, acc);

  const __m256 va = _mm256_set1_ps(alpha);
  if (beta == 0.0f) {
    for (int i = 0; i < 6; i++) {
      _mm256_storeu_ps(c + i * ldc, _mm256_mul_ps(va, _mm256_load_ps(acc + 16 * i)));
      _mm256_storeu_ps(c + i * ldc + 8, _mm256_mul_ps(va, _mm256_load_ps(acc + 16 * i + 8)));
    }
  } else {
    const __m256 vb = _mm256_set1_ps(beta);
    for (int i = 0; i < 6; i++) {
      float *r = c + i * ldc;
      _mm256_storeu_ps(r, _mm256_fmadd_ps(va, _mm256_load_ps(acc + 16 * i), _mm256_mul_ps(vb, _mm256_loadu_ps(r))));
      _mm256_storeu_ps(r + 8, _mm256_fmadd_ps(va, _mm256_load_ps(acc + 16 * i + 8),
                                              _mm256_mul_ps(vb, _mm256_loadu_ps(r + 8))));
    }
  }
}

/* ---- AVX-512: 12 x 32 tile = 24 zmm accumulators (+2 for B, 1 for A) out of
 * 32 registers; the same shape BLIS uses for SKX (transposed for row-major). */
__attribute__((target("avx512f")))
void loom_gemm_ukr_avx512_12x32(int64_t kc, const float *restrict a, const float *restrict b,
                                float *restrict c, int64_t ldc, float alpha, float beta)
{
  __m512 acc0[12], acc1[12];
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) {
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);

  for (int64_t k = 0; k < kc; k++) {
    _mm_prefetch((const char *)(b + 32 * 8), _MM_HINT_T0);
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
      const __m512 av = _mm512_set1_ps(a[i]);
      acc0[i] = _mm512_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(av, b1, acc1[i]);
    }
    a += 12;
    b += 32;
  }

  const __m512 va = _mm512_set1_ps(alpha);
  if (beta == 0.0f) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
      _mm512_storeu_ps(c + i * ldc, _mm512_mul_ps(va, acc0[i]));
      _mm512_storeu_ps(c + i * ldc + 16, _mm512_mul_ps(va, acc1[i]));
    }
  } else {
    const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
      float *r = c + i * ldc;
      _mm512_storeu_ps(r, _mm512_fmadd_ps(va, acc0[i], _mm512_mul_ps(vb, _mm512_loadu_ps(r))));
      _mm512_storeu_ps(r + 16, _mm512_fmadd_ps(va, acc1[i], _mm512_mul_ps(vb, _mm512_loadu_ps(r + 16))));
    }
  }
}


/* 8x8 transpose of rows r[0..7] (8 floats each) in AVX registers. */
__attribute__((target("avx2"))) static inline void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

__attribute__((target("avx2"))) void loom_gemm_pack_bt_avx2(const float *B, int64_t ldb, int64_t k0, int64_t kc,
                                                            int64_t j0, int64_t n, int nr, float *dst) {
  const int64_t n8 = n & ~(int64_t)7, k8 = kc & ~(int64_t)7;
  for (int64_t c = 0; c < n8; c += 8) {
    const float *src = B + (j0 + c) * ldb + k0;
    int64_t k = 0;
    for (; k < k8; k += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * ldb + k);
      transpose8(r);
      for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + (k + i) * nr + c, r[i]);
    }
    for (; k < kc; k++)
      for (int i = 0; i < 8; i++) dst[k * nr + c + i] = src[i * ldb + k];
  }
  for (int64_t c = n8; c < n; c++) {
    const float *src = B + (j0 + c) * ldb + k0;
    for (int64_t k = 0; k < kc; k++) dst[k * nr + c] = src[k];
  }
  for (int64_t c = n; c < nr; c++)
    for (int64_t k = 0; k < kc; k++) dst[k * nr + c] = 0.0f;
}

static inline float one16(uint16_t v, bool is_f16) { return is_f16 ? loom_half_to_f32(v) : loom_bfloat_to_f32(v); }

__attribute__((target("avx2,f16c"))) void loom_gemm_pack_bt16_avx2(const void *Bv, bool is_f16, int64_t ldb,
                                                                  int64_t k0, int64_t kc, int64_t j0, int64_t n,
                                                                  int nr, float *dst) {
  const uint16_t *B = Bv;
  const int64_t n8 = n & ~(int64_t)7, k8 = kc & ~(int64_t)7;
  for (int64_t c = 0; c < n8; c += 8) {
    const uint16_t *src = B + (j0 + c) * ldb + k0;
    int64_t k = 0;
    for (; k < k8; k += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; i++) r[i] = loom_widen8_16_avx2(src + i * ldb + k, is_f16);
      transpose8(r);
      for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + (k + i) * nr + c, r[i]);
    }
    for (; k < kc; k++)
      for (int i = 0; i < 8; i++) dst[k * nr + c + i] = one16(src[i * ldb + k], is_f16);
  }
  for (int64_t c = n8; c < n; c++) {
    const uint16_t *src = B + (j0 + c) * ldb + k0;
    for (int64_t k = 0; k < kc; k++) dst[k * nr + c] = one16(src[k], is_f16);
  }
  for (int64_t c = n; c < nr; c++)
    for (int64_t k = 0; k < kc; k++) dst[k * nr + c] = 0.0f;
}


/* Element i of a kind (0 f32, 1 bf16, 2 f16) matrix as f32. */
static inline float elem_any(const void *p, int64_t i, int kind) {
  return kind == 0 ? ((const float *)p)[i] : one16(((const uint16_t *)p)[i], kind == 2);
}
/* 8 consecutive values of a B of kind (0 f32, 1 bf16, 2 f16) as f32. */
__attribute__((target("avx2,f16c"), always_inline)) static inline __m256 load8_any(const void *p, int64_t i,
                                                                                   int kind) {
  if (kind == 0) return _mm256_loadu_ps((const float *)p + i);
  return loom_widen8_16_avx2((const uint16_t *)p + i, kind == 2);
}

/* Slivers [s_lo, s_hi) of a [K,N] B panel (columns from jc, nc wide), rows
 * [k0, k0+kc). Blocks of 8 rows, sliver by sliver within a block: the
 * destination is written sequentially (8 x nr floats per visit) instead of
 * one line per sliver per row, bstride apart (16 KiB for the AVX2 kernel:
 * one L1 set), and the 8 source rows stay in L1 across the slivers that
 * share their lines. 16-bit values are widened in registers. kind is a
 * constant at each call site below, so each dtype gets its own loop. */
__attribute__((target("avx2,f16c"), always_inline)) static inline void
pack_b_kind(const void *B, int kind, int64_t ldb, int64_t k0, int64_t kc, int64_t jc, int64_t nc, int64_t s_lo,
            int64_t s_hi, int nr, float *dst, int64_t bstride) {
  for (int64_t kb = 0; kb < kc; kb += 8) {
    const int64_t ke = kb + 8 < kc ? kb + 8 : kc;
    for (int64_t s = s_lo; s < s_hi; s++) {
      const int64_t j = jc + s * nr, n = nc - s * nr < nr ? nc - s * nr : nr;
      float *d = dst + s * bstride + kb * nr;
      if (n == nr) {
        for (int64_t k = kb; k < ke; k++, d += nr) {
          const int64_t at = (k0 + k) * ldb + j;
          for (int c = 0; c < nr; c += 8) _mm256_storeu_ps(d + c, load8_any(B, at + c, kind));
        }
        continue;
      }
      for (int64_t k = kb; k < ke; k++, d += nr) { /* the panel's last, narrow sliver */
        const int64_t at = (k0 + k) * ldb + j;
        int64_t c = 0;
        for (; c + 8 <= n; c += 8) _mm256_storeu_ps(d + c, load8_any(B, at + c, kind));
        for (; c < n; c++) d[c] = elem_any(B, at + c, kind);
        for (; c < nr; c++) d[c] = 0.0f;
      }
    }
  }
}

__attribute__((target("avx2,f16c"))) void loom_gemm_pack_b_avx2(const void *B, loom_dtype dt, int64_t ldb,
                                                               int64_t k0, int64_t kc, int64_t jc, int64_t nc,
                                                               int64_t s_lo, int64_t s_hi, int nr, float *dst,
                                                               int64_t bstride) {
  if (dt == LOOM_F32) pack_b_kind(B, 0, ldb, k0, kc, jc, nc, s_lo, s_hi, nr, dst, bstride);
  else if (dt == LOOM_BF16) pack_b_kind(B, 1, ldb, k0, kc, jc, nc, s_lo, s_hi, nr, dst, bstride);
  else pack_b_kind(B, 2, ldb, k0, kc, jc, nc, s_lo, s_hi, nr, dst, bstride);
}


/* Stores the low 6 floats of v at d (no write past d[5]). */
__attribute__((target("avx2"), always_inline)) static inline void store6(float *d, __m256 v) {
  _mm_storeu_ps(d, _mm256_castps256_ps128(v));
  _mm_storel_pi((__m64 *)(d + 4), _mm256_extractf128_ps(v, 1));
}

/* pack_a for the 6 x 16 kernel (see loom_gemm_pack_a6_avx2 in
 * gemm_internal.h); kind is a constant at each call site. */
__attribute__((target("avx2,f16c"), always_inline)) static inline void
pack_a6_kind(const void *A, int kind, bool ta, int64_t lda, int64_t i0, int64_t m, int64_t k0, int64_t kc,
             float *dst) {
  enum { MR = 6 };
  const int64_t k8 = kc & ~(int64_t)7;
  if (!ta) {
    /* A is [M,K]: 8 k values of each of the sliver's rows, transposed in
     * registers into 8 groups of 6 (rows past m are zero lanes). */
    for (int64_t s = 0; s < m; s += MR, dst += MR * kc) {
      const int64_t rows = m - s < MR ? m - s : MR;
      const int64_t base = (i0 + s) * lda + k0;
      int64_t k = 0;
      for (; k < k8; k += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; i++)
          r[i] = i < rows ? load8_any(A, base + i * lda + k, kind) : _mm256_setzero_ps();
        transpose8(r);
        for (int i = 0; i < 8; i++) store6(dst + (k + i) * MR, r[i]);
      }
      for (; k < kc; k++)
        for (int64_t i = 0; i < MR; i++) dst[k * MR + i] = i < rows ? elem_any(A, base + i * lda + k, kind) : 0.0f;
    }
    return;
  }
  /* A is [K,M]: a sliver's 6 values for one k are contiguous. Blocks of 8
   * k rows, sliver by sliver: the 8 source rows stay in L1 across the
   * slivers (going sliver by sliver over all kc rows, lda apart, lands them
   * in one L1 set) and each sliver's destination is written in order. A
   * 16-bit block is first widened into wide (8 rows of m, vectorized). */
  float wide[8 * LOOM_GEMM_PACK_A6_MAX_M];
  const int64_t full = m / MR * MR;
  for (int64_t kb = 0; kb < kc; kb += 8) {
    const int64_t ke = kb + 8 < kc ? kb + 8 : kc;
    const float *src = (const float *)A + (k0 + kb) * lda + i0;
    int64_t ld = lda;
    if (kind != 0) {
      for (int64_t k = kb; k < ke; k++) {
        const uint16_t *h = (const uint16_t *)A + (k0 + k) * lda + i0;
        float *w = wide + (k - kb) * m;
        int64_t c = 0;
        for (; c + 8 <= m; c += 8) _mm256_storeu_ps(w + c, loom_widen8_16_avx2(h + c, kind == 2));
        for (; c < m; c++) w[c] = one16(h[c], kind == 2);
      }
      src = wide, ld = m;
    }
    for (int64_t s = 0; s < full; s += MR) {
      float *d = dst + s * kc + kb * MR;
      for (int64_t k = kb; k < ke; k++, d += MR) {
        const float *p = src + (k - kb) * ld + s;
        _mm_storeu_ps(d, _mm_loadu_ps(p));
        _mm_storel_pi((__m64 *)(d + 4), _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(p + 4))));
      }
    }
    if (full < m) { /* a short last sliver: zeros past m */
      float *d = dst + full * kc + kb * MR;
      for (int64_t k = kb; k < ke; k++, d += MR)
        for (int64_t i = 0; i < MR; i++)
          d[i] = full + i < m ? elem_any(A, (k0 + k) * lda + i0 + full + i, kind) : 0.0f;
    }
  }
}

__attribute__((target("avx2,f16c"))) void loom_gemm_pack_a6_avx2(const void *A, loom_dtype dt, bool ta, int64_t lda,
                                                                int64_t i0, int64_t m, int64_t k0, int64_t kc,
                                                                float *dst) {
  if (dt == LOOM_F32) pack_a6_kind(A, 0, ta, lda, i0, m, k0, kc, dst);
  else if (dt == LOOM_BF16) pack_a6_kind(A, 1, ta, lda, i0, m, k0, kc, dst);
  else pack_a6_kind(A, 2, ta, lda, i0, m, k0, kc, dst);
}

__attribute__((target("avx2,f16c"))) void loom_gemm_store16_avx2(const float *t, int ldt, int64_t rows, int64_t cols,
                                                                void *dst, int64_t ldd, bool is_f16) {
  for (int64_t i = 0; i < rows; i++) {
    const float *s = t + i * ldt;
    uint16_t *d = (uint16_t *)dst + i * ldd;
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) loom_narrow8_16_avx2(d + j, _mm256_loadu_ps(s + j), is_f16);
    for (; j < cols; j++) d[j] = is_f16 ? loom_half_from_f32(s[j]) : loom_bfloat_from_f32(s[j]);
  }
}

#else
/* ISO C forbids an empty translation unit. */
typedef int loom_gemm_x86_unused;
#endif
