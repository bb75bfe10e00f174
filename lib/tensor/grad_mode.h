/* grad_mode.h (internal) — the thread state beside grad mode (grad mode
 * itself is public: loom/tensor.h). */
#ifndef LOOM_TENSOR_GRAD_MODE_H
#define LOOM_TENSOR_GRAD_MODE_H

#include "loom/tensor.h"

/* Is a checkpointed segment being recomputed (in backward) on this thread?
 * Ops with side effects skip them then (batch norm's running statistics
 * were updated by the forward pass already). */
int loom_checkpoint_recomputing(void);
/* loom_checkpoint's backward brackets its recomputation with these. */
void loom_checkpoint_recompute_enter(void);
void loom_checkpoint_recompute_leave(void);

#endif
