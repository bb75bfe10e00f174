/* shape_rules.c — shape and dtype rules: every check an op makes before a
 * kernel runs, with messages that name the op and the shapes. */
#include <stdio.h>

#include "ops/shape_rules.h"

static const char *sh(const loom_tensor *t, char *buf) { return loom_shape_str(t->ndim, t->shape, buf, 96); }

static loom_status need_float(const char *op, const loom_tensor *t, int k) {
  if (!loom_dtype_is_float(t->dtype))
    return loom_set_error(LOOM_ERR_DTYPE, "%s: input %d has dtype %s; this op needs f32, f16 or bf16", op, k,
                          loom_dtype_name(t->dtype));
  return LOOM_OK;
}

loom_status loom_broadcast_shapes(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb, int *nout,
                                  int64_t *out) {
  int n = na > nb ? na : nb;
  for (int i = 0; i < n; i++) {
    int ia = na - n + i, ib = nb - n + i;
    int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      char b1[96], b2[96];
      return loom_set_error(LOOM_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)", op,
                            loom_shape_str(na, sa, b1, 96), loom_shape_str(nb, sb, b2, 96), i, (long long)da,
                            (long long)db);
    }
    out[i] = da == 1 ? db : da;
  }
  *nout = n;
  return LOOM_OK;
}

loom_status loom_norm_dim(const char *op, int dim, int ndim, int *out) {
  int d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= (ndim > 0 ? ndim : 1))
    return loom_set_error(LOOM_ERR_SHAPE, "%s: dim %d is out of range for a %d-d tensor", op, dim, ndim);
  *out = d;
  return LOOM_OK;
}

loom_status loom_infer_binary(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const char *op = opname;
  LOOM_TRY(need_float(op, a->in[0], 0));
  LOOM_TRY(need_float(op, a->in[1], 1));
  LOOM_TRY(loom_broadcast_shapes(op, a->in[0]->ndim, a->in[0]->shape, a->in[1]->ndim, a->in[1]->shape, &o[0].ndim,
                                 o[0].shape));
  o[0].dtype = a->in[0]->dtype;
  return LOOM_OK;
}

loom_status loom_infer_unary(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  LOOM_TRY(need_float(opname, a->in[0], 0));
  o[0].ndim = a->in[0]->ndim;
  for (int d = 0; d < o[0].ndim; d++) o[0].shape[d] = a->in[0]->shape[d];
  o[0].dtype = a->in[0]->dtype;
  return LOOM_OK;
}

/* i[0]: bitmask of reduced dims, i[1]: keepdim. */
loom_status loom_infer_reduce(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[0];
  LOOM_TRY(need_float(opname, x, 0));
  unsigned mask = (unsigned)a->i[0];
  int n = 0;
  for (int d = 0; d < x->ndim; d++) {
    if (mask >> d & 1) {
      if (a->i[1]) o[0].shape[n++] = 1;
    } else {
      o[0].shape[n++] = x->shape[d];
    }
  }
  o[0].ndim = n;
  o[0].dtype = x->dtype;
  return LOOM_OK;
}

loom_status loom_infer_argmax(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[0];
  LOOM_TRY(need_float("argmax", x, 0));
  int dim = (int)a->i[0];
  if (x->shape[dim] == 0) return loom_set_error(LOOM_ERR_SHAPE, "argmax: dim %d is empty", dim);
  int n = 0;
  for (int d = 0; d < x->ndim; d++) {
    if (d == dim) {
      if (a->i[1]) o[0].shape[n++] = 1;
    } else {
      o[0].shape[n++] = x->shape[d];
    }
  }
  o[0].ndim = n;
  o[0].dtype = LOOM_I64;
  return LOOM_OK;
}

