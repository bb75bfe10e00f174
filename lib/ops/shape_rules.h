/* shape_rules.h (internal) — the shape/dtype rule of each op. */
#ifndef LOOM_OPS_SHAPE_RULES_H
#define LOOM_OPS_SHAPE_RULES_H
#include "ops/op.h"

loom_status loom_infer_binary(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_unary(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_reduce(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_argmax(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_matmul(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_linear(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_linear_backward(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_log_softmax(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_cross_entropy(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_cross_entropy_backward(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_copy(const char *opname, const loom_op_args *a, loom_out_spec *o);

/* CNN ops (shape_rules_cnn.c). loom_cnn_format: NHWC for a 4-D
 * channels-last tensor that is not also contiguous, else NCHW. */
int loom_cnn_format(const loom_tensor *t);
loom_status loom_infer_batch_norm(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_batch_norm_backward(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_pool2d(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_pool2d_backward(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_dropout(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_dropout_backward(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_add_relu(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_add_relu_backward(const char *opname, const loom_op_args *a, loom_out_spec *o);
/* Transformer ops (shape_rules_transformer.c) */
loom_status loom_infer_softmax(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_embedding(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_embedding_backward(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_layer_norm(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_layer_norm_backward(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_attention(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_attention_backward(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_linear_cross_entropy(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_linear_cross_entropy_backward(const char *opname, const loom_op_args *a, loom_out_spec *o);
/* api_cat.c */
loom_status loom_infer_cat(const char *opname, const loom_op_args *a, loom_out_spec *o);
#endif
