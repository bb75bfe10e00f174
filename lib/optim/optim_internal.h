/* optim_internal.h (internal) — the optimizer object, shared with lib/amp. */
#ifndef LOOM_OPTIM_INTERNAL_H
#define LOOM_OPTIM_INTERNAL_H

#include "loom/optim.h"
#include "optim/lr_eval.h"
#include "optim/optim_kernels.h"
#include "tensor/tensor_internal.h"

enum { LOOM_OPTIM_SGD = 1, LOOM_OPTIM_ADAMW = 2 };

/* A parameter group: params[first .. first + n) of the optimizer (groups are
 * consecutive and in order, group 0 starting at 0), with its own lr and
 * weight decay; every other hyper-parameter is the optimizer's (sgd/adamw
 * below). Checkpoints save and restore these fields as they are. */
typedef struct loom_optim_group {
  int first, n;
  double lr;
  double weight_decay;
} loom_optim_group;

struct loom_optimizer {
  int kind;
  int n;
  loom_device device;
  loom_tensor **params;   /* borrowed */
  loom_tensor **buf1;     /* owned state: momentum / exp_avg */
  loom_tensor **buf2;     /* owned state: exp_avg_sq */
  double lr;              /* group 0's lr (kept equal to groups[0].lr) */
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
    int *grp;  /* CUDA: the group of each gathered entry */
  } scratch;
  loom_sgd_options sgd;
  loom_adamw_options adamw;
  loom_optim_group *groups;  /* n_groups >= 1 */
  int n_groups;
  int cap;                   /* room in the per-parameter arrays */
  /* CUDA: the device-resident step state (counts, tables; optim_cuda.c),
   * and whether the device counts have moved ahead of steps/param_steps
   * (steps the loss scaler may have skipped on the GPU): then the host
   * copies are refreshed by a read-back when someone asks for them. */
  struct loom_opt_cuda *cuda;
  bool counts_on_device;
  int64_t synced_replays;  /* loom_graph_replay_count() when the host copies were last current */
  /* CUDA: where the gather of the copies' gradients keeps its work list. */
  struct loom_dev_table *gather_table;
  /* Optimizer offload (loom_adamw_offload_new, optim_offload.c): the state
   * lives with host copies of the parameters (host_params, owned), stepped
   * by offload_inner on the CPU; this object keeps no state of its own. */
  struct loom_optimizer *offload_inner;
  loom_tensor **host_params;
  /* An attached LR schedule (loom_optimizer_set_schedule): each step takes
   * the lr of sched_step, then counts it, taken or skipped. On CUDA the
   * device keeps its own copy of the position (so graph replays advance
   * it); sched_reseed asks the next CUDA step to overwrite that copy. */
  bool has_sched, sched_reseed;
  loom_lr_schedule sched;
  int64_t sched_step;
};

/* CUDA: the host's step counts may be behind the device's (scaler-guarded
 * steps, graph replays); loom_optimizer_steps brings them home. */
bool loom_optim_counts_stale(const loom_optimizer *o);

/* lr_schedule.c: a schedule's fields in the shared formula's form. */
loom_lr_params loom_lr_params_of(const loom_lr_schedule *s);
/* A step the loss scaler skipped without calling the optimizer (the CPU
 * path): an attached schedule still moves on, as PyTorch's does. */
void loom_optimizer_schedule_skip(loom_optimizer *o);

/* optim_offload.c: a host copy of parameter p (f32, contiguous, no scope). */
loom_tensor *loom_offload_param_copy(loom_tensor *p);
/* Step an offloading optimizer: gradients to the host, the CPU update, the
 * parameters back to the device. */
loom_status loom_offload_optimizer_step(loom_optimizer *o, const int32_t *skip);

/* One optimizer step whose update (and count) a device flag can veto: CUDA
 * only, skip is a device word (the loss scaler's found-inf); NULL is
 * loom_optimizer_step. Nothing waits for the GPU. */
loom_status loom_optimizer_step_guarded(loom_optimizer *o, const int32_t *skip);

/* Gather the parameters that have gradients into g (arrays of o->n). */
/* idx[k] receives the parameter index of entry k. */
loom_status loom_optimizer_fill_group(loom_optimizer *o, loom_param_group *g, float **pp, const float **gp, float **b1,
                                      float **b2, int64_t *numel, int *idx);
/* One fused update of g (parameters of group grp), whose parameters have all
 * had prior_steps updates. */
loom_status loom_optimizer_step_group(loom_optimizer *o, loom_param_group *g, int64_t prior_steps,
                                      const loom_optim_group *grp);

#endif
