/* shape_rules_transformer.c — shape and dtype rules of the transformer ops
 * (issue 28): softmax, embedding, layer norm, fused attention and the fused
 * final projection + cross-entropy. Their kernels read rows densely, so
 * every tensor input must be contiguous (the public functions in
 * api_transformer.c and the grad rules pass contiguous ones). */
#include <stdio.h>

#include "ops/shape_rules.h"

static const char *sh(const loom_tensor *t, char *buf) { return loom_shape_str(t->ndim, t->shape, buf, 96); }

static bool shape_eq(int na, const int64_t *a, int nb, const int64_t *b) {
  if (na != nb) return false;
  for (int d = 0; d < na; d++)
    if (a[d] != b[d]) return false;
  return true;
}

static loom_status need_float(const char *op, const loom_tensor *t, int k) {
  if (!loom_dtype_is_float(t->dtype))
    return loom_set_error(LOOM_ERR_DTYPE, "%s: input %d has dtype %s; this op needs f32, f16 or bf16", op, k,
                          loom_dtype_name(t->dtype));
  return LOOM_OK;
}

static loom_status need_index(const char *op, const loom_tensor *t, int k) {
  if (t->dtype != LOOM_I32 && t->dtype != LOOM_I64 && t->dtype != LOOM_U8)
    return loom_set_error(LOOM_ERR_DTYPE, "%s: input %d (indices) must be i32, i64 or u8, got %s", op, k,
                          loom_dtype_name(t->dtype));
  return LOOM_OK;
}

/* Row-major strides (as a fresh tensor has them; size-1 dims any). */
static bool dense(const loom_tensor *t) {
  int64_t want[LOOM_MAX_DIMS];
  loom_contiguous_strides(t->ndim, t->shape, want);
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] != 1 && t->strides[d] != want[d]) return false;
  return true;
}

/* Every non-NULL input dense. */
static loom_status need_dense(const char *op, const loom_op_args *a) {
  for (int k = 0; k < a->n_in; k++)
    if (a->in[k] && !dense(a->in[k]))
      return loom_set_error(LOOM_ERR_INVALID_ARG,
                            "%s: input %d is a strided view; the kernel reads rows densely: pass a contiguous tensor",
                            op, k);
  return LOOM_OK;
}

static void same_shape(loom_out_spec *o, const loom_tensor *t, loom_dtype dt) {
  o->ndim = t->ndim;
  for (int d = 0; d < t->ndim; d++) o->shape[d] = t->shape[d];
  o->dtype = dt;
}

static int64_t rows_of(const loom_tensor *t) {
  int64_t r = 1;
  for (int d = 0; d + 1 < t->ndim; d++) r *= t->shape[d];
  return r;
}

/* softmax (x) and its backward (gy, y): over the last dim. */
loom_status loom_infer_softmax(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  for (int k = 0; k < a->n_in; k++) LOOM_TRY(need_float(opname, a->in[k], k));
  if (a->in[0]->ndim < 1) return loom_set_error(LOOM_ERR_SHAPE, "%s: needs at least 1 dim, got a 0-d tensor", opname);
  if (a->n_in > 1 && !shape_eq(a->in[0]->ndim, a->in[0]->shape, a->in[1]->ndim, a->in[1]->shape)) {
    char b1[96], b2[96];
    return loom_set_error(LOOM_ERR_SHAPE, "%s: gy %s and y %s differ", opname, sh(a->in[0], b1), sh(a->in[1], b2));
  }
  LOOM_TRY(need_dense(opname, a));
  same_shape(&o[0], a->in[0], a->in[0]->dtype);
  return LOOM_OK;
}

/* embedding: (indices [...], weight [V, D]) -> [..., D]. */
loom_status loom_infer_embedding(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *idx = a->in[0], *w = a->in[1];
  char b1[96];
  LOOM_TRY(need_index(opname, idx, 0));
  LOOM_TRY(need_float(opname, w, 1));
  if (w->ndim != 2) return loom_set_error(LOOM_ERR_SHAPE, "%s: weight must be [num_embeddings, dim], got %s", opname, sh(w, b1));
  if (idx->ndim + 1 > LOOM_MAX_DIMS)
    return loom_set_error(LOOM_ERR_SHAPE, "%s: indices have %d dims; at most %d", opname, idx->ndim, LOOM_MAX_DIMS - 1);
  LOOM_TRY(need_dense(opname, a));
  o[0].ndim = idx->ndim + 1;
  for (int d = 0; d < idx->ndim; d++) o[0].shape[d] = idx->shape[d];
  o[0].shape[idx->ndim] = w->shape[1];
  o[0].dtype = w->dtype;
  return LOOM_OK;
}

