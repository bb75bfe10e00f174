/* node.h (internal) — one recorded op in the autograd graph. Nodes are
 * numbered in recording order (seq), so walking them by decreasing seq is
 * walking the tape backwards. */
#ifndef LOOM_AUTOGRAD_NODE_H
#define LOOM_AUTOGRAD_NODE_H

#include <stdatomic.h>
#include <stdint.h>
#include "ops/op.h"

typedef struct loom_edge {
  struct loom_node *node;  /* producer of input k (owned ref), or NULL */
  loom_tensor *leaf;       /* leaf input k that requires grad (owned ref), or NULL */
} loom_edge;

typedef struct loom_node {
  atomic_int refcount;
  uint64_t seq;
  loom_op_id op;
  loom_op_args args;                   /* attributes (f[], i[]); tensors cleared */
  int n_in;
  bool needs_grad[LOOM_OP_MAX_IN];
  loom_edge next[LOOM_OP_MAX_IN];
  int in_ndim[LOOM_OP_MAX_IN];
  int64_t in_shape[LOOM_OP_MAX_IN][LOOM_MAX_DIMS];
  loom_dtype in_dtype[LOOM_OP_MAX_IN];
  loom_tensor *saved_in[LOOM_OP_MAX_IN];   /* detached aliases, owned */
  loom_tensor *saved_out[LOOM_OP_MAX_OUT]; /* detached aliases, owned */
  unsigned saved_in_version[LOOM_OP_MAX_IN];   /* storage versions when saved */
  unsigned saved_out_version[LOOM_OP_MAX_OUT];
  bool freed;                              /* saved tensors already released */
  int consumers;                           /* nodes recorded with this node's output as an input */
  bool out_nhwc;                           /* output 0 was channels-last: its gradient comes in that layout */
  /* Set by a consumer's backward that already applied this node's dReLU
   * (CUDA DRELU_BGRAD chaining, see loom_grad_linear): the gradient this
   * node receives is dZ, and its bias gradient is given_db (owned). */
  bool gy_is_dz;
  loom_tensor *given_db;
  /* engine scratch (valid during one backward) */
  loom_tensor *pending_grad;
  int deps;
  bool gy_exclusive;                       /* backward may overwrite gy */
} loom_node;

/* Record a node for op on args whose outputs were just computed. Attaches
 * it to out[0] as grad_fn. */
loom_status loom_node_record(loom_op_id op, const loom_op_args *a);
void loom_node_release(loom_node *n);
/* Release the tensors saved for backward (after the node has run). */
void loom_node_free_saved(loom_node *n);

#endif
