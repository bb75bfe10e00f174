/* test_ops_cnn_misc.c — dropout (its mask is exactly loom_rand's numbers at
 * the same seed, in memory order, on every device; 1/(1-p) scaling; the
 * same mask in backward; identity when not training or p == 0; zeros at
 * p == 1), flatten (shapes, views, gradients, NHWC), and add_relu (against
 * float64 with b broadcast, NCHW / NHWC, f32 / f16 / bf16, both gradients),
 * with their errors. */
#include <math.h>
#include <stdlib.h>

#include "ops/op.h"  /* loom_add_inplace: the engine's gradient accumulation */
#include "support/testkit.h"

static loom_tensor *in_format(loom_tensor *t, loom_memory_format f) {
  return f == LOOM_FORMAT_NHWC ? loom_to_memory_format(t, f) : t;
}

/* ---- dropout ------------------------------------------------------------------------- */

/* Uniforms loom_rand draws at `seed`, for a tensor of logical shape sh in
 * format f: element (n, c, h, w) of an NHWC tensor gets the uniform of its
 * memory position. Returned in logical NCHW order. */
static double *uniforms_in_memory_order(uint64_t seed, const int64_t *sh, loom_memory_format f) {
  loom_manual_seed(seed);
  int64_t n = tk_numel(4, sh);
  int64_t msh[4] = {sh[0], sh[2], sh[3], sh[1]};
  double *u = tk_read(loom_rand(4, f == LOOM_FORMAT_NHWC ? msh : sh, LOOM_F32, loom_cpu()));
  if (f != LOOM_FORMAT_NHWC) return u;
  double *l = malloc((size_t)n * sizeof *l);
  for (int64_t i = 0; i < n; i++) {
    int64_t w = i % sh[3], h = i / sh[3] % sh[2], c = i / (sh[3] * sh[2]) % sh[1], b = i / (sh[3] * sh[2] * sh[1]);
    l[i] = u[((b * sh[2] + h) * sh[3] + w) * sh[1] + c];
  }
  free(u);
  return l;
}

