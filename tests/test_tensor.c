/* test_tensor.c — tensors: creation (zeros/ones/full/arange/from_host,
 * rand/randn determinism under loom_manual_seed), casts between every pair
 * of dtypes (f16/bf16 rounding bit-exact with the reference conversion),
 * copies, read-back; views (view/reshape/transpose/permute/slice/expand/
 * contiguous/detach) sharing storage and carrying gradients; and the
 * ownership rule (scopes, loom_keep, no intermediates left behind by
 * composite ops called outside a scope). */
#include <math.h>
#include <stdlib.h>

#include "ops/op.h" /* loom_expand (internal) */
#include "support/testkit.h"
#include "tensor/tensor_internal.h"

static const loom_dtype ALL[6] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I32, LOOM_I64, LOOM_U8};

static double *consts(int64_t n, double v) {
  double *p = malloc((size_t)(n ? n : 1) * sizeof *p);
  for (int64_t i = 0; i < n; i++) p[i] = v;
  return p;
}

DEVICE_TEST(create, zeros_ones_full_every_dtype) {
  int64_t s[3] = {2, 3, 5};
  double *w0 = consts(30, 0), *w1 = consts(30, 1), *w7 = consts(30, 7);
  for (int k = 0; k < 6; k++) {
    tk_assert_tensor(loom_zeros(3, s, ALL[k], dev), 3, s, ALL[k], w0, 0, 0, "zeros");
    tk_assert_tensor(loom_ones(3, s, ALL[k], dev), 3, s, ALL[k], w1, 0, 0, "ones");
    tk_assert_tensor(loom_full(3, s, 7.0, ALL[k], dev), 3, s, ALL[k], w7, 0, 0, "full");
    tk_assert_tensor(loom_zeros_like(loom_full(3, s, 2.0, ALL[k], dev)), 3, s, ALL[k], w0, 0, 0, "zeros_like");
  }
  double third = tk_round(1.0 / 3.0, LOOM_BF16);
  tk_assert_tensor(loom_full(0, NULL, 1.0 / 3.0, LOOM_BF16, dev), 0, NULL, LOOM_BF16, &third, 0, 0, "full bf16 0-d");
  int64_t z[2] = {0, 4};
  loom_tensor *e = loom_zeros(2, z, LOOM_F32, dev);
  tk_assert_shape(e, 2, z, "empty zeros");
  cr_assert_eq(loom_tensor_numel(e), 0);
  free(w0);
  free(w1);
  free(w7);
}

DEVICE_TEST(create, arange) {
  double w[5] = {0, 1, 2, 3, 4};
  int64_t n5 = 5;
  tk_assert_tensor(loom_arange(0, 5, 1, LOOM_I64, dev), 1, &n5, LOOM_I64, w, 0, 0, "arange i64");
  double w2[4] = {1.5, 1.0, 0.5, 0.0};
  int64_t n4 = 4;
  tk_assert_tensor(loom_arange(1.5, -0.25, -0.5, LOOM_F32, dev), 1, &n4, LOOM_F32, w2, 0, 0, "arange negative step");
  double w3[3] = {0, 0.25, 0.5};
  int64_t n3 = 3;
  tk_assert_tensor(loom_arange(0, 0.6, 0.25, LOOM_F16, dev), 1, &n3, LOOM_F16, w3, 0, 0, "arange f16");
  int64_t n0 = 0;
  tk_assert_shape(loom_arange(3, 1, 1, LOOM_F32, dev), 1, &n0, "arange empty");
  tk_assert_fails(loom_arange(0, 1, 0, LOOM_F32, dev), LOOM_ERR_INVALID_ARG, "arange", "step");
}

DEVICE_TEST(create, from_host_roundtrip_every_dtype) {
  unsigned char buf[8 * 7], out[8 * 7];
  int64_t s[2] = {7, 1};
  for (int k = 0; k < 6; k++) {
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 37 + 11);
    if (ALL[k] == LOOM_F32) /* keep them finite numbers */
      for (int i = 0; i < 7; i++) ((float *)buf)[i] = (float)i * 0.37f - 1.0f;
    size_t nb = 7 * loom_dtype_size(ALL[k]);
    loom_tensor *t = loom_from_host(buf, 2, s, ALL[k], dev);
    cr_assert_not_null(t, "%s", loom_last_error());
    memset(out, 0, sizeof out);
    cr_assert_eq(loom_to_host(t, out, nb, ALL[k]), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(memcmp(buf, out, nb), 0, "from_host/to_host %s changed the bytes", loom_dtype_name(ALL[k]));
  }
}

