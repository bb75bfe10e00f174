/* api_cnn.c — the public CNN ops of ops.h other than conv2d: batch norm,
 * max / average / adaptive average pooling, dropout, flatten and the fused
 * residual add + ReLU. Each brings its input into a layout the kernels take
 * (contiguous NCHW or channels-last NHWC; any other view is made contiguous
 * first, differentiably) and runs one op of the table, whose result keeps
 * that layout. */
#include <math.h>
#include <string.h>

#include "core/capture.h"
#include "core/struct_size.h"
#include "loom/rng.h"
#include "ops/op.h"
#include "ops/shape_rules.h"
#include "tensor/grad_mode.h"

/* NULL input: keep the error of the call that failed, or say which is NULL. */
static loom_tensor *null_input(const char *op, const char *what) {
  if (loom_last_status() == LOOM_OK) loom_set_error(LOOM_ERR_NULL_INPUT, "%s: %s is NULL", op, what);
  return NULL;
}

/* x itself when contiguous or channels-last, else a contiguous copy. */
static loom_tensor *canonical(loom_tensor *x) {
  if (loom_tensor_memory_format(x) != LOOM_FORMAT_STRIDED) return x;
  return loom_contiguous(x);
}

/* ---- batch norm ---------------------------------------------------------------- */

void loom_batch_norm_options_init(loom_batch_norm_options *o) {
  if (!o) return;
  *o = (loom_batch_norm_options){sizeof *o, true, 0.1, 1e-5, LOOM_ACT_NONE};
}

loom_tensor *loom_batch_norm(loom_tensor *x, loom_tensor *running_mean, loom_tensor *running_var, loom_tensor *weight,
                             loom_tensor *bias, const loom_batch_norm_options *opt) {
  loom_batch_norm_options o;
  loom_batch_norm_options_init(&o);
  if (LOOM_STRUCT_IN("batch_norm", loom_batch_norm_options, &o, opt) != LOOM_OK) return NULL;
  if (!x) return null_input("batch_norm", "x");
  /* A checkpointed segment recomputed in backward: the forward pass updated
   * the running statistics already; batch statistics only this time. */
  if (o.training && loom_checkpoint_recomputing()) running_mean = running_var = NULL;
  loom_scope_begin();  /* layout copies are intermediates */
  loom_op_args a = {.in = {canonical(x), weight && !loom_tensor_is_contiguous(weight) ? loom_contiguous(weight) : weight,
                           bias && !loom_tensor_is_contiguous(bias) ? loom_contiguous(bias) : bias, running_mean,
                           running_var},
                    .n_in = 5};
  a.i[0] = o.training;
  a.i[1] = o.act;
  a.f[0] = o.momentum;
  a.f[1] = o.eps;
  loom_tensor *y = a.in[0] ? loom_op_run(LOOM_OP_BATCH_NORM, &a) : NULL;
  /* The kernel wrote the running statistics in place: tensors saved for
   * backward from them before now are stale. The op itself never saves
   * them (its backward uses the batch statistics it returned). */
  if (y && o.training && running_mean) {
    loom_tensor_bump_version(running_mean);
    loom_tensor_bump_version(running_var);
  }
  y = loom_keep(y);
  loom_scope_end();
  return y;
}

/* ---- pooling ------------------------------------------------------------------------ */

void loom_pool2d_options_init(loom_pool2d_options *o, int64_t kernel_h, int64_t kernel_w) {
  if (!o) return;
  *o = (loom_pool2d_options){sizeof *o, {kernel_h, kernel_w}, {0, 0}, {0, 0}, false, true};
}

/* i[] layout shared with shape_rules_cnn.c and the kernels: 0-1 kernel (or
 * adaptive output size), 2-3 stride, 4-5 padding, 6 ceil_mode,
 * 7 count_include_pad, 8 adaptive, 9-10 input H, W (backward), 11 x's
 * memory format. */
static loom_tensor *pool(loom_op_id id, const char *op, loom_tensor *x, const loom_pool2d_options *opt) {
  if (!opt) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "%s: options are NULL; make them with loom_pool2d_options_init(&o, kernel_h, "
                   "kernel_w)", op);
    return NULL;
  }
  loom_pool2d_options o;
  loom_pool2d_options_init(&o, 0, 0);
  if (LOOM_STRUCT_IN(op, loom_pool2d_options, &o, opt) != LOOM_OK) return NULL;
  if (!x) return null_input(op, "x");
  loom_op_args a = {.n_in = 1};
  for (int d = 0; d < 2; d++) {
    a.i[0 + d] = o.kernel[d];
    a.i[2 + d] = o.stride[d] == 0 ? o.kernel[d] : o.stride[d];
    a.i[4 + d] = o.padding[d];
  }
  a.i[6] = o.ceil_mode;
  a.i[7] = o.count_include_pad;
  loom_scope_begin();
  a.in[0] = canonical(x);
  if (a.in[0]) a.i[11] = loom_cnn_format(a.in[0]);
  loom_tensor *y = loom_keep(a.in[0] ? loom_op_run(id, &a) : NULL);
  loom_scope_end();
  return y;
}

loom_tensor *loom_max_pool2d(loom_tensor *x, const loom_pool2d_options *opt) {
  return pool(LOOM_OP_MAX_POOL2D, "max_pool2d", x, opt);
}

