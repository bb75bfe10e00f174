/* batch_norm_x86.c — the AVX2 row loops of batch_norm_x86.h. The portable
 * NHWC loops (batch_norm_cpu.c) keep the per-channel sums in memory and
 * walk a row's channels innermost, so every row goes through a store and a
 * reload of each sum (baseline x86-64: 4 lanes); on 16-bit data each block
 * was first widened into an f32 buffer and the result rounded from a
 * second one (bf16 training forward 1.8x its f32 time, bench_cnn_ops).
 * Here a group of 8 channels is walked down the rows with its sums in
 * registers, 16-bit values widened and rounded in registers; the
 * arithmetic is the portable loops' own, operation for operation. Each
 * loop is instantiated per dtype (always_inline, the dtype a constant). */
#include "ops/cpu/batch_norm_x86.h"

#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/ew16_x86.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/cpu/bf16_simd.h"

#define BN_TARGET __attribute__((target("avx2,f16c")))
#define BN_INLINE __attribute__((target("avx2,f16c"), always_inline)) static inline

bool loom_bn_avx2_ok(loom_dtype dt, int64_t C) {
  if (C <= 0 || C % 8) return false;
  if (dt == LOOM_F32) return loom_cpu_isa_level_now() >= LOOM_CPU_ISA_AVX2;
  return loom_ew16_avx2_ok(dt);
}

/* 8 values at element i of p (dtype dt: f32, f16 or bf16) as f32. */
BN_INLINE __m256 ld8(const void *p, int64_t i, loom_dtype dt) {
  if (dt == LOOM_F32) return _mm256_loadu_ps((const float *)p + i);
  return loom_widen8_16_avx2((const uint16_t *)p + i, dt == LOOM_F16);
}

BN_INLINE void st8(void *p, int64_t i, __m256 x, loom_dtype dt) {
  if (dt == LOOM_F32) _mm256_storeu_ps((float *)p + i, x);
  else loom_narrow8_16_avx2((uint16_t *)p + i, x, dt == LOOM_F16);
}

/* loom_bn_pre(x) = x * sc + sh, multiplied then added (cnn_math.h). */
BN_INLINE __m256 pre8(__m256 x, __m256 sc, __m256 sh) { return _mm256_add_ps(_mm256_mul_ps(x, sc), sh); }

/* v > 0 ? g : 0 */
BN_INLINE __m256 mask_pos(__m256 v, __m256 g) { return _mm256_and_ps(g, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ)); }

BN_INLINE void acc_shifted(const void *p, int64_t rows, int64_t C, const float *K, float *a1, float *a2,
                           loom_dtype dt) {
  for (int64_t c = 0; c < C; c += 8) {
    const __m256 k = _mm256_loadu_ps(K + c);
    __m256 s1 = _mm256_loadu_ps(a1 + c), s2 = _mm256_loadu_ps(a2 + c);
    for (int64_t r = 0; r < rows; r++) {
      const __m256 d = _mm256_sub_ps(ld8(p, r * C + c, dt), k);
      s1 = _mm256_add_ps(s1, d);
      s2 = _mm256_add_ps(s2, _mm256_mul_ps(d, d));
    }
    _mm256_storeu_ps(a1 + c, s1);
    _mm256_storeu_ps(a2 + c, s2);
  }
}

BN_INLINE void apply(const void *p, void *q, int64_t rows, int64_t C, const float *sc, const float *sh, bool relu,
                     loom_dtype dt) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < C; c += 8) {
      __m256 v = pre8(ld8(p, r * C + c, dt), _mm256_loadu_ps(sc + c), _mm256_loadu_ps(sh + c));
      if (relu) v = mask_pos(v, v);
      st8(q, r * C + c, v, dt);
    }
}

BN_INLINE void acc_grad(const void *g, const void *x, int64_t rows, int64_t C, const float *mean, const float *sc,
                        const float *sh, bool relu, float *a1, float *a2, loom_dtype dt) {
  for (int64_t c = 0; c < C; c += 8) {
    const __m256 m = _mm256_loadu_ps(mean + c), s = _mm256_loadu_ps(sc + c), h = _mm256_loadu_ps(sh + c);
    __m256 s1 = _mm256_loadu_ps(a1 + c), s2 = _mm256_loadu_ps(a2 + c);
    for (int64_t r = 0; r < rows; r++) {
      const __m256 xv = ld8(x, r * C + c, dt);
      __m256 gv = ld8(g, r * C + c, dt);
      if (relu) gv = mask_pos(pre8(xv, s, h), gv);
      s1 = _mm256_add_ps(s1, gv);
      s2 = _mm256_add_ps(s2, _mm256_mul_ps(gv, _mm256_sub_ps(xv, m)));
    }
    _mm256_storeu_ps(a1 + c, s1);
    _mm256_storeu_ps(a2 + c, s2);
  }
}