DEVICE_TEST(create, rand_randn_deterministic_under_seed) {
  int64_t s[2] = {33, 7};
  loom_manual_seed(1234);
  double *a = tk_read(loom_rand(2, s, LOOM_F32, dev));
  double *an = tk_read(loom_randn(2, s, LOOM_F32, dev));
  loom_manual_seed(1234);
  double *b = tk_read(loom_rand(2, s, LOOM_F32, dev));
  double *bn = tk_read(loom_randn(2, s, LOOM_F32, dev));
  double *c = tk_read(loom_rand(2, s, LOOM_F32, dev)); /* the generator advanced */
  cr_assert_eq(memcmp(a, b, 231 * sizeof *a), 0, "rand differs under the same seed");
  cr_assert_eq(memcmp(an, bn, 231 * sizeof *a), 0, "randn differs under the same seed");
  cr_assert_neq(memcmp(a, c, 231 * sizeof *a), 0, "rand repeated itself");
  /* the documented stream: rand == loom_rng_fill_uniform(seed, 0) */
  float ref[231];
  loom_rng_fill_uniform(1234, 0, ref, 231, 0.0f, 1.0f);
  double mean = 0, mn = 1, mx = 0;
  for (int i = 0; i < 231; i++) {
    cr_assert_eq(a[i], (double)ref[i], "rand element %d", i);
    mean += a[i];
    mn = fmin(mn, a[i]);
    mx = fmax(mx, a[i]);
  }
  cr_assert(mn > 0 && mx < 1 && fabs(mean / 231 - 0.5) < 0.06, "uniform stats: min %g max %g mean %g", mn, mx, mean / 231);
  double m = 0, v = 0;
  for (int i = 0; i < 231; i++) m += an[i];
  m /= 231;
  for (int i = 0; i < 231; i++) v += (an[i] - m) * (an[i] - m);
  v /= 230;
  cr_assert(fabs(m) < 0.2 && fabs(v - 1) < 0.25, "normal stats: mean %g var %g", m, v);
  /* f16 draws are the f32 draws rounded */
  loom_manual_seed(1234);
  double *h = tk_read(loom_rand(2, s, LOOM_F16, dev));
  for (int i = 0; i < 231; i++) cr_assert_eq(h[i], tk_round(a[i], LOOM_F16), "f16 rand element %d", i);
  free(a);
  free(b);
  free(c);
  free(an);
  free(bn);
  free(h);
  tk_assert_fails(loom_rand(2, s, LOOM_I32, dev), LOOM_ERR_DTYPE, "rand", "i32");
  tk_assert_fails(loom_randn(2, s, LOOM_U8, dev), LOOM_ERR_DTYPE, "randn", "u8");
}

/* ---- casts ---- */
static double conv_ref(double v, loom_dtype from, loom_dtype to) {
  (void)from;
  /* every source value is exactly representable as f32 here; conversions go through f32 */
  return tk_round(v, to);
}

DEVICE_TEST(cast, every_pair) {
  double src[12] = {0, 1, -1, 2.5, -2.5, 100.75, 0.1, 3.14159, 65504, 1e-3, 250, 7.0 / 3};
  int64_t n = 12;
  for (int a = 0; a < 6; a++) {
    double vals[12];
    for (int i = 0; i < 12; i++) {
      double v = src[i];
      if (ALL[a] == LOOM_U8 && v < 0) v = -v; /* stay in range for u8 */
      vals[i] = tk_round(v, ALL[a]);
    }
    loom_tensor *t = tk_tensor(vals, 1, &n, ALL[a], dev);
    for (int b = 0; b < 6; b++) {
      double want[12];
      for (int i = 0; i < 12; i++) {
        double v = vals[i];
        if (ALL[b] == LOOM_U8 && v < 0) v = 0; /* unchecked: skip negative->u8 below */
        want[i] = conv_ref(vals[i], ALL[a], ALL[b]);
        (void)v;
      }
      loom_tensor *c = loom_cast(t, ALL[b]);
      char what[32];
      snprintf(what, sizeof what, "cast %s->%s", loom_dtype_name(ALL[a]), loom_dtype_name(ALL[b]));
      tk_assert_shape(c, 1, &n, what);
      double *got = tk_read(c);
      for (int i = 0; i < 12; i++) {
        if (ALL[b] == LOOM_U8 && (vals[i] < 0 || vals[i] > 255)) continue;
        if (ALL[b] == LOOM_F16 && fabs(vals[i]) > 65504) continue;
        cr_assert_eq(got[i], want[i], "%s element %d: %.9g from %.9g, expected %.9g", what, i, got[i], vals[i], want[i]);
      }
      free(got);
    }
  }
}

