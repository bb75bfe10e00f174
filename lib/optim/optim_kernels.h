/* optim_kernels.h (internal) — fused multi-tensor optimizer updates. One
 * call updates every parameter of a group (one launch on the GPU). All
 * buffers are f32 and contiguous; lowp (optional) receives a rounded copy of
 * each updated parameter (mixed precision: refreshed inside the step). */
#ifndef LOOM_OPTIM_KERNELS_H
#define LOOM_OPTIM_KERNELS_H

#include <stdint.h>
#include "loom/device.h"
#include "loom/dtype.h"

typedef struct loom_param_group {
  int n;
  float **param;
  const float **grad;
  float **buf1;         /* SGD momentum / AdamW exp_avg (NULL entries allowed for SGD without momentum) */
  float **buf2;         /* AdamW exp_avg_sq */
  uint16_t **lowp;      /* NULL or per-param f16/bf16 copies (entries may be NULL) */
  loom_dtype lowp_dtype;
  const int64_t *numel;
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
/* Implemented in lib/ops/cuda (one kernel launch for the whole group, on the
 * device's current stream; pointer arrays are device-visible copies made by
 * the implementation). */
loom_status loom_cuda_sgd_step(loom_device dev, const loom_param_group *g, const loom_sgd_hparams *h);
loom_status loom_cuda_adamw_step(loom_device dev, const loom_param_group *g, const loom_adamw_hparams *h);
#endif

#endif
