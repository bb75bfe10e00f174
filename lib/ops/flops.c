/* flops.c — FLOP counts per op (multiply-add = 2), from the shapes of a run
 * op's inputs and outputs. Element-wise ops count one per output element
 * (transcendentals too); copies and views count none. Ops added later count
 * 0 until they get a case here. */
#include "ops/flops.h"
#include "ops/conv.h"

static double numel(const loom_tensor *t) { return t ? (double)loom_shape_numel(t->ndim, t->shape) : 0.0; }

/* Rows of x [..., K] (the product of its leading dims). */
static double rows(const loom_tensor *x) {
  double r = 1;
  for (int d = 0; d + 1 < x->ndim; d++) r *= (double)x->shape[d];
  return r;
}

double loom_op_flops(loom_op_id id, const loom_op_args *a) {
  const loom_tensor *x = a->in[0];
  if (!x) return 0;
  switch (id) {
  case LOOM_OP_ADD: case LOOM_OP_SUB: case LOOM_OP_MUL: case LOOM_OP_DIV:
  case LOOM_OP_ADD_SCALAR: case LOOM_OP_MUL_SCALAR: case LOOM_OP_RSUB_SCALAR: case LOOM_OP_RDIV_SCALAR:
  case LOOM_OP_POW_SCALAR: case LOOM_OP_NEG: case LOOM_OP_EXP: case LOOM_OP_LOG: case LOOM_OP_SQRT:
  case LOOM_OP_RELU: case LOOM_OP_RELU_BACKWARD: case LOOM_OP_EQ:
  case LOOM_OP_GELU: case LOOM_OP_GELU_BACKWARD:
    return numel(a->out[0]);
  case LOOM_OP_SUM: case LOOM_OP_MAX: case LOOM_OP_ARGMAX:
    return numel(x);
  case LOOM_OP_MATMUL: {
    /* out [..., M, N] = x [..., M, K] · w [..., K, N] */
    int64_t k = x->ndim >= 1 ? x->shape[x->ndim - 1] : 1;
    return 2.0 * numel(a->out[0]) * (double)k;
  }
  case LOOM_OP_LINEAR: {
    /* y [M, N] = x [M, K] · wᵀ (+ b) (+ ReLU) */
    const loom_tensor *w = a->in[1];
    double m = rows(x), n = (double)w->shape[0], k = (double)w->shape[1];
    return 2.0 * m * n * k + (a->in[2] ? m * n : 0) + (a->i[0] ? m * n : 0);
  }
  case LOOM_OP_LINEAR_BACKWARD: {
    /* in: gy [M, N], x [M, K], w [N, K]; outputs dX (gy·w), dW (gyᵀ·x), db (column sums of gy) as asked */
    const loom_tensor *w = a->in[2];
    double m = rows(a->in[1]), n = (double)w->shape[0], k = (double)w->shape[1];
    return (a->out[0] ? 2.0 * m * n * k : 0) + (a->out[1] ? 2.0 * m * n * k : 0) + (a->out[2] ? m * n : 0) +
           (a->out[3] ? m * k : 0);
  }
  case LOOM_OP_LOG_SOFTMAX: /* max, subtract, exp, sum, log, subtract */
    return 5.0 * numel(x);
  case LOOM_OP_LOG_SOFTMAX_BACKWARD: /* gx = gy - exp(y) * sum(gy) */
    return 4.0 * numel(x);
  case LOOM_OP_CROSS_ENTROPY: /* log-softmax and a gather-sum */
    return 5.0 * numel(x);
  case LOOM_OP_CROSS_ENTROPY_BACKWARD: /* softmax - one_hot, scaled */
    return 4.0 * numel(a->in[1]);
  case LOOM_OP_CONV2D: {
    /* y [N, O, OH, OW]: each output sums C/groups * KH * KW products (+ bias) (+ ReLU) */
    const loom_tensor *w = a->in[1];
    double y = numel(a->out[0]), taps = (double)w->shape[1] * (double)w->shape[2] * (double)w->shape[3];
    return 2.0 * y * taps + (a->n_in > 2 && a->in[2] ? y : 0) + (a->i[LOOM_CONV_I_ACT] != LOOM_ACT_NONE ? y : 0);
  }
  case LOOM_OP_CONV2D_BACKWARD: {
    /* in: gy [N, O, OH, OW], x, w; dX and dW each cost the forward's products, db sums gy */
    const loom_tensor *w = a->in[2];
    double gy = numel(x), taps = (double)w->shape[1] * (double)w->shape[2] * (double)w->shape[3];
    return (a->out[0] ? 2.0 * gy * taps : 0) + (a->out[1] ? 2.0 * gy * taps : 0) + (a->out[2] ? gy : 0);
  }
  case LOOM_OP_ADD_RELU:
    return 2.0 * numel(a->out[0]);
  case LOOM_OP_SOFTMAX: /* max, subtract, exp, sum, scale */
    return 5.0 * numel(x);
  case LOOM_OP_SOFTMAX_BACKWARD: /* gy * y summed, subtract, multiply */
    return 4.0 * numel(x);
  case LOOM_OP_EMBEDDING_BACKWARD: /* one add per element of gy */
    return numel(x);
  case LOOM_OP_LAYER_NORM: /* sum, centred squares, normalize, scale, shift */
    return 7.0 * numel(x);
  case LOOM_OP_LAYER_NORM_BACKWARD: /* xhat, the two row sums, dx, dweight, dbias */
    return 10.0 * numel(a->in[1]);
  case LOOM_OP_ATTENTION:
  case LOOM_OP_ATTENTION_BACKWARD: {
    /* Per head, products of [T, D] by [D, T] or [T, T] by [T, D] (2 T^2 D
     * each): forward q kᵀ and p v; backward recomputes q kᵀ and dO vᵀ in each
     * of its two passes, plus dv, dk, dq: 7. Causal: about half. */
    const loom_tensor *q = id == LOOM_OP_ATTENTION ? x : a->in[1];
    double T = (double)q->shape[q->ndim - 2], D = (double)q->shape[q->ndim - 1];
    double heads = numel(q) / (T * D > 0 ? T * D : 1);
    double products = id == LOOM_OP_ATTENTION ? 2.0 : 7.0;
    return products * 2.0 * heads * T * T * D * (a->i[0] ? 0.5 : 1.0);
  }
  case LOOM_OP_LINEAR_CROSS_ENTROPY: {
    /* logits x wᵀ, then a log-softmax and a gather per row */
    const loom_tensor *w = a->in[1];
    double n = (double)x->shape[0], v = (double)w->shape[0], e = (double)w->shape[1];
    return 2.0 * n * v * e + 5.0 * n * v;
  }
  case LOOM_OP_LINEAR_CROSS_ENTROPY_BACKWARD: {
    /* the logits again, softmax - onehot, and the dx and dw products asked for */
    const loom_tensor *w = a->in[2];
    double n = (double)a->in[1]->shape[0], v = (double)w->shape[0], e = (double)w->shape[1];
    return 2.0 * n * v * e + 4.0 * n * v + (a->out[0] ? 2.0 * n * v * e : 0) + (a->out[1] ? 2.0 * n * v * e : 0);
  }
  default:
    return 0;
  }
}