DEVICE_TEST(cast, f16_bf16_rounding_is_bit_exact) {
  /* many random f32 values, including ties and subnormals */
  tk_seed(99);
  int64_t n = 4096;
  float *f = malloc((size_t)n * sizeof *f);
  for (int64_t i = 0; i < n; i++) {
    uint32_t bits = (uint32_t)(tk_uniform(0, 4294967296.0));
    if (i % 4 == 0) bits &= 0x8FFFFFFFu; /* small magnitudes / subnormal f16 range */
    memcpy(&f[i], &bits, 4);
    if (isnan(f[i]) || isinf(f[i])) f[i] = (float)i;
  }
  loom_tensor *t = loom_from_host(f, 1, &n, LOOM_F32, dev);
  uint16_t *h = malloc((size_t)n * 2), *b = malloc((size_t)n * 2);
  cr_assert_eq(loom_to_host(loom_cast(t, LOOM_F16), h, (size_t)n * 2, LOOM_F16), LOOM_OK);
  cr_assert_eq(loom_to_host(loom_cast(t, LOOM_BF16), b, (size_t)n * 2, LOOM_BF16), LOOM_OK);
  for (int64_t i = 0; i < n; i++) {
    cr_assert_eq(h[i], loom_f32_to_f16(f[i]), "f16 of %a: 0x%04x vs 0x%04x", f[i], h[i], loom_f32_to_f16(f[i]));
    cr_assert_eq(b[i], loom_f32_to_bf16(f[i]), "bf16 of %a", f[i]);
  }
  /* to_host with a dtype conversion rounds the same way */
  uint16_t *h2 = malloc((size_t)n * 2);
  cr_assert_eq(loom_to_host(t, h2, (size_t)n * 2, LOOM_F16), LOOM_OK);
  cr_assert_eq(memcmp(h, h2, (size_t)n * 2), 0);
  free(f);
  free(h);
  free(b);
  free(h2);
}

