/* optim_internal.h (internal) — the optimizer object: the header every
 * optimizer embeds as its first member (struct loom_optimizer: the
 * parameters in groups, their counts, the lr schedule), and the interface
 * table through which the generic code (optimizer.c, optim_state.c,
 * scaled_step.c) reaches an implementation: SGD and AdamW (sgd.c, adamw.c
 * on fused.c's shared machinery) and the offload wrapper (optim_offload.c),
 * which owns an inner optimizer. */
#ifndef LOOM_OPTIM_INTERNAL_H
#define LOOM_OPTIM_INTERNAL_H

#include "loom/optim.h"
#include "optim/lr_eval.h"
#include "optim/optim_kernels.h"
#include "optim/optim_state.h"
#include "tensor/tensor_internal.h"

/* A parameter group: params[first .. first + n) of the optimizer (groups are
 * consecutive and in order, group 0 starting at 0), with its own lr and
 * weight decay; every other hyper-parameter is the implementation's.
 * Checkpoints save and restore these fields as they are. */
typedef struct loom_optim_group {
  int first, n;
  double lr;
  double weight_decay;
} loom_optim_group;

typedef struct loom_optimizer_vtable loom_optimizer_vtable;

/* Where put_hparams writes (optim_state.c): the first cap entries of out,
 * counting all of them in k (so a caller can size its array). */
typedef struct loom_optim_hparam_writer {
  loom_optim_hparam *out;
  int cap, k;
} loom_optim_hparam_writer;

struct loom_optimizer {
  const loom_optimizer_vtable *vt;
  int n;
  loom_device device;
  loom_tensor **params;   /* borrowed */
  /* State tensors kept beside the parameters, on their device (SGD's
   * momentum / AdamW's exp_avg, and AdamW's exp_avg_sq); owned, NULL
   * entries where an implementation keeps none there (SGD without momentum;
   * the offload wrapper, whose state is on the host). */
  loom_tensor **buf1;
  loom_tensor **buf2;
  double lr;              /* group 0's lr (kept equal to groups[0].lr) */
  int64_t steps;           /* step() calls that updated something */
  int64_t *param_steps;    /* updates applied to each parameter */
  loom_optim_group *groups;  /* n_groups >= 1 */
  int n_groups;
  int cap;                   /* room in the per-parameter arrays above */
  /* CUDA: the device-resident step state of an implementation that steps
   * on the GPU (counts, tables; cuda/optim_cuda.c), and whether the device
   * counts have moved ahead of steps/param_steps (steps the loss scaler may
   * have skipped on the GPU): then the host copies are refreshed by a
   * read-back when someone asks for them. NULL when it never stepped there. */
  struct loom_opt_cuda *cuda;
  bool counts_on_device;
  int64_t synced_replays;  /* loom_graph_replay_count() when the host copies were last current */
  /* An attached LR schedule (loom_optimizer_set_schedule): each step takes
   * the lr of sched_step, then counts it, taken or skipped. On CUDA the
   * device keeps its own copy of the position (so graph replays advance
   * it); sched_reseed asks the next CUDA step to overwrite that copy. */
  bool has_sched, sched_reseed;
  loom_lr_schedule sched;
  int64_t sched_step;
};

/* What an optimizer implementation provides. The generic code validates
 * arguments first (NULL optimizer, group index, finite values, parameters)
 * and calls these only with valid ones. */
struct loom_optimizer_vtable {
  /* Its kind as checkpoints name it (optim.type): "sgd", "adamw". */
  const char *type;
  /* One update of every parameter that has a gradient, counted in steps and
   * param_steps; skip: a device word that vetoes it (CUDA, the loss
   * scaler's found-inf), NULL for an ordinary step. */
  loom_status (*step)(loom_optimizer *o, const int32_t *skip);
  /* Drop every parameter's gradient. */
  loom_status (*zero_grad)(loom_optimizer *o);
  /* Set group g's lr / weight decay (g < 0: every group's); the header's
   * fields are the truth, loom_optim_base_set_lr/_weight_decay write them. */
  void (*set_lr)(loom_optimizer *o, int g, double lr);
  void (*set_weight_decay)(loom_optimizer *o, int g, double weight_decay);
  /* Append params (checked: new, contiguous f32 leaves on o->device) as a
   * group; on failure o is unchanged. */
  loom_status (*add_group)(loom_optimizer *o, loom_tensor *const *params, int n, double lr, double weight_decay);
  /* The weight decay a new group gets when its options leave it out. */
  double (*default_weight_decay)(const loom_optimizer *o);
  /* ---- state, for checkpoints (optim_state.c adds steps, lr and groups) ---- */
  /* Parameter i's state tensors by PyTorch's names (see optim_state.h). */
  int (*param_state)(const loom_optimizer *o, int i, const char **names, loom_tensor **tensors);
  /* The implementation's own hyper-parameters: written with loom_optim_put,
   * checked and applied from a saved set (after the generic keys). */
  void (*put_hparams)(const loom_optimizer *o, loom_optim_hparam_writer *w);
  loom_status (*check_hparams)(const loom_optimizer *o, loom_optim_lookup lookup, void *ctx);
  void (*apply_hparams)(loom_optimizer *o, loom_optim_lookup lookup, void *ctx);
  /* After a restore wrote the parameters, the state tensors and the header
   * (counts, lr, groups): NULL, or follow them (the offload wrapper brings
   * its inner optimizer and host copies along). */
  loom_status (*restored)(loom_optimizer *o);
  /* Release everything, o included. */
  void (*free)(loom_optimizer *o);
};

