/* grad_mode.c — per-thread grad mode, and the per-thread flag that says a
 * checkpointed segment is being recomputed. Both are plain thread state
 * that ops read (dispatch records only with grad on; batch norm skips its
 * running-statistics update while recomputing), so they live below ops;
 * autograd sets them (loom_checkpoint, loom_backward). */
#include "tensor/grad_mode.h"

static _Thread_local int tl_grad_disabled;

bool loom_set_grad_enabled(bool enabled) {
  bool prev = !tl_grad_disabled;
  tl_grad_disabled = !enabled;
  return prev;
}

bool loom_is_grad_enabled(void) { return !tl_grad_disabled; }

/* > 0 while a segment is recomputed on this thread (nested checkpoints nest). */
static _Thread_local int tl_recomputing;

int loom_checkpoint_recomputing(void) { return tl_recomputing > 0; }

void loom_checkpoint_recompute_enter(void) { tl_recomputing++; }

void loom_checkpoint_recompute_leave(void) { tl_recomputing--; }