DEVICE_TEST(cast, gradient_flows_back_in_source_dtype) {
  int64_t n = 5;
  double v[5] = {0.5, -1, 2, 3, -0.25};
  loom_tensor *x = tk_tensor(v, 1, &n, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  loom_tensor *h = loom_cast(x, LOOM_BF16);
  cr_assert(loom_requires_grad(h));
  loom_tensor *l = loom_sum_all(loom_mul(h, h));
  cr_assert_eq(loom_backward(l), LOOM_OK, "%s", loom_last_error());
  double want[5];
  for (int i = 0; i < 5; i++) want[i] = 2 * v[i];
  tk_assert_tensor(loom_grad(x), 1, &n, LOOM_F32, want, 0, 1e-2, "grad through cast");
  /* casting to an integer dtype ends the graph: the result cannot require grad */
  loom_tensor *xi = loom_cast(x, LOOM_I32);
  cr_assert_not_null(xi);
  cr_assert(!loom_requires_grad(xi), "an i32 tensor must not require grad");
}

DEVICE_TEST(copy, copy_fill_clone_item) {
  int64_t s[2] = {2, 3};
  double v[6] = {1, 2, 3, 4, 5, 6};
  loom_tensor *a = tk_tensor(v, 2, s, LOOM_F32, dev);
  loom_tensor *c = loom_clone(a);
  cr_assert_neq(loom_tensor_data(c), loom_tensor_data(a));
  cr_assert_eq(loom_fill_(a, 9.0), LOOM_OK);
  tk_assert_tensor(c, 2, s, LOOM_F32, v, 0, 0, "clone is independent");
  /* copy_ with a dtype change */
  loom_tensor *h = loom_zeros(2, s, LOOM_F16, dev);
  cr_assert_eq(loom_copy_(h, c), LOOM_OK, "%s", loom_last_error());
  tk_assert_tensor(h, 2, s, LOOM_F16, v, 0, 0, "copy_ f32->f16");
  /* copy_ into a strided view writes through to the base */
  loom_tensor *col = loom_slice(a, 1, 1, 2, 1); /* [2,1] */
  double two[2] = {-1, -2};
  int64_t s21[2] = {2, 1};
  cr_assert_eq(loom_copy_(col, tk_tensor(two, 2, s21, LOOM_F32, dev)), LOOM_OK);
  double wa[6] = {9, -1, 9, 9, -2, 9};
  tk_assert_tensor(a, 2, s, LOOM_F32, wa, 0, 0, "copy_ into a column view");
  /* same element count, different rank: read row-major */
  int64_t s6 = 6;
  loom_tensor *flat = loom_zeros(1, &s6, LOOM_F32, dev);
  cr_assert_eq(loom_copy_(flat, c), LOOM_OK);
  tk_assert_tensor(flat, 1, &s6, LOOM_F32, v, 0, 0, "copy_ [2,3] -> [6]");
  /* same element count, same rank, different shape: also row-major */
  int64_t s32[2] = {3, 2};
  loom_tensor *r = loom_zeros(2, s32, LOOM_F32, dev);
  cr_assert_eq(loom_copy_(r, c), LOOM_OK, "%s", loom_last_error());
  tk_assert_tensor(r, 2, s32, LOOM_F32, v, 0, 0, "copy_ [2,3] -> [3,2]");
  int64_t s16[2] = {1, 6}, s61[2] = {6, 1};
  loom_tensor *row = tk_tensor(v, 2, s16, LOOM_F32, dev);
  loom_tensor *colv = loom_zeros(2, s61, LOOM_F32, dev);
  cr_assert_eq(loom_copy_(colv, row), LOOM_OK);
  tk_assert_tensor(colv, 2, s61, LOOM_F32, v, 0, 0, "copy_ [1,6] -> [6,1]");
  /* item */
  double x = 0;
  cr_assert_eq(loom_item(loom_full(0, NULL, 2.5, LOOM_BF16, dev), &x), LOOM_OK);
  cr_assert_eq(x, 2.5);
  cr_assert_eq(loom_item(loom_full(1, &(int64_t){1}, -7, LOOM_I64, dev), &x), LOOM_OK);
  cr_assert_eq(x, -7);
  tk_assert_error(loom_item(a, &x), LOOM_ERR_SHAPE, "item", "[2, 3]");
}

/* ---- views ---- */
DEVICE_TEST(views, share_storage_and_shapes) {
  int64_t s[3] = {2, 3, 4};
  double v[24];
  for (int i = 0; i < 24; i++) v[i] = i;
  loom_tensor *x = tk_tensor(v, 3, s, LOOM_F32, dev);
  int64_t vs[2] = {6, -1}, want_vs[2] = {6, 4};
  loom_tensor *y = loom_view(x, 2, vs);
  tk_assert_tensor(y, 2, want_vs, LOOM_F32, v, 0, 0, "view [6,-1]");
  cr_assert_eq(loom_tensor_data(y), loom_tensor_data(x), "view must share storage");
  loom_tensor *t = loom_transpose(x, 0, 2); /* [4,3,2] */
  cr_assert(!loom_tensor_is_contiguous(t));
  cr_assert_eq(loom_tensor_strides(t)[0], 1);
  cr_assert_eq(loom_tensor_strides(t)[2], 12);
  double wt[24];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 2; k++) wt[i * 6 + j * 2 + k] = v[k * 12 + j * 4 + i];
  int64_t st[3] = {4, 3, 2};
  tk_assert_tensor(t, 3, st, LOOM_F32, wt, 0, 0, "transpose");
  /* view of a non-viewable layout fails; reshape copies */
  int64_t flat = 24;
  tk_assert_fails(loom_view(t, 1, &flat), LOOM_ERR_SHAPE, "view", "reshape");
  loom_tensor *rf = loom_reshape(t, 1, &flat);
  tk_assert_tensor(rf, 1, &flat, LOOM_F32, wt, 0, 0, "reshape of transposed");
  /* but splitting a dim of a transposed view is viewable */
  int64_t sp[4] = {2, 2, 3, 2};
  loom_tensor *split = loom_view(t, 4, sp);
  cr_assert_not_null(split, "%s", loom_last_error());
  cr_assert_eq(loom_tensor_data(split), loom_tensor_data(x));
  tk_assert_tensor(split, 4, sp, LOOM_F32, wt, 0, 0, "view splitting a transposed dim");
  int perm[3] = {1, 2, 0};
  loom_tensor *p = loom_permute(x, perm); /* [3,4,2] */
  double wp[24];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 2; k++) wp[i * 8 + j * 2 + k] = v[k * 12 + i * 4 + j];
  int64_t sp3[3] = {3, 4, 2};
  tk_assert_tensor(p, 3, sp3, LOOM_F32, wp, 0, 0, "permute");
  /* slices: negative indices, steps, clamping */
  loom_tensor *sl = loom_slice(x, -1, -3, 100, 2); /* last dim: 1, 3 */
  double ws[12];
  for (int i = 0; i < 6; i++) ws[i * 2] = v[i * 4 + 1], ws[i * 2 + 1] = v[i * 4 + 3];
  int64_t ss[3] = {2, 3, 2};
  tk_assert_tensor(sl, 3, ss, LOOM_F32, ws, 0, 0, "slice -3:100:2");
  int64_t s0[3] = {2, 0, 4};
  tk_assert_shape(loom_slice(x, 1, 2, 1, 1), 3, s0, "empty slice");
  /* expand */
  int64_t e1 = 3, es[2] = {4, 3};
  double ve[3] = {1, 2, 3}, we[12];
  for (int i = 0; i < 12; i++) we[i] = ve[i % 3];
  loom_tensor *ex = loom_expand(tk_tensor(ve, 1, &e1, LOOM_F32, dev), 2, es);
  cr_assert_eq(loom_tensor_strides(ex)[0], 0);
  tk_assert_tensor(ex, 2, es, LOOM_F32, we, 0, 0, "expand");
  /* contiguous: same tensor when already contiguous, a copy otherwise */
  loom_tensor *c1 = loom_contiguous(x);
  cr_assert_eq(loom_tensor_data(c1), loom_tensor_data(x));
  loom_tensor *c2 = loom_contiguous(t);
  cr_assert(loom_tensor_is_contiguous(c2));
  cr_assert_neq(loom_tensor_data(c2), loom_tensor_data(x));
  tk_assert_tensor(c2, 3, st, LOOM_F32, wt, 0, 0, "contiguous");
  /* detach shares storage, drops autograd */
  loom_set_requires_grad(x, true);
  loom_tensor *d = loom_detach(loom_mul_scalar(x, 2));
  cr_assert(!loom_requires_grad(d));
  /* writes through a view are visible in the base */
  cr_assert_eq(loom_fill_(loom_slice(loom_detach(x), 0, 1, 2, 1), 0.0), LOOM_OK);
  double *xv = tk_read(x);
  for (int i = 0; i < 24; i++) cr_assert_eq(xv[i], i < 12 ? v[i] : 0.0);
  free(xv);
}

