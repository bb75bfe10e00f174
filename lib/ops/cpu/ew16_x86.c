/* ew16_x86.c — the one-pass AVX2 runs of ew16_x86.h: contiguous f16/bf16
 * add, sub, mul, div, add + ReLU and the ReLU gradient mask. The buffered
 * runs they replace widened each operand into a 4096-value f32 buffer,
 * computed, and rounded from a third buffer: three 16 KiB buffers that no
 * longer fit L1 beside the data, and four passes (a bf16 residual join took
 * 4x its f32 time; bench/cnn_ops). Here each group of 8 is widened,
 * computed and rounded in registers; a tail of fewer than 8 goes through
 * the same code on a padded copy. Widening and rounding are bf16_simd.h's
 * (bf16) and F16C's (f16), which cpu_util.c's runs use: the same bits. */
#include "ops/cpu/ew16_x86.h"

#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_util.h"
#include "ops/elementwise_math.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "ops/cpu/bf16_simd.h"

#define EW16_TARGET __attribute__((target("avx2,f16c")))

bool loom_ew16_avx2_ok(loom_dtype dt) {
  if (dt != LOOM_BF16 && dt != LOOM_F16) return false;
  if (loom_cpu_isa_level_now() < LOOM_CPU_ISA_AVX2) return false;
  return dt == LOOM_BF16 || loom_cpu_f16c();
}

/* The f32 operation of each kernel on 8 lanes. */
enum { K_ADD, K_SUB, K_MUL, K_DIV, K_ADD_RELU, K_RELU_MASK };

EW16_TARGET static inline __m256 op8(int k, __m256 x, __m256 y) {
  const __m256 zero = _mm256_setzero_ps();
  switch (k) {
    case K_ADD: return _mm256_add_ps(x, y);
    case K_SUB: return _mm256_sub_ps(x, y);
    case K_MUL: return _mm256_mul_ps(x, y);
    case K_DIV: return _mm256_div_ps(x, y);
    case K_ADD_RELU: {
      /* s > 0 ? s : 0 (a NaN sum gives 0, -0 gives +0). */
      const __m256 s = _mm256_add_ps(x, y);
      return _mm256_and_ps(s, _mm256_cmp_ps(s, zero, _CMP_GT_OQ));
    }
    default: /* K_RELU_MASK: x the gradient, y the output: y > 0 ? x : 0 */
      return _mm256_and_ps(x, _mm256_cmp_ps(y, zero, _CMP_GT_OQ));
  }
}

/* The kernels are instantiated per operation (k a constant after inlining),
 * so no switch runs per element. */
__attribute__((target("avx2,f16c"), always_inline)) static inline void run(int k, const uint16_t *a,
                                                                           const uint16_t *b, uint16_t *o,
                                                                           uint16_t *o1, int64_t n, bool f16) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 r = op8(k, loom_widen8_16_avx2(a + j, f16), loom_widen8_16_avx2(b + j, f16));
    loom_narrow8_16_avx2(o + j, r, f16);
    if (o1) loom_narrow8_16_avx2(o1 + j, r, f16);
  }
  if (j < n) {
    /* Zero padding is harmless: its lanes are computed and dropped. */
    uint16_t ta[8] = {0}, tb[8] = {0}, to[8];
    const size_t m = (size_t)(n - j);
    memcpy(ta, a + j, m * sizeof *ta);
    memcpy(tb, b + j, m * sizeof *tb);
    loom_narrow8_16_avx2(to, op8(k, loom_widen8_16_avx2(ta, f16), loom_widen8_16_avx2(tb, f16)), f16);
    memcpy(o + j, to, m * sizeof *to);
    if (o1) memcpy(o1 + j, to, m * sizeof *to);
  }
}

#define RUN_FN(NAME, K)                                                                                   \
  EW16_TARGET static void NAME(const uint16_t *a, const uint16_t *b, uint16_t *o, uint16_t *o1, int64_t n, \
                               bool f16) {                                                                 \
    run(K, a, b, o, o1, n, f16);                                                                           \
  }
RUN_FN(run_add, K_ADD)
RUN_FN(run_sub, K_SUB)
RUN_FN(run_mul, K_MUL)
RUN_FN(run_div, K_DIV)
RUN_FN(run_add_relu, K_ADD_RELU)
RUN_FN(run_relu_mask, K_RELU_MASK)

bool loom_ew16_binary_avx2(int op, const uint16_t *a, const uint16_t *b, uint16_t *o, int64_t n, loom_dtype dt) {
  const bool f16 = dt == LOOM_F16;
  switch (op) {
    case LOOM_EW_ADD: run_add(a, b, o, NULL, n, f16); return true;
    case LOOM_EW_SUB: run_sub(a, b, o, NULL, n, f16); return true;
    case LOOM_EW_MUL: run_mul(a, b, o, NULL, n, f16); return true;
    case LOOM_EW_DIV: run_div(a, b, o, NULL, n, f16); return true;
    default: return false;
  }
}

void loom_ew16_add_relu_avx2(const uint16_t *a, const uint16_t *b, uint16_t *o, int64_t n, loom_dtype dt) {
  run_add_relu(a, b, o, NULL, n, dt == LOOM_F16);
}

void loom_ew16_relu_mask_avx2(const uint16_t *g, const uint16_t *y, uint16_t *o, uint16_t *o1, int64_t n,
                              loom_dtype dt) {
  run_relu_mask(g, y, o, o1, n, dt == LOOM_F16);
}
#else
bool loom_ew16_avx2_ok(loom_dtype dt) {
  (void)dt;
  return false;
}
bool loom_ew16_binary_avx2(int op, const uint16_t *a, const uint16_t *b, uint16_t *o, int64_t n, loom_dtype dt) {
  (void)op, (void)a, (void)b, (void)o, (void)n, (void)dt;
  return false;
}
void loom_ew16_add_relu_avx2(const uint16_t *a, const uint16_t *b, uint16_t *o, int64_t n, loom_dtype dt) {
  (void)a, (void)b, (void)o, (void)n, (void)dt;
}
void loom_ew16_relu_mask_avx2(const uint16_t *g, const uint16_t *y, uint16_t *o, uint16_t *o1, int64_t n,
                              loom_dtype dt) {
  (void)g, (void)y, (void)o, (void)o1, (void)n, (void)dt;
}
#endif