/* ---- the generic step (optimizer.c) ------------------------------------------------ */

/* One optimizer step whose update (and count) a device flag can veto: CUDA
 * only, skip is a device word (the loss scaler's found-inf); NULL is
 * loom_optimizer_step. Nothing waits for the GPU. */
loom_status loom_optimizer_step_guarded(loom_optimizer *o, const int32_t *skip);
/* A step the loss scaler skipped without calling the optimizer (the CPU
 * path): an attached schedule still moves on, as PyTorch's does. */
void loom_optimizer_schedule_skip(loom_optimizer *o);
/* CUDA: the host's step counts may be behind the device's (scaler-guarded
 * steps, graph replays); loom_optimizer_steps brings them home. */
bool loom_optim_counts_stale(const loom_optimizer *o);

/* ---- the header, for implementations (optimizer.c) -------------------------------- */

/* Every parameter a group may hold: a contiguous f32 leaf on dev, not
 * already among the first `have` parameters of o (o may be NULL). */
loom_status loom_optim_check_params(const char *who, const loom_optimizer *o, int have, loom_tensor *const *params,
                                    int n, loom_device dev);
/* Fill the header of a new optimizer (zeroed memory) for params[0]'s
 * device, with lr as group 0's lr to be. */
void loom_optim_base_init(loom_optimizer *o, const loom_optimizer_vtable *vt, loom_device dev, double lr);
/* Room for `need` parameters in the header's per-parameter arrays. */
loom_status loom_optim_reserve(loom_optimizer *o, int need);
/* Append params as a new group with nbufs (0..2) zeroed state tensors each
 * on o->device (buf1, then buf2). On failure o is unchanged. */
loom_status loom_optim_append_group(loom_optimizer *o, loom_tensor *const *params, int n, double lr, double wd,
                                    int nbufs);
/* Remove the last group (undo of an append whose second half failed). */
void loom_optim_pop_group(loom_optimizer *o);
/* The default set_lr / set_weight_decay: write the header. */
void loom_optim_base_set_lr(loom_optimizer *o, int g, double lr);
void loom_optim_base_set_weight_decay(loom_optimizer *o, int g, double weight_decay);
/* Drop the gradients of o's parameters and of their low-precision copies. */
void loom_optim_zero_param_grads(loom_optimizer *o);
/* Release what the header owns (state tensors, arrays, CUDA step state);
 * not o itself. */
void loom_optim_base_release(loom_optimizer *o);

/* ---- hyper-parameters as text, for implementations (optim_state.c) -------------- */

/* Write key = the formatted value (doubles as %.17g: they round-trip). */
void loom_optim_put(loom_optim_hparam_writer *w, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* s as a finite double into *out: 1, or 0 (and *out untouched). */
int loom_optim_parse_double(const char *s, double *out);
/* The saved value of key as a double in [lo, hi], or an error naming it. */
loom_status loom_optim_need_double(loom_optim_lookup lookup, void *ctx, const char *key, double lo, double hi,
                                   double *out);

/* optim_offload.c: the inner optimizer of an offload wrapper (borrowed; its
 * parameters are the host copies), NULL for any other optimizer. */
loom_optimizer *loom_optim_offload_inner(const loom_optimizer *o);

/* lr_schedule.c: a schedule's fields in the shared formula's form. */
loom_lr_params loom_lr_params_of(const loom_lr_schedule *s);

#endif