/* embedding_backward: (gy [..., D], indices [...]), i[0] = V -> [V, D]. */
loom_status loom_infer_embedding_backward(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *gy = a->in[0], *idx = a->in[1];
  LOOM_TRY(need_float(opname, gy, 0));
  LOOM_TRY(need_index(opname, idx, 1));
  if (gy->ndim != idx->ndim + 1 || !shape_eq(idx->ndim, idx->shape, idx->ndim, gy->shape) || a->i[0] < 0) {
    char b1[96], b2[96];
    return loom_set_error(LOOM_ERR_SHAPE, "%s: gy %s does not match indices %s", opname, sh(gy, b1), sh(idx, b2));
  }
  LOOM_TRY(need_dense(opname, a));
  o[0].ndim = 2;
  o[0].shape[0] = a->i[0];
  o[0].shape[1] = gy->shape[gy->ndim - 1];
  o[0].dtype = gy->dtype;
  return LOOM_OK;
}

/* weight / bias of a layer norm over D: [D] of a float dtype, or NULL. */
static loom_status norm_param(const char *opname, const loom_tensor *p, int k, int64_t D) {
  if (!p) return LOOM_OK;
  LOOM_TRY(need_float(opname, p, k));
  if (p->ndim != 1 || p->shape[0] != D) {
    char b1[96];
    return loom_set_error(LOOM_ERR_SHAPE, "%s: input %d must be [%lld] (the normalized dim), got %s", opname, k,
                          (long long)D, sh(p, b1));
  }
  return LOOM_OK;
}

/* layer_norm: (x [..., D], weight [D] or NULL, bias [D] or NULL), f[0] = eps
 * -> y [..., D] (x's dtype), stats [rows, 2] f32 (mean, rstd). */
loom_status loom_infer_layer_norm(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[0];
  LOOM_TRY(need_float(opname, x, 0));
  if (x->ndim < 1) return loom_set_error(LOOM_ERR_SHAPE, "%s: needs at least 1 dim, got a 0-d tensor", opname);
  int64_t D = x->shape[x->ndim - 1];
  if (D == 0) return loom_set_error(LOOM_ERR_SHAPE, "%s: the normalized dim is empty", opname);
  if (!(a->f[0] >= 0)) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: eps must be >= 0, got %g", opname, a->f[0]);
  for (int k = 1; k < 3 && k < a->n_in; k++) LOOM_TRY(norm_param(opname, a->in[k], k, D));
  LOOM_TRY(need_dense(opname, a));
  same_shape(&o[0], x, x->dtype);
  o[1].ndim = 2;
  o[1].shape[0] = rows_of(x);
  o[1].shape[1] = 2;
  o[1].dtype = LOOM_F32;
  return LOOM_OK;
}

/* layer_norm_backward: (gy, x, stats, weight or NULL); i[0..2]: dx, dweight,
 * dbias wanted; i[3]: the bias dtype (for dbias) -> dx, dweight, dbias. */
loom_status loom_infer_layer_norm_backward(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *gy = a->in[0], *x = a->in[1], *st = a->in[2], *w = a->n_in > 3 ? a->in[3] : NULL;
  LOOM_TRY(need_float(opname, gy, 0));
  LOOM_TRY(need_float(opname, x, 1));
  int64_t D = x->ndim ? x->shape[x->ndim - 1] : 0;
  if (!shape_eq(gy->ndim, gy->shape, x->ndim, x->shape) || st->dtype != LOOM_F32 || st->ndim != 2 ||
      st->shape[0] != rows_of(x) || st->shape[1] != 2)
    return loom_set_error(LOOM_ERR_SHAPE, "%s: gy, x and stats do not belong together", opname);
  LOOM_TRY(norm_param(opname, w, 3, D));
  LOOM_TRY(need_dense(opname, a));
  if (a->i[0]) same_shape(&o[0], x, x->dtype);
  if (a->i[1]) {
    if (!w) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: dweight asked for without a weight", opname);
    same_shape(&o[1], w, w->dtype);
  }
  if (a->i[2]) {
    if (!loom_dtype_valid((int)a->i[3]) || !loom_dtype_is_float((loom_dtype)a->i[3]))
      return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: dbias asked for with an invalid bias dtype", opname);
    o[2].ndim = 1;
    o[2].shape[0] = D;
    o[2].dtype = (loom_dtype)a->i[3];
  }
  return LOOM_OK;
}

/* attention: (q, k, v), all [..., T, D] of one shape and dtype; i[0] causal,
 * f[0] scale -> out [..., T, D], lse [..., T] f32. */
