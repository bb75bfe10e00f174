/* optimizer.c — the optimizer API every implementation shares (optim.h):
 * stepping (with an attached lr schedule), zero_grad, lr and parameter
 * groups, step counts and free, each checked here and dispatched through
 * the optimizer's interface table (optim_internal.h); and the header
 * helpers the implementations build on (parameters, groups, state slots). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "loom/autograd.h"
#include "loom/ops.h"
#include "core/capture.h"
#include "core/struct_size.h"
#include "optim/optim_internal.h"
#include "core/sys.h"

void loom_param_group_options_init(loom_param_group_options *o) {
  if (!o) return;
  *o = (loom_param_group_options){sizeof *o, NAN, NAN};
}

/* ---- the header ----------------------------------------------------------------- */

loom_status loom_optim_check_params(const char *who, const loom_optimizer *o, int have, loom_tensor *const *params,
                                    int n, loom_device dev) {
  if (!params || n <= 0) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: needs at least one parameter (got %d)", who, n);
  for (int i = 0; i < n; i++) {
    loom_tensor *p = params[i];
    if (!p) return loom_set_error(LOOM_ERR_NULL_INPUT, "%s: parameter %d is NULL", who, i);
    if (p->dtype != LOOM_F32 || !loom_tensor_is_contiguous(p) || p->grad_fn)
      return loom_set_error(LOOM_ERR_INVALID_ARG,
                            "%s: parameter %d must be a contiguous f32 leaf tensor (master weights are f32; got %s%s)",
                            who, i, loom_dtype_name(p->dtype), p->grad_fn ? ", non-leaf" : "");
    if (!loom_device_eq(p->storage->device, dev))
      return loom_set_error(LOOM_ERR_DEVICE, "%s: parameter %d is on another device than the optimizer's parameters",
                            who, i);
    for (int j = 0; j < i; j++)
      if (params[j] == p) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: parameter %d is given twice (also %d)", who, i, j);
    for (int j = 0; o && j < have; j++)
      if (o->params[j] == p)
        return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: parameter %d is already in the optimizer (parameter %d)", who, i,
                              j);
  }
  return LOOM_OK;
}

void loom_optim_base_init(loom_optimizer *o, const loom_optimizer_vtable *vt, loom_device dev, double lr) {
  o->vt = vt;
  o->device = dev;
  o->lr = lr;
}

loom_status loom_optim_reserve(loom_optimizer *o, int need) {
  if (need <= o->cap) return LOOM_OK;
  int cap = o->cap ? o->cap : 8;
  while (cap < need) cap *= 2;
#define GROW(field)                                                                  \
  do {                                                                               \
    void *np_ = loom_sys_realloc((void *)o->field, (size_t)cap * sizeof *o->field);           \
    if (!np_) return loom_set_error(LOOM_ERR_OOM, "optimizer: out of host memory");   \
    o->field = np_;                                                                  \
  } while (0)
  GROW(params);
  GROW(buf1);
  GROW(buf2);
  GROW(param_steps);
#undef GROW
  o->cap = cap;
  return LOOM_OK;
}

loom_status loom_optim_append_group(loom_optimizer *o, loom_tensor *const *params, int n, double lr, double wd,
                                    int nbufs) {
  LOOM_TRY(loom_optim_reserve(o, o->n + n));
  loom_optim_group *ng = loom_sys_realloc(o->groups, (size_t)(o->n_groups + 1) * sizeof *ng);
  if (!ng) return loom_set_error(LOOM_ERR_OOM, "optimizer: out of host memory");
  o->groups = ng;
  for (int i = 0; i < n; i++) {
    int k = o->n + i;
    o->params[k] = params[i];
    o->buf1[k] = o->buf2[k] = NULL;
    o->param_steps[k] = 0;
    for (int b = 0; b < nbufs; b++) {
      loom_tensor *t = loom_tensor_alloc_raw(params[i]->ndim, params[i]->shape, LOOM_F32, o->device);
      if (!t || loom_fill_(t, 0.0) != LOOM_OK) {
        loom_status st = loom_last_status();
        loom_tensor_release(t);
        for (int j = o->n; j <= k; j++) {
          loom_tensor_release(o->buf1[j]);
          loom_tensor_release(o->buf2[j]);
          o->buf1[j] = o->buf2[j] = NULL;
        }
        return st;
      }
      if (b == 0) o->buf1[k] = t;
      else o->buf2[k] = t;
    }
  }
  o->groups[o->n_groups++] = (loom_optim_group){o->n, n, lr, wd};
  o->n += n;
  return LOOM_OK;
}