typedef struct {
  int which;
} view_ctx;

static loom_tensor *view_fn(loom_tensor **in, void *c) {
  loom_tensor *x = in[0]; /* [2,3,4] */
  int64_t s64[2] = {6, 4}, e[4] = {5, 2, 3, 4}, s3[3] = {1, 3, 4};
  int perm[3] = {2, 0, 1};
  loom_tensor *w = in[1];
  switch (((view_ctx *)c)->which) {
    case 0: return loom_mul(loom_reshape(x, 2, s64), loom_reshape(w, 2, s64));
    case 1: return loom_mul(loom_transpose(x, 0, 2), loom_transpose(w, 0, 2));
    case 2: return loom_mul(loom_permute(x, perm), loom_permute(w, perm));
    case 3: return loom_mul(loom_slice(x, 2, 1, 4, 2), loom_slice(w, 2, 0, 3, 2));
    case 4: return loom_mul(loom_expand(x, 4, e), loom_expand(w, 4, e));
    case 5: return loom_mul(loom_exp(loom_reshape(loom_transpose(x, 1, 2), 2, s64)), loom_reshape(w, 2, s64)); /* reshape copies */
    case 6: return loom_mul(loom_expand(loom_slice(x, 0, 1, 2, 1), 3, (int64_t[]){3, 3, 4}), loom_slice(w, 0, 0, 1, 1));
    case 7: return loom_mul(loom_contiguous(loom_transpose(x, 0, 1)), loom_transpose(w, 0, 1));
    case 8: return loom_mul(loom_reshape(loom_slice(x, 0, 0, 1, 1), 3, s3), loom_reshape(loom_slice(w, 0, 1, 2, 1), 3, s3));
    default: return NULL;
  }
}

DEVICE_TEST(views, gradients_through_views) {
  tk_seed(123);
  int64_t s[3] = {2, 3, 4};
  for (int k = 0; k <= 8; k++) {
    loom_tensor *in[2] = {tk_rand_tensor(3, s, -1, 1, 0, LOOM_F32, dev, NULL), tk_rand_tensor(3, s, -1, 1, 0, LOOM_F32, dev, NULL)};
    loom_set_requires_grad(in[0], true);
    loom_set_requires_grad(in[1], true);
    view_ctx c = {k};
    char what[32];
    snprintf(what, sizeof what, "view grad case %d", k);
    tk_gradcheck(view_fn, &c, in, 2, 1e-2, 2e-3, 1e-2, what);
  }
}

