/* grad_rules.h (internal) — the backward rules the grad table names. */
#ifndef LOOM_AUTOGRAD_GRAD_RULES_H
#define LOOM_AUTOGRAD_GRAD_RULES_H
#include "autograd/grad_table.h"
#include "autograd/node.h"

#define LOOM_GRAD_RULE(name) loom_status name(loom_node *n, loom_tensor *gy, loom_tensor **gx)
LOOM_GRAD_RULE(loom_grad_add);
LOOM_GRAD_RULE(loom_grad_sub);
LOOM_GRAD_RULE(loom_grad_mul);
LOOM_GRAD_RULE(loom_grad_div);
LOOM_GRAD_RULE(loom_grad_add_scalar);
LOOM_GRAD_RULE(loom_grad_mul_scalar);
LOOM_GRAD_RULE(loom_grad_rsub_scalar);
LOOM_GRAD_RULE(loom_grad_rdiv_scalar);
LOOM_GRAD_RULE(loom_grad_pow_scalar);
LOOM_GRAD_RULE(loom_grad_neg);
LOOM_GRAD_RULE(loom_grad_exp);
LOOM_GRAD_RULE(loom_grad_log);
LOOM_GRAD_RULE(loom_grad_sqrt);
LOOM_GRAD_RULE(loom_grad_relu);
LOOM_GRAD_RULE(loom_grad_sum);
LOOM_GRAD_RULE(loom_grad_max);
LOOM_GRAD_RULE(loom_grad_matmul);
LOOM_GRAD_RULE(loom_grad_linear);
LOOM_GRAD_RULE(loom_grad_log_softmax);
LOOM_GRAD_RULE(loom_grad_cross_entropy);
LOOM_GRAD_RULE(loom_grad_copy);
LOOM_GRAD_RULE(loom_grad_view_reshape);
LOOM_GRAD_RULE(loom_grad_view_permute);
LOOM_GRAD_RULE(loom_grad_view_slice);
LOOM_GRAD_RULE(loom_grad_view_expand);
/* CNN ops (grad_rules_cnn.c) */
LOOM_GRAD_RULE(loom_grad_conv2d);
LOOM_GRAD_RULE(loom_grad_batch_norm);
LOOM_GRAD_RULE(loom_grad_max_pool2d);
LOOM_GRAD_RULE(loom_grad_avg_pool2d);
LOOM_GRAD_RULE(loom_grad_dropout);
LOOM_GRAD_RULE(loom_grad_add_relu);
LOOM_GRAD_RULE(loom_grad_cat);
/* Transformer ops (grad_rules_transformer.c) */
LOOM_GRAD_RULE(loom_grad_gelu);
LOOM_GRAD_RULE(loom_grad_softmax);
LOOM_GRAD_RULE(loom_grad_embedding);
LOOM_GRAD_RULE(loom_grad_layer_norm);
LOOM_GRAD_RULE(loom_grad_attention);
LOOM_GRAD_RULE(loom_grad_linear_cross_entropy);
#endif
