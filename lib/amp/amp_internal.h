/* amp_internal.h (internal) — what lib/amp shares with nn/, optim/ and its
 * own kernels: the per-module policy record, the master -> low-precision copy
 * link, the one-pass unscale over all gradients, and the hook that lets the
 * fused optimizer step refresh the copies. */
#ifndef LOOM_AMP_INTERNAL_H
#define LOOM_AMP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include "loom/amp.h"
#include "amp/unscale_kernels.h"
#include "optim/optim_kernels.h"
#include "tensor/tensor_internal.h"

/* Stored in loom_module.policy (plain malloc memory; module.c frees it). */
typedef struct loom_amp_policy {
  loom_precision precision;
  bool keep_last_fp32;   /* as requested on the module it was set on */
  bool fp32_layer;       /* this Linear is the kept-f32 last layer */
} loom_amp_policy;

/* The Linear forward under a policy (called by lib/nn/linear.c). */
struct loom_module;
loom_tensor *loom_amp_linear_forward(struct loom_module *m, loom_tensor *x);

/* The copy linked to master (borrowed) or NULL. */
loom_tensor *loom_amp_copy_of(const loom_tensor *master);

/* One pass over the gradients of params (f32 masters): for a master with a
 * low-precision copy that has a gradient, master.grad (=|+=) copy.grad *
 * inv_scale in f32, then the copy's gradient is dropped (consumed); for a
 * master with its own f32 gradient, grad *= inv_scale in place (skipped when
 * inv_scale == 1 and !check). With check, *found_inf says whether any
 * resulting value is inf or NaN (on a GPU that is a read-back: the loss
 * scaler uses the _device form instead). table (CUDA): where the work list
 * stays in device memory between calls (the caller owns it; may be NULL). */
struct loom_dev_table;
loom_status loom_amp_unscale_grads(loom_tensor *const *params, int n, float inv_scale, bool check, bool *found_inf,
                                   struct loom_dev_table **table);
#ifdef LOOM_HAVE_CUDA
/* The same pass with scale and verdict on the GPU: the kernel reads the
 * inverse scale from *inv_dev and ORs "a non-finite value was written" into
 * *found_dev. Nothing waits for the GPU. */
loom_status loom_amp_unscale_grads_device(loom_tensor *const *params, int n, const float *inv_dev, int32_t *found_dev,
                                          struct loom_dev_table **table);
#endif
/* Drop the gradients of the copies of params (optimizer zero_grad). */
void loom_amp_zero_copy_grads(loom_tensor *const *params, int n);
/* After loom_optimizer_fill_group: point g->lowp at the copies of the
 * parameters in g (same order), so the fused step refreshes them. lowp has
 * room for n entries. Leaves g->lowp NULL when no parameter has a copy. */
struct loom_optimizer;
loom_status loom_amp_fill_lowp(struct loom_optimizer *o, loom_param_group *g, uint16_t **lowp);

#endif