DEVICE_TEST(views, empty_slice_with_far_negative_end_backward) {
  int64_t n = 6;
  loom_tensor *x = loom_ones(1, &n, LOOM_F32, dev);
  loom_set_requires_grad(x, true);
  loom_tensor *s = loom_slice(x, 0, 0, -7, 1); /* end -7 + 6 = -1 < start: empty */
  cr_assert_eq(loom_tensor_numel(s), 0);
  loom_tensor *l = loom_add(loom_sum_all(s), loom_sum_all(loom_slice(x, 0, -100, 2, 1)));
  cr_assert_eq(loom_backward(l), LOOM_OK, "%s", loom_last_error());
  double want[6] = {1, 1, 0, 0, 0, 0};
  tk_assert_tensor(loom_grad(x), 1, &n, LOOM_F32, want, 0, 0, "grad of empty + clamped slices");
}

/* ---- ownership ---- */
static int refs(loom_tensor *t) { return atomic_load(&t->refcount); }
static int srefs(loom_tensor *t) { return atomic_load(&t->storage->refcount); }

Test(scope, tensors_die_at_scope_end_unless_kept) {
  int64_t n = 4;
  loom_tensor *outer = loom_ones(1, &n, LOOM_F32, loom_cpu()); /* no scope: caller owns */
  cr_assert_eq(refs(outer), 1);
  loom_scope_begin();
  cr_assert_eq(loom_scope_depth(), 1);
  loom_tensor *a = loom_add_scalar(outer, 1);
  loom_tensor *probe = loom_tensor_retain(a); /* watch a die */
  loom_tensor *b = loom_mul_scalar(a, 2);
  loom_scope_begin();
  cr_assert_eq(loom_scope_depth(), 2);
  loom_tensor *c = loom_add(a, b);
  loom_tensor *cprobe = loom_tensor_retain(c);
  loom_tensor *kept = loom_keep(loom_exp(c)); /* moves to the outer scope */
  loom_scope_end();
  cr_assert_eq(refs(cprobe), 1, "c died with the inner scope (only the probe holds it)");
  loom_tensor_release(cprobe);
  cr_assert_eq(refs(kept), 1, "kept tensor lives on in the enclosing scope");
  double *v = tk_read(kept);
  cr_assert_float_eq(v[0], exp(6.0), 1e-2);
  free(v);
  loom_tensor *to_caller = loom_keep(kept); /* from the outermost scope to the caller */
  cr_assert_eq(refs(kept), 1);
  loom_tensor *mine = loom_keep(loom_neg(b)); /* from the outermost scope: the caller owns it */
  loom_scope_end();
  cr_assert_eq(loom_scope_depth(), 0);
  cr_assert_eq(refs(probe), 1, "a died with the scope");
  loom_tensor_release(probe);
  cr_assert_eq(refs(mine), 1);
  cr_assert_eq(refs(to_caller), 1, "kept left the scope: the scope did not release it");
  double *m = tk_read(mine);
  cr_assert_float_eq(m[0], -4.0, 1e-6);
  free(m);
  loom_tensor_release(mine);
  loom_tensor_release(to_caller);
  cr_assert_eq(refs(outer), 1, "the outer tensor was never the scope's");
  loom_tensor_release(outer);
  tk_leak_check();
}

Test(scope, views_keep_storage_alive) {
  int64_t n = 6, s23[2] = {2, 3};
  loom_scope_begin();
  loom_tensor *x = loom_arange(0, 6, 1, LOOM_F32, loom_cpu());
  loom_tensor *v = loom_keep(loom_transpose(loom_view(x, 2, s23), 0, 1));
  loom_scope_end();
  /* x and the intermediate view are gone; the kept view still reads the data */
  cr_assert_eq(srefs(v), 1);
  double *r = tk_read(v);
  double want[6] = {0, 3, 1, 4, 2, 5};
  tk_assert_close(r, want, 6, 0, 0, "view outliving its base");
  free(r);
  loom_tensor_release(v);
  (void)n;
  tk_leak_check();
}

