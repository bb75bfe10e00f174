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
  /* A node that is not an op-table op (op is LOOM_OP_COUNT): its own
   * backward and name (loom_checkpoint); ctx is freed with the saved tensors. */
  const struct loom_node_custom *custom;
  void *custom_ctx;
  /* Activation offload (offload.c): saved tensors now held as host copies,
   * bit k for saved_in[k], bit 8 + k for saved_out[k]; their device. */
  unsigned offloaded;
  loom_device offload_dev;
  /* engine scratch (valid during one backward) */
  loom_tensor *pending_grad;
  int deps;
  bool gy_exclusive;                       /* backward may overwrite gy */
} loom_node;

typedef struct loom_node_custom {
  const char *name;
  /* Like an op's backward rule: gx[k] for each input that needs grad,
   * tensors of the engine's open scope. */
  loom_status (*backward)(loom_node *n, loom_tensor *gy, loom_tensor **gx);
  void (*free_ctx)(void *ctx);
} loom_node_custom;

/* Make ops record into autograd (their recorder hook, ops/record.h) and
 * tensors release their grad_fn through loom_node_release. Idempotent; see
 * node.c for when it runs. */
void loom_autograd_install(void);
/* Record a custom node on args whose outputs were just computed (op-table
 * ops are recorded through the hook): every input is saved; ctx belongs to
 * the node from here on (freed by c->free_ctx, also when recording fails).
 * Attaches it to out[0] as grad_fn. */
loom_status loom_node_record_custom(const loom_node_custom *c, void *ctx, const loom_op_args *a);
/* offload.c: inside a loom_offload region on this thread? */
int loom_offload_active(void);
/* A contiguous host copy of t (not in any scope), or NULL (t not
 * contiguous, or out of memory: the caller keeps t on its device). */
loom_tensor *loom_offload_to_host(loom_tensor *t);
/* Bring n's offloaded saved tensors back to their device (no-op when none). */
loom_status loom_offload_prefetch(loom_node *n);

/* The node's name for messages (its op's, or the custom one's). */
const char *loom_node_name(const loom_node *n);
void loom_node_release(loom_node *n);
/* Release the tensors saved for backward (after the node has run). */
void loom_node_free_saved(loom_node *n);

#endif