loom_tensor *loom_avg_pool2d(loom_tensor *x, const loom_pool2d_options *opt) {
  return pool(LOOM_OP_AVG_POOL2D, "avg_pool2d", x, opt);
}

loom_tensor *loom_adaptive_avg_pool2d(loom_tensor *x, int64_t out_h, int64_t out_w) {
  if (!x) return null_input("adaptive_avg_pool2d", "x");
  loom_op_args a = {.n_in = 1};
  a.i[0] = out_h;
  a.i[1] = out_w;
  a.i[8] = 1;
  loom_scope_begin();
  a.in[0] = canonical(x);
  if (a.in[0]) a.i[11] = loom_cnn_format(a.in[0]);
  loom_tensor *y = loom_keep(a.in[0] ? loom_op_run(LOOM_OP_ADAPTIVE_AVG_POOL2D, &a) : NULL);
  loom_scope_end();
  return y;
}

/* ---- dropout ------------------------------------------------------------------------- */

loom_tensor *loom_dropout(loom_tensor *x, double p, bool training) {
  if (!x) return null_input("dropout", "x");
  if (!(p >= 0.0 && p <= 1.0)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "dropout: p = %g is outside [0, 1]", p);
    return NULL;
  }
  if (!loom_dtype_is_float(x->dtype)) {
    loom_set_error(LOOM_ERR_DTYPE, "dropout: x has dtype %s; it must be f32, f16 or bf16", loom_dtype_name(x->dtype));
    return NULL;
  }
  if (!training || p == 0.0) return loom_tensor_adopt(loom_tensor_retain(x));
  loom_scope_begin();
  loom_op_args a = {.in = {canonical(x)}, .n_in = 1};
  loom_tensor *y = NULL;
  if (a.in[0]) {
    /* The mask is element i's uniform of a fill at (seed, offset): the
     * number loom_rand would draw there, on every device. */
    uint64_t seed, offset;
    const char *prev_op = loom_capture_set_op("dropout");  /* names it if a capture is open */
    loom_rng_global_reserve((size_t)loom_shape_numel(x->ndim, x->shape), &seed, &offset);
    loom_capture_set_op(prev_op);
    a.i[0] = (int64_t)seed;
    a.i[1] = (int64_t)offset;
    a.i[2] = loom_cnn_format(a.in[0]);  /* the mask's memory order, for backward */
    a.f[0] = p;
    y = loom_op_run(LOOM_OP_DROPOUT, &a);
  }
  y = loom_keep(y);
  loom_scope_end();
  return y;
}

/* ---- flatten ------------------------------------------------------------------------- */

loom_tensor *loom_flatten(loom_tensor *x, int start_dim, int end_dim) {
  if (!x) return null_input("flatten", "x");
  if (x->ndim == 0) {
    int64_t one = 1;
    return loom_reshape(x, 1, &one);
  }
  int s, e;
  if (loom_norm_dim("flatten (start_dim)", start_dim, x->ndim, &s) != LOOM_OK ||
      loom_norm_dim("flatten (end_dim)", end_dim, x->ndim, &e) != LOOM_OK)
    return NULL;
  if (s > e) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "flatten: start_dim %d (dim %d) comes after end_dim %d (dim %d)", start_dim, s,
                   end_dim, e);
    return NULL;
  }
  int64_t shape[LOOM_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < s; d++) shape[n++] = x->shape[d];
  int64_t m = 1;
  for (int d = s; d <= e; d++) m *= x->shape[d];
  shape[n++] = m;
  for (int d = e + 1; d < x->ndim; d++) shape[n++] = x->shape[d];
  /* A view whenever the strides allow (NCHW, or NHWC after a global pool);
   * otherwise reshape copies, recorded for autograd either way. */
  return loom_reshape(x, n, shape);
}

/* ---- add + ReLU ------------------------------------------------------------------------ */

loom_tensor *loom_add_relu(loom_tensor *a, loom_tensor *b) {
  if (!a) return null_input("add_relu", "a");
  if (!b) return null_input("add_relu", "b");
  int nd;
  int64_t shape[LOOM_MAX_DIMS];
  if (loom_broadcast_shapes("add_relu", a->ndim, a->shape, b->ndim, b->shape, &nd, shape) != LOOM_OK) return NULL;
  /* The kernel walks both operands and the result in one memory order: give
   * b a's shape and layout (a broadcast b is materialized once; autograd of
   * expand sums its gradient back). */
  loom_memory_format f = loom_cnn_format(a) == LOOM_FORMAT_NHWC ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW;
  loom_scope_begin();
  loom_op_args args = {.n_in = 2};
  args.in[0] = loom_to_memory_format(nd == a->ndim && !memcmp(shape, a->shape, (size_t)nd * sizeof *shape)
                                         ? a : loom_expand(a, nd, shape), f);
  args.in[1] = loom_to_memory_format(nd == b->ndim && !memcmp(shape, b->shape, (size_t)nd * sizeof *shape)
                                         ? b : loom_expand(b, nd, shape), f);
  loom_tensor *y = (args.in[0] && args.in[1]) ? loom_op_run(LOOM_OP_ADD_RELU, &args) : NULL;
  y = loom_keep(y);
  loom_scope_end();
  return y;
}
