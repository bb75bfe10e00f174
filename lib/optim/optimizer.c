/* optimizer.c — SGD and AdamW over parameter groups of f32 parameters. Each
 * step is one fused multi-tensor update per group (lib/optim/optim_kernels.h),
 * with the group's lr and weight decay. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "loom/autograd.h"
#ifdef LOOM_HAVE_CUDA
#include "ops/cuda/dev_table.h"
#endif
#include "loom/optim.h"
#include "device/graph_capture.h"
#include "optim/optim_internal.h"
#include "prof/prof.h"

loom_sgd_options loom_sgd_defaults(void) {
  loom_sgd_options o = {sizeof(loom_sgd_options), 0.01, 0.0, 0.0, 0.0, false};
  return o;
}

loom_adamw_options loom_adamw_defaults(void) {
  loom_adamw_options o = {sizeof(loom_adamw_options), 1e-3, 0.9, 0.999, 1e-8, 0.01};
  return o;
}

loom_param_group_options loom_param_group_defaults(void) {
  loom_param_group_options o = {sizeof(loom_param_group_options), NAN, NAN};
  return o;
}

/* Every parameter a group may hold: a contiguous f32 leaf on dev, not
 * already among the first `have` parameters of o (o may be NULL). */
static loom_status check_params(const char *who, const loom_optimizer *o, int have, loom_tensor *const *params, int n,
                                loom_device dev) {
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

/* Room for `need` parameters in every per-parameter array. */
static loom_status reserve(loom_optimizer *o, int need) {
  if (need <= o->cap) return LOOM_OK;
  int cap = o->cap ? o->cap : 8;
  while (cap < need) cap *= 2;
#define GROW(field)                                                                  \
  do {                                                                               \
    void *np_ = realloc((void *)o->field, (size_t)cap * sizeof *o->field);           \
    if (!np_) return loom_set_error(LOOM_ERR_OOM, "optimizer: out of host memory");   \
    o->field = np_;                                                                  \
  } while (0)
  GROW(params);
  GROW(buf1);
  GROW(buf2);
  GROW(param_steps);
  GROW(scratch.pp);
  GROW(scratch.b1);
  GROW(scratch.b2);
  GROW(scratch.gp);
  GROW(scratch.numel);
  GROW(scratch.lowp);
  GROW(scratch.idx);
  GROW(scratch.grp);
#undef GROW
  o->cap = cap;
  return LOOM_OK;
}

/* Append params as a new group (state zeroed). On failure o is unchanged. */
static loom_status append_group(loom_optimizer *o, loom_tensor *const *params, int n, double lr, double wd) {
  LOOM_TRY(reserve(o, o->n + n));
  loom_optim_group *ng = realloc(o->groups, (size_t)(o->n_groups + 1) * sizeof *ng);
  if (!ng) return loom_set_error(LOOM_ERR_OOM, "optimizer: out of host memory");
  o->groups = ng;
  int nbufs = o->kind == LOOM_OPTIM_ADAMW ? 2 : o->sgd.momentum > 0 ? 1 : 0;
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

static loom_optimizer *opt_new(loom_tensor *const *params, int n, int kind, double lr, double wd) {
  if (check_params("optimizer", NULL, 0, params, n, params && n > 0 && params[0] ? params[0]->storage->device : loom_cpu()) !=
      LOOM_OK)
    return NULL;
  loom_optimizer *o = calloc(1, sizeof *o);
  if (!o) {
    loom_set_error(LOOM_ERR_OOM, "optimizer: out of host memory");
    return NULL;
  }
  o->kind = kind;
  o->device = params[0]->storage->device;
  o->lr = lr;
  return o;
}

/* The creation group, after the options are in place (they say which state
 * buffers SGD needs). */
static loom_optimizer *opt_first_group(loom_optimizer *o, loom_tensor *const *params, int n, double lr, double wd) {
  if (o && append_group(o, params, n, lr, wd) != LOOM_OK) {
    loom_optimizer_free(o);
    return NULL;
  }
  return o;
}

loom_optimizer *loom_sgd_new(loom_tensor *const *params, int n, const loom_sgd_options *opt) {
  loom_sgd_options o = loom_sgd_defaults();
  if (opt) {
    if (opt->size < sizeof(uint32_t) || opt->size > sizeof o) {
      loom_set_error(LOOM_ERR_INVALID_ARG, "sgd: options.size is %u; fill options from loom_sgd_defaults()", opt->size);
      return NULL;
    }
    memcpy(&o, opt, opt->size);
  }
  /* Written as !(x >= 0) so that NaN is rejected too; infinities as well. */
  if (!(o.lr >= 0 && o.lr < INFINITY) || !(o.momentum >= 0 && o.momentum < INFINITY) ||
      !(o.weight_decay >= 0 && o.weight_decay < INFINITY) || !(o.dampening >= 0 && o.dampening < INFINITY)) {
    loom_set_error(LOOM_ERR_INVALID_ARG,
                   "sgd: lr, momentum, dampening and weight_decay must be finite and >= 0 (got lr %g, momentum %g, "
                   "dampening %g, weight_decay %g)",
                   o.lr, o.momentum, o.dampening, o.weight_decay);
    return NULL;
  }
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "sgd: nesterov needs momentum > 0 and dampening == 0");
    return NULL;
  }
  loom_optimizer *r = opt_new(params, n, LOOM_OPTIM_SGD, o.lr, o.weight_decay);
  if (r) r->sgd = o;
  return opt_first_group(r, params, n, o.lr, o.weight_decay);
}