BN_INLINE void dx_rows(const void *g, const void *x, void *dx, int64_t rows, int64_t C, const float *mean,
                       const float *sc, const float *sh, bool relu, const float *k, const float *q, const float *r,
                       loom_dtype dt) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t c = 0; c < C; c += 8) {
      const __m256 xv = ld8(x, i * C + c, dt);
      __m256 gv = ld8(g, i * C + c, dt);
      if (relu) gv = mask_pos(pre8(xv, _mm256_loadu_ps(sc + c), _mm256_loadu_ps(sh + c)), gv);
      const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(q + c), _mm256_sub_ps(xv, _mm256_loadu_ps(mean + c)));
      st8(dx, i * C + c,
          _mm256_sub_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(k + c), gv), t), _mm256_loadu_ps(r + c)), dt);
    }
}

/* The entry points: one instance per dtype. */
#define BY_DTYPE(dt, CALL)                   \
  switch (dt) {                              \
    case LOOM_F32: CALL(LOOM_F32); break;    \
    case LOOM_F16: CALL(LOOM_F16); break;    \
    default: CALL(LOOM_BF16); break;         \
  }

BN_TARGET void loom_bn_acc_rows_shifted_avx2(const void *p, int64_t rows, int64_t C, const float *K, float *a1,
                                             float *a2, loom_dtype dt) {
#define CALL(D) acc_shifted(p, rows, C, K, a1, a2, D)
  BY_DTYPE(dt, CALL)
#undef CALL
}

BN_TARGET void loom_bn_apply_rows_avx2(const void *p, void *q, int64_t rows, int64_t C, const float *sc,
                                       const float *sh, bool relu, loom_dtype dt) {
#define CALL(D) apply(p, q, rows, C, sc, sh, relu, D)
  BY_DTYPE(dt, CALL)
#undef CALL
}

BN_TARGET void loom_bn_acc_grad_rows_avx2(const void *g, const void *x, int64_t rows, int64_t C, const float *mean,
                                          const float *sc, const float *sh, bool relu, float *a1, float *a2,
                                          loom_dtype dt) {
#define CALL(D) acc_grad(g, x, rows, C, mean, sc, sh, relu, a1, a2, D)
  BY_DTYPE(dt, CALL)
#undef CALL
}

BN_TARGET void loom_bn_dx_rows_avx2(const void *g, const void *x, void *dx, int64_t rows, int64_t C,
                                    const float *mean, const float *sc, const float *sh, bool relu, const float *k,
                                    const float *q, const float *r, loom_dtype dt) {
#define CALL(D) dx_rows(g, x, dx, rows, C, mean, sc, sh, relu, k, q, r, D)
  BY_DTYPE(dt, CALL)
#undef CALL
}
#else
bool loom_bn_avx2_ok(loom_dtype dt, int64_t C) {
  (void)dt, (void)C;
  return false;
}
void loom_bn_acc_rows_shifted_avx2(const void *p, int64_t rows, int64_t C, const float *K, float *a1, float *a2,
                                   loom_dtype dt) {
  (void)p, (void)rows, (void)C, (void)K, (void)a1, (void)a2, (void)dt;
}
void loom_bn_apply_rows_avx2(const void *p, void *q, int64_t rows, int64_t C, const float *sc, const float *sh,
                             bool relu, loom_dtype dt) {
  (void)p, (void)q, (void)rows, (void)C, (void)sc, (void)sh, (void)relu, (void)dt;
}
void loom_bn_acc_grad_rows_avx2(const void *g, const void *x, int64_t rows, int64_t C, const float *mean,
                                const float *sc, const float *sh, bool relu, float *a1, float *a2, loom_dtype dt) {
  (void)g, (void)x, (void)rows, (void)C, (void)mean, (void)sc, (void)sh, (void)relu, (void)a1, (void)a2, (void)dt;
}
void loom_bn_dx_rows_avx2(const void *g, const void *x, void *dx, int64_t rows, int64_t C, const float *mean,
                          const float *sc, const float *sh, bool relu, const float *k, const float *q, const float *r,
                          loom_dtype dt) {
  (void)g, (void)x, (void)dx, (void)rows, (void)C, (void)mean, (void)sc, (void)sh, (void)relu, (void)k, (void)q,
      (void)r, (void)dt;
}
#endif
