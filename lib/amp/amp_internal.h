/* amp_internal.h (internal) — what lib/amp offers the layers above it, all
 * on parameter lists (amp knows neither modules nor optimizers): the master
 * -> low-precision copy link and its upkeep (lib/nn's precision policy), the
 * one-pass unscale over all gradients (lib/optim's step), the loss scaler's
 * side of a scaled step (lib/optim/scaled_step.c), and the found-inf hook
 * of data parallelism (lib/dist). */
#ifndef LOOM_AMP_INTERNAL_H
#define LOOM_AMP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include "loom/amp.h"
#include "amp/unscale_kernels.h"
#include "tensor/tensor_internal.h"

/* ---- master -> low-precision copy ------------------------------------------------ */

/* The copy linked to master (borrowed) or NULL. */
loom_tensor *loom_amp_copy_of(const loom_tensor *master);
/* Give every master of params a copy of dtype dt (reusing one of that
 * dtype), up to date with the master. Stops at the first failure (errors
 * name set_precision, the entry that makes copies). */
loom_status loom_amp_make_copies(loom_tensor *const *params, int n, loom_dtype dt);
/* Drop the copies of params (the masters that have one). */
void loom_amp_drop_copies(loom_tensor *const *params, int n);
/* Re-cast every master of params that has a copy into it (no autograd). */
loom_status loom_amp_refresh_copies(loom_tensor *const *params, int n);

/* ---- unscale ---------------------------------------------------------------------- */

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
/* The CPU optimizer's form of loom_amp_unscale_grads(params, n, 1, false,
 * NULL, NULL): where a master without a gradient gets it from its copy's
 * dense 16-bit gradient, the master's f32 gradient is allocated but left
 * unwritten, defer[i] (n entries) pointing at the copy's gradient (all of
 * one dtype, *defer_dt; LOOM_F32 when none), which stays alive: the update
 * widens it block by block while the block is in cache (optim_kernels.h,
 * grad16) instead of a separate pass through memory. The other entries
 * are NULL and handled as loom_amp_unscale_grads does. On failure nothing
 * is left deferred. */
loom_status loom_amp_unscale_grads_deferred(loom_tensor *const *params, int n, const uint16_t **defer,
                                            loom_dtype *defer_dt);
/* After the update: drop the deferred copies' gradients (consumed), having
 * first widened them into the masters' gradients when widen (an update
 * that did not run). Clears defer. */
void loom_amp_deferred_finish(loom_tensor *const *params, int n, const uint16_t **defer, loom_dtype dt, bool widen);
/* Drop the gradients of the copies of params (optimizer zero_grad). */
void loom_amp_zero_copy_grads(loom_tensor *const *params, int n);

/* ---- the loss scaler's side of a scaled step ------------------------------------- */

/* params (n, on dev) are the parameters of one stepping party (an
 * optimizer: owner identifies it, so that an unscale and the step that
 * follows must be for the same one). */

/* loom_scaler_unscale for a parameter list: unscale + finite check now
 * (once per step), *found_inf (may be NULL) the verdict. */
loom_status loom_amp_scaler_unscale(loom_grad_scaler *s, loom_tensor *const *params, int n, loom_device dev,
                                    const void *owner, bool *found_inf);

/* How the step between loom_amp_scaler_step_begin and _end goes. */
typedef enum loom_amp_step_kind {
  LOOM_AMP_STEP_PLAIN,   /* scaler disabled: an ordinary step, and no _end call */
  LOOM_AMP_STEP_HOST,    /* the verdict is on the host: step unless found_inf (then skip) */
  LOOM_AMP_STEP_DEVICE,  /* the verdict is the device word skip_dev: a step it vetoes */
} loom_amp_step_kind;
typedef struct loom_amp_step {
  loom_amp_step_kind kind;
  bool found_inf;           /* HOST */
  const int32_t *skip_dev;  /* DEVICE */
} loom_amp_step;

/* Before the step: unscale + finite check unless loom_amp_scaler_unscale
 * ran for owner this step, and say how the step goes (*out). */
loom_status loom_amp_scaler_step_begin(loom_grad_scaler *s, loom_tensor *const *params, int n, loom_device dev,
                                       const void *owner, loom_amp_step *out);
/* After the step was taken (or, HOST with found_inf, skipped): the scale
 * update, and *skipped (may be NULL; on a GPU asking for it waits). Not
 * called when the step failed. */
loom_status loom_amp_scaler_step_end(loom_grad_scaler *s, const loom_amp_step *step, bool *skipped);

/* Data parallelism (lib/dist): a callback the scaler calls right after each
 * unscale + finite check, to agree the found-inf flag across ranks (every
 * rank then skips, or steps, together). On the host path found_inf is the
 * host flag (found_dev NULL); on the CUDA path found_dev is the scaler's
 * int32 flag in device memory on dev (found_inf NULL), to be reduced in
 * stream order without a host wait. NULL fn detaches. */
typedef loom_status (*loom_amp_found_inf_reduce)(void *user, bool *found_inf, int32_t *found_dev, loom_device dev);
void loom_amp_scaler_set_found_inf_reduce(loom_grad_scaler *s, loom_amp_found_inf_reduce fn, void *user);

#endif
