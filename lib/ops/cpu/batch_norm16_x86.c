/* batch_norm16_x86.c — the AVX2 row loops of batch_norm16_x86.h. In
 * batch_norm_cpu.c a 16-bit block was widened into an f32 buffer (and the
 * result rounded from a second one) before the f32 loops ran: on bf16 the
 * training forward took 1.8x its f32 time (bench_cnn_ops). Here the values
 * are widened and rounded in registers, 8 channels at a time; the
 * arithmetic is the f32 loops' own, operation for operation. */
#include "ops/cpu/batch_norm16_x86.h"

#include "ops/cpu/ew16_x86.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/cpu/bf16_simd.h"

#define BN16_TARGET __attribute__((target("avx2,f16c")))

bool loom_bn16_avx2_ok(loom_dtype dt, int64_t C) { return C > 0 && C % 8 == 0 && loom_ew16_avx2_ok(dt); }

BN16_TARGET static inline __m256 ld16(const uint16_t *p, bool f16) { return loom_widen8_16_avx2(p, f16); }

BN16_TARGET static inline void st16(uint16_t *d, __m256 x, bool f16) {
  _mm_storeu_si128((__m128i *)d, f16 ? _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT) : loom_bf16x8_avx2(x));
}

/* loom_bn_pre(x) = x * sc + sh, multiplied then added (cnn_math.h). */
BN16_TARGET static inline __m256 pre8(__m256 x, __m256 sc, __m256 sh) { return _mm256_add_ps(_mm256_mul_ps(x, sc), sh); }

/* v > 0 ? g : 0 */
BN16_TARGET static inline __m256 mask_pos(__m256 v, __m256 g) {
  return _mm256_and_ps(g, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ));
}

BN16_TARGET void loom_bn16_acc_rows_shifted(const uint16_t *p, int64_t rows, int64_t C, const float *K, float *a1,
                                            float *a2, loom_dtype dt) {
  const bool f16 = dt == LOOM_F16;
  for (int64_t c = 0; c < C; c += 8) {
    const __m256 k = _mm256_loadu_ps(K + c);
    __m256 s1 = _mm256_loadu_ps(a1 + c), s2 = _mm256_loadu_ps(a2 + c);
    for (int64_t r = 0; r < rows; r++) {
      const __m256 d = _mm256_sub_ps(ld16(p + r * C + c, f16), k);
      s1 = _mm256_add_ps(s1, d);
      s2 = _mm256_add_ps(s2, _mm256_mul_ps(d, d));
    }
    _mm256_storeu_ps(a1 + c, s1);
    _mm256_storeu_ps(a2 + c, s2);
  }
}

BN16_TARGET void loom_bn16_apply_rows(const uint16_t *p, uint16_t *q, int64_t rows, int64_t C, const float *sc,
                                      const float *sh, bool relu, loom_dtype dt) {
  const bool f16 = dt == LOOM_F16;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < C; c += 8) {
      __m256 v = pre8(ld16(p + r * C + c, f16), _mm256_loadu_ps(sc + c), _mm256_loadu_ps(sh + c));
      if (relu) v = mask_pos(v, v);
      st16(q + r * C + c, v, f16);
    }
}

BN16_TARGET void loom_bn16_acc_grad_rows(const uint16_t *g, const uint16_t *x, int64_t rows, int64_t C,
                                         const float *mean, const float *sc, const float *sh, bool relu, float *a1,
                                         float *a2, loom_dtype dt) {
  const bool f16 = dt == LOOM_F16;
  for (int64_t c = 0; c < C; c += 8) {
    const __m256 m = _mm256_loadu_ps(mean + c), s = _mm256_loadu_ps(sc + c), h = _mm256_loadu_ps(sh + c);
    __m256 s1 = _mm256_loadu_ps(a1 + c), s2 = _mm256_loadu_ps(a2 + c);
    for (int64_t r = 0; r < rows; r++) {
      const __m256 xv = ld16(x + r * C + c, f16);
      __m256 gv = ld16(g + r * C + c, f16);
      if (relu) gv = mask_pos(pre8(xv, s, h), gv);
      s1 = _mm256_add_ps(s1, gv);
      s2 = _mm256_add_ps(s2, _mm256_mul_ps(gv, _mm256_sub_ps(xv, m)));
    }
    _mm256_storeu_ps(a1 + c, s1);
    _mm256_storeu_ps(a2 + c, s2);
  }
}

BN16_TARGET void loom_bn16_dx_rows(const uint16_t *g, const uint16_t *x, uint16_t *dx, int64_t rows, int64_t C,
                                   const float *mean, const float *sc, const float *sh, bool relu, const float *k,
                                   const float *q, const float *r, loom_dtype dt) {
  const bool f16 = dt == LOOM_F16;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t c = 0; c < C; c += 8) {
      const __m256 xv = ld16(x + i * C + c, f16);
      __m256 gv = ld16(g + i * C + c, f16);
      if (relu) gv = mask_pos(pre8(xv, _mm256_loadu_ps(sc + c), _mm256_loadu_ps(sh + c)), gv);
      const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(q + c), _mm256_sub_ps(xv, _mm256_loadu_ps(mean + c)));
      st16(dx + i * C + c,
           _mm256_sub_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(k + c), gv), t), _mm256_loadu_ps(r + c)), f16);
    }
}
#else
bool loom_bn16_avx2_ok(loom_dtype dt, int64_t C) {
  (void)dt, (void)C;
  return false;
}
void loom_bn16_acc_rows_shifted(const uint16_t *p, int64_t rows, int64_t C, const float *K, float *a1, float *a2,
                                loom_dtype dt) {
  (void)p, (void)rows, (void)C, (void)K, (void)a1, (void)a2, (void)dt;
}
void loom_bn16_apply_rows(const uint16_t *p, uint16_t *q, int64_t rows, int64_t C, const float *sc, const float *sh,
                          bool relu, loom_dtype dt) {
  (void)p, (void)q, (void)rows, (void)C, (void)sc, (void)sh, (void)relu, (void)dt;
}
void loom_bn16_acc_grad_rows(const uint16_t *g, const uint16_t *x, int64_t rows, int64_t C, const float *mean,
                             const float *sc, const float *sh, bool relu, float *a1, float *a2, loom_dtype dt) {
  (void)g, (void)x, (void)rows, (void)C, (void)mean, (void)sc, (void)sh, (void)relu, (void)a1, (void)a2, (void)dt;
}
void loom_bn16_dx_rows(const uint16_t *g, const uint16_t *x, uint16_t *dx, int64_t rows, int64_t C, const float *mean,
                       const float *sc, const float *sh, bool relu, const float *k, const float *q, const float *r,
                       loom_dtype dt) {
  (void)g, (void)x, (void)dx, (void)rows, (void)C, (void)mean, (void)sc, (void)sh, (void)relu, (void)k, (void)q,
      (void)r, (void)dt;
}
#endif
