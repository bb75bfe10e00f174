/* test_ops_reduce.c — sum / mean / max over any set of dims (with and
 * without keepdim, negative dims, in full, on strided views, f32/f16/bf16)
 * and argmax (first index on ties), against a float64 reference; gradients
 * of sum, mean and max (ties split evenly) by finite differences. */
#include <math.h>
#include <stdlib.h>

#include "support/testkit.h"

enum { R_SUM, R_MEAN, R_MAX };

/* Reference reduction of v (shape nd/sh) over mask; out shape without kept dims. */
static double *ref_reduce(const double *v, int nd, const int64_t *sh, unsigned mask, int kind, int64_t *nout) {
  int64_t on = 1, cnt = 1;
  for (int d = 0; d < nd; d++) {
    if (mask >> d & 1) cnt *= sh[d];
    else on *= sh[d];
  }
  double *o = malloc((size_t)(on ? on : 1) * sizeof *o);
  for (int64_t i = 0; i < on; i++) o[i] = kind == R_MAX ? -INFINITY : 0;
  int64_t n = tk_numel(nd, sh);
  for (int64_t i = 0; i < n; i++) {
    int64_t rem = i, oi = 0, ostride = 1;
    for (int d = nd - 1; d >= 0; d--) {
      int64_t c = rem % sh[d];
      rem /= sh[d];
      if (!(mask >> d & 1)) {
        oi += c * ostride;
        ostride *= sh[d];
      }
    }
    if (kind == R_MAX) o[oi] = v[i] > o[oi] ? v[i] : o[oi];
    else o[oi] += v[i];
  }
  if (kind == R_MEAN)
    for (int64_t i = 0; i < on; i++) o[i] /= (double)cnt;
  *nout = on;
  return o;
}

static loom_tensor *do_reduce(int kind, loom_tensor *x, int nd, const int *dims, bool keep) {
  switch (kind) {
    case R_SUM: return loom_sum(x, nd, dims, keep);
    case R_MEAN: return loom_mean(x, nd, dims, keep);
    default: return loom_max(x, nd, dims, keep);
  }
}

typedef struct {
  int nd;
  int64_t sh[4];
  int ndims;
  int dims[4];
} red_case;

static const red_case RC[] = {
    {2, {5, 7}, 1, {1}},           /* rows (fast path) */
    {2, {5, 7}, 1, {0}},           /* columns (fast path) */
    {3, {3, 4, 5}, 1, {1}},        /* middle (gather path) */
    {3, {3, 4, 5}, 2, {0, 2}},     /* non-adjacent */
    {3, {3, 4, 5}, 2, {-1, -2}},   /* negative dims, trailing block */
    {4, {2, 3, 2, 3}, 0, {0}},     /* full */
    {1, {1031}, 1, {0}},           /* odd length */
    {2, {1, 6}, 1, {0}},           /* size-1 dim */
    {2, {1500, 1100}, 1, {0}},     /* columns over more than one 1024-chunk, parallel */
};

static void check_reduce(loom_device dev, loom_dtype dt, int kind) {
  tk_seed(31 + dt * 7 + kind);
  for (size_t c = 0; c < sizeof RC / sizeof RC[0]; c++) {
    const red_case *rc = &RC[c];
    if (dt != LOOM_F32 && tk_numel(rc->nd, rc->sh) > 100000) continue;
    double *v;
    loom_tensor *x = tk_rand_tensor(rc->nd, rc->sh, -3, 3, 0, dt, dev, &v);
    unsigned mask = 0;
    if (rc->ndims == 0) mask = (1u << rc->nd) - 1;
    for (int k = 0; k < rc->ndims; k++) mask |= 1u << ((rc->dims[k] + rc->nd) % rc->nd);
    int64_t on;
    double *want = ref_reduce(v, rc->nd, rc->sh, mask, kind, &on);
    for (int64_t i = 0; i < on; i++) want[i] = tk_round(want[i], dt);
    for (int keep = 0; keep < 2; keep++) {
      int64_t osh[4];
      int ond = 0;
      for (int d = 0; d < rc->nd; d++) {
        if (mask >> d & 1) {
          if (keep) osh[ond++] = 1;
        } else {
          osh[ond++] = rc->sh[d];
        }
      }
      char what[80];
      snprintf(what, sizeof what, "%s %s case %zu keepdim=%d", kind == R_SUM ? "sum" : kind == R_MEAN ? "mean" : "max",
               loom_dtype_name(dt), c, keep);
      /* sums of many rounded terms: relative to the sum of magnitudes */
      double atol = kind == R_MAX ? 0 : (dt == LOOM_F32 ? 1e-5 : 0.05) * sqrt((double)tk_numel(rc->nd, rc->sh)) / (kind == R_MEAN ? 10 : 1);
      tk_assert_tensor(do_reduce(kind, x, rc->ndims, rc->dims, keep), ond, osh, dt, want, atol, tk_rtol(dt) * 2, what);
    }
    free(v);
    free(want);
  }
}

