/* grad_rules.c — backward rules, written with other ops (docs/design.md §5).
 * They run with grad mode off inside a scope the engine opens; results that
 * the engine keeps are retained by it. */
#include "autograd/grad_rules.h"

#define SHAPE_OF(k) n->in_ndim[k], n->in_shape[k]
#define NEED(k) (n->needs_grad[k])

LOOM_GRAD_RULE(loom_grad_add) {
  if (NEED(0)) gx[0] = loom_sum_to_shape(gy, SHAPE_OF(0));
  if (NEED(1)) gx[1] = loom_sum_to_shape(gy, SHAPE_OF(1));
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_sub) {
  if (NEED(0)) gx[0] = loom_sum_to_shape(gy, SHAPE_OF(0));
  if (NEED(1)) gx[1] = loom_sum_to_shape(loom_neg(gy), SHAPE_OF(1));
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_mul) {
  if (NEED(0)) gx[0] = loom_sum_to_shape(loom_mul(gy, n->saved_in[1]), SHAPE_OF(0));
  if (NEED(1)) gx[1] = loom_sum_to_shape(loom_mul(gy, n->saved_in[0]), SHAPE_OF(1));
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_div) {
  loom_tensor *a = n->saved_in[0], *b = n->saved_in[1];
  if (NEED(0)) gx[0] = loom_sum_to_shape(loom_div(gy, b), SHAPE_OF(0));
  if (NEED(1)) gx[1] = loom_sum_to_shape(loom_neg(loom_div(loom_mul(gy, a), loom_mul(b, b))), SHAPE_OF(1));
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_add_scalar) {
  gx[0] = gy;
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_mul_scalar) {
  gx[0] = loom_mul_scalar(gy, n->args.f[0]);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_rsub_scalar) {
  gx[0] = loom_neg(gy);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_rdiv_scalar) {
  /* d(s/a) = -s/a² */
  loom_tensor *a = n->saved_in[0];
  gx[0] = loom_mul(gy, loom_mul_scalar(loom_rdiv_scalar(loom_mul(a, a), 1.0), -n->args.f[0]));
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_pow_scalar) {
  double p = n->args.f[0];
  gx[0] = loom_mul(gy, loom_mul_scalar(loom_pow_scalar(n->saved_in[0], p - 1.0), p));
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_neg) {
  gx[0] = loom_neg(gy);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_exp) {
  gx[0] = loom_mul(gy, n->saved_out[0]);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_log) {
  gx[0] = loom_div(gy, n->saved_in[0]);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_sqrt) {
  gx[0] = loom_mul_scalar(loom_div(gy, n->saved_out[0]), 0.5);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_relu) {
  loom_op_args a = {.in = {gy, n->saved_out[0]}, .n_in = 2};
  gx[0] = loom_op_run(LOOM_OP_RELU_BACKWARD, &a);
  return LOOM_OK;
}

/* gy has the reduced shape (with or without kept dims): view it with the
 * kept dims, then broadcast to the input shape. */
static loom_tensor *expand_reduced(loom_node *n, loom_tensor *g) {
  unsigned mask = (unsigned)n->args.i[0];
  int64_t kshape[LOOM_MAX_DIMS];
  for (int d = 0; d < n->in_ndim[0]; d++) kshape[d] = (mask >> d & 1) ? 1 : n->in_shape[0][d];
  loom_tensor *k = loom_reshape(g, n->in_ndim[0], kshape);
  return loom_expand(k, SHAPE_OF(0));
}