void loom_optim_pop_group(loom_optimizer *o) {
  if (o->n_groups <= 1) return;  /* group 0 stays for the optimizer's life */
  const loom_optim_group *g = &o->groups[--o->n_groups];
  for (int k = g->first; k < g->first + g->n; k++) {
    loom_tensor_release(o->buf1[k]);
    loom_tensor_release(o->buf2[k]);
    o->buf1[k] = o->buf2[k] = NULL;
  }
  o->n = g->first;
}

void loom_optim_base_set_lr(loom_optimizer *o, int g, double lr) {
  for (int k = g < 0 ? 0 : g; k < (g < 0 ? o->n_groups : g + 1); k++) o->groups[k].lr = lr;
  if (g <= 0) o->lr = lr;
}

void loom_optim_base_set_weight_decay(loom_optimizer *o, int g, double wd) {
  for (int k = g < 0 ? 0 : g; k < (g < 0 ? o->n_groups : g + 1); k++) o->groups[k].weight_decay = wd;
}

void loom_optim_zero_param_grads(loom_optimizer *o) {
  for (int i = 0; i < o->n; i++) loom_zero_grad(o->params[i]);
  loom_amp_zero_copy_grads(o->params, o->n);
}

void loom_optim_base_release(loom_optimizer *o) {
  for (int i = 0; i < o->n; i++) {
    if (o->buf1) loom_tensor_release(o->buf1[i]);
    if (o->buf2) loom_tensor_release(o->buf2[i]);
  }
  loom_sys_free(o->params);
  loom_sys_free(o->buf1);
  loom_sys_free(o->buf2);
  loom_sys_free(o->param_steps);
  loom_sys_free(o->groups);
#ifdef LOOM_HAVE_CUDA
  loom_cuda_opt_free(o->cuda);
#endif
}

/* ---- stepping ------------------------------------------------------------------- */

loom_status loom_optimizer_step_guarded(loom_optimizer *o, const int32_t *skip) {
  if (!o) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer_step: optimizer is NULL");
  if (o->has_sched) loom_optimizer_set_lr(o, loom_lr_at(&o->sched, o->sched_step));
  loom_status st = o->vt->step(o, skip);
  if (st == LOOM_OK && o->has_sched) o->sched_step++;
  return st;
}

loom_status loom_optimizer_step(loom_optimizer *o) { return loom_optimizer_step_guarded(o, NULL); }

void loom_optimizer_schedule_skip(loom_optimizer *o) {
  if (o && o->has_sched) o->sched_step++;
}

loom_status loom_optimizer_set_schedule(loom_optimizer *o, const loom_lr_schedule *s, int64_t step) {
  if (!o) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer_set_schedule: optimizer is NULL");
  /* An older, smaller schedule keeps the constructors' values of the fields
   * it lacks (the one-cycle factors). */
  loom_lr_schedule sc = loom_lr_constant(0.0);
  LOOM_TRY(LOOM_STRUCT_IN("optimizer_set_schedule", loom_lr_schedule, &sc, s));
  if (step < 0) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer_set_schedule: step is %lld (need >= 0)", (long long)step);
  o->has_sched = s != NULL;
  if (!s) return LOOM_OK;
  o->sched = sc;
  o->sched_step = step;
  o->sched_reseed = true;
  loom_optimizer_set_lr(o, loom_lr_at(&sc, step));
  return LOOM_OK;
}

loom_status loom_optimizer_zero_grad(loom_optimizer *o) {
  if (!o) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer_zero_grad: optimizer is NULL");
  return o->vt->zero_grad(o);
}