DEVICE_TEST(reduce, sum_f32) { check_reduce(dev, LOOM_F32, R_SUM); }
DEVICE_TEST(reduce, mean_f32) { check_reduce(dev, LOOM_F32, R_MEAN); }
DEVICE_TEST(reduce, max_f32) { check_reduce(dev, LOOM_F32, R_MAX); }
DEVICE_TEST(reduce, sum_f16) { check_reduce(dev, LOOM_F16, R_SUM); }
DEVICE_TEST(reduce, max_bf16) { check_reduce(dev, LOOM_BF16, R_MAX); }
DEVICE_TEST(reduce, mean_bf16) { check_reduce(dev, LOOM_BF16, R_MEAN); }

DEVICE_TEST(reduce, full_reductions_are_0d) {
  int64_t s[2] = {3, 4};
  double *v;
  loom_tensor *x = tk_rand_tensor(2, s, -1, 1, 0, LOOM_F32, dev, &v);
  double sum = 0, mx = -INFINITY;
  for (int i = 0; i < 12; i++) {
    sum += v[i];
    mx = v[i] > mx ? v[i] : mx;
  }
  double want_s = (float)sum, want_m = (float)(sum / 12), want_x = mx;
  tk_assert_tensor(loom_sum_all(x), 0, NULL, LOOM_F32, &want_s, 1e-6, 1e-6, "sum_all");
  tk_assert_tensor(loom_mean_all(x), 0, NULL, LOOM_F32, &want_m, 1e-6, 1e-6, "mean_all");
  tk_assert_tensor(loom_max(x, 0, NULL, false), 0, NULL, LOOM_F32, &want_x, 0, 0, "max all");
  int64_t k11[2] = {1, 1};
  tk_assert_tensor(loom_sum(x, 0, NULL, true), 2, k11, LOOM_F32, &want_s, 1e-6, 1e-6, "sum all keepdim");
  free(v);
}

DEVICE_TEST(reduce, on_transposed_view) {
  int64_t s[3] = {4, 3, 5};
  double *v;
  loom_tensor *x = tk_rand_tensor(3, s, -1, 1, 0, LOOM_F32, dev, &v);
  int perm[3] = {2, 0, 1};
  loom_tensor *p = loom_permute(x, perm); /* [5, 4, 3] */
  int dims[1] = {2};
  loom_tensor *r = loom_sum(p, 1, dims, false); /* [5, 4]: sum over original dim 1 */
  double want[20];
  for (int a = 0; a < 5; a++)
    for (int b = 0; b < 4; b++) {
      double acc = 0;
      for (int c = 0; c < 3; c++) acc += v[b * 15 + c * 5 + a];
      want[a * 4 + b] = (float)acc;
    }
  int64_t os[2] = {5, 4};
  tk_assert_tensor(r, 2, os, LOOM_F32, want, 1e-6, 1e-6, "sum of permuted view");
  free(v);
}

