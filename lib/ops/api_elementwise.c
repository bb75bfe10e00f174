/* api_elementwise.c — the public elementwise ops (ops.h) and the internal
 * in-place add, equality and broadcast-undo helpers. */
#include "ops/op.h"

static loom_tensor *bin(loom_op_id id, loom_tensor *a, loom_tensor *b) {
  loom_op_args args = {.in = {a, b}, .n_in = 2};
  return loom_op_run(id, &args);
}

static loom_tensor *un(loom_op_id id, loom_tensor *a, double s) {
  loom_op_args args = {.in = {a}, .n_in = 1};
  args.f[0] = s;
  return loom_op_run(id, &args);
}

loom_tensor *loom_add(loom_tensor *a, loom_tensor *b) { return bin(LOOM_OP_ADD, a, b); }
loom_tensor *loom_sub(loom_tensor *a, loom_tensor *b) { return bin(LOOM_OP_SUB, a, b); }
loom_tensor *loom_mul(loom_tensor *a, loom_tensor *b) { return bin(LOOM_OP_MUL, a, b); }
loom_tensor *loom_div(loom_tensor *a, loom_tensor *b) { return bin(LOOM_OP_DIV, a, b); }
loom_tensor *loom_eq(loom_tensor *a, loom_tensor *b) { return bin(LOOM_OP_EQ, a, b); }
loom_tensor *loom_add_scalar(loom_tensor *a, double s) { return un(LOOM_OP_ADD_SCALAR, a, s); }
loom_tensor *loom_mul_scalar(loom_tensor *a, double s) { return un(LOOM_OP_MUL_SCALAR, a, s); }
loom_tensor *loom_rsub_scalar(loom_tensor *a, double s) { return un(LOOM_OP_RSUB_SCALAR, a, s); }
loom_tensor *loom_rdiv_scalar(loom_tensor *a, double s) { return un(LOOM_OP_RDIV_SCALAR, a, s); }
loom_tensor *loom_pow_scalar(loom_tensor *a, double p) { return un(LOOM_OP_POW_SCALAR, a, p); }
loom_tensor *loom_neg(loom_tensor *a) { return un(LOOM_OP_NEG, a, 0); }
loom_tensor *loom_exp(loom_tensor *a) { return un(LOOM_OP_EXP, a, 0); }
loom_tensor *loom_log(loom_tensor *a) { return un(LOOM_OP_LOG, a, 0); }
loom_tensor *loom_sqrt(loom_tensor *a) { return un(LOOM_OP_SQRT, a, 0); }
loom_tensor *loom_relu(loom_tensor *a) { return un(LOOM_OP_RELU, a, 0); }

loom_status loom_add_inplace(loom_tensor *a, loom_tensor *b) {
  loom_tensor_bump_version(a);
  loom_op_args args = {.in = {a, b}, .n_in = 2, .out = {a}, .n_out = 1};
  return loom_op_run_into(LOOM_OP_ADD, &args);
}

loom_tensor *loom_sum_to_shape(loom_tensor *g, int ndim, const int64_t *shape) {
  if (!g) return NULL;
  int lead = g->ndim - ndim;
  int dims[LOOM_MAX_DIMS], nd = 0;
  for (int d = 0; d < g->ndim; d++) {
    if (d < lead) dims[nd++] = d;
    else if (shape[d - lead] == 1 && g->shape[d] != 1) dims[nd++] = d;
  }
  if (nd == 0) {
    if (g->ndim == ndim) return loom_tensor_adopt(loom_tensor_retain(g));
    return loom_reshape(g, ndim, shape);
  }
  loom_scope_begin(); /* the unreshaped sum is an intermediate */
  loom_tensor *r = loom_keep(loom_reshape(loom_sum(g, nd, dims, false), ndim, shape));
  loom_scope_end();
  return r;
}