void loom_optimizer_set_lr(loom_optimizer *o, double lr) {
  if (o) o->vt->set_lr(o, -1, lr);
}
double loom_optimizer_get_lr(const loom_optimizer *o) { return o ? o->lr : 0.0; }

/* ---- parameter groups ------------------------------------------------------ */

loom_status loom_optimizer_add_param_group(loom_optimizer *o, loom_tensor *const *params, int n,
                                           const loom_param_group_options *opt) {
  if (!o) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer_add_param_group: optimizer is NULL");
  loom_param_group_options g;
  loom_param_group_options_init(&g);
  LOOM_TRY(LOOM_STRUCT_IN("optimizer_add_param_group", loom_param_group_options, &g, opt));
  double lr = isnan(g.lr) ? o->lr : g.lr;
  double wd = isnan(g.weight_decay) ? o->vt->default_weight_decay(o) : g.weight_decay;
  if (!(lr >= 0 && lr < INFINITY) || !(wd >= 0 && wd < INFINITY))
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "optimizer_add_param_group: lr and weight_decay must be finite and >= 0 (got lr %g, "
                          "weight_decay %g)",
                          lr, wd);
  LOOM_TRY(loom_optim_check_params("optimizer_add_param_group", o, o->n, params, n, o->device));
  return o->vt->add_group(o, params, n, lr, wd);
}

int loom_optimizer_num_groups(const loom_optimizer *o) { return o ? o->n_groups : 0; }

int loom_optimizer_group_num_params(const loom_optimizer *o, int g) {
  return (o && g >= 0 && g < o->n_groups) ? o->groups[g].n : 0;
}

static loom_status check_group(const char *who, const loom_optimizer *o, int g, double v, const char *what) {
  if (!o) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: optimizer is NULL", who);
  if (g < 0 || g >= o->n_groups)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: group %d does not exist (the optimizer has %d)", who, g, o->n_groups);
  if (!(v >= 0 && v < INFINITY))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: %s must be finite and >= 0 (got %g)", who, what, v);
  return LOOM_OK;
}

loom_status loom_optimizer_set_group_lr(loom_optimizer *o, int g, double lr) {
  LOOM_TRY(check_group("optimizer_set_group_lr", o, g, lr, "lr"));
  o->vt->set_lr(o, g, lr);
  return LOOM_OK;
}

double loom_optimizer_get_group_lr(const loom_optimizer *o, int g) {
  return (o && g >= 0 && g < o->n_groups) ? o->groups[g].lr : NAN;
}

loom_status loom_optimizer_set_group_weight_decay(loom_optimizer *o, int g, double wd) {
  LOOM_TRY(check_group("optimizer_set_group_weight_decay", o, g, wd, "weight_decay"));
  o->vt->set_weight_decay(o, g, wd);
  return LOOM_OK;
}

double loom_optimizer_get_group_weight_decay(const loom_optimizer *o, int g) {
  return (o && g >= 0 && g < o->n_groups) ? o->groups[g].weight_decay : NAN;
}

/* ---- counts and free --------------------------------------------------------------- */

bool loom_optim_counts_stale(const loom_optimizer *o) {
#ifdef LOOM_HAVE_CUDA
  return o && o->cuda && (o->counts_on_device || o->synced_replays != loom_graph_replay_count());
#else
  (void)o;
  return false;
#endif
}

int64_t loom_optimizer_steps(const loom_optimizer *o) {
  if (!o) return 0;
#ifdef LOOM_HAVE_CUDA
  int64_t replays = loom_graph_replay_count();
  if (loom_optim_counts_stale(o)) {
    /* Steps the loss scaler decided on the GPU, or graph replays the host
     * never saw: read the counts back (a host wait, outside the training
     * step) and keep the host copies current. */
    loom_optimizer *m = (loom_optimizer *)o;
    if (loom_cuda_opt_counts(m->cuda, m->param_steps, &m->steps) == LOOM_OK) {
      m->counts_on_device = false;
      m->synced_replays = replays;
    }
  }
#endif
  return o->steps;
}

void loom_optimizer_free(loom_optimizer *o) {
  if (o) o->vt->free(o);
}
