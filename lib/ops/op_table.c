/* op_table.c — the op table: name, arity, shape rule, CPU kernel, CUDA
 * kernel. Backward rules and what each op saves for them are autograd's
 * (lib/autograd/grad_table.c). */
#include "ops/conv.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/elementwise_math.h"
#include "ops/shape_rules.h"
/* LOOM_CUDA_OPS: set once lib/ops/cuda provides every kernel below. */
#if defined(LOOM_HAVE_CUDA) && defined(LOOM_CUDA_OPS)
#include "ops/cuda/cuda_kernels.h"
#define CUDA_K(fn) fn
#else
#define CUDA_K(fn) NULL
#endif

#define CPU_EW(name, kind, code) \
  static loom_status name(loom_op_args *a) { return loom_cpu_ew_##kind(a, code); }
CPU_EW(cpu_add, binary, LOOM_EW_ADD)
CPU_EW(cpu_sub, binary, LOOM_EW_SUB)
CPU_EW(cpu_mul, binary, LOOM_EW_MUL)
CPU_EW(cpu_div, binary, LOOM_EW_DIV)
CPU_EW(cpu_eq, binary, LOOM_EW_EQ)
CPU_EW(cpu_relu_bw, binary, LOOM_EW_RELU_BW)
CPU_EW(cpu_add_s, unary, LOOM_EW_ADD_S)
CPU_EW(cpu_mul_s, unary, LOOM_EW_MUL_S)
CPU_EW(cpu_rsub_s, unary, LOOM_EW_RSUB_S)
CPU_EW(cpu_rdiv_s, unary, LOOM_EW_RDIV_S)
CPU_EW(cpu_pow_s, unary, LOOM_EW_POW_S)
CPU_EW(cpu_neg, unary, LOOM_EW_NEG)
CPU_EW(cpu_exp, unary, LOOM_EW_EXP)
CPU_EW(cpu_log, unary, LOOM_EW_LOG)
CPU_EW(cpu_sqrt, unary, LOOM_EW_SQRT)
CPU_EW(cpu_relu, unary, LOOM_EW_RELU)
CPU_EW(cpu_gelu, unary, LOOM_EW_GELU)
CPU_EW(cpu_gelu_bw, binary, LOOM_EW_GELU_BW)

/* name, n_in, max_in, n_out, infer, cpu, cuda, same_dtype */
static const loom_op_def g_ops[LOOM_OP_COUNT] = {
  [LOOM_OP_ADD] = {"add", 2, 2, 1, loom_infer_binary, cpu_add, CUDA_K(loom_cuda_add), 1},
  [LOOM_OP_SUB] = {"sub", 2, 2, 1, loom_infer_binary, cpu_sub, CUDA_K(loom_cuda_sub), 1},
  [LOOM_OP_MUL] = {"mul", 2, 2, 1, loom_infer_binary, cpu_mul, CUDA_K(loom_cuda_mul), 1},
  [LOOM_OP_DIV] = {"div", 2, 2, 1, loom_infer_binary, cpu_div, CUDA_K(loom_cuda_div), 1},
  [LOOM_OP_ADD_SCALAR] = {"add_scalar", 1, 1, 1, loom_infer_unary, cpu_add_s, CUDA_K(loom_cuda_add_scalar), 0},
  [LOOM_OP_MUL_SCALAR] = {"mul_scalar", 1, 1, 1, loom_infer_unary, cpu_mul_s, CUDA_K(loom_cuda_mul_scalar), 0},
  [LOOM_OP_RSUB_SCALAR] = {"rsub_scalar", 1, 1, 1, loom_infer_unary, cpu_rsub_s, CUDA_K(loom_cuda_rsub_scalar), 0},
  [LOOM_OP_RDIV_SCALAR] = {"rdiv_scalar", 1, 1, 1, loom_infer_unary, cpu_rdiv_s, CUDA_K(loom_cuda_rdiv_scalar), 0},
  [LOOM_OP_POW_SCALAR] = {"pow_scalar", 1, 1, 1, loom_infer_unary, cpu_pow_s, CUDA_K(loom_cuda_pow_scalar), 0},
  [LOOM_OP_NEG] = {"neg", 1, 1, 1, loom_infer_unary, cpu_neg, CUDA_K(loom_cuda_neg), 0},
  [LOOM_OP_EXP] = {"exp", 1, 1, 1, loom_infer_unary, cpu_exp, CUDA_K(loom_cuda_exp), 0},
  [LOOM_OP_LOG] = {"log", 1, 1, 1, loom_infer_unary, cpu_log, CUDA_K(loom_cuda_log), 0},
  [LOOM_OP_SQRT] = {"sqrt", 1, 1, 1, loom_infer_unary, cpu_sqrt, CUDA_K(loom_cuda_sqrt), 0},
  [LOOM_OP_RELU] = {"relu", 1, 1, 1, loom_infer_unary, cpu_relu, CUDA_K(loom_cuda_relu), 0},
  [LOOM_OP_RELU_BACKWARD] = {"relu_backward", 2, 2, 1, loom_infer_binary, cpu_relu_bw, CUDA_K(loom_cuda_relu_backward), 1},
  [LOOM_OP_EQ] = {"eq", 2, 2, 1, loom_infer_binary, cpu_eq, CUDA_K(loom_cuda_eq), 1},
  [LOOM_OP_SUM] = {"sum", 1, 1, 1, loom_infer_reduce, loom_cpu_sum, CUDA_K(loom_cuda_sum), 0},
  [LOOM_OP_MAX] = {"max", 1, 1, 1, loom_infer_reduce, loom_cpu_max, CUDA_K(loom_cuda_max), 0},
  [LOOM_OP_ARGMAX] = {"argmax", 1, 1, 1, loom_infer_argmax, loom_cpu_argmax, CUDA_K(loom_cuda_argmax), 0},
  [LOOM_OP_MATMUL] = {"matmul", 2, 2, 1, loom_infer_matmul, loom_cpu_matmul, CUDA_K(loom_cuda_matmul), 1},
  /* linear: out1 is the ReLU bitmask on CUDA (see loom_infer_linear). linear_backward: out3 is the chained db. */
  [LOOM_OP_LINEAR] = {"linear", 2, 3, 2, loom_infer_linear, loom_cpu_linear, CUDA_K(loom_cuda_linear), 1},
  [LOOM_OP_LINEAR_BACKWARD] = {"linear_backward", 3, 4, 4, loom_infer_linear_backward, loom_cpu_linear_backward, CUDA_K(loom_cuda_linear_backward), 0},
  [LOOM_OP_LOG_SOFTMAX] = {"log_softmax", 1, 1, 1, loom_infer_log_softmax, loom_cpu_log_softmax, CUDA_K(loom_cuda_log_softmax), 0},
  [LOOM_OP_LOG_SOFTMAX_BACKWARD] = {"log_softmax_backward", 2, 2, 1, loom_infer_log_softmax, loom_cpu_log_softmax_backward, CUDA_K(loom_cuda_log_softmax_backward), 1},
  [LOOM_OP_CROSS_ENTROPY] = {"cross_entropy", 2, 2, 1, loom_infer_cross_entropy, loom_cpu_cross_entropy, CUDA_K(loom_cuda_cross_entropy), 0},
  [LOOM_OP_CROSS_ENTROPY_BACKWARD] = {"cross_entropy_backward", 3, 3, 1, loom_infer_cross_entropy_backward, loom_cpu_cross_entropy_backward, CUDA_K(loom_cuda_cross_entropy_backward), 0},
  [LOOM_OP_COPY] = {"copy", 1, 1, 1, loom_infer_copy, loom_cpu_copy, CUDA_K(loom_cuda_copy), 0},
  [LOOM_OP_VIEW_RESHAPE] = {"reshape", 1, 1, 1, NULL, NULL, NULL, 0},
  [LOOM_OP_VIEW_PERMUTE] = {"permute", 1, 1, 1, NULL, NULL, NULL, 0},
  [LOOM_OP_VIEW_SLICE] = {"slice", 1, 1, 1, NULL, NULL, NULL, 0},
  [LOOM_OP_VIEW_EXPAND] = {"expand", 1, 1, 1, NULL, NULL, NULL, 0},
  /* conv2d_backward: dx, dw, db (skipped ones NULL). */
  [LOOM_OP_CONV2D] = {"conv2d", 2, 3, 1, loom_infer_conv2d, loom_cpu_conv2d, CUDA_K(loom_cuda_conv2d), 1},
  [LOOM_OP_CONV2D_BACKWARD] = {"conv2d_backward", 3, 4, 3, loom_infer_conv2d_backward, loom_cpu_conv2d_backward, CUDA_K(loom_cuda_conv2d_backward), 1},
  /* CNN ops. batch_norm: out1 is its statistics [2, C] f32; training updates the running statistics in place. */
  [LOOM_OP_BATCH_NORM] = {"batch_norm", 1, 5, 2, loom_infer_batch_norm, loom_cpu_batch_norm, CUDA_K(loom_cuda_batch_norm), 0},
  [LOOM_OP_BATCH_NORM_BACKWARD] = {"batch_norm_backward", 2, 5, 3, loom_infer_batch_norm_backward, loom_cpu_batch_norm_backward, CUDA_K(loom_cuda_batch_norm_backward), 0},
  [LOOM_OP_MAX_POOL2D] = {"max_pool2d", 1, 1, 2, loom_infer_pool2d, loom_cpu_max_pool2d, CUDA_K(loom_cuda_max_pool2d), 0},
  [LOOM_OP_MAX_POOL2D_BACKWARD] = {"max_pool2d_backward", 2, 2, 1, loom_infer_pool2d_backward, loom_cpu_max_pool2d_backward, CUDA_K(loom_cuda_max_pool2d_backward), 0},
  [LOOM_OP_AVG_POOL2D] = {"avg_pool2d", 1, 1, 1, loom_infer_pool2d, loom_cpu_avg_pool2d, CUDA_K(loom_cuda_avg_pool2d), 0},
  [LOOM_OP_ADAPTIVE_AVG_POOL2D] = {"adaptive_avg_pool2d", 1, 1, 1, loom_infer_pool2d, loom_cpu_avg_pool2d, CUDA_K(loom_cuda_avg_pool2d), 0},
  [LOOM_OP_AVG_POOL2D_BACKWARD] = {"avg_pool2d_backward", 1, 1, 1, loom_infer_pool2d_backward, loom_cpu_avg_pool2d_backward, CUDA_K(loom_cuda_avg_pool2d_backward), 0},
  [LOOM_OP_DROPOUT] = {"dropout", 1, 1, 2, loom_infer_dropout, loom_cpu_dropout, CUDA_K(loom_cuda_dropout), 0},
  [LOOM_OP_DROPOUT_BACKWARD] = {"dropout_backward", 2, 2, 1, loom_infer_dropout_backward, loom_cpu_dropout_backward, CUDA_K(loom_cuda_dropout_backward), 0},
  [LOOM_OP_ADD_RELU] = {"add_relu", 2, 2, 1, loom_infer_add_relu, loom_cpu_add_relu, CUDA_K(loom_cuda_add_relu), 1},
  [LOOM_OP_ADD_RELU_BACKWARD] = {"add_relu_backward", 2, 2, 2, loom_infer_add_relu_backward, loom_cpu_add_relu_backward, CUDA_K(loom_cuda_add_relu_backward), 1},
  /* cat: one kernel for every device (strided copies through COPY's kernels). */
  [LOOM_OP_CAT] = {"cat", 1, LOOM_OP_MAX_IN, 1, loom_infer_cat, loom_kernel_cat, CUDA_K(loom_kernel_cat), 1},
  /* Transformer ops (issue 28). CUDA: GELU in elementwise.cu, softmax / embedding / layer norm in
   * transformer_cuda.c, the fused projection + cross-entropy in linear_ce_cuda.c, attention in attention_cuda.c. */
  [LOOM_OP_GELU] = {"gelu", 1, 1, 1, loom_infer_unary, cpu_gelu, CUDA_K(loom_cuda_gelu), 0},
  [LOOM_OP_GELU_BACKWARD] = {"gelu_backward", 2, 2, 1, loom_infer_binary, cpu_gelu_bw, CUDA_K(loom_cuda_gelu_backward), 1},
  [LOOM_OP_SOFTMAX] = {"softmax", 1, 1, 1, loom_infer_softmax, loom_cpu_softmax, CUDA_K(loom_cuda_softmax), 0},
  [LOOM_OP_SOFTMAX_BACKWARD] = {"softmax_backward", 2, 2, 1, loom_infer_softmax, loom_cpu_softmax_backward, CUDA_K(loom_cuda_softmax_backward), 1},
  [LOOM_OP_EMBEDDING] = {"embedding", 2, 2, 1, loom_infer_embedding, loom_cpu_embedding, CUDA_K(loom_cuda_embedding), 0},
  [LOOM_OP_EMBEDDING_BACKWARD] = {"embedding_backward", 2, 2, 1, loom_infer_embedding_backward, loom_cpu_embedding_backward, CUDA_K(loom_cuda_embedding_backward), 0},
  /* layer_norm: out1 is its statistics [rows, 2] f32 (mean, rstd). */
  [LOOM_OP_LAYER_NORM] = {"layer_norm", 1, 3, 2, loom_infer_layer_norm, loom_cpu_layer_norm, CUDA_K(loom_cuda_layer_norm), 0},
  [LOOM_OP_LAYER_NORM_BACKWARD] = {"layer_norm_backward", 3, 4, 3, loom_infer_layer_norm_backward, loom_cpu_layer_norm_backward, CUDA_K(loom_cuda_layer_norm_backward), 0},
  /* attention: out1 is the logsumexp of each query row [..., T] f32. */
  [LOOM_OP_ATTENTION] = {"attention", 3, 3, 2, loom_infer_attention, loom_cpu_attention, CUDA_K(loom_cuda_attention), 1},
  [LOOM_OP_ATTENTION_BACKWARD] = {"attention_backward", 5, 5, 3, loom_infer_attention_backward, loom_cpu_attention_backward, CUDA_K(loom_cuda_attention_backward), 0},
  [LOOM_OP_LINEAR_CROSS_ENTROPY] = {"linear_cross_entropy", 3, 3, 2, loom_infer_linear_cross_entropy, loom_cpu_linear_cross_entropy, CUDA_K(loom_cuda_linear_cross_entropy), 0},
  [LOOM_OP_LINEAR_CROSS_ENTROPY_BACKWARD] = {"linear_cross_entropy_backward", 5, 5, 2, loom_infer_linear_cross_entropy_backward, loom_cpu_linear_cross_entropy_backward, CUDA_K(loom_cuda_linear_cross_entropy_backward), 0},
};

const loom_op_def *loom_op_get(loom_op_id id) {
  return (id >= 0 && id < LOOM_OP_COUNT) ? &g_ops[id] : NULL;
}