loom_status loom_infer_attention(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *q = a->in[0];
  char b1[96], b2[96];
  for (int k = 0; k < 3; k++) LOOM_TRY(need_float(opname, a->in[k], k));
  if (q->ndim < 2) return loom_set_error(LOOM_ERR_SHAPE, "%s: q must be [..., T, head_dim], got %s", opname, sh(q, b1));
  for (int k = 1; k < 3; k++)
    if (!shape_eq(q->ndim, q->shape, a->in[k]->ndim, a->in[k]->shape))
      return loom_set_error(LOOM_ERR_SHAPE, "%s: q %s and %s %s must have one shape", opname, sh(q, b1),
                            k == 1 ? "k" : "v", sh(a->in[k], b2));
  if (!(a->f[0] > 0) || a->f[0] != a->f[0])
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: scale must be > 0, got %g", opname, a->f[0]);
  LOOM_TRY(need_dense(opname, a));
  same_shape(&o[0], q, q->dtype);
  o[1].ndim = q->ndim - 1;
  for (int d = 0; d < q->ndim - 1; d++) o[1].shape[d] = q->shape[d];
  o[1].dtype = LOOM_F32;
  return LOOM_OK;
}

/* attention_backward: (gy, q, k, v, stats [..., T, 2] f32) -> dq, dk, dv. */
loom_status loom_infer_attention_backward(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *q = a->in[1], *st = a->in[4];
  for (int k = 0; k < 4; k++) {
    LOOM_TRY(need_float(opname, a->in[k], k));
    if (!shape_eq(q->ndim, q->shape, a->in[k]->ndim, a->in[k]->shape) || a->in[k]->dtype != q->dtype)
      return loom_set_error(LOOM_ERR_SHAPE, "%s: gy, q, k and v must have one shape and dtype", opname);
  }
  bool ok = q->ndim >= 2 && st->dtype == LOOM_F32 && st->ndim == q->ndim && st->shape[q->ndim - 1] == 2 &&
            shape_eq(q->ndim - 1, q->shape, st->ndim - 1, st->shape);
  if (!ok) return loom_set_error(LOOM_ERR_SHAPE, "%s: stats must be [..., T, 2] f32", opname);
  LOOM_TRY(need_dense(opname, a));
  for (int k = 0; k < 3; k++) same_shape(&o[k], q, q->dtype);
  return LOOM_OK;
}

/* linear_cross_entropy: (x [N, E], w [V, E], both f32, f16 or bf16, labels
 * [N]) -> mean loss (0-d f32), lse [N] f32. */
loom_status loom_infer_linear_cross_entropy(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[0], *w = a->in[1], *l = a->in[2];
  char b1[96], b2[96], b3[96];
  if (!loom_dtype_is_float(x->dtype) || w->dtype != x->dtype)
    return loom_set_error(LOOM_ERR_DTYPE, "%s: x and w must be of one float dtype (f32, f16 or bf16), got %s and %s",
                          opname, loom_dtype_name(x->dtype), loom_dtype_name(w->dtype));
  LOOM_TRY(need_index(opname, l, 2));
  if (x->ndim != 2 || w->ndim != 2 || l->ndim != 1 || x->shape[1] != w->shape[1] || l->shape[0] != x->shape[0])
    return loom_set_error(LOOM_ERR_SHAPE, "%s: expected x [N, E], w [V, E] and labels [N], got %s, %s and %s", opname,
                          sh(x, b1), sh(w, b2), sh(l, b3));
  if (w->shape[0] == 0) return loom_set_error(LOOM_ERR_SHAPE, "%s: w has 0 classes", opname);
  LOOM_TRY(need_dense(opname, a));
  o[0].ndim = 0;
  o[0].dtype = LOOM_F32;
  o[1].ndim = 1;
  o[1].shape[0] = x->shape[0];
  o[1].dtype = LOOM_F32;
  return LOOM_OK;
}

/* linear_cross_entropy_backward: (gy 0-d f32, x, w, labels, lse); i[0], i[1]:
 * dx, dw wanted -> dx [N, E], dw [V, E], in x's dtype. */
loom_status loom_infer_linear_cross_entropy_backward(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *lse = a->in[4];
  if (gy->dtype != LOOM_F32 || gy->ndim != 0 || lse->dtype != LOOM_F32 || lse->ndim != 1 ||
      lse->shape[0] != x->shape[0])
    return loom_set_error(LOOM_ERR_SHAPE, "%s: gy must be a 0-d f32 and lse [N] f32", opname);
  loom_op_args fw = {.in = {a->in[1], a->in[2], a->in[3]}, .n_in = 3};
  loom_out_spec tmp[LOOM_OP_MAX_OUT];
  LOOM_TRY(loom_infer_linear_cross_entropy(opname, &fw, tmp));
  if (a->i[0]) same_shape(&o[0], x, x->dtype);
  if (a->i[1]) same_shape(&o[1], w, w->dtype);
  return LOOM_OK;
}