loom_optimizer *loom_adamw_new(loom_tensor *const *params, int n, const loom_adamw_options *opt) {
  loom_adamw_options o = loom_adamw_defaults();
  if (opt) {
    if (opt->size < sizeof(uint32_t) || opt->size > sizeof o) {
      loom_set_error(LOOM_ERR_INVALID_ARG, "adamw: options.size is %u; fill options from loom_adamw_defaults()", opt->size);
      return NULL;
    }
    memcpy(&o, opt, opt->size);
  }
  if (!(o.lr >= 0 && o.lr < INFINITY) || !(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1) ||
      !(o.eps > 0 && o.eps < INFINITY) || !(o.weight_decay >= 0 && o.weight_decay < INFINITY)) {
    loom_set_error(LOOM_ERR_INVALID_ARG,
                   "adamw: need finite lr >= 0, betas in [0, 1), eps > 0, weight_decay >= 0 (got lr %g, betas %g, %g, "
                   "eps %g, weight_decay %g)",
                   o.lr, o.beta1, o.beta2, o.eps, o.weight_decay);
    return NULL;
  }
  loom_optimizer *r = opt_new(params, n, LOOM_OPTIM_ADAMW, o.lr, o.weight_decay);
  if (r) r->adamw = o;
  return opt_first_group(r, params, n, o.lr, o.weight_decay);
}

loom_optimizer *loom_adamw_offload_new(loom_tensor *const *params, int n, const loom_adamw_options *opt) {
  /* Validate the options and build the state on the host copies first. */
  loom_tensor **host = calloc(n > 0 ? (size_t)n : 1, sizeof *host);
  if (!host) {
    loom_set_error(LOOM_ERR_OOM, "adamw_offload: out of host memory");
    return NULL;
  }
  loom_optimizer *inner = NULL, *o = NULL;
  bool ok = params && n > 0;
  for (int i = 0; ok && i < n; i++) {
    if (!params[i]) loom_set_error(LOOM_ERR_NULL_INPUT, "adamw_offload: parameter %d is NULL", i);
    ok = params[i] && (host[i] = loom_offload_param_copy(params[i])) != NULL;
    if (ok) host[i]->requires_grad = true;
  }
  if (ok) inner = loom_adamw_new(host, n, opt);
  /* The device side: parameters only, no state (nbufs 0). */
  /* Made as a momentum-free SGD so append_group allocates no state buffers,
   * then labelled AdamW (the state lives in inner). */
  if (inner) o = opt_first_group(opt_new(params, n, LOOM_OPTIM_SGD, inner->lr, 0.0), params, n, inner->lr, 0.0);
  if (o) o->kind = LOOM_OPTIM_ADAMW;
  if (!o) {
    if (!params || n <= 0) loom_set_error(LOOM_ERR_INVALID_ARG, "adamw_offload: needs at least one parameter (got %d)", n);
    loom_optimizer_free(inner);
    for (int i = 0; i < n && params; i++) loom_tensor_release(host[i]);
    free(host);
    return NULL;
  }
  o->adamw = inner->adamw;
  o->lr = inner->lr;
  o->offload_inner = inner;
  o->host_params = host;
  return o;
}

