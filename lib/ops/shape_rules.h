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
#endif
