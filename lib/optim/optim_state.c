/* optim_state.c — what a checkpoint saves of an optimizer and how it goes
 * back: state tensors by PyTorch's names, per-parameter update counts, and
 * the hyper-parameters as text. Kept apart from optimizer.c, which only
 * steps. */
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
#ifdef LOOM_HAVE_CUDA
#include "optim/optim_kernels.h"
#endif

int loom_optim_num_params(const loom_optimizer *o) { return o ? o->n : 0; }

loom_tensor *loom_optim_param(const loom_optimizer *o, int i) {
  return (o && i >= 0 && i < o->n) ? o->params[i] : NULL;
}

int loom_optim_param_state(const loom_optimizer *o, int i, const char **names, loom_tensor **tensors) {
  if (!o || i < 0 || i >= o->n) return 0;
  int k = 0;
  if (o->kind == LOOM_OPTIM_ADAMW) {
    names[k] = "exp_avg", tensors[k++] = o->buf1[i];
    names[k] = "exp_avg_sq", tensors[k++] = o->buf2[i];
  } else if (o->buf1[i]) {
    names[k] = "momentum_buffer", tensors[k++] = o->buf1[i];
  }
  return k;
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

void loom_optim_counts_restored(loom_optimizer *o) {
#ifdef LOOM_HAVE_CUDA
  /* The device step state was seeded from the old host counts: drop it; the
   * next step builds it again from the restored ones. */
  if (o && o->cuda) {
    loom_cuda_opt_free(o->cuda);
    o->cuda = NULL;
  }
  if (o) o->counts_on_device = false;
#else
  (void)o;
#endif
}

static void put(loom_optim_hparam *out, int cap, int *k, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void put(loom_optim_hparam *out, int cap, int *k, const char *key, const char *fmt, ...) {
  if (*k < cap) { /* past cap: only counted, so a caller can size its array */
    snprintf(out[*k].key, sizeof out[*k].key, "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out[*k].value, sizeof out[*k].value, fmt, ap);
    va_end(ap);
  }
  (*k)++;
}

int loom_optim_hparams(const loom_optimizer *o, loom_optim_hparam *out, int cap) {
  if (!o) return 0;
  int k = 0;
  put(out, cap, &k, "type", "%s", o->kind == LOOM_OPTIM_ADAMW ? "adamw" : "sgd");
  put(out, cap, &k, "steps", "%lld", (long long)o->steps);
  put(out, cap, &k, "lr", "%.17g", o->lr);
  if (o->kind == LOOM_OPTIM_ADAMW) {
    put(out, cap, &k, "beta1", "%.17g", o->adamw.beta1);
    put(out, cap, &k, "beta2", "%.17g", o->adamw.beta2);
    put(out, cap, &k, "eps", "%.17g", o->adamw.eps);
    put(out, cap, &k, "weight_decay", "%.17g", o->adamw.weight_decay);
  } else {
    put(out, cap, &k, "momentum", "%.17g", o->sgd.momentum);
    put(out, cap, &k, "dampening", "%.17g", o->sgd.dampening);
    put(out, cap, &k, "weight_decay", "%.17g", o->sgd.weight_decay);
    put(out, cap, &k, "nesterov", "%d", o->sgd.nesterov ? 1 : 0);
  }
  /* Parameter groups (PyTorch's param_groups): their sizes, lr and weight
   * decay. "lr" above is group 0's; "weight_decay" the optimizer option that
   * new groups default to. */
  put(out, cap, &k, "param_groups", "%d", o->n_groups);
  for (int g = 0; g < o->n_groups; g++) {
    char key[LOOM_OPTIM_KEY_MAX];
    snprintf(key, sizeof key, "param_groups.%d.params", g);
    put(out, cap, &k, key, "%d", o->groups[g].n);
    snprintf(key, sizeof key, "param_groups.%d.lr", g);
    put(out, cap, &k, key, "%.17g", o->groups[g].lr);
    snprintf(key, sizeof key, "param_groups.%d.weight_decay", g);
    put(out, cap, &k, key, "%.17g", o->groups[g].weight_decay);
  }
  return k;
}

/* ---- restore ----------------------------------------------------------------- */

static int parse_double(const char *s, double *out) {
  if (!s || !*s) return 0;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v)) return 0;
  *out = v;
  return 1;
}

/* The saved value of key as a double, or an error naming it. */
static loom_status need_double(loom_optim_lookup lookup, void *ctx, const char *key, double lo, double hi,
                               double *out) {
  const char *s = lookup(ctx, key);
  if (!s) return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: optim.%s is missing", key);
  if (!parse_double(s, out) || !(*out >= lo && *out <= hi))
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
    LOOM_TRY(need_double(lookup, ctx, key, 0, INFINITY, &v));
    snprintf(key, sizeof key, "param_groups.%d.weight_decay", g);
    LOOM_TRY(need_double(lookup, ctx, key, 0, INFINITY, &v));
  }
  return LOOM_OK;
}

