/* optim.h — optimizers (SGD, AdamW), parameter groups and learning-rate
 * schedules.
 *
 * An optimizer holds borrowed parameter tensors (they must outlive it) and
 * its own state. step() updates every parameter that has a gradient, in
 * place, without recording autograd. Options structs start with their
 * struct_size so they can grow: initialize them with their
 * loom_X_options_init function, then change the fields you need.
 *
 * Parameter groups (as PyTorch's param_groups): the parameters given at
 * creation are group 0, with the options' lr and weight_decay; more groups
 * are appended with loom_optimizer_add_param_group, each with its own lr and
 * weight_decay (the other hyper-parameters are the optimizer's). Each group
 * is one fused update per step. loom_optimizer_set_lr sets every group's lr
 * (what a schedule does); loom_optimizer_set_group_lr sets one.
 * loom_sgd_new_for_module / loom_adamw_new_for_module make the usual two
 * groups from a model: weights with weight decay, and BatchNorm parameters
 * and biases without it.
 *
 * Failures: a training step (forward, loom_backward, loom_scaler_step /
 * loom_optimizer_step) that returns an error leaves the parameters, the
 * optimizer's state and the loss scaler exactly as they were, so the same
 * step can simply be retried (tests/test_fault_sweep.c: every allocation
 * failed in turn, compared bit for bit with an unfaulted run). What a failed
 * step may have changed: gradients (zero_grad resets them) and BatchNorm's
 * running statistics (updated by the forward before the failure).
 *
 * Threads: an optimizer is used by one thread at a time. */
#ifndef LOOM_OPTIM_H
#define LOOM_OPTIM_H

#include "tensor.h"
#include "amp.h"

LOOM_EXTERN_C_BEGIN

typedef struct loom_optimizer loom_optimizer;

typedef struct loom_sgd_options {
  size_t struct_size;     /* sizeof(loom_sgd_options) */
  double lr;              /* 0.01 */
  double momentum;        /* 0 */
  double dampening;       /* 0 */
  double weight_decay;    /* 0 (L2, added to the gradient) */
  bool nesterov;          /* false; needs momentum > 0 and dampening == 0 */
} loom_sgd_options;

typedef struct loom_adamw_options {
  size_t struct_size;     /* sizeof(loom_adamw_options) */
  double lr;              /* 1e-3 */
  double beta1, beta2;    /* 0.9, 0.999 */
  double eps;             /* 1e-8 */
  double weight_decay;    /* 0.01 (decoupled) */
} loom_adamw_options;

/* Set struct_size and every default (noted beside each field). */
LOOM_API void loom_sgd_options_init(loom_sgd_options *o);
LOOM_API void loom_adamw_options_init(loom_adamw_options *o);
/* opt NULL: the defaults. */
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
/* Set every group's lr; get_lr returns group 0's. */
LOOM_API void loom_optimizer_set_lr(loom_optimizer *o, double lr);
LOOM_API double loom_optimizer_get_lr(const loom_optimizer *o);
LOOM_API int64_t loom_optimizer_steps(const loom_optimizer *o);
LOOM_API void loom_optimizer_free(loom_optimizer *o);

/* ---- parameter groups ------------------------------------------------------ */
typedef struct loom_param_group_options {
  size_t struct_size;     /* sizeof(loom_param_group_options) */
  double lr;              /* NAN (the default): group 0's current lr */
  double weight_decay;    /* NAN (the default): the optimizer's weight_decay option */
} loom_param_group_options;

LOOM_API void loom_param_group_options_init(loom_param_group_options *o);
/* Append a group of n parameters (f32 leaves on the optimizer's device, none
 * already in the optimizer); opt NULL: defaults. Their state starts empty, as
 * for parameters that never had a gradient. */
LOOM_API loom_status loom_optimizer_add_param_group(loom_optimizer *o, loom_tensor *const *params, int n,
                                                    const loom_param_group_options *opt);
LOOM_API int loom_optimizer_num_groups(const loom_optimizer *o);
/* Number of parameters in group g (0 if g is out of range). */
LOOM_API int loom_optimizer_group_num_params(const loom_optimizer *o, int g);
LOOM_API loom_status loom_optimizer_set_group_lr(loom_optimizer *o, int g, double lr);
LOOM_API double loom_optimizer_get_group_lr(const loom_optimizer *o, int g);          /* NAN if g is out of range */
LOOM_API loom_status loom_optimizer_set_group_weight_decay(loom_optimizer *o, int g, double weight_decay);
LOOM_API double loom_optimizer_get_group_weight_decay(const loom_optimizer *o, int g); /* NAN if g is out of range */

/* Clip gradients by their global L2 norm (torch.nn.utils.clip_grad_norm_,
 * norm_type 2): norm = sqrt(sum over the n parameters' gradients of their
 * squares); when max_norm / (norm + 1e-6) < 1 every gradient is scaled by
 * it in place. *total_norm (may be NULL) gets the norm before clipping.
 * Parameters without a gradient are skipped. A non-finite norm is returned
 * and leaves the gradients as they are (PyTorch would scale them to NaN).
 * max_norm must be >= 0. Reads the norm back to the host (one sync per
 * parameter on a GPU). */
