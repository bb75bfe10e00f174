/* cuda_kernels.h (internal, C) — the CUDA kernels the op table points at
 * (same contract as the CPU ones: outputs are already allocated on the
 * input device by the dispatcher; the kernel enqueues work on the device's
 * current stream and returns a loom_status). They are C functions in
 * the .c files of lib/ops/cuda that launch the device code of its .cu files through
 * cuda_launch.h. Only compiled with LOOM_HAVE_CUDA. */
#ifndef LOOM_OPS_CUDA_KERNELS_H
#define LOOM_OPS_CUDA_KERNELS_H

#include <stdbool.h>
#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

loom_status loom_cuda_add(loom_op_args *a);
loom_status loom_cuda_sub(loom_op_args *a);
loom_status loom_cuda_mul(loom_op_args *a);
loom_status loom_cuda_div(loom_op_args *a);
loom_status loom_cuda_add_scalar(loom_op_args *a);
loom_status loom_cuda_mul_scalar(loom_op_args *a);
loom_status loom_cuda_rsub_scalar(loom_op_args *a);
loom_status loom_cuda_rdiv_scalar(loom_op_args *a);
loom_status loom_cuda_pow_scalar(loom_op_args *a);
loom_status loom_cuda_neg(loom_op_args *a);
loom_status loom_cuda_exp(loom_op_args *a);
loom_status loom_cuda_log(loom_op_args *a);
loom_status loom_cuda_sqrt(loom_op_args *a);
loom_status loom_cuda_relu(loom_op_args *a);
loom_status loom_cuda_relu_backward(loom_op_args *a);
loom_status loom_cuda_gelu(loom_op_args *a);
loom_status loom_cuda_gelu_backward(loom_op_args *a);
loom_status loom_cuda_eq(loom_op_args *a);
loom_status loom_cuda_sum(loom_op_args *a);
loom_status loom_cuda_max(loom_op_args *a);
loom_status loom_cuda_argmax(loom_op_args *a);
loom_status loom_cuda_matmul(loom_op_args *a);
loom_status loom_cuda_linear(loom_op_args *a);
loom_status loom_cuda_linear_backward(loom_op_args *a);
loom_status loom_cuda_log_softmax(loom_op_args *a);
loom_status loom_cuda_log_softmax_backward(loom_op_args *a);
loom_status loom_cuda_cross_entropy(loom_op_args *a);
loom_status loom_cuda_cross_entropy_backward(loom_op_args *a);
loom_status loom_cuda_copy(loom_op_args *a);
/* CNN ops (cnn_cuda.c) */
loom_status loom_cuda_batch_norm(loom_op_args *a);
loom_status loom_cuda_batch_norm_backward(loom_op_args *a);
loom_status loom_cuda_max_pool2d(loom_op_args *a);
loom_status loom_cuda_max_pool2d_backward(loom_op_args *a);
loom_status loom_cuda_avg_pool2d(loom_op_args *a);
loom_status loom_cuda_avg_pool2d_backward(loom_op_args *a);
loom_status loom_cuda_dropout(loom_op_args *a);
loom_status loom_cuda_dropout_backward(loom_op_args *a);
loom_status loom_cuda_add_relu(loom_op_args *a);
loom_status loom_cuda_add_relu_backward(loom_op_args *a);
/* Transformer ops (issue 28): softmax, embedding, layer norm
 * (transformer_cuda.c), the fused projection + cross-entropy
 * (linear_ce_cuda.c). */
loom_status loom_cuda_softmax(loom_op_args *a);
loom_status loom_cuda_softmax_backward(loom_op_args *a);
loom_status loom_cuda_embedding(loom_op_args *a);
loom_status loom_cuda_embedding_backward(loom_op_args *a);
loom_status loom_cuda_layer_norm(loom_op_args *a);
loom_status loom_cuda_layer_norm_backward(loom_op_args *a);
loom_status loom_cuda_linear_cross_entropy(loom_op_args *a);
loom_status loom_cuda_linear_cross_entropy_backward(loom_op_args *a);
/* Fused attention (attention_cuda.c) */
loom_status loom_cuda_attention(loom_op_args *a);
loom_status loom_cuda_attention_backward(loom_op_args *a);

/* Fill t (contiguous, float dtype, on a CUDA device) with Philox numbers
 * identical to loom_rng_fill_uniform / _normal at (seed, offset). */
loom_status loom_cuda_rng_fill(loom_tensor *t, int normal, uint64_t seed, uint64_t offset, float a, float b);

/* Benchmarks and tests: force the linear op onto the plain unfused path
 * (GEMM, then bias, then ReLU kernels; backward: dReLU kernel, bias-gradient
 * reduction, two GEMMs). Switch between training steps, not within one. */
void loom_cuda_linear_force_unfused(bool on);
bool loom_cuda_linear_unfused_forced(void);
/* Tests: make the cuBLASLt heuristic report "no algorithm" for plans built
 * while on (part of the plan key, so toggling never poisons the cache):
 * exercises the unfused fallbacks and the cublasGemmEx path. */
void loom_cuda_lt_testing_refuse(bool on);

#ifdef __cplusplus
}
#endif
#endif