loom_status loom_optim_hparams_check(const loom_optimizer *o, loom_optim_lookup lookup, void *ctx) {
  const char *type = lookup(ctx, "type");
  const char *mine = o->kind == LOOM_OPTIM_ADAMW ? "adamw" : "sgd";
  if (!type) return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: optim.type is missing");
  if (strcmp(type, mine))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer state: the checkpoint holds a %s optimizer but this one is %s",
                          type, mine);
  int64_t steps;
  const char *s = lookup(ctx, "steps");
  if (!loom_parse_i64(s, &steps) || steps < 0)
    return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: optim.steps = '%s' is not a count", s ? s : "(missing)");
  double v;
  LOOM_TRY(need_double(lookup, ctx, "lr", 0, INFINITY, &v));
  LOOM_TRY(need_double(lookup, ctx, "weight_decay", 0, INFINITY, &v));
  LOOM_TRY(groups_check(o, lookup, ctx));
  if (o->kind == LOOM_OPTIM_ADAMW) {
    LOOM_TRY(need_double(lookup, ctx, "beta1", 0, nextafter(1.0, 0.0), &v));
    LOOM_TRY(need_double(lookup, ctx, "beta2", 0, nextafter(1.0, 0.0), &v));
    LOOM_TRY(need_double(lookup, ctx, "eps", 1e-300, INFINITY, &v));
  } else {
    double m;
    LOOM_TRY(need_double(lookup, ctx, "momentum", 0, INFINITY, &m));
    LOOM_TRY(need_double(lookup, ctx, "dampening", 0, INFINITY, &v));
    const char *nv = lookup(ctx, "nesterov");
    if (!nv || (strcmp(nv, "0") && strcmp(nv, "1")))
      return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: optim.nesterov = '%s' is not 0 or 1",
                            nv ? nv : "(missing)");
    double damp = v;
    if (!strcmp(nv, "1") && (m <= 0 || damp != 0))
      return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: nesterov with momentum %g and dampening %g is not valid",
                            m, damp);
    /* The momentum buffers exist only when momentum > 0 (from creation). */
    if ((m > 0) != (o->sgd.momentum > 0))
      return loom_set_error(LOOM_ERR_INVALID_ARG,
                            "optimizer state: the checkpoint's SGD has momentum %g but this optimizer was created with "
                            "momentum %g; create it with %s momentum",
                            m, o->sgd.momentum, m > 0 ? "a non-zero" : "zero");
  }
  return LOOM_OK;
}

void loom_optim_hparams_apply(loom_optimizer *o, loom_optim_lookup lookup, void *ctx) {
  int64_t steps = 0;
  loom_parse_i64(lookup(ctx, "steps"), &steps);
  o->steps = steps;
  parse_double(lookup(ctx, "lr"), &o->lr);
  if (o->kind == LOOM_OPTIM_ADAMW) {
    o->adamw.lr = o->lr;
    parse_double(lookup(ctx, "beta1"), &o->adamw.beta1);
    parse_double(lookup(ctx, "beta2"), &o->adamw.beta2);
    parse_double(lookup(ctx, "eps"), &o->adamw.eps);
    parse_double(lookup(ctx, "weight_decay"), &o->adamw.weight_decay);
  } else {
    o->sgd.lr = o->lr;
    parse_double(lookup(ctx, "momentum"), &o->sgd.momentum);
    parse_double(lookup(ctx, "dampening"), &o->sgd.dampening);
    parse_double(lookup(ctx, "weight_decay"), &o->sgd.weight_decay);
    o->sgd.nesterov = !strcmp(lookup(ctx, "nesterov"), "1");
  }
  const double wd = o->kind == LOOM_OPTIM_ADAMW ? o->adamw.weight_decay : o->sgd.weight_decay;
  const bool has_groups = lookup(ctx, "param_groups") != NULL;
  for (int g = 0; g < o->n_groups; g++) {
    if (!has_groups) { /* an older single-group checkpoint: its top-level values */
      o->groups[g].lr = o->lr;
      o->groups[g].weight_decay = wd;
      continue;
    }
    char key[LOOM_OPTIM_KEY_MAX];
    snprintf(key, sizeof key, "param_groups.%d.lr", g);
    parse_double(lookup(ctx, key), &o->groups[g].lr);
    snprintf(key, sizeof key, "param_groups.%d.weight_decay", g);
    parse_double(lookup(ctx, key), &o->groups[g].weight_decay);
  }
  o->lr = o->groups[0].lr;
  if (o->kind == LOOM_OPTIM_ADAMW) o->adamw.lr = o->lr;
  else o->sgd.lr = o->lr;
}
