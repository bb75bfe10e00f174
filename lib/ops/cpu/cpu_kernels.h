/* cpu_kernels.h (internal) — the CPU kernels the op table points at. */
#ifndef LOOM_OPS_CPU_KERNELS_H
#define LOOM_OPS_CPU_KERNELS_H

#include "ops/op.h"

loom_status loom_cpu_ew_binary(loom_op_args *a, int ew_op);
loom_status loom_cpu_ew_unary(loom_op_args *a, int ew_op);
loom_status loom_cpu_copy(loom_op_args *a);
loom_status loom_cpu_sum(loom_op_args *a);
loom_status loom_cpu_max(loom_op_args *a);
loom_status loom_cpu_argmax(loom_op_args *a);
loom_status loom_cpu_matmul(loom_op_args *a);
loom_status loom_cpu_linear(loom_op_args *a);
loom_status loom_cpu_linear_backward(loom_op_args *a);
loom_status loom_cpu_log_softmax(loom_op_args *a);
loom_status loom_cpu_log_softmax_backward(loom_op_args *a);
loom_status loom_cpu_cross_entropy(loom_op_args *a);
loom_status loom_cpu_cross_entropy_backward(loom_op_args *a);
loom_status loom_cpu_conv2d(loom_op_args *a);
loom_status loom_cpu_conv2d_backward(loom_op_args *a);
/* CNN ops: batch_norm_cpu.c, pool_cpu.c, dropout_cpu.c, add_relu_cpu.c */
loom_status loom_cpu_batch_norm(loom_op_args *a);
loom_status loom_cpu_batch_norm_backward(loom_op_args *a);
loom_status loom_cpu_max_pool2d(loom_op_args *a);
loom_status loom_cpu_max_pool2d_backward(loom_op_args *a);
loom_status loom_cpu_avg_pool2d(loom_op_args *a);          /* avg_pool2d and adaptive_avg_pool2d */
loom_status loom_cpu_avg_pool2d_backward(loom_op_args *a);
loom_status loom_cpu_dropout(loom_op_args *a);
loom_status loom_cpu_dropout_backward(loom_op_args *a);
loom_status loom_cpu_add_relu(loom_op_args *a);
loom_status loom_cpu_add_relu_backward(loom_op_args *a);
/* Transformer ops: softmax_cpu.c, embedding_cpu.c, layer_norm_cpu.c,
 * attention_cpu.c, linear_ce_cpu.c (GELU is elementwise). */
loom_status loom_cpu_softmax(loom_op_args *a);
loom_status loom_cpu_softmax_backward(loom_op_args *a);
loom_status loom_cpu_embedding(loom_op_args *a);
loom_status loom_cpu_embedding_backward(loom_op_args *a);
loom_status loom_cpu_layer_norm(loom_op_args *a);
loom_status loom_cpu_layer_norm_backward(loom_op_args *a);
loom_status loom_cpu_attention(loom_op_args *a);
loom_status loom_cpu_attention_backward(loom_op_args *a);
loom_status loom_cpu_linear_cross_entropy(loom_op_args *a);
loom_status loom_cpu_linear_cross_entropy_backward(loom_op_args *a);

#endif
