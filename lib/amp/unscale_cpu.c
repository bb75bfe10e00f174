/* unscale_cpu.c — the CPU kernel of the one-pass unscale + non-finite check
 * over all gradients (the CPU twin of unscale.cu). Each value is widened to
 * f32 exactly (lib/core/half.h, bit-exact with the GPU), multiplied by
 * 1/scale in f32, optionally added to the master gradient, stored, and
 * tested for finiteness in the same loop. With the CPU kernels' instruction
 * set at avx2 or wider the loop runs 8 lanes at a time, 16-bit values
 * widened in registers (the same multiply and add per element; compiled
 * without contraction: the same bits). */
#include <math.h>
#include <string.h>
#include <omp.h>

#include "amp/amp_internal.h"
#include "core/half.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_util.h"

#define CHUNK 16384  /* elements per work item: items are split so threads balance */

/* d[j] = s[j] * inv (+ d[j] when accumulating) for j < n; nonzero if a
 * result is not finite. d_first: the sum as d[j] + s[j] * inv (the f32
 * branch's order; it decides which NaN payload survives NaN + NaN). */
static int unscale_run_scalar(const float *s, float *d, int64_t n, float inv, bool acc, bool d_first) {
  int bad = 0;
  for (int64_t j = 0; j < n; j++) {
    float v = s[j] * inv;
    if (acc) v = d_first ? d[j] + v : v + d[j];
    d[j] = v;
    bad |= !isfinite(v);
  }
  return bad;
}

#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/cpu/bf16_simd.h"
__attribute__((target("avx2"))) static int unscale_run_avx2(const float *s, float *d, int64_t n, float inv,
                                                            bool acc, bool d_first) {
  const __m256 vi = _mm256_set1_ps(inv);
  const __m256i expo = _mm256_set1_epi32(0x7f800000);
  __m256i bad = _mm256_setzero_si256();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + j), vi);
    if (acc) v = d_first ? _mm256_add_ps(_mm256_loadu_ps(d + j), v) : _mm256_add_ps(v, _mm256_loadu_ps(d + j));
    _mm256_storeu_ps(d + j, v);
    /* Not finite: all exponent bits set. */
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), expo), expo));
  }
  return (_mm256_testz_si256(bad, bad) == 0) | unscale_run_scalar(s + j, d + j, n - j, inv, acc, d_first);
}
static int unscale_run(const float *s, float *d, int64_t n, float inv, bool acc, bool d_first) {
  if (loom_cpu_isa_level_now() >= LOOM_CPU_ISA_AVX2) return unscale_run_avx2(s, d, n, inv, acc, d_first);
  return unscale_run_scalar(s, d, n, inv, acc, d_first);
}
/* A 16-bit run (f16 when is_f16, else bf16) widened in registers (exact,
 * as half.h), then unscale_run_avx2's multiply, add (v + d) and check: the
 * same bits as widening into a buffer first, in one pass. */
__attribute__((target("avx2,f16c"))) static int unscale16_run_avx2(const uint16_t *s, bool is_f16, float *d,
                                                                    int64_t n, float inv, bool acc) {
  const __m256 vi = _mm256_set1_ps(inv);
  const __m256i expo = _mm256_set1_epi32(0x7f800000);
  __m256i bad = _mm256_setzero_si256();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_mul_ps(loom_widen8_16_avx2(s + j, is_f16), vi);
    if (acc) v = _mm256_add_ps(v, _mm256_loadu_ps(d + j));
    _mm256_storeu_ps(d + j, v);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), expo), expo));
  }
  float w[8];
  for (int64_t t = j; t < n; t++) w[t - j] = is_f16 ? loom_half_to_f32(s[t]) : loom_bfloat_to_f32(s[t]);
  return (_mm256_testz_si256(bad, bad) == 0) | unscale_run_scalar(w, d + j, n - j, inv, acc, false);
}
static bool unscale16_avx2_runs(int32_t dt) {
  return loom_cpu_isa_level_now() >= LOOM_CPU_ISA_AVX2 && (dt == LOOM_BF16 || loom_cpu_f16c());
}
#else
static bool unscale16_avx2_runs(int32_t dt) { (void)dt; return false; }
static int unscale_run(const float *s, float *d, int64_t n, float inv, bool acc, bool d_first) {
  return unscale_run_scalar(s, d, n, inv, acc, d_first);
}
#endif