loom_status loom_optimizer_fill_group(loom_optimizer *o, loom_param_group *g, float **pp, const float **gp, float **b1,
                                      float **b2, int64_t *numel, int *idx) {
  int k = 0;
  for (int i = 0; i < o->n; i++) {
    loom_tensor *p = o->params[i];
    if (!p->grad) continue;
    if (p->grad->dtype != LOOM_F32 || !loom_tensor_is_contiguous(p->grad) ||
        loom_shape_numel(p->grad->ndim, p->grad->shape) != loom_shape_numel(p->ndim, p->shape))
      return loom_set_error(LOOM_ERR_INTERNAL, "optimizer: gradient of parameter %d is not a dense f32 tensor of its shape", i);
    pp[k] = loom_tensor_ptr(p);
    gp[k] = loom_tensor_ptr(p->grad);
    b1[k] = o->buf1[i] ? loom_tensor_ptr(o->buf1[i]) : NULL;
    b2[k] = o->buf2[i] ? loom_tensor_ptr(o->buf2[i]) : NULL;
    numel[k] = loom_shape_numel(p->ndim, p->shape);
    idx[k] = i;
    k++;
  }
  g->n = k;
  g->param = pp;
  g->grad = gp;
  g->buf1 = b1;
  g->buf2 = b2;
  g->numel = numel;
  g->lowp = NULL;
  return LOOM_OK;
}

/* The CUDA step of every group at once: one launch whatever the
 * parameters' counts (they are on the device, per parameter) and groups
 * (each table entry names its group; the groups' lr and weight decay travel
 * by value in the launch), vetoed by *skip. */
#ifdef LOOM_HAVE_CUDA
static loom_status cuda_step(loom_optimizer *o, loom_param_group *g, const int *idx, const int32_t *skip) {
  if (o->n_groups > LOOM_OPT_CUDA_MAX_GROUPS)
    return loom_set_error(LOOM_ERR_UNSUPPORTED,
                          "optimizer_step: %d parameter groups on CUDA; at most %d are supported (merge groups with "
                          "equal lr and weight decay)",
                          o->n_groups, LOOM_OPT_CUDA_MAX_GROUPS);
  float glr[LOOM_OPT_CUDA_MAX_GROUPS], gwd[LOOM_OPT_CUDA_MAX_GROUPS];
  for (int gi = 0; gi < o->n_groups; gi++) glr[gi] = (float)o->groups[gi].lr, gwd[gi] = (float)o->groups[gi].weight_decay;
  /* Entries are in parameter order and groups are consecutive runs. */
  for (int k = 0, gi = 0; k < g->n; k++) {
    while (idx[k] >= o->groups[gi].first + o->groups[gi].n) gi++;
    o->scratch.grp[k] = gi;
  }
  loom_lr_params sp = loom_lr_params_of(&o->sched);
  loom_opt_cuda_args a = {&o->cuda,     o->n,          idx,       o->param_steps,
                          o->steps,     o->adamw.beta1, o->adamw.beta2, skip,
                          o->scratch.grp, o->n_groups, glr,       gwd,
                          o->has_sched ? &sp : NULL, o->sched_step, o->sched_reseed};
  loom_status st;
  bool fresh = o->cuda == NULL;
  if (o->kind == LOOM_OPTIM_SGD) {
    loom_sgd_hparams h = {glr[0], (float)o->sgd.momentum, (float)o->sgd.dampening, gwd[0], o->sgd.nesterov, 0};
    if (o->sgd.momentum <= 0) g->buf1 = NULL;
    st = loom_cuda_sgd_step(o->device, g, &h, &a);
  } else {
    loom_adamw_hparams h = {glr[0], (float)o->adamw.beta1, (float)o->adamw.beta2, (float)o->adamw.eps, gwd[0], 1.0f, 1.0f};
    st = loom_cuda_adamw_step(o->device, g, &h, &a);
  }
  if (fresh && o->cuda) o->synced_replays = loom_graph_replay_count();  /* seeded from the host's counts */
  /* No gradients: nothing launched moved the device's schedule position. */
  if (st == LOOM_OK && o->has_sched) o->sched_reseed = g->n == 0;
  return st;
}
#endif

