/* param_groups.c — optimizers made from a model with the usual two
 * parameter groups: weights that decay, and batch-norm parameters and biases
 * that do not (loom_module_split_decay decides which is which). */
#include <stdlib.h>

#include "loom/nn.h"
#include "loom/optim.h"
#include "core/error.h"
#include "core/struct_size.h"
#include "core/sys.h"

typedef struct split_params {
  loom_tensor **decay, **no_decay;
  int n_decay, n_no_decay;
} split_params;

static loom_status split_of(const loom_module *m, split_params *s) {
  if (!m) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer for module: module is NULL");
  int n = loom_module_num_params(m);
  if (n <= 0) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer for module: %s has no parameters", loom_module_name(m));
  s->decay = loom_sys_malloc((size_t)n * sizeof *s->decay);
  s->no_decay = loom_sys_malloc((size_t)n * sizeof *s->no_decay);
  if (!s->decay || !s->no_decay) return loom_set_error(LOOM_ERR_OOM, "optimizer for module: out of host memory");
  return loom_module_split_decay(m, s->decay, &s->n_decay, s->no_decay, &s->n_no_decay);
}

/* o made over the decay group; append the no-decay group with weight_decay 0.
 * A model with nothing to decay (only biases and norms) gets one group with
 * weight decay 0. */
static loom_optimizer *finish(loom_optimizer *o, split_params *s, bool swapped) {
  if (o && !swapped && s->n_no_decay > 0) {
    loom_param_group_options g;
    loom_param_group_options_init(&g);
    g.weight_decay = 0.0;
    if (loom_optimizer_add_param_group(o, s->no_decay, s->n_no_decay, &g) != LOOM_OK) {
      loom_optimizer_free(o);
      o = NULL;
    }
  }
  loom_sys_free(s->decay);
  loom_sys_free(s->no_decay);
  return o;
}

loom_optimizer *loom_sgd_new_for_module(const loom_module *m, const loom_sgd_options *opt) {
  split_params s = {0};
  if (split_of(m, &s) != LOOM_OK) return finish(NULL, &s, false);
  loom_sgd_options o;
  loom_sgd_options_init(&o);
  if (LOOM_STRUCT_IN("sgd_new_for_module", loom_sgd_options, &o, opt) != LOOM_OK) return finish(NULL, &s, false);
  bool swapped = s.n_decay == 0;
  if (swapped) o.weight_decay = 0.0;
  loom_tensor **p = swapped ? s.no_decay : s.decay;
  int n = swapped ? s.n_no_decay : s.n_decay;
  return finish(loom_sgd_new(p, n, &o), &s, swapped);
}

loom_optimizer *loom_adamw_new_for_module(const loom_module *m, const loom_adamw_options *opt) {
  split_params s = {0};
  if (split_of(m, &s) != LOOM_OK) return finish(NULL, &s, false);
  loom_adamw_options o;
  loom_adamw_options_init(&o);
  if (LOOM_STRUCT_IN("adamw_new_for_module", loom_adamw_options, &o, opt) != LOOM_OK) return finish(NULL, &s, false);
  bool swapped = s.n_decay == 0;
  if (swapped) o.weight_decay = 0.0;
  loom_tensor **p = swapped ? s.no_decay : s.decay;
  int n = swapped ? s.n_no_decay : s.n_decay;
  return finish(loom_adamw_new(p, n, &o), &s, swapped);
}
