/* grad_rules_transformer.c — backward rules of the transformer ops (GELU,
 * softmax, embedding, layer norm, fused attention, fused final projection +
 * cross-entropy). Their backward kernels read dense rows, so an incoming
 * gradient that is a strided view is copied once first. */
#include "autograd/grad_rules.h"

#define NEED(k) (n->needs_grad[k])

static loom_tensor *dense(loom_tensor *t) { return t && !loom_tensor_is_contiguous(t) ? loom_contiguous(t) : t; }

/* Outputs [0, count) of a backward op that computes several gradients: each
 * one asked for (want[k]) must be there. */
static loom_status take(loom_op_args *a, const bool *want, int count, loom_tensor **gx, const int *slot) {
  for (int k = 0; k < count; k++)
    if (want[k] && !a->out[k]) return loom_last_status() != LOOM_OK ? loom_last_status() : LOOM_ERR_INTERNAL;
  for (int k = 0; k < count; k++)
    if (want[k]) gx[slot[k]] = a->out[k];
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_gelu) {
  loom_op_args a = {.in = {gy, n->saved_in[0]}, .n_in = 2};
  gx[0] = loom_op_run(LOOM_OP_GELU_BACKWARD, &a);
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_softmax) {
  loom_op_args a = {.in = {dense(gy), n->saved_out[0]}, .n_in = 2};
  gx[0] = a.in[0] ? loom_op_run(LOOM_OP_SOFTMAX_BACKWARD, &a) : NULL;
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_embedding) {
  /* The indices (input 0) are integers: only the weight has a gradient. */
  if (!NEED(1)) return LOOM_OK;
  loom_op_args a = {.in = {dense(gy), n->saved_in[0]}, .n_in = 2};
  a.i[0] = n->in_shape[1][0];
  gx[1] = a.in[0] ? loom_op_run(LOOM_OP_EMBEDDING_BACKWARD, &a) : NULL;
  return LOOM_OK;
}

LOOM_GRAD_RULE(loom_grad_layer_norm) {
  bool has_w = n->n_in > 1 && n->saved_in[1], has_b = n->n_in > 2 && NEED(2);
  loom_op_args a = {.in = {dense(gy), n->saved_in[0], n->saved_out[1], has_w ? n->saved_in[1] : NULL}, .n_in = 4};
  if (!a.in[0]) return loom_last_status();
  bool want[3] = {NEED(0), has_w && NEED(1), has_b};
  for (int k = 0; k < 3; k++) a.i[k] = want[k];
  a.i[3] = has_b ? (int64_t)n->in_dtype[2] : -1;
  loom_op_run(LOOM_OP_LAYER_NORM_BACKWARD, &a);  /* outputs not asked for stay NULL */
  static const int slot[3] = {0, 1, 2};
  return take(&a, want, 3, gx, slot);
}

LOOM_GRAD_RULE(loom_grad_attention) {
  /* The kernel needs, per query row, the forward's logsumexp and
   * rowsum(gy * out) (FlashAttention's D): packed as [..., T, 2] f32. */
  loom_tensor *out = n->saved_out[0], *lse = n->saved_out[1];
  int nd = out->ndim;
  int64_t sh[LOOM_MAX_DIMS];
  for (int d = 0; d < nd - 1; d++) sh[d] = out->shape[d];
  sh[nd - 1] = 1;
  int last = nd - 1;
  loom_tensor *g = dense(gy);
  loom_tensor *g32 = g && g->dtype != LOOM_F32 ? loom_cast(g, LOOM_F32) : g;
  loom_tensor *o32 = out->dtype != LOOM_F32 ? loom_cast(out, LOOM_F32) : out;
  loom_tensor *parts[2] = {loom_reshape(lse, nd, sh), loom_sum(loom_mul(g32, o32), 1, &last, true)};
  loom_op_args a = {.in = {g, n->saved_in[0], n->saved_in[1], n->saved_in[2], loom_cat(2, parts, last)}, .n_in = 5};
  if (!a.in[0] || !a.in[4]) return loom_last_status();
  a.f[0] = n->args.f[0];
  a.i[0] = n->args.i[0];
  loom_op_run(LOOM_OP_ATTENTION_BACKWARD, &a);  /* the kernel skips the gradients whose output is NULL */
  bool want[3] = {NEED(0), NEED(1), NEED(2)};
  static const int slot[3] = {0, 1, 2};
  return take(&a, want, 3, gx, slot);
}

LOOM_GRAD_RULE(loom_grad_linear_cross_entropy) {
  loom_op_args a = {.in = {gy, n->saved_in[0], n->saved_in[1], n->saved_in[2], n->saved_out[1]}, .n_in = 5};
  bool want[2] = {NEED(0), NEED(1)};
  a.i[0] = want[0];
  a.i[1] = want[1];
  loom_op_run(LOOM_OP_LINEAR_CROSS_ENTROPY_BACKWARD, &a);
  static const int slot[2] = {0, 1};
  return take(&a, want, 2, gx, slot);
}
