/* autograd.h — reverse-mode automatic differentiation.
 *
 * Ops on tensors that require grad are recorded (each result points at the
 * node that made it; nodes are numbered in the order they were recorded, so
 * the graph is also a tape). loom_backward(loss) walks it in reverse order,
 * accumulates into each leaf's .grad, fires the leaf's grad-ready hook as
 * soon as that leaf's gradient is complete, and frees each node's saved
 * tensors as soon as the node has run.
 *
 * Threads: grad mode is per thread; a graph belongs to the thread that
 * recorded it. */
#ifndef LOOM_AUTOGRAD_H
#define LOOM_AUTOGRAD_H

#include "tensor.h"

LOOM_EXTERN_C_BEGIN

/* Backpropagate from a scalar (one-element) loss with d(loss) = 1. */
LOOM_API loom_status loom_backward(loom_tensor *loss);
/* Backpropagate with an explicit output gradient of the same shape. */
LOOM_API loom_status loom_backward_with(loom_tensor *out, loom_tensor *grad_out);
/* Drop t's accumulated gradient (the next backward allocates a fresh one). */
LOOM_API loom_status loom_zero_grad(loom_tensor *t);

/* Make t a leaf that requires grad (float tensors only), or stop it being
 * one (leaves only: cut a result off with loom_detach). Grad mode
 * (loom_set_grad_enabled, loom_no_grad_begin) is in tensor.h. */
LOOM_API loom_status loom_set_requires_grad(loom_tensor *t, bool requires_grad);

/* Called once per backward when the gradient of leaf t is complete. */
typedef void (*loom_grad_hook)(loom_tensor *t, loom_tensor *grad, void *user);
LOOM_API loom_status loom_set_grad_hook(loom_tensor *t, loom_grad_hook hook, void *user);

/* ---- activation checkpointing ---------------------------------------------
 * loom_checkpoint(fn, ctx, n, inputs) returns fn(ctx, n, inputs), computed
 * without recording the ops inside: the segment's intermediates are freed
 * when it returns, and only its inputs are kept for backward. Backward runs
 * fn again with grad on, from the random state the forward pass started
 * with (dropout draws the same masks; the global generator is not moved),
 * and backpropagates through that recomputation: gradients equal those of
 * the plain run. Parameters used inside fn get their gradients (and their
 * grad-ready hooks fire) during that inner backward.
 * fn: returns one new tensor (NULL with an error on failure), must compute
 * the same thing when called again, and may use parameters and ctx freely;
 * ctx must stay valid until the backward has run or the graph is freed.
 * n: 1 .. 5 inputs (NULL inputs propagate). Under no-grad it just calls fn.
 * Side effects run twice (a batch norm inside updates its running
 * statistics again in backward, as in PyTorch). Follows the scope rule. */
typedef loom_tensor *(*loom_checkpoint_fn)(void *ctx, int n, loom_tensor *const *inputs);
LOOM_API loom_tensor *loom_checkpoint(loom_checkpoint_fn fn, void *ctx, int n, loom_tensor *const *inputs);

/* ---- activation offload --------------------------------------------------
 * loom_offload(fn, ctx, n, inputs) returns fn(ctx, n, inputs), recorded as
 * usual, but every contiguous tensor the ops inside save for backward is
 * copied to host memory and only that copy is kept, so the region's device
 * activations are freed when it returns (like PyTorch's save_on_cpu);
 * backward brings them back a few nodes ahead of their use. Gradients equal
 * the plain run's. Under no-grad it just calls fn. On CUDA devices the
 * copies run on a copy stream into pinned host memory, ordered by events
 * (the host never waits); on the CPU it saves nothing and only costs the
 * copies.
 * Same fn/ctx rules as loom_checkpoint (n may be 0); follows the scope rule. */
LOOM_API loom_tensor *loom_offload(loom_checkpoint_fn fn, void *ctx, int n, loom_tensor *const *inputs);

LOOM_EXTERN_C_END
#endif