loom_status loom_optimizer_step_group(loom_optimizer *o, loom_param_group *g, int64_t prior_steps,
                                      const loom_optim_group *grp) {
  loom_status st;
  if (o->kind == LOOM_OPTIM_SGD) {
    loom_sgd_hparams h = {(float)grp->lr, (float)o->sgd.momentum, (float)o->sgd.dampening, (float)grp->weight_decay,
                          o->sgd.nesterov, prior_steps == 0};
    if (o->sgd.momentum <= 0) g->buf1 = NULL;
    st = loom_cpu_sgd_step(g, &h);
  } else {
    double t = (double)(prior_steps + 1);
    loom_adamw_hparams h = {(float)grp->lr, (float)o->adamw.beta1, (float)o->adamw.beta2, (float)o->adamw.eps,
                            (float)grp->weight_decay, (float)(1.0 - pow(o->adamw.beta1, t)),
                            (float)(1.0 - pow(o->adamw.beta2, t))};
    st = loom_cpu_adamw_step(g, &h);
  }
  return st;
}

/* Parameters keep their own update counts, as in PyTorch: one that first
 * gets a gradient late starts its momentum and bias correction then. In the
 * usual case every parameter has the same count and this is one fused call. */
static loom_status step_by_count(loom_optimizer *o, loom_param_group *g, const int *idx, const loom_optim_group *grp) {
  bool uniform = true;
  for (int j = 1; j < g->n; j++) uniform = uniform && o->param_steps[idx[j]] == o->param_steps[idx[0]];
  if (uniform) return g->n ? loom_optimizer_step_group(o, g, o->param_steps[idx[0]], grp) : LOOM_OK;
  int n = g->n;
  size_t ptrs = (size_t)n * sizeof(void *);
  float **pp = malloc(ptrs), **b1 = malloc(ptrs), **b2 = malloc(ptrs);
  const float **gp = malloc(ptrs);
  uint16_t **lp = malloc(ptrs);
  int64_t *numel = malloc((size_t)n * sizeof *numel);
  bool *done = calloc((size_t)n, sizeof *done);
  loom_status st = (pp && b1 && b2 && gp && lp && numel && done) ? LOOM_OK
                   : loom_set_error(LOOM_ERR_OOM, "optimizer_step: out of host memory");
  for (int j0 = 0; j0 < n && st == LOOM_OK; j0++) {
    if (done[j0]) continue;
    int64_t c = o->param_steps[idx[j0]];
    loom_param_group sub = *g;
    sub.n = 0;
    sub.param = pp, sub.grad = gp, sub.buf1 = g->buf1 ? b1 : NULL, sub.buf2 = g->buf2 ? b2 : NULL;
    sub.lowp = g->lowp ? lp : NULL, sub.numel = numel;
    for (int j = j0; j < n; j++) {
      if (done[j] || o->param_steps[idx[j]] != c) continue;
      pp[sub.n] = g->param[j];
      gp[sub.n] = g->grad[j];
      if (g->buf1) b1[sub.n] = g->buf1[j];
      if (g->buf2) b2[sub.n] = g->buf2[j];
      if (g->lowp) lp[sub.n] = g->lowp[j];
      numel[sub.n] = g->numel[j];
      sub.n++;
      done[j] = true;
    }
    st = loom_optimizer_step_group(o, &sub, c, grp);
  }
  free(pp), free(b1), free(b2), free(gp), free(lp), free(numel), free(done);
  return st;
}

