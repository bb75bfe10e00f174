/* conv_winograd_x86.c — AVX-512 and AVX2+FMA instantiations of the Winograd
 * convolution's kernels (conv_winograd_kern.h, written once in
 * conv_winograd_tmpl.h), plus a 16-lane instantiation on GCC's generic
 * vectors for tests: it runs the AVX-512 kernels' code (blocking, kernel
 * choice, 16-lane transforms) on any AVX2 CPU, so machines without AVX-512
 * check it too. The library is compiled for baseline x86-64: each function
 * carries its own target attribute and is only reached after
 * conv_winograd.c has checked that the CPU has its ISA. */
#include <string.h>

#include "ops/cpu/conv_winograd_kern.h"
#include "core/half.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/cpu/bf16_simd.h"

#define U_(x) _Pragma(#x)
#define UNROLL(n) U_(GCC unroll n)

typedef void (*wg_mk_fn)(const float *, int64_t, int64_t, const float *, int64_t, int64_t, float *, int64_t, bool);

/* ---- AVX-512 ------------------------------------------------------------------ */
#define TGT __attribute__((target("avx512f")))
#define VL 16
#define V __m512
#define WGN(n) n##_avx512
#define V_LOAD _mm512_loadu_ps
#define V_STORE _mm512_storeu_ps
#define V_ZERO _mm512_setzero_ps
#define V_ADD _mm512_add_ps
#define V_SUB _mm512_sub_ps
#define V_MAX _mm512_max_ps
#define V_SET1 _mm512_set1_ps
#define V_FMADD _mm512_fmadd_ps
#define V_LOAD_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define V_LOAD_BF16(p) \
  _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define V_STORE_F16(p, v) _mm256_storeu_si256((__m256i *)(p), _mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT))
#define V_STORE_BF16(p, v) _mm256_storeu_si256((__m256i *)(p), loom_bf16x16_avx512(v))
#include "ops/cpu/conv_winograd_tmpl.h"
const loom_wg_isa loom_wg_isa_avx512 = {"avx512", input_avx512, output_avx512, dy_avx512, input4_avx512, output4_avx512, dy4_avx512, gemm_avx512};

/* ---- AVX2 + FMA (+ F16C) ------------------------------------------------------- */
#define TGT __attribute__((target("avx2,fma,f16c")))
#define VL 8
#define V __m256
#define WGN(n) n##_avx2
#define V_LOAD _mm256_loadu_ps
#define V_STORE _mm256_storeu_ps
#define V_ZERO _mm256_setzero_ps
#define V_ADD _mm256_add_ps
#define V_SUB _mm256_sub_ps
#define V_MAX _mm256_max_ps
#define V_SET1 _mm256_set1_ps
#define V_FMADD _mm256_fmadd_ps
#define V_LOAD_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define V_LOAD_BF16(p) \
  _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define V_STORE_F16(p, v) _mm_storeu_si128((__m128i *)(p), _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT))
#define V_STORE_BF16(p, v) _mm_storeu_si128((__m128i *)(p), loom_bf16x8_avx2(v))
#include "ops/cpu/conv_winograd_tmpl.h"
const loom_wg_isa loom_wg_isa_avx2 = {"avx2", input_avx2, output_avx2, dy_avx2, input4_avx2, output4_avx2, dy4_avx2, gemm_avx2};

/* ---- 16 lanes on generic vectors (tests) ------------------------------------- */
typedef float wg_v16 __attribute__((vector_size(64)));
typedef int wg_v16i __attribute__((vector_size(64)));
#define TGT __attribute__((target("avx2,fma")))
/* Macros, not functions: 64-byte vectors passed by value without AVX-512
 * would change the ABI (GCC warns). */
#define e16_load(p) ({ wg_v16 ld_; memcpy(&ld_, (p), sizeof ld_); ld_; })
#define e16_store(p, v) ({ wg_v16 st_ = (v); memcpy((p), &st_, sizeof st_); })
#define e16_zero() ((wg_v16){0})
#define e16_add(a, b) ((a) + (b))
#define e16_sub(a, b) ((a) - (b))
/* _mm512_max_ps's rule: a where a > b, else b (so b for NaNs and ±0 ties). */
#define e16_max(a, b) ({ wg_v16 a_ = (a), b_ = (b); wg_v16i m_ = a_ > b_; (wg_v16)(((wg_v16i)a_ & m_) | ((wg_v16i)b_ & ~m_)); })
#define e16_set1(s) ((wg_v16){0} + (s))
#define e16_fmadd(a, b, c) ((a) * (b) + (c))
/* 16-bit values one lane at a time through core/half.h (tests need no speed). */
#define e16_load_h(p, cvt) ({ wg_v16 lh_; for (int i_ = 0; i_ < 16; i_++) lh_[i_] = cvt((p)[i_]); lh_; })
#define e16_store_h(p, v, cvt) ({ wg_v16 sh_ = (v); for (int i_ = 0; i_ < 16; i_++) (p)[i_] = cvt(sh_[i_]); })
#define VL 16
#define V wg_v16
#define WGN(n) n##_emu16
#define V_LOAD e16_load
#define V_STORE e16_store
#define V_ZERO e16_zero
#define V_ADD e16_add
#define V_SUB e16_sub
#define V_MAX e16_max
#define V_SET1 e16_set1
#define V_FMADD e16_fmadd
#define V_LOAD_F16(p) e16_load_h((p), loom_half_to_f32)
#define V_LOAD_BF16(p) e16_load_h((p), loom_bfloat_to_f32)
#define V_STORE_F16(p, v) e16_store_h((p), (v), loom_half_from_f32)
#define V_STORE_BF16(p, v) e16_store_h((p), (v), loom_bfloat_from_f32)
#include "ops/cpu/conv_winograd_tmpl.h"
const loom_wg_isa loom_wg_isa_emu16 = {"emu16", input_emu16, output_emu16, dy_emu16, input4_emu16, output4_emu16, dy4_emu16, gemm_emu16};

#else
const loom_wg_isa loom_wg_isa_avx512 = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
const loom_wg_isa loom_wg_isa_avx2 = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
const loom_wg_isa loom_wg_isa_emu16 = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
#endif
