/* optim.h — optimizers (SGD, AdamW) and learning-rate schedules.
 *
 * An optimizer holds borrowed parameter tensors (they must outlive it) and
 * its own state. step() updates every parameter that has a gradient, in
 * place, without recording autograd. Options structs carry their size so
 * they can grow: fill them from the *_defaults() functions.
 *
 * Threads: an optimizer is used by one thread at a time. */
#ifndef LOOM_OPTIM_H
#define LOOM_OPTIM_H

#include "tensor.h"

LOOM_EXTERN_C_BEGIN

typedef struct loom_optimizer loom_optimizer;

typedef struct loom_sgd_options {
  uint32_t size;          /* sizeof(loom_sgd_options) */
  double lr;              /* 0.01 */
  double momentum;        /* 0 */
  double dampening;       /* 0 */
  double weight_decay;    /* 0 (L2, added to the gradient) */
  bool nesterov;          /* false; needs momentum > 0 and dampening == 0 */
} loom_sgd_options;

typedef struct loom_adamw_options {
  uint32_t size;          /* sizeof(loom_adamw_options) */
  double lr;              /* 1e-3 */
  double beta1, beta2;    /* 0.9, 0.999 */
  double eps;             /* 1e-8 */
  double weight_decay;    /* 0.01 (decoupled) */
} loom_adamw_options;

LOOM_API loom_sgd_options loom_sgd_defaults(void);
LOOM_API loom_adamw_options loom_adamw_defaults(void);
LOOM_API loom_optimizer *loom_sgd_new(loom_tensor *const *params, int n, const loom_sgd_options *opt);
LOOM_API loom_optimizer *loom_adamw_new(loom_tensor *const *params, int n, const loom_adamw_options *opt);
/* AdamW whose state (exp_avg, exp_avg_sq) and update live on the host:
 * step() copies each gradient to host memory, updates host f32 copies of
 * the parameters on the CPU and copies them back, so the device holds only
 * the parameters and their gradients (loom-mnist --offload-optimizer). The
 * results equal loom_adamw_new's on the CPU. Ordinary host memory and
 * synchronous copies for now (not pinned, not overlapped); f32 parameters
 * without low-precision copies; the loss scaler's device-side skip is not
 * supported (step() refuses it). */
LOOM_API loom_optimizer *loom_adamw_offload_new(loom_tensor *const *params, int n, const loom_adamw_options *opt);
LOOM_API loom_status loom_optimizer_step(loom_optimizer *o);
/* Drop every parameter's gradient. */
LOOM_API loom_status loom_optimizer_zero_grad(loom_optimizer *o);
LOOM_API void loom_optimizer_set_lr(loom_optimizer *o, double lr);
LOOM_API double loom_optimizer_get_lr(const loom_optimizer *o);
LOOM_API int64_t loom_optimizer_steps(const loom_optimizer *o);
LOOM_API void loom_optimizer_free(loom_optimizer *o);

/* Append-only. */
typedef enum loom_lr_kind {
  LOOM_LR_CONSTANT = 0,
  LOOM_LR_STEP = 1,         /* base * gamma^(floor(step / step_size)) */
  LOOM_LR_COSINE = 2,       /* linear warm-up, then cosine from base to min_lr */
} loom_lr_kind;

typedef struct loom_lr_schedule {
  uint32_t size;            /* sizeof(loom_lr_schedule) */
  int32_t kind;             /* loom_lr_kind */
  double base_lr;
  int64_t warmup_steps;     /* all kinds: linear ramp from 0 to base over warmup */
  int64_t step_size;        /* STEP */
  double gamma;             /* STEP */
  int64_t total_steps;      /* COSINE */
  double min_lr;            /* COSINE */
} loom_lr_schedule;

LOOM_API loom_lr_schedule loom_lr_constant(double lr);
LOOM_API loom_lr_schedule loom_lr_step(double lr, int64_t step_size, double gamma);
LOOM_API loom_lr_schedule loom_lr_cosine(double lr, int64_t warmup_steps, int64_t total_steps, double min_lr);
/* The learning rate for step (0-based). */
LOOM_API double loom_lr_at(const loom_lr_schedule *s, int64_t step);

LOOM_EXTERN_C_END
#endif
