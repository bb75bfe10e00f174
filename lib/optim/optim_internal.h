/* optim_internal.h (internal) — the optimizer object, shared with lib/amp. */
#ifndef LOOM_OPTIM_INTERNAL_H
#define LOOM_OPTIM_INTERNAL_H

#include "loom/optim.h"
#include "optim/optim_kernels.h"
#include "tensor/tensor_internal.h"

enum { LOOM_OPTIM_SGD = 1, LOOM_OPTIM_ADAMW = 2 };

struct loom_optimizer {
  int kind;
  int n;
  loom_device device;
  loom_tensor **params;   /* borrowed */
  loom_tensor **buf1;     /* owned state: momentum / exp_avg */
  loom_tensor **buf2;     /* owned state: exp_avg_sq */
  double lr;
  int64_t steps;           /* step() calls that updated something */
  int64_t *param_steps;    /* updates applied to each parameter */
  /* Per-step group arrays, allocated once (an optimizer is driven by one
   * thread at a time, so step() can reuse them). */
  struct {
    float **pp, **b1, **b2;
    const float **gp;
    int64_t *numel;
    uint16_t **lowp;
    int *idx;
  } scratch;
  loom_sgd_options sgd;
  loom_adamw_options adamw;
  /* CUDA: the device-resident step state (counts, tables; optim_cuda.c),
   * and whether the device counts have moved ahead of steps/param_steps
   * (steps the loss scaler may have skipped on the GPU): then the host
   * copies are refreshed by a read-back when someone asks for them. */
  struct loom_opt_cuda *cuda;
  bool counts_on_device;
  /* CUDA: where the gather of the copies' gradients keeps its work list. */
  struct loom_dev_table *gather_table;
};

/* One optimizer step whose update (and count) a device flag can veto: CUDA
 * only, skip is a device word (the loss scaler's found-inf); NULL is
 * loom_optimizer_step. Nothing waits for the GPU. */
loom_status loom_optimizer_step_guarded(loom_optimizer *o, const int32_t *skip);

/* Gather the parameters that have gradients into g (arrays of o->n). */
/* idx[k] receives the parameter index of entry k. */
loom_status loom_optimizer_fill_group(loom_optimizer *o, loom_param_group *g, float **pp, const float **gp, float **b1,
                                      float **b2, int64_t *numel, int *idx);
/* One fused update of g, whose parameters have all had prior_steps updates. */
loom_status loom_optimizer_step_group(loom_optimizer *o, loom_param_group *g, int64_t prior_steps);

#endif