DEVICE_TEST(reduce, argmax_values_and_ties) {
  double v[] = {1, 5, 5, 2,   /* tie: first index (1) */
                -1, -3, -1, -2, /* tie: 0 */
                0, 0, 0, 7};
  int64_t s[2] = {3, 4};
  loom_tensor *x = tk_tensor(v, 2, s, LOOM_F32, dev);
  double want1[3] = {1, 0, 3};
  tk_assert_tensor(loom_argmax(x, 1, false), 1, s, LOOM_I64, want1, 0, 0, "argmax dim 1");
  double want0[4] = {0, 0, 0, 2};
  tk_assert_tensor(loom_argmax(x, 0, false), 1, s + 1, LOOM_I64, want0, 0, 0, "argmax dim 0");
  int64_t k[2] = {3, 1};
  tk_assert_tensor(loom_argmax(x, -1, true), 2, k, LOOM_I64, want1, 0, 0, "argmax dim -1 keepdim");
  /* f16 and a transposed view */
  loom_tensor *h = loom_cast(x, LOOM_F16);
  tk_assert_tensor(loom_argmax(loom_transpose(h, 0, 1), 0, false), 1, s, LOOM_I64, want1, 0, 0, "argmax f16 transposed");
}

DEVICE_TEST(reduce, argmax_random_against_reference) {
  tk_seed(77);
  int64_t s[3] = {7, 9, 11};
  double *v;
  loom_tensor *x = tk_rand_tensor(3, s, -5, 5, 0, LOOM_F32, dev, &v);
  for (int dim = 0; dim < 3; dim++) {
    int64_t os[2];
    int n = 0;
    for (int d = 0; d < 3; d++)
      if (d != dim) os[n++] = s[d];
    double want[99];
    int64_t st[3] = {99, 11, 1};
    for (int64_t o = 0; o < os[0] * os[1]; o++) {
      int64_t i0 = o / os[1], i1 = o % os[1];
      int64_t base = 0;
      int q = 0;
      for (int d = 0; d < 3; d++)
        if (d != dim) base += (q++ == 0 ? i0 : i1) * st[d];
      int64_t best = 0;
      for (int64_t j = 1; j < s[dim]; j++)
        if (v[base + j * st[dim]] > v[base + best * st[dim]]) best = j;
      want[o] = (double)best;
    }
    tk_assert_tensor(loom_argmax(x, dim, false), 2, os, LOOM_I64, want, 0, 0, "argmax 3-d");
  }
  free(v);
}

/* ---- gradients ---- */
typedef struct {
  int kind, nd;
  const int *dims;
  bool keep;
} red_ctx;

static loom_tensor *red_fn(loom_tensor **in, void *c) {
  red_ctx *r = c;
  return do_reduce(r->kind, in[0], r->nd, r->dims, r->keep);
}

DEVICE_TEST(reduce, gradients) {
  tk_seed(88);
  int64_t s[3] = {3, 4, 5};
  static const int d1[1] = {1}, d02[2] = {0, 2}, dm1[1] = {-1};
  const struct {
    int nd;
    const int *dims;
  } sets[] = {{1, d1}, {2, d02}, {1, dm1}, {0, NULL}};
  for (int kind = 0; kind < 3; kind++)
    for (int k = 0; k < 4; k++)
      for (int keep = 0; keep < 2; keep++) {
        /* distinct values well apart so max has no near-ties for FD */
        double vals[60];
        for (int i = 0; i < 60; i++) vals[i] = (double)((i * 37) % 60) * 0.1 - 3.0;
        loom_tensor *in[1] = {tk_tensor(vals, 3, s, LOOM_F32, dev)};
        loom_set_requires_grad(in[0], true);
        red_ctx ctx = {kind, sets[k].nd, sets[k].dims, keep};
        char what[64];
        snprintf(what, sizeof what, "grad reduce kind %d set %d keep %d", kind, k, keep);
        tk_gradcheck(red_fn, &ctx, in, 1, 1e-2, 2e-3, 1e-2, what);
      }
}

DEVICE_TEST(reduce, max_gradient_splits_ties) {
  double v[] = {1, 3, 3, 0, 2, 2, 2, -1};
  int64_t s[2] = {2, 4};
  loom_tensor *x = tk_tensor(v, 2, s, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  int d[1] = {1};
  loom_tensor *m = loom_max(x, 1, d, false);
  cr_assert_eq(loom_backward(loom_sum_all(m)), LOOM_OK, "%s", loom_last_error());
  double want[8] = {0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0};
  tk_assert_tensor(loom_grad(x), 2, s, LOOM_F32, want, 1e-7, 1e-6, "max ties grad");
}
