/* grad_rules_cnn.c — backward rules of the CNN ops (conv2d, batch norm,
 * pooling, dropout, add_relu). Each brings the incoming gradient into the
 * layout its forward input had (a copy only when a consumer produced another
 * layout), so the gradient it returns keeps the model's memory format too. */
#include "autograd/grad_rules.h"
#include "ops/conv.h"
#include "ops/shape_rules.h"

#define NEED(k) (n->needs_grad[k])

/* g itself when its memory is in format f, else a copy in f. */
static loom_tensor *in_format(loom_tensor *g, int f) {
  bool ok = f == LOOM_FORMAT_NHWC ? loom_tensor_is_channels_last(g) : loom_tensor_is_contiguous(g);
  return ok ? g : loom_to_memory_format(g, (loom_memory_format)f);
}

LOOM_GRAD_RULE(loom_grad_batch_norm) {
  loom_tensor *x = n->saved_in[0];
  loom_op_args a = {.in = {in_format(gy, loom_cnn_format(x)), x, n->saved_in[1], n->saved_in[2], n->saved_out[1]},
                    .n_in = 5};
  if (!a.in[0]) return loom_last_status();
  a.i[0] = n->args.i[0];
  a.i[1] = n->args.i[1];
  a.i[2] = NEED(0);
  a.i[3] = NEED(1);
  a.i[4] = NEED(2);
  loom_op_run(LOOM_OP_BATCH_NORM_BACKWARD, &a);  /* out[0] is NULL when dx is not needed: check each */
  for (int k = 0; k < 3; k++)
    if (NEED(k) && !a.out[k]) return loom_last_status() != LOOM_OK ? loom_last_status() : LOOM_ERR_INTERNAL;
  for (int k = 0; k < 3; k++) gx[k] = a.out[k];
  return LOOM_OK;
}

/* Pool backward: the forward's attributes, plus the input's H and W. */
static loom_tensor *pool_backward(loom_node *n, loom_op_id id, loom_tensor *gy, loom_tensor *indices) {
  loom_op_args a = n->args;
  a.in[0] = in_format(gy, (int)n->args.i[11]);
  a.in[1] = indices;
  a.n_in = indices ? 2 : 1;
  if (!a.in[0]) return NULL;
  a.i[9] = n->in_shape[0][2];
  a.i[10] = n->in_shape[0][3];
  return loom_op_run(id, &a);
}

LOOM_GRAD_RULE(loom_grad_max_pool2d) {
  gx[0] = pool_backward(n, LOOM_OP_MAX_POOL2D_BACKWARD, gy, n->saved_out[1]);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_avg_pool2d) {
  gx[0] = pool_backward(n, LOOM_OP_AVG_POOL2D_BACKWARD, gy, NULL);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_dropout) {
  loom_op_args a = {.in = {in_format(gy, (int)n->args.i[2]), n->saved_out[1]}, .n_in = 2};
  a.f[0] = n->args.f[0];
  gx[0] = a.in[0] ? loom_op_run(LOOM_OP_DROPOUT_BACKWARD, &a) : NULL;
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_add_relu) {
  /* Both inputs get the same masked gradient: one pass over gy and y writes
   * it once and both take that one tensor. The engine lets nodes share a
   * pending gradient and copies only if one is added into while still
   * shared, which a residual block never does (its branch has run and let
   * go before the shortcut's other gradient arrives), so the second full
   * write is gone. A leaf input gets its own copy (leaf grads never share). */
  loom_tensor *y = n->saved_out[0];
  loom_op_args a = {.in = {in_format(gy, loom_cnn_format(y)), y}, .n_in = 2};
  if (!a.in[0]) return loom_last_status();
  bool both = NEED(0) && NEED(1);
  a.i[0] = NEED(0);
  a.i[1] = NEED(1) && !both;
  loom_op_run(LOOM_OP_ADD_RELU_BACKWARD, &a);
  for (int k = 0; k < 2; k++)
    if (a.i[k] && !a.out[k]) return loom_last_status() != LOOM_OK ? loom_last_status() : LOOM_ERR_INTERNAL;
  gx[0] = a.out[0];
  gx[1] = both ? a.out[0] : a.out[1];
  return LOOM_OK;
}

/* One CONV2D_BACKWARD op computes dX, dW and db (each only when needed). */
LOOM_GRAD_RULE(loom_grad_conv2d) {
  loom_tensor *x = n->saved_in[0], *w = n->saved_in[1], *y = n->saved_out[0];
  /* The kernels read gy in x's memory format (the usual case: it comes from
   * ops that keep their input's format); anything else is converted once. */
  loom_memory_format fx = loom_tensor_memory_format(x);
  loom_tensor *g = gy;
  if (!loom_conv_same_layout(gy, x) || gy->dtype != x->dtype) {
    g = loom_to_memory_format(gy->dtype != x->dtype ? loom_cast(gy, x->dtype) : gy, fx);
    if (!g) return loom_last_status();
  }
  bool relu = n->args.i[LOOM_CONV_I_ACT] == LOOM_ACT_RELU;
  loom_op_args a = {.in = {g, x, w, relu ? y : NULL}, .n_in = relu ? 4 : 3};
  for (int k = 0; k <= LOOM_CONV_I_ACT; k++) a.i[k] = n->args.i[k];
  bool has_b = n->n_in > 2;
  a.i[LOOM_CONV_I_NEED_DX] = n->needs_grad[0];
  a.i[LOOM_CONV_I_NEED_DW] = n->needs_grad[1];
  a.i[LOOM_CONV_I_NEED_DB] = has_b && n->needs_grad[2];
  a.i[LOOM_CONV_I_GY_OWNED] = g == gy ? n->gy_exclusive : true;
  loom_op_run(LOOM_OP_CONV2D_BACKWARD, &a);  /* out[0] is NULL when dX is skipped: check each output */
  bool ok = (!n->needs_grad[0] || a.out[0]) && (!n->needs_grad[1] || a.out[1]) &&
            (!a.i[LOOM_CONV_I_NEED_DB] || a.out[2]);
  if (!ok) return loom_last_status() != LOOM_OK ? loom_last_status() : LOOM_ERR_INTERNAL;
  gx[0] = a.out[0];
  gx[1] = a.out[1];
  if (has_b) gx[2] = a.out[2];
  return LOOM_OK;
}
