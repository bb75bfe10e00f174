/* sum_f64.c — sums of f32 runs in f64 in LANES independent accumulators
 * (element j in lane j % LANES), added pairwise in a fixed order at the end
 * (sum_f64.h). One accumulator is a chain of dependent adds, four cycles
 * each; eight lanes run at the adder's throughput, and the result depends
 * only on n, never on threads. */
#include "ops/cpu/sum_f64.h"

#define LANES 8

/* The lanes added pairwise, in a fixed order. */
static double lanes_total(const double *l) {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* The sums below: element j goes to lane j % LANES. SSE2 (every x86-64)
 * holds lanes 2k, 2k+1 in register k and does the same adds in the same
 * order as the portable loops: the same bits. */
#if defined(__SSE2__)
#include <emmintrin.h>
/* Elements [j, j+8) of r as f64, lanes 2k and 2k+1 in d[k]. */
static void widen8(const float *r, __m128d d[4]) {
  const __m128 lo = _mm_loadu_ps(r), hi = _mm_loadu_ps(r + 4);
  d[0] = _mm_cvtps_pd(lo), d[1] = _mm_cvtps_pd(_mm_movehl_ps(lo, lo));
  d[2] = _mm_cvtps_pd(hi), d[3] = _mm_cvtps_pd(_mm_movehl_ps(hi, hi));
}
static void store_lanes(double *l, const __m128d a[4]) {
  for (int k = 0; k < 4; k++) _mm_storeu_pd(l + 2 * k, a[k]);
}
#endif

double loom_cpu_sum_f64(const float *restrict r, int64_t n) {
  double l[LANES] = {0};
  int64_t j = 0;
#if defined(__SSE2__)
  __m128d a[4] = {_mm_setzero_pd(), _mm_setzero_pd(), _mm_setzero_pd(), _mm_setzero_pd()}, v[4];
  for (; j + LANES <= n; j += LANES) {
    widen8(r + j, v);
    for (int k = 0; k < 4; k++) a[k] = _mm_add_pd(a[k], v[k]);
  }
  store_lanes(l, a);
#else
  for (; j + LANES <= n; j += LANES)
    for (int k = 0; k < LANES; k++) l[k] += r[j + k];
#endif
  for (; j < n; j++) l[j % LANES] += r[j];
  return lanes_total(l);
}

double loom_cpu_sum_sq_dev_f64(const float *restrict r, int64_t n, double mean) {
  double l[LANES] = {0};
  int64_t j = 0;
#if defined(__SSE2__)
  const __m128d m = _mm_set1_pd(mean);
  __m128d a[4] = {_mm_setzero_pd(), _mm_setzero_pd(), _mm_setzero_pd(), _mm_setzero_pd()}, v[4];
  for (; j + LANES <= n; j += LANES) {
    widen8(r + j, v);
    for (int k = 0; k < 4; k++) {
      const __m128d d = _mm_sub_pd(v[k], m);
      a[k] = _mm_add_pd(a[k], _mm_mul_pd(d, d));
    }
  }
  store_lanes(l, a);
#else
  for (; j + LANES <= n; j += LANES)
    for (int k = 0; k < LANES; k++) {
      const double d = (double)r[j + k] - mean;
      l[k] += d * d;
    }
#endif
  for (; j < n; j++) {
    const double d = (double)r[j] - mean;
    l[j % LANES] += d * d;
  }
  return lanes_total(l);
}

void loom_cpu_sum_dot_f64(const float *restrict g, const float *restrict x, int64_t n, double *sg, double *sgx) {
  double a[LANES] = {0}, b[LANES] = {0};
  int64_t j = 0;
#if defined(__SSE2__)
  __m128d va[4] = {_mm_setzero_pd(), _mm_setzero_pd(), _mm_setzero_pd(), _mm_setzero_pd()};
  __m128d vb[4] = {va[0], va[0], va[0], va[0]}, gd[4], xd[4];
  for (; j + LANES <= n; j += LANES) {
    widen8(g + j, gd);
    widen8(x + j, xd);
    for (int k = 0; k < 4; k++) {
      va[k] = _mm_add_pd(va[k], gd[k]);
      vb[k] = _mm_add_pd(vb[k], _mm_mul_pd(gd[k], xd[k]));
    }
  }
  store_lanes(a, va);
  store_lanes(b, vb);
#else
  for (; j + LANES <= n; j += LANES)
    for (int k = 0; k < LANES; k++) {
      a[k] += g[j + k];
      b[k] += (double)g[j + k] * x[j + k];
    }
#endif
  for (; j < n; j++) {
    a[j % LANES] += g[j];
    b[j % LANES] += (double)g[j] * x[j];
  }
  *sg = lanes_total(a);
  *sgx = lanes_total(b);
}
