/* cases_reduce.c — the op sweep's cases for sum, max and argmax over
 * [N, C, H, W] inputs (sw_nchw). Each reduces over several sets of dims, so
 * every CPU path runs: a trailing block (row reductions), a leading block
 * (column reductions), anything else (gathered first), and everything. */
#include <math.h>

#include "op_sweep/sweep.h"

/* A reduction of a 4-D input: the reduced dims (bit d: dim d) and keepdim. */
typedef struct red_def {
  unsigned mask;
  bool keepdim;
  const char *what;
} red_def;

static int red_dims(const red_def *r, int *dims) {
  int n = 0;
  for (int d = 0; d < 4; d++)
    if (r->mask >> d & 1) dims[n++] = d;
  return n;
}

/* The result's shape; returns its ndim. */
static int red_shape(const red_def *r, const int64_t *s, int64_t *out) {
  int n = 0;
  for (int d = 0; d < 4; d++) {
    if (!(r->mask >> d & 1)) out[n++] = s[d];
    else if (r->keepdim) out[n++] = 1;
  }
  return n;
}

/* Sum (or max) of v [s] over r's dims into out (the kept dims' numel). */
static void ref_reduce(const red_def *r, const double *v, const int64_t *s, bool max, double *out) {
  int64_t kept[4], nk = 1;
  for (int d = 0; d < 4; d++) kept[d] = r->mask >> d & 1 ? 1 : s[d], nk *= kept[d];
  for (int64_t o = 0; o < nk; o++) out[o] = max ? -INFINITY : 0.0;
  int64_t n = sw_numel(4, s), idx[4] = {0};
  for (int64_t i = 0; i < n; i++) {
    int64_t o = 0;
    for (int d = 0; d < 4; d++) o = o * kept[d] + (r->mask >> d & 1 ? 0 : idx[d]);
    out[o] = max ? fmax(out[o], v[i]) : out[o] + v[i];
    for (int d = 3; d >= 0 && ++idx[d] == s[d]; d--) idx[d] = 0;
  }
}

static int64_t red_terms(const red_def *r, const int64_t *s) {
  int64_t t = 1;
  for (int d = 0; d < 4; d++)
    if (r->mask >> d & 1) t *= s[d];
  return t;
}

typedef struct red_ctx {
  const red_def *r;
  bool max;
} red_ctx;

static loom_tensor *red_fn(loom_tensor **in, void *ctx) {
  const red_ctx *k = ctx;
  int dims[4], nd = red_dims(k->r, dims);
  if (nd == 4) nd = 0; /* every dim: the empty list */
  return (k->max ? loom_max : loom_sum)(in[0], nd, dims, k->r->keepdim);
}

/* Forward of every reduction in reds; the gradient of the first. */
static void reduce_case(const sw_config *c, const red_def *reds, int n, bool max, double h) {
  const int64_t *s = sw_nchw[c->shape];
  double *v;
  loom_tensor *in[1] = {sw_input(c, 4, s, -2, 2, 0, &v)};
  for (int k = 0; k < n; k++) {
    int64_t os[4];
    int ond = red_shape(&reds[k], s, os);
    double *want = sw_alloc(sw_numel(ond, os));
    ref_reduce(&reds[k], v, s, max, want);
    red_ctx ctx = {&reds[k], max};
    bool ok = sw_expect(c, red_fn(in, &ctx), ond, os, want, max ? 1.0 : (double)red_terms(&reds[k], s), reds[k].what);
    free(want);
    if (!ok) break;
  }
  red_ctx ctx = {&reds[0], max};
  sw_gradcheck(c, red_fn, &ctx, in, 1, 1u, h, "gradient");
  free(v);
}

static const red_def SUMS[] = {
    {0x5, false, "sum over dims 0, 2 (gathered)"},
    {0xC, false, "sum over dims 2, 3 (rows)"},
    {0x3, true, "sum over dims 0, 1, keepdim (columns)"},
    {0xF, false, "sum of everything"},
};
static const red_def MAXES[] = {
    {0x2, true, "max over dim 1, keepdim"},
    {0xC, false, "max over dims 2, 3 (rows)"},
    {0x3, false, "max over dims 0, 1 (columns)"},
    {0xF, false, "max of everything"},
};

/* A sum is linear: any step is exact up to rounding, and a large one keeps
 * the rounding of large sums (BIG) out of the difference. */
void sw_case_sum(const sw_config *c) { reduce_case(c, SUMS, 4, false, 0.25); }
/* A small step: random maxima are further apart than 2e-3 (fixed seed).
 * Over an empty set the max is -inf (the identity; PyTorch refuses). */
void sw_case_max(const sw_config *c) { reduce_case(c, MAXES, 4, true, 1e-3); }

/* argmax over dim 1 (gathered) and dim 3 (the last): i64 indices, the first
 * maximum on ties (which 16-bit inputs have). Over an empty dim: refused. */
void sw_case_argmax(const sw_config *c) {
  const int64_t *s = sw_nchw[c->shape];
  double *v;
  loom_tensor *x = sw_input(c, 4, s, -2, 2, 0, &v);
  for (int dim = 1; dim < 4; dim += 2) {
    int64_t os[3], len = s[dim], inner = 1;
    for (int d = 0, k = 0; d < 4; d++)
      if (d != dim) os[k++] = s[d];
    for (int d = dim + 1; d < 4; d++) inner *= s[d];
    char what[64];
    snprintf(what, sizeof what, "argmax over dim %d", dim);
    if (len == 0) {
      sw_expect_error(loom_argmax(x, dim, false), LOOM_ERR_SHAPE, "empty", what);
      continue;
    }
    int64_t no = sw_numel(3, os);
    double *want = sw_alloc(no);
    for (int64_t o = 0; o < no; o++) {
      int64_t outer = o / inner, in = o % inner, base = outer * len * inner + in, best = 0;
      for (int64_t j = 1; j < len; j++)
        if (v[base + j * inner] > v[base + best * inner]) best = j;
      want[o] = (double)best;
    }
    bool ok = sw_expect_as(c, loom_argmax(x, dim, false), 3, os, LOOM_I64, want, 0, 0, what);
    free(want);
    if (!ok) break;
  }
  if (c->shape == SW_SMALL && !c->refused) /* float inputs only */
    sw_expect_error(loom_argmax(loom_cast(x, LOOM_I32), 1, false), LOOM_ERR_DTYPE, "f32, f16 or bf16",
                    "argmax of an i32 tensor");
  free(v);
}
