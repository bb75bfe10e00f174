/* sweep.c — the op sweep's shared machinery (sweep.h): inputs in each
 * layout, result checks with per-dtype tolerances, gradient checks. */
#include "op_sweep/sweep.h"

#include <math.h>

char sw_ctx[256];
int sw_strided_inputs;

const char *sw_layout_name(sw_layout l) {
  static const char *names[SW_NLAYOUTS] = {"contiguous", "sliced", "transposed", "channels-last"};
  return (unsigned)l < SW_NLAYOUTS ? names[l] : "?";
}

const char *sw_shape_name(sw_shape s) {
  static const char *names[SW_NSHAPES] = {"small", "empty", "one", "odd", "batch1", "big", "wide"};
  return (unsigned)s < SW_NSHAPES ? names[s] : "?";
}

/* BIG: 1,056,768 elements; ODD: an inner dim of 127 leaves a tail after
 * every vector width. */
const int64_t sw_nchw[SW_NSHAPES][4] = {
    [SW_SMALL] = {2, 3, 4, 5},   [SW_EMPTY] = {2, 0, 4, 5},      [SW_ONE] = {1, 1, 1, 1},
    [SW_ODD] = {3, 7, 13, 127},  [SW_BATCH1] = {1, 3, 4, 5},     [SW_BIG] = {4, 16, 128, 129},
    [SW_WIDE] = {2, 2048, 3, 3},
};

double *sw_alloc(int64_t n) {
  double *p = calloc((size_t)(n > 0 ? n : 1), sizeof *p);
  cr_assert_not_null(p);
  return p;
}

int64_t sw_numel(int ndim, const int64_t *shape) { return tk_numel(ndim, shape); }

/* ---- inputs ------------------------------------------------------------------ */

/* What the padding of a SLICED / TRANSPOSED base holds: NaN, or for
 * integer inputs (labels) a value no op accepts as valid. */
static double pad_value(loom_dtype dt) {
  if (loom_dtype_is_float(dt)) return NAN;
  return dt == LOOM_U8 ? 255.0 : (double)(1 << 20);
}

/* The layout an input of ndim dims gets in layout l. */
static sw_layout effective(sw_layout l, int ndim) {
  if (ndim == 0) return SW_CONTIGUOUS;
  if (l == SW_CHANNELS_LAST && ndim != 4) return SW_CONTIGUOUS;
  return l;
}

/* Element offset in the (row-major) base of logical index idx. */
static int64_t base_offset(sw_layout l, int ndim, const int64_t *idx, const int64_t *bs) {
  int64_t off = 0;
  switch (l) {
    case SW_SLICED:
      for (int d = 0; d < ndim; d++) off += (idx[d] + 1) * bs[d];
      return off;
    case SW_TRANSPOSED:
      if (ndim == 1) return 2 * idx[0];
      for (int d = 0; d < ndim - 2; d++) off += idx[d] * bs[d];
      return off + idx[ndim - 2] * bs[ndim - 1] + idx[ndim - 1] * bs[ndim - 2];
    case SW_CHANNELS_LAST: /* base [N, H, W, C] */
      return idx[0] * bs[0] + idx[2] * bs[1] + idx[3] * bs[2] + idx[1] * bs[3];
    default:
      for (int d = 0; d < ndim; d++) off += idx[d] * bs[d];
      return off;
  }
}

/* Row-major strides, counting an empty dim as 1 (as loom's fresh tensors
 * do); size-1 dims may have any stride. */
static bool dense(const loom_tensor *t) {
  int nd = loom_tensor_ndim(t);
  const int64_t *shape = loom_tensor_shape(t), *strides = loom_tensor_strides(t);
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; d--) {
    if (shape[d] != 1 && strides[d] != s) return false;
    s *= shape[d] > 0 ? shape[d] : 1;
  }
  return true;
}