/* Composite ops (mean = sum * 1/n, reshape of a non-viewable layout =
 * contiguous + view, log_softmax over a non-last dim, linear / cross_entropy
 * on strided inputs) make intermediates. Called outside any scope, the
 * caller owns only the result: releasing it must release everything, which
 * we observe through the input's reference count (graph nodes hold inputs
 * that require grad). LeakSanitizer checks the same in the sanitizer build. */
Test(scope, composite_ops_outside_a_scope_leave_nothing_behind) {
  cr_assert_eq(loom_scope_depth(), 0);
  int64_t s[2] = {4, 5}, s20 = 20, s34[2] = {3, 4}, n5 = 5;
  loom_tensor *x = loom_rand(2, s, LOOM_F32, loom_cpu());
  loom_tensor *w = loom_rand(2, s34, LOOM_F32, loom_cpu());
  int32_t labs[5] = {0, 1, 2, 3, 0};
  loom_tensor *lab = loom_from_host(labs, 1, &n5, LOOM_I32, loom_cpu());
  loom_set_requires_grad(x, true);
  loom_tensor *xt = loom_transpose(x, 0, 1); /* [5,4], non-contiguous, holds x via its node */
  loom_tensor *wt = loom_transpose(w, 0, 1);
  loom_tensor *wtt = loom_transpose(wt, 0, 1); /* [3,4] non-contiguous */
  int base = refs(x);
  int dims[1] = {1};
  for (int i = 0; i < 7; i++) {
    loom_tensor *r = NULL;
    switch (i) {
      case 0: r = loom_mean(x, 1, dims, false); break;
      case 1: r = loom_mean_all(x); break;
      case 2: r = loom_reshape(xt, 1, &s20); break;
      case 3: r = loom_log_softmax(x, 0); break;
      case 4: r = loom_linear(xt, w, NULL, LOOM_ACT_RELU); break;
      case 5: r = loom_cross_entropy(xt, lab); break;
      case 6: r = loom_linear(xt, wtt, NULL, LOOM_ACT_NONE); break;
    }
    cr_assert_not_null(r, "composite %d: %s", i, loom_last_error());
    loom_tensor_release(r);
    cr_assert_eq(refs(x), base, "composite %d left an intermediate holding x (refcount %d, expected %d)", i, refs(x), base);
  }
  loom_tensor_release(wtt);
  loom_tensor_release(wt);
  loom_tensor_release(xt);
  cr_assert_eq(refs(x), 1);
  loom_tensor_release(x);
  loom_tensor_release(w);
  loom_tensor_release(lab);
  tk_leak_check();
}

/* Float to integer casts saturate and send NaN to 0 (as the GPU's
 * cvt.rzi.sat does) instead of being undefined. */
Test(tensor, float_to_int_casts_saturate) {
  loom_scope_begin();
  float v[6] = {NAN, INFINITY, -INFINITY, 3e9f, -7.9f, 300.5f};
  int64_t n = 6;
  loom_tensor *t = loom_from_host(v, 1, &n, LOOM_F32, loom_cpu());
  int32_t i32[6];
  uint8_t u8[6];
  int64_t i64[6];
  cr_assert_eq(loom_to_host(loom_cast(t, LOOM_I32), i32, sizeof i32, LOOM_I32), LOOM_OK);
  cr_assert_eq(loom_to_host(loom_cast(t, LOOM_U8), u8, sizeof u8, LOOM_U8), LOOM_OK);
  cr_assert_eq(loom_to_host(loom_cast(t, LOOM_I64), i64, sizeof i64, LOOM_I64), LOOM_OK);
  int32_t e32[6] = {0, INT32_MAX, INT32_MIN, INT32_MAX, -7, 300};
  uint8_t e8[6] = {0, 255, 0, 255, 0, 255};
  int64_t e64[6] = {0, INT64_MAX, INT64_MIN, 3000000000LL, -7, 300};
  for (int i = 0; i < 6; i++) {
    cr_assert_eq(i32[i], e32[i], "i32[%d] = %d", i, i32[i]);
    cr_assert_eq(u8[i], e8[i], "u8[%d] = %d", i, u8[i]);
    cr_assert_eq(i64[i], e64[i], "i64[%d] = %lld", i, (long long)i64[i]);
  }
  loom_scope_end();
  tk_leak_check();
}

/* Casts of contiguous runs take a vector path (F16C on x86) — bit for bit
 * the scalar reference conversions, NaNs, ties and subnormals included. */