static loom_status optimizer_step(loom_optimizer *o, const int32_t *skip) {
  bool on_gpu = o->device.kind == LOOM_CUDA;
  if (skip && !on_gpu) return loom_set_error(LOOM_ERR_INTERNAL, "optimizer_step: a device skip flag on the CPU");
  int *idx = o->scratch.idx;
  loom_param_group g;
  /* Mixed precision (lib/amp): masters whose low-precision copies got the
   * gradient receive it in f32 first; the fused step refreshes the copies. */
  loom_status st = loom_amp_unscale_grads(o->params, o->n, 1.0f, false, NULL, &o->gather_table);
  if (st == LOOM_OK)
    st = loom_optimizer_fill_group(o, &g, o->scratch.pp, o->scratch.gp, o->scratch.b1, o->scratch.b2, o->scratch.numel,
                                   idx);
  if (st == LOOM_OK) st = loom_amp_fill_lowp(o, &g, o->scratch.lowp);
#ifdef LOOM_HAVE_CUDA
  if (st == LOOM_OK && on_gpu) st = cuda_step(o, &g, idx, skip);
  else
#endif
  {
    /* The gathered entries are in parameter order, so each group's are a run. */
    for (int gi = 0, k0 = 0; st == LOOM_OK && gi < o->n_groups; gi++) {
      const loom_optim_group *grp = &o->groups[gi];
      int k1 = k0;
      while (k1 < g.n && idx[k1] < grp->first + grp->n) k1++;
      loom_param_group sub = g;
      sub.n = k1 - k0;
      sub.param = g.param + k0, sub.grad = g.grad + k0, sub.buf1 = g.buf1 + k0, sub.buf2 = g.buf2 + k0;
      sub.numel = g.numel + k0, sub.lowp = g.lowp ? g.lowp + k0 : NULL;
      st = step_by_count(o, &sub, idx + k0, grp);
      k0 = k1;
    }
  }
  if (st == LOOM_OK) {
    /* A step the device may veto is counted on the device only; the host
     * copies catch up when asked (loom_optimizer_steps). */
    if (skip) o->counts_on_device = true;
    for (int j = 0; j < g.n; j++) {
      loom_tensor *p = o->params[idx[j]];
      if (!skip) o->param_steps[idx[j]]++;
      loom_tensor_bump_version(p);
      loom_tensor_bump_version(loom_amp_lowp_copy(p));
    }
    if (!skip) o->steps++;
  }
  return st;
}

/* The step in a profiler / NVTX range (device-timed on the optimizer's device). */
loom_status loom_optimizer_step_guarded(loom_optimizer *o, const int32_t *skip) {
  if (!o) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer_step: optimizer is NULL");
  if (o->has_sched) loom_optimizer_set_lr(o, loom_lr_at(&o->sched, o->sched_step));
  loom_status st;
  if (o->offload_inner) {
    st = loom_offload_optimizer_step(o, skip);
  } else {
    loom_prof_range pr = LOOM_PROF_RANGE_INIT;
    if (LOOM_PROF_ACTIVE())
      loom_prof_begin_device(&pr, LOOM_PROF_CAT_OPTIMIZER, o->kind == LOOM_OPTIM_SGD ? "sgd step" : "adamw step",
                             o->device);
    st = optimizer_step(o, skip);
    loom_prof_end(&pr, 0.0, 0);
  }
  if (st == LOOM_OK && o->has_sched) o->sched_step++;
  return st;
}

void loom_optimizer_schedule_skip(loom_optimizer *o) {
  if (o && o->has_sched) o->sched_step++;
}

loom_status loom_optimizer_set_schedule(loom_optimizer *o, const loom_lr_schedule *s, int64_t step) {
  if (!o) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer_set_schedule: optimizer is NULL");
  if (s && s->size != sizeof *s)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer_set_schedule: schedule.size is %u but this loom expects %zu "
                          "(make it with loom_lr_constant/step/cosine/one_cycle)", s->size, sizeof *s);
  if (step < 0) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer_set_schedule: step is %lld (need >= 0)", (long long)step);
  o->has_sched = s != NULL;
  if (!s) return LOOM_OK;
  o->sched = *s;
  o->sched_step = step;
  o->sched_reseed = true;
  loom_optimizer_set_lr(o, loom_lr_at(s, step));
  return LOOM_OK;
}

loom_status loom_optimizer_step(loom_optimizer *o) { return loom_optimizer_step_guarded(o, NULL); }

loom_status loom_optimizer_zero_grad(loom_optimizer *o) {
  if (!o) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer_zero_grad: optimizer is NULL");
  for (int i = 0; i < o->n; i++) loom_zero_grad(o->params[i]);
  loom_amp_zero_copy_grads(o->params, o->n);
  if (o->offload_inner) loom_optimizer_zero_grad(o->offload_inner);
  return LOOM_OK;
}

