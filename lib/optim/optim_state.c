/* optim_state.c — what a checkpoint saves of an optimizer and how it goes
 * back: state tensors by PyTorch's names, per-parameter update counts, and
 * the hyper-parameters as text. The keys every optimizer has (type, steps,
 * lr, parameter groups) are written and read here; the state tensors and
 * the implementation's own hyper-parameters come through its interface
 * table. Kept apart from the stepping code. */
#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "optim/optim_internal.h"
#include "optim/optim_state.h"

int loom_optim_num_params(const loom_optimizer *o) { return o ? o->n : 0; }

loom_tensor *loom_optim_param(const loom_optimizer *o, int i) {
  return (o && i >= 0 && i < o->n) ? o->params[i] : NULL;
}

int loom_optim_param_state(const loom_optimizer *o, int i, const char **names, loom_tensor **tensors) {
  if (!o || i < 0 || i >= o->n) return 0;
  return o->vt->param_state(o, i, names, tensors);
}

loom_status loom_optim_sync_counts(const loom_optimizer *o) {
  if (!o) return LOOM_OK;
  (void)loom_optimizer_steps(o); /* reads device-held counts back (CUDA: scaler-guarded steps, graph replays) */
  if (loom_optim_counts_stale(o)) return loom_error_prefix("optimizer state: reading the step counts back from the GPU");
  return LOOM_OK;
}

int64_t loom_optim_param_steps(const loom_optimizer *o, int i) {
  return (o && i >= 0 && i < o->n) ? o->param_steps[i] : 0;
}

void loom_optim_set_param_steps(loom_optimizer *o, int i, int64_t steps) {
  if (o && i >= 0 && i < o->n) o->param_steps[i] = steps;
}

loom_status loom_optim_counts_restored(loom_optimizer *o) {
  if (!o) return LOOM_OK;
#ifdef LOOM_HAVE_CUDA
  /* The device step state was seeded from the old host counts: drop it; the
   * next step builds it again from the restored ones. */
  if (o->cuda) {
    loom_cuda_opt_free(o->cuda);
    o->cuda = NULL;
  }
  o->counts_on_device = false;
#endif
  return o->vt->restored ? o->vt->restored(o) : LOOM_OK;
}

void loom_optim_put(loom_optim_hparam_writer *w, const char *key, const char *fmt, ...) {
  if (w->k < w->cap) { /* past cap: only counted, so a caller can size its array */
    snprintf(w->out[w->k].key, sizeof w->out[w->k].key, "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->out[w->k].value, sizeof w->out[w->k].value, fmt, ap);
    va_end(ap);
  }
  w->k++;
}

int loom_optim_hparams(const loom_optimizer *o, loom_optim_hparam *out, int cap) {
  if (!o) return 0;
  loom_optim_hparam_writer w = {out, cap, 0};
  loom_optim_put(&w, "type", "%s", o->vt->type);
  loom_optim_put(&w, "steps", "%lld", (long long)o->steps);
  loom_optim_put(&w, "lr", "%.17g", o->lr);
  o->vt->put_hparams(o, &w);
  /* Parameter groups (PyTorch's param_groups): their sizes, lr and weight
   * decay. "lr" above is group 0's; "weight_decay" the optimizer option that
   * new groups default to. */
  loom_optim_put(&w, "param_groups", "%d", o->n_groups);
  for (int g = 0; g < o->n_groups; g++) {
    char key[LOOM_OPTIM_KEY_MAX];
    snprintf(key, sizeof key, "param_groups.%d.params", g);
    loom_optim_put(&w, key, "%d", o->groups[g].n);
    snprintf(key, sizeof key, "param_groups.%d.lr", g);
    loom_optim_put(&w, key, "%.17g", o->groups[g].lr);
    snprintf(key, sizeof key, "param_groups.%d.weight_decay", g);
    loom_optim_put(&w, key, "%.17g", o->groups[g].weight_decay);
  }
  return w.k;
}

/* ---- restore ----------------------------------------------------------------- */

int loom_optim_parse_double(const char *s, double *out) {
  if (!s || !*s) return 0;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v)) return 0;
  *out = v;
  return 1;
}

