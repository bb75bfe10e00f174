/* test_sum_f64.c — the CPU reductions' f64 lane sums (ops/cpu/sum_f64.h)
 * and the sums built on them:
 *  - each lane sum gives the bits of its definition, written out here as
 *    the plain loop (element j into lane j % 8, lanes added pairwise), at
 *    lengths around the 8-wide body and its tail, and is close to a long
 *    double sum;
 *  - loom_sum over one long row (its chunks split over the threads) gives
 *    the bits of the same row summed as one of two rows (one thread per
 *    row) and of the same call on one thread, and is close to long double;
 *  - layer_norm forward and backward give the same bits on 1 and 2 threads
 *    (their row sums run in these lanes). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loom/loom.h"
#include "ops/cpu/sum_f64.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float rndf(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  const double u = (double)(rng >> 11) / 9007199254740992.0; /* [0, 1) */
  /* Mixed magnitudes, both signs: rounding differences would show. */
  return (float)((u - 0.3) * ldexp(1.0, (int)(rng % 13) - 6));
}
static float *rnd_vec(int64_t n) {
  float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  cr_assert_not_null(v);
  for (int64_t j = 0; j < n; j++) v[j] = rndf();
  return v;
}
static double pairwise(const double *l) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])); }

static const int64_t LENS[] = {0, 1, 7, 8, 9, 15, 16, 17, 383, 384, 4099, 100003};

Test(sum_f64, lane_sums_match_their_definition) {
  for (size_t t = 0; t < sizeof LENS / sizeof LENS[0]; t++) {
    const int64_t n = LENS[t];
    float *r = rnd_vec(n), *x = rnd_vec(n);
    const double mean = 0.0625;
    double s[8] = {0}, q[8] = {0}, g[8] = {0}, gx[8] = {0};
    long double ls = 0, lq = 0, lgx = 0, mag = 0;
    for (int64_t j = 0; j < n; j++) {
      const double d = (double)r[j] - mean;
      s[j % 8] += r[j], q[j % 8] += d * d, g[j % 8] += r[j], gx[j % 8] += (double)r[j] * x[j];
      ls += r[j], lq += (long double)d * d, lgx += (long double)r[j] * x[j], mag += fabsl((long double)r[j]);
    }
    const double got_s = loom_cpu_sum_f64(r, n), got_q = loom_cpu_sum_sq_dev_f64(r, n, mean);
    double got_g, got_gx;
    loom_cpu_sum_dot_f64(r, x, n, &got_g, &got_gx);
    cr_assert(got_s == pairwise(s), "n=%lld: sum %.17g, definition %.17g", (long long)n, got_s, pairwise(s));
    cr_assert(got_q == pairwise(q), "n=%lld: squared deviations %.17g, definition %.17g", (long long)n, got_q,
              pairwise(q));
    cr_assert(got_g == pairwise(g) && got_gx == pairwise(gx), "n=%lld: dot sums %.17g %.17g, definition %.17g %.17g",
              (long long)n, got_g, got_gx, pairwise(g), pairwise(gx));
    /* f64 sums of f32 values: relative to the magnitudes, far below 1e-12. */
    cr_assert(fabsl(got_s - ls) <= 1e-12L * (mag + 1), "n=%lld: sum %.17g, long double %.17Lg", (long long)n, got_s, ls);
    cr_assert(fabsl(got_q - lq) <= 1e-12L * (lq + 1), "n=%lld", (long long)n);
    cr_assert(fabsl(got_gx - lgx) <= 1e-12L * (mag + 1), "n=%lld", (long long)n);
    free(r), free(x);
  }
}

