/* shape_rules_cnn.c — shape, dtype and argument rules of the CNN ops (batch
 * norm, pooling, dropout, add_relu) and of their backward ops, with messages
 * that name the op, the shapes and what to change. Every result keeps its
 * input's memory format (NCHW or NHWC). */
#include <math.h>
#include <stdio.h>

#include "ops/cnn_math.h"
#include "ops/shape_rules.h"

static const char *sh(const loom_tensor *t, char *buf) { return loom_shape_str(t->ndim, t->shape, buf, 96); }

/* The kernels see canonical layouts only (the public functions convert). */
int loom_cnn_format(const loom_tensor *t) {
  return (t->ndim == 4 && !loom_tensor_is_contiguous(t) && loom_tensor_is_channels_last(t)) ? LOOM_FORMAT_NHWC
                                                                                            : LOOM_FORMAT_NCHW;
}

static void like(loom_out_spec *o, const loom_tensor *t, loom_dtype dt) {
  o->ndim = t->ndim;
  for (int d = 0; d < t->ndim; d++) o->shape[d] = t->shape[d];
  o->dtype = dt;
  o->format = loom_cnn_format(t);
}

static loom_status need_float(const char *op, const char *what, const loom_tensor *t) {
  if (!loom_dtype_is_float(t->dtype))
    return loom_set_error(LOOM_ERR_DTYPE, "%s: %s has dtype %s; it must be f32, f16 or bf16", op, what,
                          loom_dtype_name(t->dtype));
  return LOOM_OK;
}

/* ---- batch norm ---------------------------------------------------------------- */

static loom_status bn_channel_vec(const char *op, const char *what, const loom_tensor *t, int64_t C, bool running) {
  char b1[96];
  if (t->ndim != 1 || t->shape[0] != C)
    return loom_set_error(LOOM_ERR_SHAPE, "%s: %s has shape %s; it must be [%lld], one value per channel", op, what,
                          sh(t, b1), (long long)C);
  if (!running) return need_float(op, what, t);
  if (t->dtype != LOOM_F32)
    return loom_set_error(LOOM_ERR_DTYPE, "%s: %s is %s; running statistics are kept in f32", op, what,
                          loom_dtype_name(t->dtype));
  if (C > 1 && t->strides[0] != 1)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: %s is a strided view; it is updated in place, so pass a contiguous tensor",
                          op, what);
  if (loom_requires_grad(t))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: %s requires grad; running statistics are buffers, not parameters",
                          op, what);
  return LOOM_OK;
}

/* in: x, weight, bias, running_mean, running_var. i[0] training, i[1] act;
 * f[0] momentum, f[1] eps. out: y, stats [2, C] f32 (mean, invstd). */
loom_status loom_infer_batch_norm(const char *op, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[0], *w = a->in[1], *b = a->in[2], *rm = a->in[3], *rv = a->in[4];
  char b1[96];
  LOOM_TRY(need_float(op, "x", x));
  if (x->ndim < 2)
    return loom_set_error(LOOM_ERR_SHAPE, "%s: x has shape %s; it must be [N, C, ...] with at least 2 dims", op,
                          sh(x, b1));
  int64_t C = x->shape[1];
  if (w) LOOM_TRY(bn_channel_vec(op, "weight", w, C, false));
  if (b) LOOM_TRY(bn_channel_vec(op, "bias", b, C, false));
  if (!rm != !rv)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: pass both running_mean and running_var, or neither", op);
  if (rm) {
    LOOM_TRY(bn_channel_vec(op, "running_mean", rm, C, true));
    LOOM_TRY(bn_channel_vec(op, "running_var", rv, C, true));
  }
  bool training = a->i[0] != 0;
  if (!training && !rm)
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "%s: evaluation mode (training = false) normalizes with running_mean and running_var; pass them", op);
  if (a->i[1] != LOOM_ACT_NONE && a->i[1] != LOOM_ACT_RELU)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: unknown activation %lld (LOOM_ACT_NONE or LOOM_ACT_RELU)", op,
                          (long long)a->i[1]);
  double mom = a->f[0], eps = a->f[1];
  if (!(mom >= 0.0 && mom <= 1.0))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: momentum %g is outside [0, 1]", op, mom);
  if (!(eps >= 0.0) || isinf(eps))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: eps %g must be finite and >= 0", op, eps);
  int64_t m = C ? loom_shape_numel(x->ndim, x->shape) / C : 0;
  if (training && m < 2)
    return loom_set_error(LOOM_ERR_SHAPE,
                          "%s: x %s has %lld value(s) per channel; training needs more than 1 (larger batch, or eval mode)",
                          op, sh(x, b1), (long long)m);
  like(&o[0], x, x->dtype);
  o[1].ndim = 2;
  o[1].shape[0] = 2;
  o[1].shape[1] = C;
  o[1].dtype = LOOM_F32;
  return LOOM_OK;
}

/* in: gy, x, weight, bias, stats. i[0] training, i[1] act, i[2..4] need dx,
 * dweight, dbias. */
loom_status loom_infer_batch_norm_backward(const char *op, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *b = a->in[3], *st = a->in[4];
  if (!st || st->ndim != 2 || st->shape[1] != x->shape[1] || loom_cnn_format(gy) != loom_cnn_format(x))
    return loom_set_error(LOOM_ERR_INTERNAL, "%s: saved statistics or gradient layout do not match x", op);
  o[0].ndim = o[1].ndim = o[2].ndim = -1;
  if (a->i[2]) like(&o[0], x, x->dtype);
  if (a->i[3] && w) like(&o[1], w, w->dtype);
  if (a->i[4] && b) like(&o[2], b, b->dtype);
  return LOOM_OK;
}

/* ---- pooling ------------------------------------------------------------------------ */

