/* checkpoint.c — activation checkpointing (loom_checkpoint): run a segment
 * of the forward pass without recording it, so none of its intermediates
 * outlive it, and record one node that keeps only the segment's inputs. Its
 * backward recomputes the segment with grad on, from the same random state
 * (a thread-local replay of the global generator: dropout masks come out
 * identical and the global generator does not move), and backpropagates
 * through the recomputed graph: parameters used inside the segment receive
 * their gradients there (as leaves of that inner graph, hooks included), the
 * segment's inputs become this node's input gradients. Ops with side
 * effects ask loom_checkpoint_recomputing() (tensor/grad_mode.h, below the
 * ops that ask) to skip them the second time (batch norm does not update
 * its running statistics again). */
#include <stdlib.h>

#include "autograd/node.h"
#include "core/rng_replay.h"
#include "loom/autograd.h"
#include "tensor/grad_mode.h"
#include "tensor/tensor_internal.h"
#include "core/sys.h"

typedef struct ckpt {
  loom_checkpoint_fn fn;
  void *ctx;
  uint64_t rng_seed, rng_offset;  /* where the forward pass drew from */
} ckpt;

static void ckpt_free(void *p) { loom_sys_free(p); }

/* A new header over t's memory that belongs to no scope and no graph. */
static loom_tensor *detached(const loom_tensor *t) {
  return loom_tensor_new_header(t->storage, t->offset, t->dtype, t->ndim, t->shape, t->strides);
}

static loom_status ckpt_backward(loom_node *nd, loom_tensor *gy, loom_tensor **gx) {
  ckpt *c = nd->custom_ctx;
  loom_tensor *in[LOOM_OP_MAX_IN] = {0};
  loom_status st = LOOM_OK;
  for (int k = 0; k < nd->n_in && st == LOOM_OK; k++) {
    in[k] = detached(nd->saved_in[k]);
    if (!in[k]) st = loom_set_error(LOOM_ERR_OOM, "checkpoint backward: out of host memory");
    else in[k]->requires_grad = nd->needs_grad[k];
  }
  if (st == LOOM_OK) {
    bool prev = loom_set_grad_enabled(true);
    loom_rng_replay saved;
    loom_rng_replay_begin(c->rng_seed, c->rng_offset, &saved);
    loom_scope_begin();
    loom_checkpoint_recompute_enter();
    loom_tensor *y = c->fn(c->ctx, nd->n_in, in);
    loom_checkpoint_recompute_leave();
    loom_rng_replay_end(&saved);
    if (!y) {
      st = loom_last_status() != LOOM_OK ? loom_last_status()
                                          : loom_set_error(LOOM_ERR_INTERNAL, "the function returned NULL");
      loom_error_prefix("checkpoint: recomputing the segment in backward");
    } else if (y->grad_fn || y->requires_grad) {
      /* Nothing inside requiring grad leaves y without a graph: then the
       * segment contributes no gradient, and the inputs get zeros below. */
      st = loom_backward_with(y, gy);
      if (st != LOOM_OK) loom_error_prefix("checkpoint: backward through the recomputed segment");
    }
    loom_scope_end();  /* the recomputed intermediates go here */
    loom_set_grad_enabled(prev);
  }
  for (int k = 0; k < nd->n_in && st == LOOM_OK; k++) {
    if (!nd->needs_grad[k]) continue;
    if (in[k]->grad) {
      gx[k] = loom_tensor_adopt(loom_tensor_retain(in[k]->grad));
      if (!gx[k]) st = loom_last_status();
    } else {  /* the output does not depend on this input */
      gx[k] = loom_full(in[k]->ndim, in[k]->shape, 0.0, in[k]->dtype, in[k]->storage->device);
      if (!gx[k]) st = loom_last_status();
    }
  }
  for (int k = 0; k < LOOM_OP_MAX_IN; k++) loom_tensor_release(in[k]);
  return st;
}

static const loom_node_custom g_ckpt = {"checkpoint", ckpt_backward, ckpt_free};

loom_tensor *loom_checkpoint(loom_checkpoint_fn fn, void *ctx, int n, loom_tensor *const *inputs) {
  if (!fn || n < 1 || n > LOOM_OP_MAX_IN || !inputs) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "checkpoint: needs a function and 1 to %d inputs (got %s, %d inputs); pack "
                   "more into fewer tensors or capture them in ctx", LOOM_OP_MAX_IN, fn ? "a function" : "NULL", n);
    return NULL;
  }
  for (int k = 0; k < n; k++)
    if (!inputs[k]) {
      if (loom_last_status() == LOOM_OK) loom_set_error(LOOM_ERR_NULL_INPUT, "checkpoint: input %d is NULL", k);
      return NULL;
    }
  if (!loom_is_grad_enabled()) return fn(ctx, n, inputs);  /* nothing to save anyway */
  ckpt *c = loom_sys_malloc(sizeof *c);
  if (!c) {
    loom_set_error(LOOM_ERR_OOM, "checkpoint: out of host memory");
    return NULL;
  }
  c->fn = fn;
  c->ctx = ctx;
  loom_rng_global_peek(&c->rng_seed, &c->rng_offset);
  bool prev = loom_set_grad_enabled(false);
  loom_scope_begin();
  loom_tensor *y = fn(ctx, n, inputs), *out = NULL;
  /* A fresh header for the result: fn may hand back one of its inputs (an
   * identity, e.g. dropout in eval mode), whose own graph must stay. */
  if (y) out = detached(y);
  loom_scope_end();  /* the segment's intermediates die here */
  loom_set_grad_enabled(prev);
  if (!out) {
    loom_sys_free(c);
    if (y) loom_set_error(LOOM_ERR_OOM, "checkpoint: out of host memory");
    else if (loom_last_status() == LOOM_OK) loom_set_error(LOOM_ERR_INVALID_ARG, "checkpoint: the function returned NULL");
    else loom_error_prefix("checkpoint");
    return NULL;
  }
  loom_op_args a = {.n_in = n, .out = {out}, .n_out = 1};
  for (int k = 0; k < n; k++) a.in[k] = inputs[k];
  if (loom_node_record_custom(&g_ckpt, c, &a) != LOOM_OK) {
    loom_tensor_release(out);
    return NULL;
  }
  return loom_tensor_adopt(out);
}