void loom_optimizer_set_lr(loom_optimizer *o, double lr) {
  if (!o) return;
  o->lr = lr;
  for (int g = 0; g < o->n_groups; g++) o->groups[g].lr = lr;
  if (o->offload_inner) loom_optimizer_set_lr(o->offload_inner, lr);
}
double loom_optimizer_get_lr(const loom_optimizer *o) { return o ? o->lr : 0.0; }

/* ---- parameter groups ------------------------------------------------------ */

loom_status loom_optimizer_add_param_group(loom_optimizer *o, loom_tensor *const *params, int n,
                                           const loom_param_group_options *opt) {
  if (!o) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer_add_param_group: optimizer is NULL");
  loom_param_group_options g = loom_param_group_defaults();
  if (opt) {
    if (opt->size < sizeof(uint32_t) || opt->size > sizeof g)
      return loom_set_error(LOOM_ERR_INVALID_ARG,
                            "optimizer_add_param_group: options.size is %u; fill options from loom_param_group_defaults()",
                            opt->size);
    memcpy(&g, opt, opt->size);
  }
  double lr = isnan(g.lr) ? o->lr : g.lr;
  double wd = isnan(g.weight_decay) ? (o->kind == LOOM_OPTIM_ADAMW ? o->adamw.weight_decay : o->sgd.weight_decay)
                                    : g.weight_decay;
  if (!(lr >= 0 && lr < INFINITY) || !(wd >= 0 && wd < INFINITY))
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "optimizer_add_param_group: lr and weight_decay must be finite and >= 0 (got lr %g, "
                          "weight_decay %g)",
                          lr, wd);
  LOOM_TRY(check_params("optimizer_add_param_group", o, o->n, params, n, o->device));
#ifdef LOOM_HAVE_CUDA
  if (o->cuda) {
    /* The device step state is sized for the current parameters: bring its
     * counts home (a wait, outside any step) and rebuild it at the next step. */
    (void)loom_optimizer_steps(o);
    if (loom_optim_counts_stale(o))
      return loom_error_prefix("optimizer_add_param_group: reading the device step counts");
    loom_cuda_opt_free(o->cuda);
    o->cuda = NULL;
  }
#endif
  return append_group(o, params, n, lr, wd);
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
  o->groups[g].lr = lr;
  if (g == 0) o->lr = lr;
  return LOOM_OK;
}

double loom_optimizer_get_group_lr(const loom_optimizer *o, int g) {
  return (o && g >= 0 && g < o->n_groups) ? o->groups[g].lr : NAN;
}

loom_status loom_optimizer_set_group_weight_decay(loom_optimizer *o, int g, double wd) {
  LOOM_TRY(check_group("optimizer_set_group_weight_decay", o, g, wd, "weight_decay"));
  o->groups[g].weight_decay = wd;
  return LOOM_OK;
}

double loom_optimizer_get_group_weight_decay(const loom_optimizer *o, int g) {
  return (o && g >= 0 && g < o->n_groups) ? o->groups[g].weight_decay : NAN;
}
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
  if (!o) return;
  if (o->offload_inner) {
    loom_optimizer_free(o->offload_inner);
    for (int i = 0; i < o->n; i++) loom_tensor_release(o->host_params[i]);
    free(o->host_params);
  }
  for (int i = 0; i < o->n; i++) {
    if (o->buf1) loom_tensor_release(o->buf1[i]);
    if (o->buf2) loom_tensor_release(o->buf2[i]);
  }
  free(o->params);
  free(o->buf1);
  free(o->buf2);
  free(o->param_steps);
  free(o->scratch.pp);
  free(o->scratch.b1);
  free(o->scratch.b2);
  free(o->scratch.gp);
  free(o->scratch.numel);
  free(o->scratch.lowp);
  free(o->scratch.idx);
  free(o->scratch.grp);
  free(o->groups);
#ifdef LOOM_HAVE_CUDA
  loom_cuda_opt_free(o->cuda);
  loom_dev_table_free(o->gather_table);
#endif
  free(o);
}
