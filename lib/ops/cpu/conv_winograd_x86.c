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

#if defined(__x86_64__)
#include <immintrin.h>

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
#include "ops/cpu/conv_winograd_tmpl.h"
const loom_wg_isa loom_wg_isa_avx512 = {"avx512", input_avx512, output_avx512, dy_avx512, gemm_avx512};
#undef TGT
#undef VL
#undef V
#undef WGN
#undef V_LOAD
#undef V_STORE
#undef V_ZERO
#undef V_ADD
#undef V_SUB
#undef V_MAX
#undef V_SET1
#undef V_FMADD

/* ---- AVX2 + FMA --------------------------------------------------------------- */
#define TGT __attribute__((target("avx2,fma")))
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
#include "ops/cpu/conv_winograd_tmpl.h"
const loom_wg_isa loom_wg_isa_avx2 = {"avx2", input_avx2, output_avx2, dy_avx2, gemm_avx2};
#undef TGT
#undef VL
#undef V
#undef WGN
#undef V_LOAD
#undef V_STORE
#undef V_ZERO
#undef V_ADD
#undef V_SUB
#undef V_MAX
#undef V_SET1
#undef V_FMADD

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
#include "ops/cpu/conv_winograd_tmpl.h"
const loom_wg_isa loom_wg_isa_emu16 = {"emu16", input_emu16, output_emu16, dy_emu16, gemm_emu16};

#else
const loom_wg_isa loom_wg_isa_avx512 = {NULL, NULL, NULL, NULL, NULL};
const loom_wg_isa loom_wg_isa_avx2 = {NULL, NULL, NULL, NULL, NULL};
const loom_wg_isa loom_wg_isa_emu16 = {NULL, NULL, NULL, NULL, NULL};
#endif
