/* optim_cpu_x86.c — AVX2 versions of the CPU AdamW and SGD updates
 * (optim_cpu.c calls them when the CPU kernels' instruction set is avx2 or
 * wider), with the low-precision copy written from registers instead of a
 * second pass.
 *
 * Bit-identical to the scalar loops: each lane does the same IEEE
 * operations in the same order (+, -, *, / and sqrt are correctly rounded
 * in both), the target is "avx2" without "fma" and the file is compiled
 * with -ffp-contract=off, so no a*b+c is fused; the f16 copy rounds with
 * F16C (= half.h) and the bf16 copy with half.h's integer rounding. The
 * one thing left open is which NaN a NaN + NaN returns (IEEE 754 does not
 * say, and compilers order a commutative +'s operands as they see fit). */
#include "optim/optim_cpu_x86.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/cpu/bf16_simd.h"

#include "core/half.h"

static inline uint16_t lowp1(float x, bool f16) { return f16 ? loom_half_from_f32(x) : loom_bfloat_from_f32(x); }

/* The gradient's 8 values at j. With a deferred 16-bit gradient (g16) they
 * are widened in registers, multiplied by 1 (as unscale_cpu.c's pass: the
 * same bits, a signalling NaN quieted) and stored into the f32 gradient,
 * which then needs no pass of its own and is not read back. */
__attribute__((target("avx2,f16c"))) static inline __m256 grad8(float *g, const uint16_t *g16, bool g16_f16,
                                                                 int64_t j) {
  if (!g16) return _mm256_loadu_ps(g + j);
  __m256 one = _mm256_set1_ps(1.0f);
  __asm__("" : "+x"(one)); /* as in grad1 */
  const __m256 x = _mm256_mul_ps(loom_widen8_16_avx2(g16 + j, g16_f16), one);
  _mm256_storeu_ps(g + j, x);
  return x;
}
static inline float grad1(float *g, const uint16_t *g16, bool g16_f16, int64_t j) {
  if (!g16) return g[j];
  /* A 1 the compiler cannot see: x * 1.0f would be folded to x, leaving a
   * signalling NaN unquieted. */
  float one = 1.0f;
  __asm__("" : "+x"(one));
  g[j] = (g16_f16 ? loom_half_to_f32(g16[j]) : loom_bfloat_to_f32(g16[j])) * one;
  return g[j];
}

/* The loops are inlined twice, with and without g16, so that the loop
 * without a 16-bit gradient is the plain one (no test per iteration). */
#define RUN_INLINE __attribute__((target("avx2,f16c"), always_inline)) static inline

RUN_INLINE void adamw_run(float *restrict p, float *restrict m, float *restrict v, float *restrict g, int64_t n,
                          const loom_adamw_consts *c, uint16_t *restrict lowp, bool f16,
                          const uint16_t *restrict g16, bool g16_f16) {
  const __m256 b1 = _mm256_set1_ps(c->b1), c1 = _mm256_set1_ps(c->c1), b2 = _mm256_set1_ps(c->b2);
  const __m256 c2 = _mm256_set1_ps(c->c2), eps = _mm256_set1_ps(c->eps), decay = _mm256_set1_ps(c->decay);
  const __m256 step = _mm256_set1_ps(c->step_size), inv = _mm256_set1_ps(c->inv_bc2_sqrt);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 gj = grad8(g, g16, g16_f16, j);
    const __m256 mj = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + j)), _mm256_mul_ps(c1, gj));
    const __m256 vj = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + j)), _mm256_mul_ps(_mm256_mul_ps(c2, gj), gj));
    _mm256_storeu_ps(m + j, mj);
    _mm256_storeu_ps(v + j, vj);
    const __m256 den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vj), inv), eps);
    const __m256 pj = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p + j), decay), _mm256_div_ps(_mm256_mul_ps(step, mj), den));
    _mm256_storeu_ps(p + j, pj);
    if (lowp) loom_narrow8_16_avx2(lowp + j, pj, f16);
  }
  for (; j < n; j++) {
    const float gj = grad1(g, g16, g16_f16, j);
    const float mj = c->b1 * m[j] + c->c1 * gj;
    const float vj = c->b2 * v[j] + c->c2 * gj * gj;
    m[j] = mj;
    v[j] = vj;
    p[j] = p[j] * c->decay - c->step_size * mj / (sqrtf(vj) * c->inv_bc2_sqrt + c->eps);
    if (lowp) lowp[j] = lowp1(p[j], f16);
  }
}

__attribute__((target("avx2,f16c"))) void loom_adamw_run_avx2(float *restrict p, float *restrict m,
                                                              float *restrict v, float *restrict g, int64_t n,
                                                              const loom_adamw_consts *c, uint16_t *restrict lowp,
                                                              bool f16, const uint16_t *restrict g16, bool g16_f16) {
  if (g16) adamw_run(p, m, v, g, n, c, lowp, f16, g16, g16_f16);
  else adamw_run(p, m, v, g, n, c, lowp, f16, NULL, false);
}

RUN_INLINE void sgd_run(float *restrict p, float *restrict m, float *restrict g, int64_t n, const loom_sgd_consts *c,
                        uint16_t *restrict lowp, bool f16, const uint16_t *restrict g16, bool g16_f16) {
  const __m256 wd = _mm256_set1_ps(c->wd), mom = _mm256_set1_ps(c->mom), damp = _mm256_set1_ps(c->damp);
  const __m256 lr = _mm256_set1_ps(c->lr);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 pj = _mm256_loadu_ps(p + j);
    __m256 d = _mm256_add_ps(grad8(g, g16, g16_f16, j), _mm256_mul_ps(wd, pj));
    if (m) {
      const __m256 b = c->first ? d : _mm256_add_ps(_mm256_mul_ps(mom, _mm256_loadu_ps(m + j)), _mm256_mul_ps(damp, d));
      _mm256_storeu_ps(m + j, b);
      d = c->nesterov ? _mm256_add_ps(d, _mm256_mul_ps(mom, b)) : b;
    }
    const __m256 r = _mm256_sub_ps(pj, _mm256_mul_ps(lr, d));
    _mm256_storeu_ps(p + j, r);
    if (lowp) loom_narrow8_16_avx2(lowp + j, r, f16);
  }
  for (; j < n; j++) {
    float d = grad1(g, g16, g16_f16, j) + c->wd * p[j];
    if (m) {
      float b = c->first ? d : c->mom * m[j] + c->damp * d;
      m[j] = b;
      d = c->nesterov ? d + c->mom * b : b;
    }
    p[j] -= c->lr * d;
    if (lowp) lowp[j] = lowp1(p[j], f16);
  }
}

__attribute__((target("avx2,f16c"))) void loom_sgd_run_avx2(float *restrict p, float *restrict m,
                                                            float *restrict g, int64_t n,
                                                            const loom_sgd_consts *c, uint16_t *restrict lowp,
                                                            bool f16, const uint16_t *restrict g16, bool g16_f16) {
  if (g16) sgd_run(p, m, g, n, c, lowp, f16, g16, g16_f16);
  else sgd_run(p, m, g, n, c, lowp, f16, NULL, false);
}
#else
typedef int loom_optim_cpu_x86_unused; /* ISO C forbids an empty translation unit */
#endif
