/* graph_step.c — warm up, capture once, replay (graph_step.h). */
#include "graph_step.h"

#include <stdio.h>

static void drop_outputs(graph_step *gs) {
  loom_tensor_release(gs->loss);
  loom_tensor_release(gs->logits);
  gs->loss = gs->logits = NULL;
}

static int capture(graph_step *gs, const char *prog, loom_tensor **loss, loom_tensor **logits) {
  if (loom_graph_capture_begin(gs->dev, &gs->g) != LOOM_OK) {
    fprintf(stderr, "%s: --cuda-graph: %s\n", prog, loom_last_error());
    return 1;
  }
  loom_scope_begin();
  loom_tensor *l = NULL, *z = NULL;
  loom_status st = gs->fn(gs->ctx, &l, &z);
  /* The outputs are the graph's static buffers: ours beyond this scope. */
  gs->loss = l ? loom_tensor_retain(l) : NULL;
  gs->logits = z ? loom_tensor_retain(z) : NULL;
  loom_scope_end();
  loom_status end = loom_graph_capture_end(gs->g);
  if (st != LOOM_OK || end != LOOM_OK) {
    fprintf(stderr, "%s: --cuda-graph: capturing the training step failed: %s\n", prog, loom_last_error());
    return 1;
  }
  /* A CUDA capture only recorded the step: run it. The CPU's ran it. */
  gs->replaying = gs->dev.kind == LOOM_CUDA;
  if (gs->replaying && loom_graph_replay(gs->g) != LOOM_OK) {
    fprintf(stderr, "%s: --cuda-graph: replay: %s\n", prog, loom_last_error());
    return 1;
  }
  *loss = gs->loss;
  *logits = gs->logits;
  return 0;
}

/* An owned tensor like t: its shape, dtype and device, and NHWC strides when
 * t is a channels-last image batch (what the loader delivers then). */
static loom_tensor *buffer_like(loom_tensor *t) {
  loom_tensor *b;
  if (loom_tensor_ndim(t) == 4 && !loom_tensor_is_contiguous(t) && loom_tensor_is_channels_last(t)) {
    int64_t nhwc[4] = {loom_tensor_dim(t, 0), loom_tensor_dim(t, 2), loom_tensor_dim(t, 3), loom_tensor_dim(t, 1)};
    static const int to_nchw[4] = {0, 3, 1, 2};
    loom_tensor *base = loom_empty(4, nhwc, loom_tensor_dtype(t), loom_tensor_device(t));
    b = base ? loom_permute(base, to_nchw) : NULL;
  } else {
    b = loom_empty_like(t);
  }
  return b ? loom_tensor_retain(b) : NULL;  /* beyond the caller's scope */
}

int graph_step_next_batch(graph_step *gs, loom_loader *l, const char *prog, loom_tensor **x, loom_tensor **y) {
  *x = *y = NULL;
  if (gs->x) {
    int64_t n = 0;
    if (loom_loader_next_into(l, gs->x, gs->y, &n) != LOOM_OK) {
      fprintf(stderr, "%s: training loader: %s\n", prog, loom_last_error());
      return 1;
    }
    if (n) *x = gs->x, *y = gs->y;
    return 0;
  }
  loom_tensor *bx = NULL, *by = NULL;
  if (loom_loader_next(l, &bx, &by) != LOOM_OK) {
    fprintf(stderr, "%s: training loader: %s\n", prog, loom_last_error());
    return 1;
  }
  if (!bx) return 0;
  gs->x = buffer_like(bx);
  gs->y = by ? buffer_like(by) : NULL;
  if (!gs->x || (by && !gs->y) || loom_copy_(gs->x, bx) != LOOM_OK || (by && loom_copy_(gs->y, by) != LOOM_OK)) {
    fprintf(stderr, "%s: --cuda-graph input buffers: %s\n", prog, loom_last_error());
    return 1;
  }
  *x = gs->x, *y = gs->y;
  return 0;
}

int graph_step_run(graph_step *gs, const char *prog, loom_tensor **loss, loom_tensor **logits) {
  *loss = *logits = NULL;
  int64_t k = gs->steps++;
  if (k == gs->warmup) return capture(gs, prog, loss, logits);
  if (gs->replaying) {
    if (loom_graph_replay(gs->g) != LOOM_OK) {
      fprintf(stderr, "%s: --cuda-graph: replay: %s\n", prog, loom_last_error());
      return 1;
    }
    *loss = gs->loss;
    *logits = gs->logits;
    return 0;
  }
  if (gs->fn(gs->ctx, loss, logits) != LOOM_OK) {
    fprintf(stderr, "%s: training step: %s\n", prog, loom_last_error());
    return 1;
  }
  if (gs->g) {  /* CPU, the step after the check: its zero_grad let go of the capture's gradients */
    drop_outputs(gs);
    loom_graph_free(gs->g);
    gs->g = NULL;
  }
  return 0;
}

void graph_step_report(const graph_step *gs, const char *prog) {
  if (gs->replaying)
    printf("%s: cuda graph: step %d captured (%.1f MiB private pool), %lld steps replayed\n", prog, gs->warmup,
           (double)loom_graph_pool_reserved(gs->g) / (1 << 20), (long long)(gs->steps - gs->warmup));
  else if (gs->steps > gs->warmup)
    printf("%s: cuda graph: the CPU has no graphs; step %d was captured to check it is capture-safe (it is) and every "
           "step ran eagerly from the static input buffers\n", prog, gs->warmup);
}

void graph_step_close(graph_step *gs) {
  if (gs->opt) loom_optimizer_zero_grad(gs->opt);
  drop_outputs(gs);
  loom_tensor_release(gs->x);
  loom_tensor_release(gs->y);
  gs->x = gs->y = NULL;
}

void graph_step_free(graph_step *gs) {
  loom_graph_free(gs->g);
  gs->g = NULL;
  gs->replaying = false;
}
