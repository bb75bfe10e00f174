/* cases_views.c — the op sweep's cases for the copy op (contiguous copies,
 * casts, memory-format changes) and the four views, on [N, C, H, W] inputs
 * (sw_nchw) in every layout. */
#include "op_sweep/sweep.h"

/* want[perm-ordered index] = v[i]: the values of v [s] permuted by perm
 * (result dim k is input dim perm[k]), row-major. */
static void ref_permute(const double *v, const int64_t *s, const int *perm, double *want) {
  int64_t os[4], ost[4], n = sw_numel(4, s), idx[4] = {0};
  for (int k = 0; k < 4; k++) os[k] = s[perm[k]];
  ost[3] = 1;
  for (int k = 2; k >= 0; k--) ost[k] = ost[k + 1] * os[k + 1];
  for (int64_t i = 0; i < n; i++) {
    int64_t o = 0;
    for (int k = 0; k < 4; k++) o += idx[perm[k]] * ost[k];
    want[o] = v[i];
    for (int d = 3; d >= 0 && ++idx[d] == s[d]; d--) idx[d] = 0;
  }
}

/* ---- copy ------------------------------------------------------------------------ */

/* A strided read (contiguous of a transpose) runs the copy kernel. */
static loom_tensor *copy_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_contiguous(loom_transpose(in[0], 1, 2));
}

void sw_case_copy(const sw_config *c) {
  const int64_t *s = sw_nchw[c->shape];
  int64_t n = sw_numel(4, s), st[4] = {s[0], s[2], s[1], s[3]};
  double *v, *want = sw_alloc(n);
  loom_tensor *in[1] = {sw_input(c, 4, s, -2, 2, 0, &v)};
  ref_permute(v, s, (const int[]){0, 2, 1, 3}, want);
  if (!sw_expect(c, copy_fn(in, NULL), 4, st, want, 1, "contiguous(transpose(x, 1, 2))")) goto out;
  sw_expect(c, loom_contiguous(in[0]), 4, s, v, 1, "contiguous(x)");
  sw_expect(c, loom_to_memory_format(in[0], LOOM_FORMAT_NHWC), 4, s, v, 1, "to channels-last");
  /* Casts convert through the same kernel: to every float dtype, and to
   * i32 (truncating toward zero). */
  static const loom_dtype to[4] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I32};
  for (int k = 0; k < 4; k++) {
    for (int64_t i = 0; i < n; i++) want[i] = tk_round(v[i], to[k]);
    char what[48];
    snprintf(what, sizeof what, "cast to %s", loom_dtype_name(to[k]));
    sw_expect_as(c, loom_cast(in[0], to[k]), 4, s, to[k], want, 0, 0, what);
  }
  sw_gradcheck(c, copy_fn, NULL, in, 1, 1u, 1e-2, "gradient");
out:
  free(want);
  free(v);
}

/* ---- views ------------------------------------------------------------------------ */

static loom_tensor *reshape_fn(loom_tensor **in, void *ctx) {
  const int64_t *s = ctx;
  return loom_reshape(in[0], 2, (const int64_t[]){s[0] * s[1], s[2] * s[3]});
}

/* reshape: a view where the strides allow, else a copy (recorded as the
 * view op either way). loom_view itself must either view or refuse, naming
 * loom_reshape. */
void sw_case_view_reshape(const sw_config *c) {
  const int64_t *s = sw_nchw[c->shape];
  int64_t so[2] = {s[0] * s[1], s[2] * s[3]}, s2[2] = {s[0], s[1] * s[2] * s[3]};
  double *v;
  loom_tensor *in[1] = {sw_input(c, 4, s, -2, 2, 0, &v)};
  if (sw_expect(c, reshape_fn(in, (void *)s), 2, so, v, 1, "reshape to [N*C, H*W]")) {
    loom_tensor *r = loom_view(in[0], 2, (const int64_t[]){s[0], -1});
    if (r || c->layout == SW_CONTIGUOUS) sw_expect(c, r, 2, s2, v, 1, "view as [N, -1]");
    else sw_expect_error(r, LOOM_ERR_SHAPE, "loom_reshape", "view as [N, -1] of a strided layout");
    sw_gradcheck(c, reshape_fn, (void *)s, in, 1, 1u, 1e-2, "gradient");
  }
  free(v);
}

static const int PERM[4] = {3, 1, 0, 2};

static loom_tensor *permute_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_permute(in[0], PERM);
}

void sw_case_view_permute(const sw_config *c) {
  const int64_t *s = sw_nchw[c->shape];
  int64_t so[4] = {s[3], s[1], s[0], s[2]};
  double *v, *want = sw_alloc(sw_numel(4, s));
  loom_tensor *in[1] = {sw_input(c, 4, s, -2, 2, 0, &v)};
  ref_permute(v, s, PERM, want);
  if (sw_expect(c, permute_fn(in, NULL), 4, so, want, 1, "permute (3, 1, 0, 2)"))
    sw_gradcheck(c, permute_fn, NULL, in, 1, 1u, 1e-2, "gradient");
  free(want);
  free(v);
}

static loom_tensor *slice_fn(loom_tensor **in, void *ctx) {
  const int64_t *s = ctx;
  return loom_slice(in[0], 2, 1, s[2], 2);
}

/* Rows 1:H:2 of dim 2 (none when H is 1). */
void sw_case_view_slice(const sw_config *c) {
  const int64_t *s = sw_nchw[c->shape];
  int64_t len = s[2] > 1 ? s[2] / 2 : 0, so[4] = {s[0], s[1], len, s[3]};
  double *v, *want = sw_alloc(sw_numel(4, so));
  loom_tensor *in[1] = {sw_input(c, 4, s, -2, 2, 0, &v)};
  for (int64_t p = 0; p < s[0] * s[1]; p++)
    for (int64_t i = 0; i < len; i++)
      for (int64_t j = 0; j < s[3]; j++) want[(p * len + i) * s[3] + j] = v[(p * s[2] + 1 + 2 * i) * s[3] + j];
  if (sw_expect(c, slice_fn(in, (void *)s), 4, so, want, 1, "rows 1:H:2 of dim 2"))
    sw_gradcheck(c, slice_fn, (void *)s, in, 1, 1u, 1e-2, "gradient");
  free(want);
  free(v);
}

static loom_tensor *expand_fn(loom_tensor **in, void *ctx) {
  return loom_expand(in[0], 4, (const int64_t *)ctx);
}

/* [1, C, 1, W] expanded to [N, C, H, W] (its gradient sums over N and H). */
void sw_case_view_expand(const sw_config *c) {
  const int64_t *s = sw_nchw[c->shape];
  int64_t sx[4] = {1, s[1], 1, s[3]}, n = sw_numel(4, s);
  double *v, *want = sw_alloc(n);
  loom_tensor *in[1] = {sw_input(c, 4, sx, -2, 2, 0, &v)};
  for (int64_t i = 0; i < n; i++) want[i] = v[tk_bcast_index(i, 4, s, 4, sx)];
  if (sw_expect(c, expand_fn(in, (void *)s), 4, s, want, 1, "expand [1, C, 1, W] to [N, C, H, W]"))
    sw_gradcheck(c, expand_fn, (void *)s, in, 1, 1u, 1e-2, "gradient");
  free(want);
  free(v);
}
