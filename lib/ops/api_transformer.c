/* api_transformer.c — the public functions of the transformer ops (issue
 * 28): GELU, softmax, embedding, layer norm, fused attention and the fused
 * final projection + cross-entropy. Their kernels read dense rows: strided
 * inputs are copied first, inside a private scope so that the copies do not
 * outlive the call when the caller has no scope open (ownership rule). */
#include <math.h>

#include "ops/op.h"

static loom_tensor *dense(loom_tensor *t) { return t && !loom_tensor_is_contiguous(t) ? loom_contiguous(t) : t; }

/* Runs id on the dense copies of in[0..n) (NULL stays NULL; a failed copy
 * fails the op instead of dropping an optional input). */
static loom_tensor *run_dense(loom_op_id id, loom_op_args *a, int n) {
  loom_scope_begin();
  loom_tensor *r = NULL;
  bool ok = true;
  for (int k = 0; k < n; k++) {
    loom_tensor *d = dense(a->in[k]);
    if (a->in[k] && !d) ok = false;
    a->in[k] = d;
  }
  if (ok) r = loom_keep(loom_op_run(id, a));
  loom_scope_end();
  return r;
}

loom_tensor *loom_gelu(loom_tensor *x) {
  loom_op_args a = {.in = {x}, .n_in = 1};
  return loom_op_run(LOOM_OP_GELU, &a);
}

loom_tensor *loom_softmax(loom_tensor *x, int dim) {
  if (!x) return loom_op_run(LOOM_OP_SOFTMAX, &(loom_op_args){.n_in = 1});
  if (x->ndim < 1) {
    loom_set_error(LOOM_ERR_SHAPE, "softmax: needs at least 1 dim, got a 0-d tensor");
    return NULL;
  }
  int d;
  if (loom_norm_dim("softmax", dim, x->ndim, &d) != LOOM_OK) return NULL;
  loom_scope_begin();
  loom_tensor *r;
  if (d != x->ndim - 1) {
    /* The kernel works on the last dim: move dim there and back. */
    r = loom_transpose(loom_softmax(loom_transpose(x, d, -1), -1), d, -1);
  } else {
    loom_op_args a = {.in = {dense(x)}, .n_in = 1};
    r = loom_op_run(LOOM_OP_SOFTMAX, &a);
  }
  r = loom_keep(r);
  loom_scope_end();
  return r;
}

loom_tensor *loom_embedding(loom_tensor *indices, loom_tensor *weight) {
  loom_op_args a = {.in = {indices, weight}, .n_in = 2};
  return run_dense(LOOM_OP_EMBEDDING, &a, 2);
}

loom_tensor *loom_layer_norm(loom_tensor *x, loom_tensor *weight, loom_tensor *bias, double eps) {
  loom_op_args a = {.in = {x, weight, bias}, .n_in = 3};
  a.f[0] = eps;
  return run_dense(LOOM_OP_LAYER_NORM, &a, 3);
}

loom_tensor *loom_scaled_dot_product_attention(loom_tensor *q, loom_tensor *k, loom_tensor *v, bool is_causal) {
  loom_op_args a = {.in = {q, k, v}, .n_in = 3};
  int64_t D = q && q->ndim >= 1 ? q->shape[q->ndim - 1] : 0;
  a.f[0] = D > 0 ? 1.0 / sqrt((double)D) : 1.0;
  a.i[0] = is_causal;
  return run_dense(LOOM_OP_ATTENTION, &a, 3);
}

loom_tensor *loom_linear_cross_entropy(loom_tensor *x, loom_tensor *weight, loom_tensor *labels) {
  loom_op_args a = {.in = {x, weight, labels}, .n_in = 3};
  return run_dense(LOOM_OP_LINEAR_CROSS_ENTROPY, &a, 3);
}
