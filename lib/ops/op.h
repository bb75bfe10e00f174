/* op.h (internal) — the op table: every op has a name, a shape rule, a CPU
 * kernel and a CUDA kernel; its backward rule, written with other ops, is in
 * autograd's grad table (docs/design.md §5). Adding an op touches one table
 * entry, two kernels, one grad-table entry and one case of
 * tests/test_op_sweep.c. */
#ifndef LOOM_OPS_OP_H
#define LOOM_OPS_OP_H

#include "loom/ops.h"
#include "tensor/tensor_internal.h"

#define LOOM_OP_MAX_IN 5   /* batch_norm: x, weight, bias, running mean, running var */
#define LOOM_OP_MAX_OUT 4  /* linear_backward: dX, dW, db, and the chained db of the previous layer */
#define LOOM_OP_MAX_INTS 12

/* Append-only within a build; the order is the table's order. */
typedef enum loom_op_id {
  LOOM_OP_ADD, LOOM_OP_SUB, LOOM_OP_MUL, LOOM_OP_DIV,
  LOOM_OP_ADD_SCALAR, LOOM_OP_MUL_SCALAR, LOOM_OP_RSUB_SCALAR, LOOM_OP_RDIV_SCALAR, LOOM_OP_POW_SCALAR,
  LOOM_OP_NEG, LOOM_OP_EXP, LOOM_OP_LOG, LOOM_OP_SQRT, LOOM_OP_RELU,
  LOOM_OP_RELU_BACKWARD,   /* gy * (y > 0) */
  LOOM_OP_EQ,              /* (a == b) as a's dtype (0/1) */
  LOOM_OP_SUM, LOOM_OP_MAX, LOOM_OP_ARGMAX,
  LOOM_OP_MATMUL,
  LOOM_OP_LINEAR,          /* fused x·wᵀ + b (+ReLU) */
  LOOM_OP_LINEAR_BACKWARD, /* dX, dW, db of the fused linear in one op */
  LOOM_OP_LOG_SOFTMAX, LOOM_OP_LOG_SOFTMAX_BACKWARD,
  LOOM_OP_CROSS_ENTROPY, LOOM_OP_CROSS_ENTROPY_BACKWARD,
  LOOM_OP_COPY,            /* strided copy with dtype conversion (cast, contiguous) */
  /* Views: no kernel, only a backward rule (recorded by lib/ops/api_view.c). */
  LOOM_OP_VIEW_RESHAPE, LOOM_OP_VIEW_PERMUTE, LOOM_OP_VIEW_SLICE, LOOM_OP_VIEW_EXPAND,
  LOOM_OP_CONV2D,          /* conv2d (+ bias, + fused ReLU); lib/ops/conv_rules.c */
  LOOM_OP_CONV2D_BACKWARD, /* dX, dW, db of conv2d in one op */
  /* CNN ops (issue 11): outputs keep the input's memory format (NCHW / NHWC). */
  LOOM_OP_BATCH_NORM,          /* y, stats [2, C] f32 (mean, invstd); training updates running stats */
  LOOM_OP_BATCH_NORM_BACKWARD, /* dx, dweight, dbias in two passes over memory */
  LOOM_OP_MAX_POOL2D,          /* y, argmax indices (i32, within each input plane) */
  LOOM_OP_MAX_POOL2D_BACKWARD,
  LOOM_OP_AVG_POOL2D,
  LOOM_OP_ADAPTIVE_AVG_POOL2D,
  LOOM_OP_AVG_POOL2D_BACKWARD, /* both avg pools (window mode in i[]) */
  LOOM_OP_DROPOUT,             /* y, keep bitmask (u8, memory order) */
  LOOM_OP_DROPOUT_BACKWARD,
  LOOM_OP_ADD_RELU,            /* relu(a + b), same shape and format */
  LOOM_OP_ADD_RELU_BACKWARD,   /* gy * (y > 0), written once per input that needs it */
  LOOM_OP_CAT,                 /* concatenation of 1..LOOM_OP_MAX_IN inputs along i[0] (lib/ops/api_cat.c) */
  /* Transformer ops (issue 28); CUDA kernels for all but attention so far (op_table.c). */
  LOOM_OP_GELU,                /* tanh approximation (GPT-2's) */
  LOOM_OP_GELU_BACKWARD,       /* (gy, x) -> gy * gelu'(x) */
  LOOM_OP_SOFTMAX,             /* over the last dim */
  LOOM_OP_SOFTMAX_BACKWARD,    /* (gy, y) -> y * (gy - sum(gy * y)) */
  LOOM_OP_EMBEDDING,           /* (indices, weight [V, D]) -> [..., D] */
  LOOM_OP_EMBEDDING_BACKWARD,  /* (gy, indices), i[0] = V -> dweight [V, D] (scatter-add) */
  LOOM_OP_LAYER_NORM,          /* over the last dim: y, stats [rows, 2] f32 (mean, rstd) */
  LOOM_OP_LAYER_NORM_BACKWARD, /* (gy, x, weight, stats) -> dx, dweight, dbias */
  LOOM_OP_ATTENTION,           /* fused (causal) SDPA: out, logsumexp per query row [..., T] f32 */
  LOOM_OP_ATTENTION_BACKWARD,  /* (gy, q, k, v, stats [..., T, 2]: lse, rowsum(gy * out)) -> dq, dk, dv */
  LOOM_OP_LINEAR_CROSS_ENTROPY,          /* (x [N, E], w [V, E], labels [N]) -> mean loss, lse [N] f32 */
  LOOM_OP_LINEAR_CROSS_ENTROPY_BACKWARD, /* (gy, x, w, labels, lse) -> dx, dw */
  LOOM_OP_COUNT
} loom_op_id;

