/* optim_kernels.h (internal) — fused multi-tensor optimizer updates. One
 * call updates every parameter of a group (one launch on the GPU). All
 * buffers are f32 and contiguous; lowp (optional) receives a rounded copy of
 * each updated parameter (mixed precision: refreshed inside the step). */
#ifndef LOOM_OPTIM_KERNELS_H
#define LOOM_OPTIM_KERNELS_H

#include <stdint.h>
#include "loom/device.h"
#include "loom/dtype.h"
#include "optim/lr_eval.h"

typedef struct loom_param_group {
  int n;
  float **param;
  const float **grad;
  float **buf1;         /* SGD momentum / AdamW exp_avg (NULL entries allowed for SGD without momentum) */
  float **buf2;         /* AdamW exp_avg_sq */
  uint16_t **lowp;      /* NULL or per-param f16/bf16 copies (entries may be NULL) */
  loom_dtype lowp_dtype;
  const int64_t *numel;
  /* CPU, mixed precision: NULL or per-param 16-bit gradients (entries may
   * be NULL) of dtype grad16_dtype not yet in grad: each block widens its
   * part into grad as it updates (the AVX2 runs in registers, storing grad
   * as they go; the portable loops first, then read it from cache), as
   * loom_amp_unscale_grads_deferred arranged. */
  const uint16_t **grad16;
  loom_dtype grad16_dtype;
} loom_param_group;

typedef struct loom_sgd_hparams {
  float lr, momentum, dampening, weight_decay;
  int nesterov;
  int first_step;       /* momentum buffer starts as the gradient */
} loom_sgd_hparams;

typedef struct loom_adamw_hparams {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1, bias_correction2;  /* 1 - beta^t */
} loom_adamw_hparams;

loom_status loom_cpu_sgd_step(const loom_param_group *g, const loom_sgd_hparams *h);
loom_status loom_cpu_adamw_step(const loom_param_group *g, const loom_adamw_hparams *h);
#if defined(LOOM_HAVE_CUDA)
/* Implemented in lib/optim/cuda/optim_cuda.c: one update launch for the whole
 * group (plus a tiny count commit), on the device's current stream, reading
 * a parameter table kept in device memory. The step's changing state lives
 * on the device (loom_opt_cuda): per-parameter update counts replace
 * h->first_step and h->bias_correction*, and a device skip flag (the loss
 * scaler's found-inf) can veto the whole update without the host knowing. */
typedef struct loom_opt_cuda loom_opt_cuda;
#define LOOM_OPT_CUDA_MAX_GROUPS 8  /* = LOOM_CU_OPT_MAX_GROUPS (cuda/optim_launch.h) */
typedef struct loom_opt_cuda_args {
  loom_opt_cuda **state;        /* the optimizer's; created at its first CUDA step */
  int n_params;                 /* parameters of the optimizer */
  const int *param_index;       /* group entry k is parameter param_index[k] */
  const int64_t *host_counts;   /* per-parameter counts and ... */
  int64_t host_steps;           /* ... step count that seed a new state */
  double beta1, beta2;          /* AdamW's, in double (the bias-correction tables) */
  const int32_t *skip;          /* device flag: nonzero skips the update; NULL: never */
  /* Parameter groups: entry k belongs to group group_of[k] (< n_groups <=
   * LOOM_OPT_CUDA_MAX_GROUPS), whose lr and weight decay are group_lr/wd[];
   * group_of NULL: every entry uses h's lr and weight_decay. */
  const int *group_of;
  int n_groups;
  const float *group_lr, *group_wd;
  /* An attached schedule (NULL: none): every group's lr is evaluated on the
   * device from the device's schedule position, which advances every step,
   * skipped or not; sched_reseed: first set that position to sched_step. */
  const loom_lr_params *sched;
  int64_t sched_step;
  bool sched_reseed;
} loom_opt_cuda_args;
loom_status loom_cuda_sgd_step(loom_device dev, const loom_param_group *g, const loom_sgd_hparams *h,
                               const loom_opt_cuda_args *a);
loom_status loom_cuda_adamw_step(loom_device dev, const loom_param_group *g, const loom_adamw_hparams *h,
                                 const loom_opt_cuda_args *a);
/* Read the device counts back (waits for the GPU): counts[n_params], *steps. */
loom_status loom_cuda_opt_counts(loom_opt_cuda *s, int64_t *counts, int64_t *steps);
/* Uploads of the parameter table so far (tests: 1 in a steady loop). */
int64_t loom_cuda_opt_table_uploads(const loom_opt_cuda *s);
void loom_cuda_opt_free(loom_opt_cuda *s);
#endif

#endif