/* i[0..1] kernel (adaptive: output size), i[2..3] stride, i[4..5] padding,
 * i[6] ceil_mode, i[7] count_include_pad, i[8] adaptive, i[11] x's format. */
static loom_status pool_out(const char *op, const loom_op_args *a, const loom_tensor *x, int64_t *oh, int64_t *ow) {
  char b1[96];
  if (x->ndim != 4)
    return loom_set_error(LOOM_ERR_SHAPE, "%s: x has shape %s; it must be 4-D [N, C, H, W]", op, sh(x, b1));
  LOOM_TRY(need_float(op, "x", x));
  int64_t H = x->shape[2], W = x->shape[3];
  if (a->i[8]) {
    if (a->i[0] < 1 || a->i[1] < 1)
      return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: output size %lldx%lld must be at least 1x1", op,
                            (long long)a->i[0], (long long)a->i[1]);
    if (H < 1 || W < 1)
      return loom_set_error(LOOM_ERR_SHAPE, "%s: x %s has an empty spatial dim", op, sh(x, b1));
    *oh = a->i[0];
    *ow = a->i[1];
    return LOOM_OK;
  }
  const int64_t *k = &a->i[0], *s = &a->i[2], *p = &a->i[4];
  for (int d = 0; d < 2; d++) {
    if (k[d] < 1 || s[d] < 1 || p[d] < 0)
      return loom_set_error(LOOM_ERR_INVALID_ARG,
                            "%s: kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld: kernel and stride must be >= 1 "
                            "and padding >= 0",
                            op, (long long)k[0], (long long)k[1], (long long)s[0], (long long)s[1], (long long)p[0],
                            (long long)p[1]);
    if (2 * p[d] > k[d])
      return loom_set_error(LOOM_ERR_INVALID_ARG,
                            "%s: padding %lldx%lld is more than half the kernel %lldx%lld (PyTorch's limit: a window "
                            "would hold only padding)",
                            op, (long long)p[0], (long long)p[1], (long long)k[0], (long long)k[1]);
  }
  *oh = loom_pool_out_size(H, k[0], s[0], p[0], (int)a->i[6]);
  *ow = loom_pool_out_size(W, k[1], s[1], p[1], (int)a->i[6]);
  if (*oh < 1 || *ow < 1)
    return loom_set_error(LOOM_ERR_SHAPE,
                          "%s: the kernel %lldx%lld is larger than the padded input %lldx%lld (x %s, padding %lldx%lld): "
                          "the output would be %lldx%lld",
                          op, (long long)k[0], (long long)k[1], (long long)(H + 2 * p[0]), (long long)(W + 2 * p[1]),
                          sh(x, b1), (long long)p[0], (long long)p[1], (long long)*oh, (long long)*ow);
  return LOOM_OK;
}

loom_status loom_infer_pool2d(const char *op, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[0];
  int64_t oh = 0, ow = 0;
  LOOM_TRY(pool_out(op, a, x, &oh, &ow));
  like(&o[0], x, x->dtype);
  o[0].shape[2] = oh;
  o[0].shape[3] = ow;
  o[1] = o[0];
  o[1].dtype = LOOM_I32;  /* max pool's argmax (avg pool has one output: o[1] is ignored) */
  return LOOM_OK;
}

/* in: gy (+ indices for max pool), both in the input's layout. i[9], i[10]:
 * the input's H, W; i[11]: its memory format (gy's may be ambiguous, e.g.
 * [N, C, 1, 1]: its strides cannot say it). */
loom_status loom_infer_pool2d_backward(const char *op, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *gy = a->in[0];
  like(&o[0], gy, gy->dtype);
  o[0].shape[2] = a->i[9];
  o[0].shape[3] = a->i[10];
  o[0].format = (int)a->i[11];
  return LOOM_OK;
}

/* ---- dropout ------------------------------------------------------------------------- */

/* in: x. f[0] p; i[0], i[1]: Philox seed and offset. out: y, keep bitmask
 * (u8, a whole number of 32-bit words). */
loom_status loom_infer_dropout(const char *op, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[0];
  LOOM_TRY(need_float(op, "x", x));
  like(&o[0], x, x->dtype);
  int64_t n = loom_shape_numel(x->ndim, x->shape);
  o[1].ndim = 1;
  o[1].shape[0] = (n + 31) / 32 * 4;
  o[1].dtype = LOOM_U8;
  o[1].format = LOOM_FORMAT_NCHW;
  return LOOM_OK;
}

/* in: gy, mask. */
loom_status loom_infer_dropout_backward(const char *op, const loom_op_args *a, loom_out_spec *o) {
  like(&o[0], a->in[0], a->in[0]->dtype);
  return LOOM_OK;
}

/* ---- add_relu ---------------------------------------------------------------------------- */

/* in: a, b with one shape and one memory format (the public function
 * broadcasts and converts b). */
loom_status loom_infer_add_relu(const char *op, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *x = a->in[0], *y = a->in[1];
  char b1[96], b2[96];
  LOOM_TRY(need_float(op, "a", x));
  bool same = x->ndim == y->ndim;
  for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
  if (!same || loom_cnn_format(x) != loom_cnn_format(y))
    return loom_set_error(LOOM_ERR_INTERNAL, "%s: operands %s and %s differ in shape or layout", op, sh(x, b1), sh(y, b2));
  like(&o[0], x, x->dtype);
  return LOOM_OK;
}

/* in: gy, y. i[0], i[1]: write the gradient for a, for b. */
loom_status loom_infer_add_relu_backward(const char *op, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *y = a->in[1];
  o[0].ndim = o[1].ndim = -1;
  if (a->i[0]) like(&o[0], y, y->dtype);
  if (a->i[1]) like(&o[1], y, y->dtype);
  return LOOM_OK;
}