/* sum over dim 1 of an [rows, n] tensor whose rows are all v, on threads. */
static float *row_sums(const float *v, int64_t rows, int64_t n, int threads) {
  loom_set_num_threads(threads);
  loom_scope_begin();
  float *all = malloc((size_t)(rows * n) * sizeof *all), *out = malloc((size_t)rows * sizeof *out);
  cr_assert(all && out);
  for (int64_t r = 0; r < rows; r++) memcpy(all + r * n, v, (size_t)n * sizeof *v);
  int64_t shape[2] = {rows, n};
  const int dim = 1;
  loom_tensor *x = loom_from_host(all, 2, shape, LOOM_F32, loom_cpu());
  cr_assert_not_null(x, "%s", loom_last_error());
  loom_tensor *s = loom_sum(x, 1, &dim, false);
  cr_assert_not_null(s, "%s", loom_last_error());
  cr_assert_eq(loom_to_host(s, out, (size_t)rows * sizeof *out, LOOM_F32), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
  loom_set_num_threads(0);
  free(all);
  return out;
}

Test(sum_f64, long_row_sum_does_not_depend_on_threads) {
  const int64_t n = 1000003; /* 245 chunks of 4096 and a short one */
  float *v = rnd_vec(n);
  /* Cancelling giants in chunks 0 and 1: in f64 each absorbs its chunk's
   * small values differently, so adding the chunks in any other order
   * would change the result's f32 bits. */
  v[5] = 0x1p60f, v[4096 + 5] = -0x1p60f;
  float *one = row_sums(v, 1, n, 1), *two = row_sums(v, 1, n, 2), *rows2 = row_sums(v, 2, n, 2);
  cr_assert(one[0] == two[0], "1 thread %.9g, 2 threads %.9g", one[0], two[0]);
  cr_assert(one[0] == rows2[0] && rows2[0] == rows2[1], "one long row %.9g, as one of two rows %.9g %.9g", one[0],
            rows2[0], rows2[1]);
  long double ref = 0, mag = 0;
  for (int64_t j = 0; j < n; j++) ref += v[j], mag += fabsl((long double)v[j]);
  /* The f64 sum rounded once to f32. */
  cr_assert(fabsl(one[0] - ref) <= 1e-7L * fabsl(ref) + 1e-12L * mag, "%.9g, long double %.12Lg", one[0], ref);
  free(v), free(one), free(two), free(rows2);
}

/* y = layer_norm(x, w, b) and the gradients of sum(y * x): bits on threads. */
static void ln_run(int threads, float **out) {
  loom_set_num_threads(threads);
  loom_scope_begin();
  rng = 77;
  const int64_t R = 700, D = 389, sx[2] = {R, D}; /* D: an 8-wide body and a tail */
  float *xv = rnd_vec(R * D), *wv = rnd_vec(D), *bv = rnd_vec(D);
  loom_tensor *x = loom_from_host(xv, 2, sx, LOOM_F32, loom_cpu()), *w = loom_from_host(wv, 1, &D, LOOM_F32, loom_cpu());
  loom_tensor *b = loom_from_host(bv, 1, &D, LOOM_F32, loom_cpu());
  cr_assert(x && w && b, "%s", loom_last_error());
  loom_set_requires_grad(x, true), loom_set_requires_grad(w, true), loom_set_requires_grad(b, true);
  loom_tensor *y = loom_layer_norm(x, w, b, 1e-5);
  cr_assert_not_null(y, "%s", loom_last_error());
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul(y, x))), LOOM_OK, "%s", loom_last_error());
  loom_tensor *t[4] = {y, loom_grad(x), loom_grad(w), loom_grad(b)};
  const int64_t n[4] = {R * D, R * D, D, D};
  for (int k = 0; k < 4; k++) {
    out[k] = malloc((size_t)n[k] * sizeof(float));
    cr_assert(out[k] && t[k]);
    cr_assert_eq(loom_to_host(t[k], out[k], (size_t)n[k] * sizeof(float), LOOM_F32), LOOM_OK, "%s", loom_last_error());
  }
  loom_scope_end();
  loom_set_num_threads(0);
  free(xv), free(wv), free(bv);
}

Test(sum_f64, layer_norm_does_not_depend_on_threads) {
  float *one[4], *two[4];
  ln_run(1, one);
  ln_run(2, two);
  const int64_t n[4] = {700 * 389, 700 * 389, 389, 389};
  static const char *names[4] = {"y", "dx", "dweight", "dbias"};
  for (int k = 0; k < 4; k++) {
    cr_assert(!memcmp(one[k], two[k], (size_t)n[k] * sizeof(float)), "layer_norm %s differs between 1 and 2 threads",
              names[k]);
    free(one[k]), free(two[k]);
  }
}