LOOM_GRAD_RULE(loom_grad_sum) {
  gx[0] = loom_contiguous(expand_reduced(n, gy));
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_max) {
  /* The gradient goes to the maxima, split evenly between ties. */
  loom_tensor *x = n->saved_in[0];
  loom_tensor *hit = loom_eq(x, expand_reduced(n, n->saved_out[0]));
  int dims[LOOM_MAX_DIMS], nd = 0;
  for (int d = 0; d < n->in_ndim[0]; d++)
    if ((unsigned)n->args.i[0] >> d & 1) dims[nd++] = d;
  loom_tensor *cnt = loom_sum(hit, nd, dims, true);
  gx[0] = loom_mul(hit, loom_expand(loom_div(loom_reshape(gy, cnt ? cnt->ndim : 0, cnt ? cnt->shape : NULL), cnt),
                                    SHAPE_OF(0)));
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_matmul) {
  loom_tensor *a = n->saved_in[0], *b = n->saved_in[1];
  bool ta = n->args.i[0] != 0, tb = n->args.i[1] != 0;
  if (NEED(0)) {
    loom_tensor *g = ta ? loom_matmul_ex(b, gy, tb, true) : loom_matmul_ex(gy, b, false, !tb);
    gx[0] = loom_sum_to_shape(g, SHAPE_OF(0));
  }
  if (NEED(1)) {
    loom_tensor *g = tb ? loom_matmul_ex(gy, a, true, ta) : loom_matmul_ex(a, gy, !ta, false);
    gx[1] = loom_sum_to_shape(g, SHAPE_OF(1));
  }
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_linear) {
  /* One op computes dX, dW and db; dX is skipped when the input needs none
   * (the first layer). The engine owns gy exclusively when it says so, and
   * then dReLU is applied in place over it.
   *
   * CUDA chaining (docs/design.md §7): when this layer's input is the output of
   * a fused Linear→ReLU node p whose only consumer is this node, p saved
   * its ReLU bitmask (out1). This layer's dX GEMM then applies p's dReLU and
   * computes p's bias gradient in its epilogue (DRELU_BGRAD): gx[0] is p's
   * dZ, and p is marked so that its own backward skips dReLU and takes the
   * bias gradient computed here. The CPU never saves a mask, so never
   * chains. */
  bool dz_given = n->gy_is_dz;
  n->gy_is_dz = false;
  int64_t act = dz_given ? LOOM_ACT_NONE : n->args.i[0];
  loom_node *p = NEED(0) ? n->next[0].node : NULL;
  bool chain = p && p->op == LOOM_OP_LINEAR && p->args.i[0] == LOOM_ACT_RELU && p->saved_out[1] && !p->freed &&
               p->consumers == 1 && !p->offloaded;  /* an offloaded mask is in host memory */
  loom_tensor *g = gy;
  bool g_own = n->gy_exclusive;
  if (chain && act == LOOM_ACT_RELU) {
    /* in[3] carries p's mask, so this layer's own dReLU is a pass of its own
     * (from y > 0: loom's kernels never read cuBLASLt's bitmask). */
    loom_op_args r = {.in = {gy, n->saved_out[0]}, .n_in = 2};
    g = loom_op_run(LOOM_OP_RELU_BACKWARD, &r);
    if (!g) return loom_last_status();
    g_own = true;
    act = LOOM_ACT_NONE;
  }
  loom_op_args a = {.in = {g, n->saved_in[0], n->saved_in[1], chain ? p->saved_out[1] : n->saved_out[0]}, .n_in = 4};
  a.i[0] = act;
  a.i[1] = NEED(0);
  a.i[2] = NEED(1);
  a.i[3] = n->n_in > 2 && NEED(2) && !dz_given;
  a.i[4] = g_own;
  a.i[5] = n->n_in > 2 ? (int64_t)n->in_dtype[2] : -1;
  a.i[6] = chain;
  a.i[7] = (chain && p->n_in > 2 && p->needs_grad[2]) ? (int64_t)p->in_dtype[2] : -1;
  loom_op_run(LOOM_OP_LINEAR_BACKWARD, &a);  /* out[0] is NULL when dX is skipped: check the outputs */
  bool ok = (!NEED(0) || a.out[0]) && (!NEED(1) || a.out[1]) && (a.i[7] < 0 || a.out[3]);
  if (!ok) return loom_last_status() != LOOM_OK ? loom_last_status() : LOOM_ERR_INTERNAL;
  gx[0] = a.out[0];
  gx[1] = a.out[1];
  if (n->n_in > 2) gx[2] = dz_given ? n->given_db : a.out[2];
  if (chain) {
    p->gy_is_dz = true;
    loom_tensor_release(p->given_db);
    p->given_db = loom_tensor_retain(a.out[3]);
  }
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_log_softmax) {
  loom_op_args a = {.in = {gy, n->saved_out[0]}, .n_in = 2};
  a.i[0] = n->args.i[0];
  gx[0] = loom_op_run(LOOM_OP_LOG_SOFTMAX_BACKWARD, &a);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_cross_entropy) {
  loom_op_args a = {.in = {gy, n->saved_in[0], n->saved_in[1]}, .n_in = 3};
  gx[0] = loom_op_run(LOOM_OP_CROSS_ENTROPY_BACKWARD, &a);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_copy) {
  gx[0] = gy->dtype == n->in_dtype[0] ? gy : loom_cast(gy, n->in_dtype[0]);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_view_reshape) {
  gx[0] = loom_reshape(gy, SHAPE_OF(0));
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_view_permute) {
  int inv[LOOM_MAX_DIMS];
  for (int d = 0; d < n->in_ndim[0]; d++) inv[n->args.i[d]] = d;
  gx[0] = loom_permute(gy, inv);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_view_slice) {
  /* Scatter into zeros of the input's shape. */
  loom_tensor *z = loom_zeros(SHAPE_OF(0), gy->dtype, gy->storage->device);
  loom_tensor *part = loom_slice(z, (int)n->args.i[0], n->args.i[1], n->args.i[2], n->args.i[3]);
  if (!part || loom_copy_(part, gy) != LOOM_OK) return loom_last_status();
  gx[0] = z;
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_cat) {
  /* Each input's stretch of the gradient along the concatenated dim. */
  int d = (int)n->args.i[0];
  int64_t at = 0;
  for (int k = 0; k < n->n_in; k++) {
    int64_t len = n->in_shape[k][d];
    if (NEED(k)) gx[k] = loom_slice(gy, d, at, at + len, 1);
    at += len;
  }
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_view_expand) {
  gx[0] = loom_sum_to_shape(gy, SHAPE_OF(0));
  return LOOM_OK;
}