loom_status loom_optim_need_double(loom_optim_lookup lookup, void *ctx, const char *key, double lo, double hi,
                                   double *out) {
  const char *s = lookup(ctx, key);
  if (!s) return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: optim.%s is missing", key);
  if (!loom_optim_parse_double(s, out) || !(*out >= lo && *out <= hi))
    return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: optim.%s = '%s' is not a number in [%g, %g]", key, s, lo,
                          hi);
  return LOOM_OK;
}

/* The saved groups must match o's: same count, same sizes in the same
 * order (state is matched per parameter by name; groups by position). A
 * checkpoint without groups (written before they existed) is one group. */
static loom_status groups_check(const loom_optimizer *o, loom_optim_lookup lookup, void *ctx) {
  const char *s = lookup(ctx, "param_groups");
  int64_t ng = 1;
  if (s && (!loom_parse_i64(s, &ng) || ng < 1))
    return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: optim.param_groups = '%s' is not a count", s);
  if (ng != o->n_groups)
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "optimizer state: the checkpoint's optimizer has %lld parameter group(s) but this one has %d; "
                          "create the same groups (loom_optimizer_add_param_group) before restoring",
                          (long long)ng, o->n_groups);
  if (!s) return LOOM_OK;
  for (int g = 0; g < o->n_groups; g++) {
    char key[LOOM_OPTIM_KEY_MAX];
    int64_t n;
    snprintf(key, sizeof key, "param_groups.%d.params", g);
    const char *c = lookup(ctx, key);
    if (!loom_parse_i64(c, &n) || n < 0)
      return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: optim.%s = '%s' is not a count", key,
                            c ? c : "(missing)");
    if (n != o->groups[g].n)
      return loom_set_error(LOOM_ERR_INVALID_ARG,
                            "optimizer state: parameter group %d has %lld parameters in the checkpoint but %d here", g,
                            (long long)n, o->groups[g].n);
    double v;
    snprintf(key, sizeof key, "param_groups.%d.lr", g);
    LOOM_TRY(loom_optim_need_double(lookup, ctx, key, 0, INFINITY, &v));
    snprintf(key, sizeof key, "param_groups.%d.weight_decay", g);
    LOOM_TRY(loom_optim_need_double(lookup, ctx, key, 0, INFINITY, &v));
  }
  return LOOM_OK;
}

loom_status loom_optim_hparams_check(const loom_optimizer *o, loom_optim_lookup lookup, void *ctx) {
  const char *type = lookup(ctx, "type");
  const char *mine = o->vt->type;
  if (!type) return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: optim.type is missing");
  if (strcmp(type, mine))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer state: the checkpoint holds a %s optimizer but this one is %s",
                          type, mine);
  int64_t steps;
  const char *s = lookup(ctx, "steps");
  if (!loom_parse_i64(s, &steps) || steps < 0)
    return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: optim.steps = '%s' is not a count", s ? s : "(missing)");
  double v;
  LOOM_TRY(loom_optim_need_double(lookup, ctx, "lr", 0, INFINITY, &v));
  LOOM_TRY(loom_optim_need_double(lookup, ctx, "weight_decay", 0, INFINITY, &v));
  LOOM_TRY(groups_check(o, lookup, ctx));
  return o->vt->check_hparams(o, lookup, ctx);
}

void loom_optim_hparams_apply(loom_optimizer *o, loom_optim_lookup lookup, void *ctx) {
  int64_t steps = 0;
  loom_parse_i64(lookup(ctx, "steps"), &steps);
  o->steps = steps;
  loom_optim_parse_double(lookup(ctx, "lr"), &o->lr);
  o->vt->apply_hparams(o, lookup, ctx);
  const double wd = o->vt->default_weight_decay(o);
  const bool has_groups = lookup(ctx, "param_groups") != NULL;
  for (int g = 0; g < o->n_groups; g++) {
    if (!has_groups) { /* an older single-group checkpoint: its top-level values */
      o->groups[g].lr = o->lr;
      o->groups[g].weight_decay = wd;
      continue;
    }
    char key[LOOM_OPTIM_KEY_MAX];
    snprintf(key, sizeof key, "param_groups.%d.lr", g);
    loom_optim_parse_double(lookup(ctx, key), &o->groups[g].lr);
    snprintf(key, sizeof key, "param_groups.%d.weight_decay", g);
    loom_optim_parse_double(lookup(ctx, key), &o->groups[g].weight_decay);
  }
  o->lr = o->groups[0].lr;
}