Test(tensor, f16_cast_runs_match_scalar_conversion) {
  loom_scope_begin();
  int64_t n = 65536 + 4099;  /* all half patterns, then an odd tail */
  uint16_t *h = malloc((size_t)n * 2), *back = malloc((size_t)n * 2);
  float *f = malloc((size_t)n * 4), *wide = malloc((size_t)n * 4);
  cr_assert(h && back && f && wide);
  uint32_t x = 12345;
  for (int64_t i = 0; i < n; i++) {
    h[i] = (uint16_t)i;
    x = x * 1664525u + 1013904223u;
    /* a third random f32 bit patterns, a third exact halves, a third halves
     * plus 0x1000 in f32 bits: exactly half a half-ulp for normal halves (ties) */
    uint32_t bits = x;
    if (i % 3 != 0) {
      float t = loom_f16_to_f32((uint16_t)(x >> 16));
      memcpy(&bits, &t, 4);
      if (i % 3 == 2) bits += 0x1000;
    }
    memcpy(&f[i], &bits, 4);
  }
  loom_tensor *th = loom_from_host(h, 1, &n, LOOM_F16, loom_cpu());
  cr_assert_eq(loom_to_host(loom_cast(th, LOOM_F32), wide, (size_t)n * 4, LOOM_F32), LOOM_OK);
  for (int64_t i = 0; i < n; i++) {
    float ref = loom_f16_to_f32(h[i]);
    cr_assert(memcmp(&ref, &wide[i], 4) == 0, "f16 0x%04x -> f32", h[i]);
  }
  loom_tensor *tf = loom_from_host(f, 1, &n, LOOM_F32, loom_cpu());
  cr_assert_eq(loom_to_host(loom_cast(tf, LOOM_F16), back, (size_t)n * 2, LOOM_F16), LOOM_OK);
  for (int64_t i = 0; i < n; i++) {
    uint16_t ref = loom_f32_to_f16(f[i]);
    uint32_t b;
    memcpy(&b, &f[i], 4);
    cr_assert_eq(back[i], ref, "f32 0x%08x -> f16: 0x%04x vs 0x%04x", b, back[i], ref);
  }
  free(h), free(back), free(f), free(wide);
  loom_scope_end();
  tk_leak_check();
}

/* Channels-last: the logical shape stays [N, C, H, W], the strides become
 * NHWC, values are unchanged, gradients flow back, and non-4-D is refused. */
Test(tensor, memory_format_channels_last) {
  loom_scope_begin();
  int64_t s[4] = {2, 3, 4, 5};
  loom_tensor *x = loom_randn(4, s, LOOM_F32, loom_cpu());
  loom_set_requires_grad(x, true);
  cr_assert_eq(loom_tensor_memory_format(x), LOOM_FORMAT_NCHW);
  loom_tensor *y = loom_to_memory_format(x, LOOM_FORMAT_NHWC);
  cr_assert_not_null(y, "%s", loom_last_error());
  cr_assert(loom_tensor_is_channels_last(y));
  cr_assert_eq(loom_tensor_memory_format(y), LOOM_FORMAT_NHWC);
  const int64_t *st = loom_tensor_strides(y);
  cr_assert(st[0] == 60 && st[1] == 1 && st[2] == 15 && st[3] == 3);
  cr_assert_eq(loom_tensor_dim(y, 1), 3);
  cr_assert_eq(loom_to_memory_format(y, LOOM_FORMAT_NHWC), y); /* already: the same tensor */
  double *a = tk_read(x), *b = tk_read(y);
  tk_assert_close(a, b, 120, 0, 0, "channels-last copy keeps values");
  free(a);
  free(b);
  loom_tensor *back = loom_to_memory_format(y, LOOM_FORMAT_NCHW);
  cr_assert(loom_tensor_is_contiguous(back));
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul_scalar(y, 2.0))), LOOM_OK, "%s", loom_last_error());
  double *g = tk_read(loom_grad(x));
  for (int i = 0; i < 120; i++) cr_assert_eq(g[i], 2.0);
  free(g);
  int64_t s3[3] = {2, 3, 4};
  cr_assert_null(loom_to_memory_format(loom_zeros(3, s3, LOOM_F32, loom_cpu()), LOOM_FORMAT_NHWC));
  tk_assert_error(loom_last_status(), LOOM_ERR_SHAPE, "4-D");
  cr_assert_null(loom_to_memory_format(x, (loom_memory_format)7));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "format 7");
  cr_assert_eq(loom_tensor_memory_format(loom_transpose(x, 2, 3)), LOOM_FORMAT_STRIDED);
  loom_scope_end();
  tk_leak_check();
}
