/* optim_state.h (internal) — the optimizer's state in a form checkpoints can
 * name and restore without knowing the optimizer's struct: per-parameter
 * state tensors under PyTorch's names (exp_avg, exp_avg_sq,
 * momentum_buffer), per-parameter update counts, and the hyper-parameters
 * and counters as key/value text ("type", "lr", "beta1", ...). */
#ifndef LOOM_OPTIM_STATE_H
#define LOOM_OPTIM_STATE_H

#include <stdint.h>
#include "loom/optim.h"

#define LOOM_OPTIM_MAX_SLOTS 2
#define LOOM_OPTIM_KEY_MAX 48
#define LOOM_OPTIM_VALUE_MAX 40

typedef struct loom_optim_hparam {
  char key[LOOM_OPTIM_KEY_MAX];
  char value[LOOM_OPTIM_VALUE_MAX];
} loom_optim_hparam;

/* Number of parameters and parameter i (borrowed). */
int loom_optim_num_params(const loom_optimizer *o);
loom_tensor *loom_optim_param(const loom_optimizer *o, int i);
/* The state tensors of parameter i: writes up to LOOM_OPTIM_MAX_SLOTS
 * (name, tensor) pairs (borrowed; f32, the parameter's shape); returns how
 * many. */
int loom_optim_param_state(const loom_optimizer *o, int i, const char **names, loom_tensor **tensors);
/* Bring step counts a GPU step kept on the device back to the host (a
 * wait); call before reading steps and per-parameter counts. */
loom_status loom_optim_sync_counts(const loom_optimizer *o);
int64_t loom_optim_param_steps(const loom_optimizer *o, int i);
/* Hyper-parameters and counters as text (doubles with 17 significant
 * digits, so they round-trip exactly): writes the first cap (out may be NULL
 * when cap is 0) and returns how many there are in all. */
int loom_optim_hparams(const loom_optimizer *o, loom_optim_hparam *out, int cap);

/* Restore. lookup(ctx, key) returns the saved text or NULL. check verifies
 * that every value parses, is valid, and that the type and the set of state
 * buffers match o; apply writes them (after check passed) together with the
 * per-parameter update counts. */
typedef const char *(*loom_optim_lookup)(void *ctx, const char *key);
loom_status loom_optim_hparams_check(const loom_optimizer *o, loom_optim_lookup lookup, void *ctx);
void loom_optim_hparams_apply(loom_optimizer *o, loom_optim_lookup lookup, void *ctx);
void loom_optim_set_param_steps(loom_optimizer *o, int i, int64_t steps);
/* After the hyper-parameters were applied and every count was set: forget
 * device copies of the old counts, and let the implementation follow the
 * restored values. */
loom_status loom_optim_counts_restored(loom_optimizer *o);

#endif
