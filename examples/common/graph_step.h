/* graph_step.h — the trainers' --cuda-graph driver. The first `warmup`
 * steps run eagerly (the optimizer's state, the loss scaler's device state
 * and the allocator settle), the next one is captured whole (forward,
 * backward, unscale, optimizer step: loom/graph.h) and every later step is
 * one graph replay. The step reads the caller's static input buffers, which
 * the loader fills before each step (loom_loader_next_into); the LR
 * schedule must be attached to the optimizer (loom_optimizer_set_schedule)
 * and the loss scaler decides skips on the device, so a replay needs no
 * host call but its launch.
 * On the CPU there are no graphs: the captured step still checks that the
 * step is capture-safe (capture executes it there), then every step runs
 * eagerly from the same static buffers; the result is the eager run's. */
#ifndef LOOM_EXAMPLES_GRAPH_STEP_H
#define LOOM_EXAMPLES_GRAPH_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include <loom/loom.h>

/* One training step; *loss and *logits (logits may be NULL) live in the
 * innermost scope. */
typedef loom_status (*graph_step_fn)(void *ctx, loom_tensor **loss, loom_tensor **logits);

typedef struct graph_step {
  loom_device dev;
  int warmup;               /* eager steps before the capture */
  graph_step_fn fn;
  void *ctx;
  loom_optimizer *opt;      /* its gradients were made in the capture */
  /* state */
  int64_t steps;
  loom_graph *g;
  bool replaying;           /* a CUDA graph is ready */
  loom_tensor *loss, *logits;  /* the captured step's outputs (owned) */
  loom_tensor *x, *y;          /* the static inputs (owned), made like the first batch */
} graph_step;

/* The next training batch in the static input buffers: the first call
 * takes a batch from the loader and makes the buffers like it (shape,
 * dtype, device, channels-last or not); later ones have the loader write
 * into them (loom_loader_next_into). *x / *y: the buffers, or NULL at the
 * end of an epoch. Returns 0, or 1 after printing why. */
int graph_step_next_batch(graph_step *gs, loom_loader *l, const char *prog, loom_tensor **x, loom_tensor **y);

/* Run the next step; *loss / *logits: its outputs (valid until the next
 * call; do not release). Returns 0, or 1 after printing why (prog: for
 * messages). */
int graph_step_run(graph_step *gs, const char *prog, loom_tensor **loss, loom_tensor **logits);
/* Say what happened (one line on stdout). */
void graph_step_report(const graph_step *gs, const char *prog);
/* Release the captured step's outputs, the static inputs and the gradients
 * made in the capture (the optimizer must still be alive). */
void graph_step_close(graph_step *gs);
/* Free the graph and its private pool: after the optimizer is freed (on a
 * GPU its kernel-argument table was allocated during the capture). */
void graph_step_free(graph_step *gs);

#endif
