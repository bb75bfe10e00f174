/* grad_table.c — the grad table: each differentiable op's backward rule
 * (grad_rules*.c) and what it saves. An op missing here is not recorded,
 * so tests/test_op_sweep.c checks every op it expects to be differentiable
 * has an entry. */
#include "autograd/grad_rules.h"

#define IN(k) LOOM_SAVE_IN(k)
#define OUT0 LOOM_SAVE_OUT0
#define OUT1 LOOM_SAVE_OUT1

/* backward, saves. The *_BACKWARD ops, eq and argmax have none. */
static const loom_grad_def g_grads[LOOM_OP_COUNT] = {
  [LOOM_OP_ADD] = {loom_grad_add, 0},
  [LOOM_OP_SUB] = {loom_grad_sub, 0},
  [LOOM_OP_MUL] = {loom_grad_mul, IN(0) | IN(1)},
  [LOOM_OP_DIV] = {loom_grad_div, IN(0) | IN(1)},
  [LOOM_OP_ADD_SCALAR] = {loom_grad_add_scalar, 0},
  [LOOM_OP_MUL_SCALAR] = {loom_grad_mul_scalar, 0},
  [LOOM_OP_RSUB_SCALAR] = {loom_grad_rsub_scalar, 0},
  [LOOM_OP_RDIV_SCALAR] = {loom_grad_rdiv_scalar, IN(0)},
  [LOOM_OP_POW_SCALAR] = {loom_grad_pow_scalar, IN(0)},
  [LOOM_OP_NEG] = {loom_grad_neg, 0},
  [LOOM_OP_EXP] = {loom_grad_exp, OUT0},
  [LOOM_OP_LOG] = {loom_grad_log, IN(0)},
  [LOOM_OP_SQRT] = {loom_grad_sqrt, OUT0},
  [LOOM_OP_RELU] = {loom_grad_relu, OUT0},
  [LOOM_OP_SUM] = {loom_grad_sum, 0},
  [LOOM_OP_MAX] = {loom_grad_max, IN(0) | OUT0},
  [LOOM_OP_MATMUL] = {loom_grad_matmul, IN(0) | IN(1)},
  /* linear: out1 is the ReLU bitmask, made on CUDA only (see loom_infer_linear). */
  [LOOM_OP_LINEAR] = {loom_grad_linear, IN(0) | IN(1) | OUT0 | OUT1},
  [LOOM_OP_LOG_SOFTMAX] = {loom_grad_log_softmax, OUT0},
  [LOOM_OP_CROSS_ENTROPY] = {loom_grad_cross_entropy, IN(0) | IN(1)},
  [LOOM_OP_COPY] = {loom_grad_copy, 0},
  [LOOM_OP_VIEW_RESHAPE] = {loom_grad_view_reshape, 0},
  [LOOM_OP_VIEW_PERMUTE] = {loom_grad_view_permute, 0},
  [LOOM_OP_VIEW_SLICE] = {loom_grad_view_slice, 0},
  [LOOM_OP_VIEW_EXPAND] = {loom_grad_view_expand, 0},
  /* conv2d saves y for the fused ReLU's mask (y > 0). */
  [LOOM_OP_CONV2D] = {loom_grad_conv2d, IN(0) | IN(1) | OUT0},
  /* batch_norm saves x, weight and bias (the fused ReLU's mask is recomputed from x) and its
   * statistics; never the running statistics, which it updates in place. */
  [LOOM_OP_BATCH_NORM] = {loom_grad_batch_norm, IN(0) | IN(1) | IN(2) | OUT1},
  [LOOM_OP_MAX_POOL2D] = {loom_grad_max_pool2d, OUT1},
  [LOOM_OP_AVG_POOL2D] = {loom_grad_avg_pool2d, 0},
  [LOOM_OP_ADAPTIVE_AVG_POOL2D] = {loom_grad_avg_pool2d, 0},
  [LOOM_OP_DROPOUT] = {loom_grad_dropout, OUT1},
  [LOOM_OP_ADD_RELU] = {loom_grad_add_relu, OUT0},
  [LOOM_OP_CAT] = {loom_grad_cat, 0},
  [LOOM_OP_GELU] = {loom_grad_gelu, IN(0)},
  [LOOM_OP_SOFTMAX] = {loom_grad_softmax, OUT0},
  [LOOM_OP_EMBEDDING] = {loom_grad_embedding, IN(0)},
  /* layer_norm saves x, weight and its statistics (mean, rstd); never the bias. */
  [LOOM_OP_LAYER_NORM] = {loom_grad_layer_norm, IN(0) | IN(1) | OUT1},
  /* attention saves q, k, v, its output and the logsumexp of each query row: O(T) beyond the tensors. */
  [LOOM_OP_ATTENTION] = {loom_grad_attention, IN(0) | IN(1) | IN(2) | OUT0 | OUT1},
  [LOOM_OP_LINEAR_CROSS_ENTROPY] = {loom_grad_linear_cross_entropy, IN(0) | IN(1) | IN(2) | OUT1},
};

const loom_grad_def *loom_grad_get(loom_op_id op) {
  if (op < 0 || op >= LOOM_OP_COUNT || !g_grads[op].backward) return NULL;
  return &g_grads[op];
}