LOOM_API loom_status loom_clip_grad_norm(loom_tensor *const *params, int n, double max_norm, double *total_norm);

/* Two groups from a model's parameters (loom_module_split_decay): group 0
 * the weights of convolutions and linear layers, with opt's weight_decay;
 * group 1 BatchNorm weights and biases and every bias, with weight decay 0
 * (left out when empty). NULL + error on failure. */
typedef struct loom_module loom_module;
LOOM_API loom_optimizer *loom_sgd_new_for_module(const loom_module *m, const loom_sgd_options *opt);
LOOM_API loom_optimizer *loom_adamw_new_for_module(const loom_module *m, const loom_adamw_options *opt);

/* Append-only. */
typedef enum loom_lr_kind {
  LOOM_LR_CONSTANT = 0,
  LOOM_LR_STEP = 1,         /* base * gamma^(floor(step / step_size)) */
  LOOM_LR_COSINE = 2,       /* linear warm-up, then cosine from base to min_lr */
  LOOM_LR_ONE_CYCLE = 3,    /* PyTorch's OneCycleLR (cos): warm-up from base/div_factor up to base,
                               then down to base/(div_factor*final_div_factor) at total_steps - 1 */
} loom_lr_kind;

typedef struct loom_lr_schedule {
  size_t struct_size;       /* sizeof(loom_lr_schedule) */
  int32_t kind;             /* loom_lr_kind */
  double base_lr;
  int64_t warmup_steps;     /* CONSTANT, STEP, COSINE: linear ramp from 0 to base over warmup;
                               ONE_CYCLE: the first phase of the cycle */
  int64_t step_size;        /* STEP */
  double gamma;             /* STEP */
  int64_t total_steps;      /* COSINE, ONE_CYCLE */
  double min_lr;            /* COSINE */
  double div_factor;        /* ONE_CYCLE: initial lr = base / div_factor (25) */
  double final_div_factor;  /* ONE_CYCLE: final lr = initial / final_div_factor (1e4) */
} loom_lr_schedule;

LOOM_API loom_lr_schedule loom_lr_constant(double lr);
LOOM_API loom_lr_schedule loom_lr_step(double lr, int64_t step_size, double gamma);
LOOM_API loom_lr_schedule loom_lr_cosine(double lr, int64_t warmup_steps, int64_t total_steps, double min_lr);
/* One cycle over total_steps with max_lr as base_lr: its warm-up takes
 * warmup_steps (PyTorch's pct_start * total_steps) and is part of the cycle
 * (cosine-shaped, not the linear ramp of the other kinds). Same values as
 * torch.optim.lr_scheduler.OneCycleLR(max_lr, total_steps, pct_start,
 * anneal_strategy='cos', div_factor, final_div_factor) at each step. */
LOOM_API loom_lr_schedule loom_lr_one_cycle(double max_lr, int64_t warmup_steps, int64_t total_steps,
                                            double div_factor, double final_div_factor);
/* The learning rate for step (0-based). */
LOOM_API double loom_lr_at(const loom_lr_schedule *s, int64_t step);

/* Attach a schedule to the optimizer (s NULL detaches; s is copied): from
 * then on every loom_optimizer_step, and every step the loss scaler skips,
 * sets each group's lr to the schedule's value at the next position (as
 * loom_optimizer_set_lr would; a set_lr in between is overridden) and moves
 * the position on by one. `step` is the position of the next step: 0 for a
 * new run, the restored step count after loading a checkpoint. On a GPU the
 * lr is evaluated on the device from a device-side position, so a captured
 * CUDA graph (graph.h) replays every step with that step's lr and no host
 * call; loom_optimizer_get_lr then tells the lr of the last step the host
 * itself ran (replays run without it). Errors: a bad s->struct_size,
 * step < 0. */
LOOM_API loom_status loom_optimizer_set_schedule(loom_optimizer *o, const loom_lr_schedule *s, int64_t step);

/* ---- loss-scaled steps (the dynamic loss scaler of amp.h) ------------------ */

/* Optional, before step: unscale the gradients of o's parameters now (e.g. to
 * clip them) and report whether any is non-finite. step() then does not
 * unscale again. */
LOOM_API loom_status loom_scaler_unscale(loom_grad_scaler *s, loom_optimizer *o, bool *found_inf);
/* Unscale + finite check (unless unscale() ran this step), then either the
 * optimizer step or a skipped step, then the scale update. *skipped (may be
 * NULL) says which. A skipped step is not an error. */
LOOM_API loom_status loom_scaler_step(loom_grad_scaler *s, loom_optimizer *o, bool *skipped);

LOOM_EXTERN_C_END
#endif