/* i[0]: trans_a, i[1]: trans_b. */
loom_status loom_infer_matmul(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[0], *y = a->in[1];
  char b1[96], b2[96];
  LOOM_TRY(need_float("matmul", x, 0));
  LOOM_TRY(need_float("matmul", y, 1));
  if (x->ndim < 2 || y->ndim < 2)
    return loom_set_error(LOOM_ERR_SHAPE, "matmul: operands need at least 2 dims, got %s and %s", sh(x, b1), sh(y, b2));
  int64_t M = a->i[0] ? x->shape[x->ndim - 1] : x->shape[x->ndim - 2];
  int64_t K1 = a->i[0] ? x->shape[x->ndim - 2] : x->shape[x->ndim - 1];
  int64_t K2 = a->i[1] ? y->shape[y->ndim - 1] : y->shape[y->ndim - 2];
  int64_t N = a->i[1] ? y->shape[y->ndim - 2] : y->shape[y->ndim - 1];
  if (K1 != K2)
    return loom_set_error(LOOM_ERR_SHAPE, "matmul: shapes %s%s x %s%s do not agree on the inner dimension (%lld vs %lld)",
                          sh(x, b1), a->i[0] ? "ᵀ" : "", sh(y, b2), a->i[1] ? "ᵀ" : "", (long long)K1, (long long)K2);
  int nb;
  LOOM_TRY(loom_broadcast_shapes("matmul (batch dims)", x->ndim - 2, x->shape, y->ndim - 2, y->shape, &nb, o[0].shape));
  o[0].shape[nb] = M;
  o[0].shape[nb + 1] = N;
  o[0].ndim = nb + 2;
  o[0].dtype = x->dtype;
  return LOOM_OK;
}

/* in: x [..., in], w [out, in], b [out] or NULL. i[0]: activation. */
loom_status loom_infer_linear(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[0], *w = a->in[1], *b = a->in[2];
  char b1[96], b2[96];
  LOOM_TRY(need_float("linear", x, 0));
  LOOM_TRY(need_float("linear", w, 1));
  if (x->ndim < 1 || w->ndim != 2)
    return loom_set_error(LOOM_ERR_SHAPE, "linear: expected x [..., in] and w [out, in], got %s and %s", sh(x, b1),
                          sh(w, b2));
  if (x->shape[x->ndim - 1] != w->shape[1])
    return loom_set_error(LOOM_ERR_SHAPE, "linear: x %s has %lld features but w %s expects %lld", sh(x, b1),
                          (long long)x->shape[x->ndim - 1], sh(w, b2), (long long)w->shape[1]);
  if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
    return loom_set_error(LOOM_ERR_SHAPE, "linear: bias %s does not match %lld output features", sh(b, b1),
                          (long long)w->shape[0]);
  if (a->i[0] != LOOM_ACT_NONE && a->i[0] != LOOM_ACT_RELU)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "linear: unknown activation %lld", (long long)a->i[0]);
  o[0].ndim = x->ndim;
  for (int d = 0; d < x->ndim - 1; d++) o[0].shape[d] = x->shape[d];
  o[0].shape[x->ndim - 1] = w->shape[0];
  o[0].dtype = x->dtype;
  /* On CUDA, a fused Linear→ReLU that autograd will differentiate also
   * keeps the ReLU bitmask cuBLASLt's RELU_AUX_BIAS epilogue writes: one row
   * of ceil(out/128)*128 bits per input row (its leading dimension is
   * counted in bits and must be a multiple of 128). The CPU keeps no mask
   * (it uses y > 0). */
  bool grad = false;
  for (int k = 0; k < 3; k++) grad = grad || (a->in[k] && loom_requires_grad(a->in[k]));
  if (a->i[0] == LOOM_ACT_RELU && x->storage->device.kind == LOOM_CUDA && grad && loom_is_grad_enabled()) {
    int64_t rows = 1;
    for (int d = 0; d < x->ndim - 1; d++) rows *= x->shape[d];
    o[1].ndim = 2;
    o[1].shape[0] = rows;
    o[1].shape[1] = (w->shape[0] + 127) / 128 * 16;
    o[1].dtype = LOOM_U8;
  }
  return LOOM_OK;
}

/* in: gy, x, w, y; i[1..3]: need dx, dw, db. out: dx, dw, db (ndim -1 = skipped).
 * CUDA chaining (i[6] set): in[3] is the previous layer's ReLU bitmask and
 * out[3] receives the previous layer's bias gradient (length in, dtype i[7])
 * when i[7] >= 0. */