/* Whether elements [j0, j1) of a 16-bit run are all finite (exponent
 * bits not all set), four at a time in 64-bit words (the library is built
 * for baseline x86-64, where SSE2 has no unsigned 16-bit max to vectorize
 * a plain loop with). */
static bool all_finite16(const void *src, int32_t dt, int64_t j0, int64_t j1) {
  const uint16_t *h = (const uint16_t *)src + j0;
  const int64_t n = j1 - j0;
  const uint16_t m = dt == LOOM_F16 ? 0x7c00 : 0x7f80;
  /* Four lanes per 64-bit word: x's lane is 0 exactly where the exponent
   * is all ones; m leaves bit 15 clear, so the zero-lane test is exact. */
  const uint64_t M = m * 0x0001000100010001ull, lo = 0x0001000100010001ull, hi = 0x8000800080008000ull;
  uint64_t any = 0;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    uint64_t w;
    memcpy(&w, h + j, sizeof w);
    const uint64_t x = (w & M) ^ M;
    any |= (x - lo) & ~x & hi;
  }
  for (; j < n; j++) any |= (h[j] & m) == m;
  return any == 0;
}

/* Returns nonzero if a non-finite value was written. */
static int run_chunk(const loom_amp_unscale_item *it, int64_t j0, int64_t j1, float inv) {
  int bad = 0;
  float *d = it->dst;
  if (it->src_dtype == LOOM_F32) {
    const float *s = it->src;
    bad = unscale_run(s + j0, d + j0, j1 - j0, inv, it->accumulate, true);
  } else if (unscale16_avx2_runs(it->src_dtype)) {
#if defined(__x86_64__)
    bad = unscale16_run_avx2((const uint16_t *)it->src + j0, it->src_dtype == LOOM_F16, d + j0, j1 - j0, inv,
                             it->accumulate);
#endif
  } else if (inv == 1.0f && !it->accumulate && all_finite16(it->src, it->src_dtype, j0, j1)) {
    /* The mixed-precision step without loss scaling (bf16): the master
     * gradient is the copy's, widened. The same bits as the run below
     * (x * 1 == x for finite x), in one pass. */
    loom_cpu_widen_fn_for(it->src_dtype)((const uint16_t *)it->src + j0, d + j0, j1 - j0);
  } else {
    /* Widen runs through the CPU kernels' conversion (F16C for f16, AVX2
     * for bf16: exact, like half.h), then the f32 run. */
    float w[1024];
    const char *src = it->src;
    for (int64_t b = j0; b < j1; b += 1024) {
      const int64_t n = j1 - b < 1024 ? j1 - b : 1024;
      loom_cpu_load_f32(src + (size_t)b * loom_dtype_size(it->src_dtype), it->src_dtype, 1, n, w);
      bad |= unscale_run(w, d + b, n, inv, it->accumulate, false);
    }
  }
  return bad;
}

void loom_cpu_amp_widen_grad(const uint16_t *src, loom_dtype dt, float *dst, int64_t n) {
  const loom_amp_unscale_item it = {src, dst, n, (int32_t)dt, 0};
  (void)run_chunk(&it, 0, n, 1.0f);
}

loom_status loom_cpu_amp_unscale(const loom_amp_unscale_item *items, int n, float inv_scale, int *found_inf) {
  /* Flatten (item, chunk) pairs into one index space so one parallel loop
   * covers every tensor, big or small. */
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += (items[i].numel + CHUNK - 1) / CHUNK;
  int bad = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : bad) if (total > 1)
  for (int64_t c = 0; c < total; c++) {
    /* Find the item of chunk c (n is small: a linear walk is fine). */
    int64_t k = c;
    int i = 0;
    for (; i < n; i++) {
      int64_t nc = (items[i].numel + CHUNK - 1) / CHUNK;
      if (k < nc) break;
      k -= nc;
    }
    int64_t j0 = k * CHUNK, j1 = j0 + CHUNK < items[i].numel ? j0 + CHUNK : items[i].numel;
    bad |= run_chunk(&items[i], j0, j1, inv_scale);
  }
  if (bad && found_inf) *found_inf = 1;
  return LOOM_OK;
}