loom_tensor *sw_input_vals(const sw_config *c, int ndim, const int64_t *shape, loom_dtype dt, const double *vals) {
  sw_layout l = effective(c->layout, ndim);
  if (l == SW_CONTIGUOUS) return tk_tensor(vals, ndim, shape, dt, c->dev);
  int64_t base[LOOM_MAX_DIMS], bs[LOOM_MAX_DIMS];
  for (int d = 0; d < ndim; d++) base[d] = shape[d];
  if (l == SW_SLICED) {
    for (int d = 0; d < ndim; d++) base[d] = shape[d] + (d == ndim - 1 ? 3 : 2);
  } else if (l == SW_TRANSPOSED) {
    if (ndim == 1) base[0] = 2 * shape[0];
    else base[ndim - 2] = shape[ndim - 1], base[ndim - 1] = shape[ndim - 2];
  } else { /* channels-last: the dense base is [N, H, W, C] */
    base[1] = shape[2], base[2] = shape[3], base[3] = shape[1];
  }
  int64_t bn = tk_numel(ndim, base), n = tk_numel(ndim, shape);
  bs[ndim - 1] = 1;
  for (int d = ndim - 2; d >= 0; d--) bs[d] = bs[d + 1] * base[d + 1];
  double *bv = sw_alloc(bn);
  for (int64_t i = 0; i < bn; i++) bv[i] = pad_value(dt);
  int64_t idx[LOOM_MAX_DIMS] = {0};
  for (int64_t i = 0; i < n; i++) {
    bv[base_offset(l, ndim, idx, bs)] = vals[i];
    for (int d = ndim - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
  }
  loom_tensor *v = tk_tensor(bv, ndim, base, dt, c->dev);
  free(bv);
  if (l == SW_SLICED) {
    for (int d = 0; v && d < ndim; d++) v = loom_slice(v, d, 1, 1 + shape[d], 1);
  } else if (l == SW_TRANSPOSED) {
    v = ndim == 1 ? loom_slice(v, 0, 0, base[0], 2) : loom_transpose(v, -2, -1);
  } else {
    v = loom_permute(v, (const int[]){0, 3, 1, 2});
  }
  cr_assert_not_null(v, "%s: making a %s input: %s", sw_ctx, sw_layout_name(l), loom_last_error());
  tk_assert_shape(v, ndim, shape, sw_ctx);
  if (!dense(v)) sw_strided_inputs++;
  return v;
}

loom_tensor *sw_input(const sw_config *c, int ndim, const int64_t *shape, double lo, double hi, double away,
                      double **vals) {
  double *v = tk_rand_vals(tk_numel(ndim, shape), lo, hi, away, c->dtype);
  loom_tensor *t = sw_input_vals(c, ndim, shape, c->dtype, v);
  *vals = v;
  return t;
}

/* ---- results ---------------------------------------------------------------------- */

double sw_atol(loom_dtype dt, double terms) {
  double a = 1e-5 * sqrt(terms > 1 ? terms : 1);
  return dt == LOOM_F16 ? a + 0x1p-24 : a;
}

double sw_rtol(loom_dtype dt) { return tk_rtol(dt); }

bool sw_expect_as(const sw_config *c, loom_tensor *t, int ndim, const int64_t *shape, loom_dtype dt,
                  const double *want, double atol, double rtol, const char *what) {
  if (c->refused && sw_strided_inputs > 0) {
    cr_assert_null(t, "%s: %s: the op is declared to refuse this layout, but it returned a result", sw_ctx, what);
    cr_assert(loom_last_status() != LOOM_OK, "%s: %s: refused without an error status", sw_ctx, what);
    cr_assert(strstr(loom_last_error(), "contiguous"),
              "%s: %s: a layout refusal must say what layout it needs (\"contiguous\"), got \"%s\"", sw_ctx, what,
              loom_last_error());
    return false;
  }
  cr_assert_not_null(t, "%s: %s failed: %s", sw_ctx, what, loom_last_error());
  char msg[400];
  snprintf(msg, sizeof msg, "%s: %s", sw_ctx, what);
  tk_assert_tensor(t, ndim, shape, dt, want, atol, rtol, msg);
  return true;
}

bool sw_expect_scaled(const sw_config *c, loom_tensor *t, int ndim, const int64_t *shape, const double *want,
                      const double *scale, double terms, const char *what) {
  if (c->refused && sw_strided_inputs > 0) return sw_expect(c, t, ndim, shape, want, terms, what);
  cr_assert_not_null(t, "%s: %s failed: %s", sw_ctx, what, loom_last_error());
  char msg[400];
  snprintf(msg, sizeof msg, "%s: %s", sw_ctx, what);
  tk_assert_shape(t, ndim, shape, msg);
  cr_assert_eq(loom_tensor_dtype(t), c->dtype, "%s: dtype %s", msg, loom_dtype_name(loom_tensor_dtype(t)));
  double *got = tk_read(t), atol = sw_atol(c->dtype, terms), rtol = sw_rtol(c->dtype);
  for (int64_t i = 0, n = sw_numel(ndim, shape); i < n; i++) {
    double g = got[i], w = want[i], tol = atol + rtol * fmax(fabs(w), scale[i]);
    cr_assert(fabs(g - w) <= tol, "%s: element %lld is %.9g, expected %.9g (|diff| %.3g > %.3g; scale %.3g)", msg,
              (long long)i, g, w, fabs(g - w), tol, scale[i]);
  }
  free(got);
  return true;
}

bool sw_expect(const sw_config *c, loom_tensor *t, int ndim, const int64_t *shape, const double *want, double terms,
               const char *what) {
  return sw_expect_as(c, t, ndim, shape, c->dtype, want, sw_atol(c->dtype, terms), sw_rtol(c->dtype), what);
}

void sw_expect_error(loom_tensor *t, loom_status st, const char *frag, const char *what) {
  cr_assert_null(t, "%s: %s: expected an error, got a result", sw_ctx, what);
  cr_assert_eq(loom_last_status(), st, "%s: %s: status %s, expected %s (\"%s\")", sw_ctx, what,
               loom_status_name(loom_last_status()), loom_status_name(st), loom_last_error());
  cr_assert(strstr(loom_last_error(), frag), "%s: %s: error \"%s\" does not mention \"%s\"", sw_ctx, what,
            loom_last_error(), frag);
  loom_clear_error();
}

/* ---- gradients ----------------------------------------------------------------------- */

enum { SW_FD_ALL = 512, SW_FD_SAMPLES = 8 };

/* 16-bit gradients against the f32 gradient at the same inputs (sweep.h). */
static void grad_vs_f32(const sw_config *c, tk_fn fn, void *ctx, loom_tensor **in, int n, unsigned mask,
                        const char *what) {
  enum { MAX_IN = 8 };
  cr_assert(n <= MAX_IN);
  loom_scope_begin();
  for (int k = 0; k < n; k++)
    if (in[k]) loom_zero_grad(in[k]);
  loom_tensor *y = fn(in, ctx);
  cr_assert_not_null(y, "%s: %s: forward failed: %s", sw_ctx, what, loom_last_error());
  cr_assert(loom_requires_grad(y), "%s: %s: the output does not require grad", sw_ctx, what);
  int64_t ny = loom_tensor_numel(y);
  double *r = tk_rand_vals(ny, -1.0, 1.0, 0.0, loom_tensor_dtype(y)); /* exact in f32 too */
  loom_tensor *rt = tk_tensor(r, loom_tensor_ndim(y), loom_tensor_shape(y), loom_tensor_dtype(y), c->dev);
  cr_assert_eq(loom_backward_with(y, rt), LOOM_OK, "%s: %s: backward failed: %s", sw_ctx, what, loom_last_error());

  /* The f32 twin of each float input: the same values in the same layout
   * (a layout can change results: dropout's mask is in memory order). */
  loom_tensor *in32[MAX_IN] = {0};
  for (int k = 0; k < n; k++) {
    in32[k] = in[k];
    if (!in[k] || !loom_dtype_is_float(loom_tensor_dtype(in[k]))) continue;
    double *v = tk_read(in[k]);
    in32[k] = sw_input_vals(c, loom_tensor_ndim(in[k]), loom_tensor_shape(in[k]), LOOM_F32, v);
    free(v);
  }
  for (int k = 0; k < n; k++)
    if (mask >> k & 1) cr_assert_eq(loom_set_requires_grad(in32[k], true), LOOM_OK, "%s", loom_last_error());
  loom_tensor *y32 = fn(in32, ctx);
  cr_assert_not_null(y32, "%s: %s: f32 forward failed: %s", sw_ctx, what, loom_last_error());
  loom_tensor *rt32 = tk_tensor(r, loom_tensor_ndim(y32), loom_tensor_shape(y32), LOOM_F32, c->dev);
  cr_assert_eq(loom_backward_with(y32, rt32), LOOM_OK, "%s: %s: f32 backward failed: %s", sw_ctx, what,
               loom_last_error());

  for (int k = 0; k < n; k++) {
    if (!(mask >> k & 1)) continue;
    loom_tensor *g = loom_grad(in[k]), *g32 = loom_grad(in32[k]);
    cr_assert_not_null(g, "%s: %s: input %d got no gradient", sw_ctx, what, k);
    cr_assert_not_null(g32, "%s: %s: input %d got no f32 gradient", sw_ctx, what, k);
    cr_assert_eq(loom_tensor_dtype(g), loom_tensor_dtype(in[k]), "%s: %s: gradient %d is %s, its input %s", sw_ctx,
                 what, k, loom_dtype_name(loom_tensor_dtype(g)), loom_dtype_name(loom_tensor_dtype(in[k])));
    char msg[400];
    snprintf(msg, sizeof msg, "%s: %s: gradient of input %d against the f32 gradient", sw_ctx, what, k);
    tk_assert_shape(g, loom_tensor_ndim(in[k]), loom_tensor_shape(in[k]), msg);
    int64_t m = loom_tensor_numel(g);
    double *want = tk_read(g32), big = 0;
    for (int64_t i = 0; i < m; i++) big = fmax(big, fabs(want[i]));
    double *got = tk_read(g);
    tk_assert_close(got, want, m, 8.0 * tk_rtol(c->dtype) * big + 1e-6, 0.0, msg);
    free(got);
    free(want);
  }
  free(r);
  loom_scope_end();
}

void sw_gradcheck(const sw_config *c, tk_fn fn, void *ctx, loom_tensor **in, int n, unsigned grad_mask, double h,
                  const char *what) {
  if (c->refused && sw_strided_inputs > 0) return;
  int64_t most = 0;
  for (int k = 0; k < n; k++) {
    if (!(grad_mask >> k & 1)) continue;
    cr_assert_eq(loom_set_requires_grad(in[k], true), LOOM_OK, "%s: %s", sw_ctx, loom_last_error());
    int64_t m = loom_tensor_numel(in[k]);
    most = m > most ? m : most;
  }
  if (c->dtype != LOOM_F32) {
    grad_vs_f32(c, fn, ctx, in, n, grad_mask, what);
    return;
  }
  /* Every element of small contiguous inputs; a sample otherwise (a layout
   * bug shows on many elements, and the big classes must stay quick). */
  int64_t coords = c->grad_coords > 0                                  ? c->grad_coords
                   : most > SW_FD_ALL || c->layout != SW_CONTIGUOUS ? SW_FD_SAMPLES
                                                                       : 0;
  char msg[400];
  snprintf(msg, sizeof msg, "%s: %s", sw_ctx, what);
  tk_gradcheck_sampled(fn, ctx, in, n, h, 2e-3, 1e-2, coords, msg);
}