loom_status loom_infer_linear_backward(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[1], *w = a->in[2];
  o[0].ndim = -1;
  o[1].ndim = -1;
  o[2].ndim = -1;
  if (a->i[1]) {
    o[0].ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) o[0].shape[d] = x->shape[d];
    o[0].dtype = x->dtype;
  }
  if (a->i[2]) {
    o[1].ndim = 2;
    o[1].shape[0] = w->shape[0];
    o[1].shape[1] = w->shape[1];
    o[1].dtype = w->dtype;
  }
  if (a->i[3]) {
    o[2].ndim = 1;
    o[2].shape[0] = w->shape[0];
    o[2].dtype = a->i[5] >= 0 ? (loom_dtype)a->i[5] : w->dtype;
  }
  o[3].ndim = -1;
  if (a->i[6] && a->i[7] >= 0) {
    o[3].ndim = 1;
    o[3].shape[0] = x->shape[x->ndim - 1];
    o[3].dtype = (loom_dtype)a->i[7];
  }
  return LOOM_OK;
}

/* Row-major strides (those loom gives a fresh tensor, also when a dim is
 * empty; size-1 dims may have any stride). */
static bool dense(const loom_tensor *t) {
  int64_t want[LOOM_MAX_DIMS];
  loom_contiguous_strides(t->ndim, t->shape, want);
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] != 1 && t->strides[d] != want[d]) return false;
  return true;
}

/* log_softmax and its backward (inputs gy, y): the kernels read rows
 * densely, so strided views are refused (loom_log_softmax and the autograd
 * engine pass contiguous tensors). */
loom_status loom_infer_log_softmax(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  LOOM_TRY(need_float("log_softmax", a->in[0], 0));
  if (a->in[0]->ndim < 1) return loom_set_error(LOOM_ERR_SHAPE, "log_softmax: needs at least 1 dim");
  for (int k = 0; k < a->n_in; k++)
    if (a->in[k] && !dense(a->in[k]))
      return loom_set_error(LOOM_ERR_INVALID_ARG,
                            "%s: input %d is a strided view; the kernel reads rows densely: pass a contiguous tensor",
                            opname, k);
  return loom_infer_unary(opname, a, o);
}

loom_status loom_infer_cross_entropy(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[0], *l = a->in[1];
  char b1[96], b2[96];
  LOOM_TRY(need_float("cross_entropy", x, 0));
  if (l->dtype != LOOM_I32 && l->dtype != LOOM_I64 && l->dtype != LOOM_U8)
    return loom_set_error(LOOM_ERR_DTYPE, "cross_entropy: labels must be i32, i64 or u8, got %s",
                          loom_dtype_name(l->dtype));
  if (x->ndim != 2 || l->ndim != 1 || l->shape[0] != x->shape[0])
    return loom_set_error(LOOM_ERR_SHAPE, "cross_entropy: expected logits [N, C] and labels [N], got %s and %s",
                          sh(x, b1), sh(l, b2));
  if (x->shape[1] == 0) return loom_set_error(LOOM_ERR_SHAPE, "cross_entropy: logits have 0 classes");
  o[0].ndim = 0;
  o[0].dtype = LOOM_F32;
  return LOOM_OK;
}

loom_status loom_infer_cross_entropy_backward(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[1];
  o[0].ndim = x->ndim;
  for (int d = 0; d < x->ndim; d++) o[0].shape[d] = x->shape[d];
  o[0].dtype = x->dtype;
  return LOOM_OK;
}

/* i[0]: target dtype. */
loom_status loom_infer_copy(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  if (!loom_dtype_valid((int)a->i[0])) return loom_set_error(LOOM_ERR_DTYPE, "cast: invalid dtype %lld", (long long)a->i[0]);
  o[0].ndim = a->in[0]->ndim;
  for (int d = 0; d < o[0].ndim; d++) o[0].shape[d] = a->in[0]->shape[d];
  o[0].dtype = (loom_dtype)a->i[0];
  return LOOM_OK;
}

int64_t loom_matmul_batch_offset(const loom_tensor *t, const loom_tensor *out, int64_t b) {
  int nb_out = out->ndim - 2, nb_t = t->ndim - 2;
  int64_t off = 0;
  for (int d = nb_out - 1; d >= 0; d--) {
    int64_t idx = b % out->shape[d];
    b /= out->shape[d];
    int td = d - (nb_out - nb_t);
    if (td >= 0 && t->shape[td] != 1) off += idx * t->strides[td];
  }
  return off;
}