DEVICE_TEST(dropout, mask_is_loom_rand_in_memory_order) {
  tk_seed(301);
  int64_t sh[4] = {3, 5, 4, 7}, n = 420;
  loom_dtype dts[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
  double ps[3] = {0.5, 0.1, 0.9};
  for (int f = 0; f < 2; f++)
    for (int d = 0; d < 3; d++) {
      double p = ps[d], *xv, *gv = tk_rand_vals(n, -1, 1, 0, dts[d]);
      loom_tensor *x = tk_rand_tensor(4, sh, -2, 2, 0, dts[d], dev, &xv);
      loom_set_requires_grad(x, true);
      uint64_t seed = 1234 + (uint64_t)(f * 3 + d);
      double *u = uniforms_in_memory_order(seed, sh, f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW);
      loom_manual_seed(seed);
      loom_tensor *y = loom_dropout(in_format(x, f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW), p, true);
      cr_assert_not_null(y, "%s", loom_last_error());
      float scale = (float)(1.0 / (1.0 - p));
      double *want = malloc((size_t)n * sizeof *want), *dwant = malloc((size_t)n * sizeof *dwant);
      for (int64_t i = 0; i < n; i++) {
        bool keep = u[i] >= p;
        want[i] = keep ? tk_round((float)xv[i] * scale, dts[d]) : 0;
        dwant[i] = keep ? tk_round((float)gv[i] * scale, dts[d]) : 0;
      }
      char what[64];
      snprintf(what, sizeof what, "dropout p=%g %s %s", p, f ? "NHWC" : "NCHW", loom_dtype_name(dts[d]));
      tk_assert_tensor(y, 4, sh, dts[d], want, 0, 0, what);
      if (f) cr_assert(loom_tensor_is_channels_last(y), "%s: result is not channels-last", what);
      cr_assert_eq(loom_backward_with(y, in_format(tk_tensor(gv, 4, sh, dts[d], dev), f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW)),
                   LOOM_OK, "%s", loom_last_error());
      tk_assert_tensor(loom_grad(x), 4, sh, dts[d], dwant, 0, 0, "dropout backward: same mask and scale");
      free(xv), free(gv), free(u), free(want), free(dwant);
    }
}

DEVICE_TEST(dropout, drops_about_p_and_advances_the_generator) {
  int64_t n = 100003;
  loom_manual_seed(7);
  loom_tensor *x = loom_ones(1, &n, LOOM_F32, dev);
  double *a = tk_read(loom_dropout(x, 0.3, true)), *b = tk_read(loom_dropout(x, 0.3, true));
  int64_t zeros = 0, same = 0;
  for (int64_t i = 0; i < n; i++) {
    zeros += a[i] == 0;
    same += (a[i] == 0) == (b[i] == 0);
    cr_assert(a[i] == 0 || a[i] == (double)(float)(1.0 / 0.7), "kept value %g is not 1/(1-p)", a[i]);
  }
  cr_assert(fabs((double)zeros / (double)n - 0.3) < 0.01, "dropped %.4f of the elements, expected about 0.3",
            (double)zeros / (double)n);
  cr_assert(same < n * 0.7, "two calls drew the same mask: the generator did not advance");
  free(a), free(b);
}

DEVICE_TEST(dropout, identity_when_not_training_or_p_zero_and_zeros_at_one) {
  int64_t sh[2] = {3, 4}, n = 12;
  loom_tensor *x = tk_rand_tensor(2, sh, -1, 1, 0.1, LOOM_F32, dev, NULL);
  loom_manual_seed(9);
  double *r0 = tk_read(loom_rand(1, &n, LOOM_F32, loom_cpu()));
  loom_manual_seed(9);
  cr_assert_eq(loom_dropout(x, 0.5, false), x, "eval-mode dropout must return x itself");
  cr_assert_eq(loom_dropout(x, 0.0, true), x, "p = 0 must return x itself");
  double *r1 = tk_read(loom_rand(1, &n, LOOM_F32, loom_cpu()));
  tk_assert_close(r1, r0, n, 0, 0, "identity dropout must not draw random numbers");
  loom_set_requires_grad(x, true);
  loom_tensor *y = loom_dropout(x, 1.0, true);
  double zeros[12] = {0};
  tk_assert_tensor(y, 2, sh, LOOM_F32, zeros, 0, 0, "p = 1 gives zeros");
  cr_assert_eq(loom_backward(loom_sum_all(y)), LOOM_OK, "%s", loom_last_error());
  tk_assert_tensor(loom_grad(x), 2, sh, LOOM_F32, zeros, 0, 0, "p = 1: zero gradient");
  free(r0), free(r1);
}

static loom_tensor *dropout_fn(loom_tensor **in, void *c) {
  (void)c;
  loom_manual_seed(77);  /* every evaluation sees the same mask */
  return loom_dropout(in[0], 0.4, true);
}

DEVICE_TEST(dropout, finite_difference_gradient) {
  int64_t sh[2] = {5, 9};
  loom_tensor *in[1] = {tk_rand_tensor(2, sh, -1, 1, 0, LOOM_F32, dev, NULL)};
  loom_set_requires_grad(in[0], true);
  tk_gradcheck(dropout_fn, NULL, in, 1, 1e-2, 1e-3, 1e-3, "dropout gradcheck");
}

DEVICE_TEST(dropout, errors) {
  int64_t n = 4;
  loom_tensor *x = loom_ones(1, &n, LOOM_F32, dev);
  tk_assert_fails(loom_dropout(x, -0.1, true), LOOM_ERR_INVALID_ARG, "dropout", "outside [0, 1]");
  tk_assert_fails(loom_dropout(x, 1.5, true), LOOM_ERR_INVALID_ARG, "outside [0, 1]");
  tk_assert_fails(loom_dropout(x, NAN, false), LOOM_ERR_INVALID_ARG, "outside [0, 1]");
  tk_assert_fails(loom_dropout(loom_ones(1, &n, LOOM_I32, dev), 0.5, true), LOOM_ERR_DTYPE, "i32");
  loom_clear_error();
  tk_assert_fails(loom_dropout(NULL, 0.5, true), LOOM_ERR_NULL_INPUT, "dropout");
}

/* ---- flatten -------------------------------------------------------------------------- */

DEVICE_TEST(flatten, shapes_views_and_gradient) {
  int64_t sh[4] = {2, 3, 4, 5};
  double *v;
  loom_tensor *x = tk_rand_tensor(4, sh, -1, 1, 0, LOOM_F32, dev, &v);
  struct { int s, e, nd; int64_t want[4]; } cs[] = {
      {1, -1, 2, {2, 60}}, {0, 1, 3, {6, 4, 5}}, {-2, -1, 3, {2, 3, 20}}, {2, 2, 4, {2, 3, 4, 5}}, {0, -1, 1, {120}},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    loom_tensor *y = loom_flatten(x, cs[i].s, cs[i].e);
    tk_assert_tensor(y, cs[i].nd, cs[i].want, LOOM_F32, v, 0, 0, "flatten");
    cr_assert_eq(loom_tensor_data(y), loom_tensor_data(x), "flatten of a contiguous tensor must be a view");
  }
  loom_tensor *s = loom_full(0, NULL, 2.5, LOOM_F32, dev);
  int64_t one = 1;
  double two5 = 2.5;
  tk_assert_tensor(loom_flatten(s, 0, -1), 1, &one, LOOM_F32, &two5, 0, 0, "flatten of a 0-d tensor");
  /* NHWC: a global pool's [N, C, 1, 1] flattens without a copy; a general
   * NHWC tensor flattens in logical (NCHW) order. */
  loom_tensor *xn = loom_to_memory_format(x, LOOM_FORMAT_NHWC);
  int64_t f2[2] = {2, 60};
  tk_assert_tensor(loom_flatten(xn, 1, -1), 2, f2, LOOM_F32, v, 0, 0, "flatten of NHWC");
  int64_t psh[4] = {2, 3, 1, 1}, p2[2] = {2, 3};
  loom_tensor *pooled = loom_adaptive_avg_pool2d(xn, 1, 1);
  loom_tensor *fp = loom_flatten(pooled, 1, -1);
  double *pv = tk_read(pooled);
  tk_assert_tensor(fp, 2, p2, LOOM_F32, pv, 0, 0, "flatten of pooled NHWC");
  cr_assert_eq(loom_tensor_data(fp), loom_tensor_data(pooled), "flattening [N, C, 1, 1] must not copy");
  (void)psh;
  free(pv);
  free(v);
}

static loom_tensor *flat_fn(loom_tensor **in, void *c) {
  (void)c;
  return loom_mul(loom_flatten(loom_to_memory_format(in[0], LOOM_FORMAT_NHWC), 1, 2), loom_flatten(in[0], 1, 2));
}

DEVICE_TEST(flatten, finite_difference_gradient) {
  int64_t sh[4] = {2, 2, 3, 2};
  loom_tensor *in[1] = {tk_rand_tensor(4, sh, -1, 1, 0, LOOM_F32, dev, NULL)};
  loom_set_requires_grad(in[0], true);
  tk_gradcheck(flat_fn, NULL, in, 1, 1e-2, 1e-3, 1e-3, "flatten gradcheck");
}

DEVICE_TEST(flatten, errors) {
  int64_t sh[3] = {2, 3, 4};
  loom_tensor *x = loom_zeros(3, sh, LOOM_F32, dev);
  tk_assert_fails(loom_flatten(x, 2, 1), LOOM_ERR_INVALID_ARG, "flatten", "start_dim", "after end_dim");
  tk_assert_fails(loom_flatten(x, 0, 3), LOOM_ERR_SHAPE, "flatten", "out of range");
  tk_assert_fails(loom_flatten(x, -4, 1), LOOM_ERR_SHAPE, "out of range");
  loom_clear_error();
  tk_assert_fails(loom_flatten(NULL, 0, 1), LOOM_ERR_NULL_INPUT, "flatten");
}

/* ---- add_relu -------------------------------------------------------------------------------- */

typedef struct ar_case {
  int nb;
  int64_t bsh[4];
} ar_case;

DEVICE_TEST(add_relu, matches_reference_with_broadcast) {
  tk_seed(321);
  int64_t sh[4] = {2, 3, 4, 5}, n = 120;
  ar_case cs[] = {{4, {2, 3, 4, 5}}, {3, {3, 1, 1}}, {4, {1, 3, 1, 1}}, {1, {1}}, {2, {4, 5}}};
  loom_dtype dts[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
    for (int f = 0; f < 2; f++)
      for (int d = 0; d < 3; d++) {
        int64_t nb = tk_numel(cs[i].nb, cs[i].bsh);
        double *av, *bv, *gv = tk_rand_vals(n, -1, 1, 0, dts[d]);
        loom_tensor *a = tk_rand_tensor(4, sh, -2, 2, 0, dts[d], dev, &av);
        if (f) a = loom_to_memory_format(a, LOOM_FORMAT_NHWC);  /* an NHWC leaf */
        loom_tensor *b = tk_rand_tensor(cs[i].nb, cs[i].bsh, -1, 1, 0, dts[d], dev, &bv);
        loom_set_requires_grad(a, true);
        loom_set_requires_grad(b, true);
        loom_tensor *y = loom_add_relu(a, b);
        double want[120], ga[120], *gb = calloc((size_t)nb, sizeof *gb);
        for (int64_t k = 0; k < n; k++) {
          int64_t j = tk_bcast_index(k, 4, sh, cs[i].nb, cs[i].bsh);
          double s = (double)(float)(av[k] + bv[j]);  /* the f32 sum, rounded once to the dtype */
          want[k] = tk_round(s > 0 ? s : 0, dts[d]);
          ga[k] = s > 0 ? gv[k] : 0;
          gb[j] += ga[k];
        }
        char what[80];
        snprintf(what, sizeof what, "add_relu b[%d dims] %s %s", cs[i].nb, f ? "NHWC" : "NCHW", loom_dtype_name(dts[d]));
        tk_assert_tensor(y, 4, sh, dts[d], want, 0, 0, what);
        if (f) cr_assert(loom_tensor_is_channels_last(y) && !loom_tensor_is_contiguous(y), "%s: not channels-last", what);
        cr_assert_eq(loom_backward_with(y, in_format(tk_tensor(gv, 4, sh, dts[d], dev), f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW)),
                     LOOM_OK, "%s", loom_last_error());
        tk_assert_tensor(loom_grad(a), 4, sh, dts[d], ga, 0, 0, "add_relu da");
        double t = dts[d] == LOOM_F32 ? 1e-5 : 0.05;
        tk_assert_tensor(loom_grad(b), cs[i].nb, cs[i].bsh, dts[d], gb, t, t, "add_relu db (summed over broadcast)");
        /* Each leaf's gradient comes in the leaf's layout. */
        if (f) cr_assert(loom_tensor_is_channels_last(loom_grad(a)) && !loom_tensor_is_contiguous(loom_grad(a)),
                         "%s: the NHWC leaf's gradient is not NHWC", what);
        cr_assert(loom_tensor_is_contiguous(loom_grad(b)), "%s: the contiguous leaf's gradient is not contiguous", what);
        free(av), free(bv), free(gv), free(gb);
      }
}

DEVICE_TEST(add_relu, a_may_broadcast_too) {
  double av[2] = {1, -3}, bv[6] = {0, 1, 2, 3, 4, 5};
  int64_t ash[2] = {2, 1}, bsh[2] = {2, 3};
  double want[6] = {1, 2, 3, 0, 1, 2};
  tk_assert_tensor(loom_add_relu(tk_tensor(av, 2, ash, LOOM_F32, dev), tk_tensor(bv, 2, bsh, LOOM_F32, dev)), 2, bsh,
                   LOOM_F32, want, 0, 0, "add_relu with a broadcast");
}

/* add_relu hands one gradient tensor to both of its inputs; the engine lets
 * two nodes' pending gradients share it and must copy before adding into a
 * shared one. Here u is both add_relu's first input and w's, and the
 * gradients of u and v must stay apart (z = add_relu(u, v) + 5u, u = 2x,
 * v = 3x: dz/dx = gz (2 (m + 5) + 3 m), m = [5x > 0]). Backward runs nodes
 * in reverse recording order: with w recorded between v and add_relu,
 * w adds into u's gradient while v's still shares it (the copy-on-write
 * case); with w recorded last, w's part is in u's slot first. */
DEVICE_TEST(add_relu, shared_gradient_is_copied_before_an_add) {
  tk_seed(323);
  int64_t sh[2] = {4, 6}, n = 24;
  for (int order = 0; order < 2; order++) {
    double *xv, *gv = tk_rand_vals(n, -1, 1, 0, LOOM_F32), want[24];
    loom_tensor *x = tk_rand_tensor(2, sh, -2, 2, 0.1, LOOM_F32, dev, &xv);
    loom_set_requires_grad(x, true);
    loom_tensor *u = loom_mul_scalar(x, 2), *v = loom_mul_scalar(x, 3), *w = NULL, *y;
    if (order == 0) w = loom_mul_scalar(u, 5);
    y = loom_add_relu(u, v);
    if (order == 1) w = loom_mul_scalar(u, 5);
    loom_tensor *z = loom_add(y, w);
    cr_assert_eq(loom_backward_with(z, tk_tensor(gv, 2, sh, LOOM_F32, dev)), LOOM_OK, "%s", loom_last_error());
    for (int64_t k = 0; k < n; k++) {
      double m = (float)(2 * (float)xv[k]) + (float)(3 * (float)xv[k]) > 0 ? 1 : 0;
      want[k] = gv[k] * (2 * (m + 5) + 3 * m);
    }
    tk_assert_tensor(loom_grad(x), 2, sh, LOOM_F32, want, 1e-5, 1e-5,
                     order ? "dx, 5u recorded after add_relu" : "dx, 5u recorded between v and add_relu");
    free(xv), free(gv);
  }
}

static loom_tensor *ar_fn(loom_tensor **in, void *c) {
  (void)c;
  return loom_add_relu(loom_to_memory_format(in[0], LOOM_FORMAT_NHWC), in[1]);
}

DEVICE_TEST(add_relu, finite_difference_gradients) {
  tk_seed(322);
  int64_t sh[4] = {2, 3, 2, 2}, bsh[3] = {3, 1, 1};
  loom_tensor *in[2] = {tk_rand_tensor(4, sh, -2, 2, 0.1, LOOM_F32, dev, NULL),
                        tk_rand_tensor(3, bsh, -0.05, 0.05, 0, LOOM_F32, dev, NULL)};
  loom_set_requires_grad(in[0], true);
  loom_set_requires_grad(in[1], true);
  tk_gradcheck(ar_fn, NULL, in, 2, 1e-3, 1e-3, 1e-2, "add_relu gradcheck");
}

DEVICE_TEST(add_relu, errors) {
  int64_t s1[2] = {2, 3}, s2[2] = {2, 4};
  loom_tensor *a = loom_zeros(2, s1, LOOM_F32, dev);
  tk_assert_fails(loom_add_relu(a, loom_zeros(2, s2, LOOM_F32, dev)), LOOM_ERR_SHAPE, "add_relu", "[2, 3]", "[2, 4]");
  tk_assert_fails(loom_add_relu(a, loom_zeros(2, s1, LOOM_F16, dev)), LOOM_ERR_DTYPE, "add_relu", "f16");
  tk_assert_fails(loom_add_relu(loom_zeros(2, s1, LOOM_I32, dev), loom_zeros(2, s1, LOOM_I32, dev)), LOOM_ERR_DTYPE,
                  "add_relu");
  loom_clear_error();
  tk_assert_fails(loom_add_relu(a, NULL), LOOM_ERR_NULL_INPUT, "add_relu", "b");
}

/* ---- writing into channels-last memory ---------------------------------------------------- */

DEVICE_TEST(memory_format, copies_and_accumulation_into_nhwc_and_permuted_outputs) {
  /* Elementwise kernels walk the output in memory order (dims sorted by its
   * strides): NHWC and permuted destinations must still get every value. */
  tk_seed(331);
  int64_t sh[4] = {2, 3, 4, 5}, n = 120;
  double *v, *w;
  loom_tensor *src = tk_rand_tensor(4, sh, -1, 1, 0, LOOM_F32, dev, &v);
  loom_tensor *other = tk_rand_tensor(4, sh, -1, 1, 0, LOOM_F32, dev, &w);
  loom_tensor *dst = loom_to_memory_format(loom_zeros(4, sh, LOOM_F32, dev), LOOM_FORMAT_NHWC);
  cr_assert_eq(loom_copy_(dst, src), LOOM_OK, "%s", loom_last_error());
  tk_assert_tensor(dst, 4, sh, LOOM_F32, v, 0, 0, "copy into NHWC");
  cr_assert(loom_tensor_is_channels_last(dst), "copy_ changed the destination's layout");
  /* The autograd engine accumulates a second gradient in place like this. */
  double want[120];
  for (int i = 0; i < n; i++) want[i] = (double)((float)v[i] + (float)w[i]);
  cr_assert_eq(loom_add_inplace(dst, loom_to_memory_format(other, LOOM_FORMAT_NHWC)), LOOM_OK, "%s", loom_last_error());
  tk_assert_tensor(dst, 4, sh, LOOM_F32, want, 0, 0, "NHWC + NHWC written into NHWC");
  /* A permuted destination ([5, 4, 3, 2] memory seen as [2, 3, 4, 5]). */
  int perm[4] = {3, 2, 1, 0};
  int64_t rsh[4] = {5, 4, 3, 2};
  loom_tensor *pd = loom_permute(loom_zeros(4, rsh, LOOM_F32, dev), perm);
  cr_assert_eq(loom_copy_(pd, src), LOOM_OK, "%s", loom_last_error());
  tk_assert_tensor(pd, 4, sh, LOOM_F32, v, 0, 0, "copy into a permuted view");
  free(v), free(w);
}

/* log_softmax(x) -> NHWC copy -> batch norm: the copy's backward hands the
 * channels-last gradient on unchanged, and log_softmax's kernel expects its
 * gradient in its output's (contiguous) layout. */
static loom_tensor *ls_bn_fn(loom_tensor **in, void *c) {
  loom_tensor *y = loom_log_softmax(in[0], -1);
  if (c) y = loom_to_memory_format(y, LOOM_FORMAT_NHWC);
  return loom_batch_norm(y, NULL, NULL, NULL, NULL, NULL);
}

DEVICE_TEST(memory_format, gradients_arrive_in_each_outputs_layout) {
  tk_seed(332);
  int64_t sh[4] = {2, 3, 4, 5};
  double *v;
  loom_tensor *x = tk_rand_tensor(4, sh, -2, 2, 0, LOOM_F32, dev, &v);
  loom_tensor *g = tk_rand_tensor(4, sh, -1, 1, 0, LOOM_F32, dev, NULL);
  loom_set_requires_grad(x, true);
  int dummy = 1;
  double *grads[2];
  for (int f = 0; f < 2; f++) {
    loom_zero_grad(x);
    loom_tensor *in[1] = {x};
    loom_tensor *y = ls_bn_fn(in, f ? &dummy : NULL);
    cr_assert_eq(loom_backward_with(y, g), LOOM_OK, "%s", loom_last_error());  /* a contiguous seed for an NHWC y */
    /* A contiguous leaf gets a contiguous gradient, whatever layout reached it. */
    cr_assert(loom_tensor_is_contiguous(loom_grad(x)), "x.grad is not contiguous");
    grads[f] = tk_read(loom_grad(x));
  }
  tk_assert_close(grads[1], grads[0], 120, 1e-5, 1e-4, "gradient through an NHWC detour");
  /* A channels-last leaf gets a channels-last gradient. */
  loom_tensor *xl = loom_detach(loom_to_memory_format(x, LOOM_FORMAT_NHWC));
  loom_set_requires_grad(xl, true);
  cr_assert_eq(loom_backward(loom_sum_all(loom_relu(loom_to_memory_format(xl, LOOM_FORMAT_NCHW)))), LOOM_OK, "%s",
               loom_last_error());
  cr_assert(loom_tensor_is_channels_last(loom_grad(xl)) && !loom_tensor_is_contiguous(loom_grad(xl)),
            "an NHWC leaf's gradient is not NHWC");
  free(grads[0]), free(grads[1]), free(v);
}