typedef struct loom_op_args {
  loom_tensor *in[LOOM_OP_MAX_IN];
  int n_in;
  loom_tensor *out[LOOM_OP_MAX_OUT];
  int n_out;
  double f[4];                     /* scalar attributes */
  int64_t i[LOOM_OP_MAX_INTS];     /* integer attributes (dims, flags) */
} loom_op_args;

/* What the shape rule decides about each output. */
typedef struct loom_out_spec {
  int ndim;
  int64_t shape[LOOM_MAX_DIMS];
  loom_dtype dtype;
  int format;  /* loom_memory_format: NCHW (0, contiguous: the default) or NHWC (4-D, channels-last strides) */
} loom_out_spec;
/* Give a fresh contiguous 4-D [N, C, H, W] tensor channels-last strides
 * (same storage size): how NHWC results and gradients are made
 * (lib/ops/api_memory_format.c). */
void loom_set_channels_last_strides(loom_tensor *t);

typedef loom_status (*loom_infer_fn)(const char *opname, const loom_op_args *a, loom_out_spec *out);
typedef loom_status (*loom_kernel_fn)(loom_op_args *a);

typedef struct loom_op_def {
  const char *name;
  int n_in;        /* required inputs (optional ones may be NULL beyond) */
  int max_in;
  int n_out;
  loom_infer_fn infer;
  loom_kernel_fn cpu;
  loom_kernel_fn cuda;
  int same_dtype;             /* all inputs must share a dtype */
} loom_op_def;

const loom_op_def *loom_op_get(loom_op_id id);

/* Run op id on args (in[], f[], i[] filled): checks NULL inputs, devices,
 * shape rule; allocates outputs; runs the device's kernel; records autograd
 * (through the recorder autograd installed: ops/record.h).
 * Returns out[0] adopted by the ownership rule; out[1] (if any) is stored in
 * a->out[1] and also adopted. NULL on failure. */
loom_tensor *loom_op_run(loom_op_id id, loom_op_args *a);
/* Run the kernel on preallocated outputs (no autograd, no adoption). */
loom_status loom_op_run_into(loom_op_id id, loom_op_args *a);

/* Helpers used by ops and the layers above (loom_copy_*_host_raw: tensor_internal.h). */
/* a += b in place (same shape), no autograd. */
loom_status loom_add_inplace(loom_tensor *a, loom_tensor *b);
/* Sum g down to shape (undo broadcasting). Returns a new tensor (scope rule). */
loom_tensor *loom_sum_to_shape(loom_tensor *g, int ndim, const int64_t *shape);
/* Broadcast two shapes; LOOM_ERR_SHAPE naming op if they do not agree. */
loom_status loom_broadcast_shapes(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb, int *nout,
                                  int64_t *out);
/* Normalize a possibly negative dim for ndim; error names op. */
loom_status loom_norm_dim(const char *op, int dim, int ndim, int *out);
loom_tensor *loom_eq(loom_tensor *a, loom_tensor *b);
/* CAT's kernel, for every device: one COPY per input into its stretch of
 * the output (api_cat.c). */
loom_status loom_kernel_cat(loom_op_args *a);
/* Element offset of batch b of matmul operand t, whose leading (batch) dims
 * broadcast against those of the output out. */
int64_t loom_matmul_batch_offset(const loom_tensor *t, const loom_tensor *out, int64_t b);

#endif
