/* optimizer.c — SGD and AdamW over a list of f32 parameters. Each step is
 * one fused multi-tensor update per device (lib/optim/optim_kernels.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "loom/autograd.h"
#ifdef LOOM_HAVE_CUDA
#include "ops/cuda/dev_table.h"
#endif
#include "loom/optim.h"
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

static loom_optimizer *opt_new(loom_tensor *const *params, int n, int kind, int nbufs) {
  if (!params || n <= 0) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer: needs at least one parameter (got %d)", n);
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    loom_tensor *p = params[i];
    if (!p) {
      loom_set_error(LOOM_ERR_NULL_INPUT, "optimizer: parameter %d is NULL", i);
      return NULL;
    }
    if (p->dtype != LOOM_F32 || !loom_tensor_is_contiguous(p) || p->grad_fn) {
      loom_set_error(LOOM_ERR_INVALID_ARG,
                     "optimizer: parameter %d must be a contiguous f32 leaf tensor (master weights are f32; got %s%s)", i,
                     loom_dtype_name(p->dtype), p->grad_fn ? ", non-leaf" : "");
      return NULL;
    }
    if (!loom_device_eq(p->storage->device, params[0]->storage->device)) {
      loom_set_error(LOOM_ERR_DEVICE, "optimizer: parameter %d is on another device than parameter 0", i);
      return NULL;
    }
  }
  loom_optimizer *o = calloc(1, sizeof *o);
  if (!o) goto oom;
  o->kind = kind;
  o->n = n;
  o->device = params[0]->storage->device;
  o->params = calloc((size_t)n, sizeof *o->params);
  o->buf1 = calloc((size_t)n, sizeof *o->buf1);
  o->buf2 = calloc((size_t)n, sizeof *o->buf2);
  o->param_steps = calloc((size_t)n, sizeof *o->param_steps);
  o->scratch.pp = calloc((size_t)n, sizeof *o->scratch.pp);
  o->scratch.b1 = calloc((size_t)n, sizeof *o->scratch.b1);
  o->scratch.b2 = calloc((size_t)n, sizeof *o->scratch.b2);
  o->scratch.gp = calloc((size_t)n, sizeof *o->scratch.gp);
  o->scratch.numel = calloc((size_t)n, sizeof *o->scratch.numel);
  o->scratch.lowp = calloc((size_t)n, sizeof *o->scratch.lowp);
  o->scratch.idx = calloc((size_t)n, sizeof *o->scratch.idx);
  if (!o->params || !o->buf1 || !o->buf2 || !o->param_steps || !o->scratch.pp || !o->scratch.b1 || !o->scratch.b2 ||
      !o->scratch.gp || !o->scratch.numel || !o->scratch.lowp || !o->scratch.idx)
    goto oom;
  for (int i = 0; i < n; i++) {
    o->params[i] = params[i];
    for (int b = 0; b < nbufs; b++) {
      loom_tensor *t = loom_tensor_alloc_raw(params[i]->ndim, params[i]->shape, LOOM_F32, o->device);
      if (!t || loom_fill_(t, 0.0) != LOOM_OK) {
        loom_tensor_release(t);
        loom_optimizer_free(o);
        return NULL;
      }
      if (b == 0) o->buf1[i] = t;
      else o->buf2[i] = t;
    }
  }
  return o;
oom:
  loom_optimizer_free(o);
  loom_set_error(LOOM_ERR_OOM, "optimizer: out of host memory");
  return NULL;
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
  loom_optimizer *r = opt_new(params, n, LOOM_OPTIM_SGD, o.momentum > 0 ? 1 : 0);
  if (r) {
    r->sgd = o;
    r->lr = o.lr;
  }
  return r;
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
  loom_optimizer *r = opt_new(params, n, LOOM_OPTIM_ADAMW, 2);
  if (r) {
    r->adamw = o;
    r->lr = o.lr;
  }
  return r;
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

/* The CUDA step of the whole group: one launch whatever the parameters'
 * counts (they are on the device, per parameter), vetoed by *skip. */
#ifdef LOOM_HAVE_CUDA
static loom_status cuda_step(loom_optimizer *o, loom_param_group *g, const int *idx, const int32_t *skip) {
  loom_opt_cuda_args a = {&o->cuda, o->n, idx, o->param_steps, o->steps,
                          o->adamw.beta1, o->adamw.beta2, skip};
  if (o->kind == LOOM_OPTIM_SGD) {
    loom_sgd_hparams h = {(float)o->lr, (float)o->sgd.momentum, (float)o->sgd.dampening, (float)o->sgd.weight_decay,
                          o->sgd.nesterov, 0};
    if (o->sgd.momentum <= 0) g->buf1 = NULL;
    return loom_cuda_sgd_step(o->device, g, &h, &a);
  }
  loom_adamw_hparams h = {(float)o->lr, (float)o->adamw.beta1, (float)o->adamw.beta2, (float)o->adamw.eps,
                          (float)o->adamw.weight_decay, 1.0f, 1.0f};
  return loom_cuda_adamw_step(o->device, g, &h, &a);
}
#endif

loom_status loom_optimizer_step_group(loom_optimizer *o, loom_param_group *g, int64_t prior_steps) {
  loom_status st;
  if (o->kind == LOOM_OPTIM_SGD) {
    loom_sgd_hparams h = {(float)o->lr, (float)o->sgd.momentum, (float)o->sgd.dampening, (float)o->sgd.weight_decay,
                          o->sgd.nesterov, prior_steps == 0};
    if (o->sgd.momentum <= 0) g->buf1 = NULL;
    st = loom_cpu_sgd_step(g, &h);
  } else {
    double t = (double)(prior_steps + 1);
    loom_adamw_hparams h = {(float)o->lr, (float)o->adamw.beta1, (float)o->adamw.beta2, (float)o->adamw.eps,
                            (float)o->adamw.weight_decay, (float)(1.0 - pow(o->adamw.beta1, t)),
                            (float)(1.0 - pow(o->adamw.beta2, t))};
    st = loom_cpu_adamw_step(g, &h);
  }
  return st;
}

/* Parameters keep their own update counts, as in PyTorch: one that first
 * gets a gradient late starts its momentum and bias correction then. In the
 * usual case every parameter has the same count and this is one fused call. */
static loom_status step_by_count(loom_optimizer *o, loom_param_group *g, const int *idx) {
  bool uniform = true;
  for (int j = 1; j < g->n; j++) uniform = uniform && o->param_steps[idx[j]] == o->param_steps[idx[0]];
  if (uniform) return g->n ? loom_optimizer_step_group(o, g, o->param_steps[idx[0]]) : LOOM_OK;
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
    st = loom_optimizer_step_group(o, &sub, c);
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
    if (st == LOOM_OK) st = step_by_count(o, &g, idx);
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
  loom_prof_range pr = LOOM_PROF_RANGE_INIT;
  if (LOOM_PROF_ACTIVE())
    loom_prof_begin_device(&pr, LOOM_PROF_CAT_OPTIMIZER, o->kind == LOOM_OPTIM_SGD ? "sgd step" : "adamw step", o->device);
  loom_status st = optimizer_step(o, skip);
  loom_prof_end(&pr, 0.0, 0);
  return st;
}

loom_status loom_optimizer_step(loom_optimizer *o) { return loom_optimizer_step_guarded(o, NULL); }

loom_status loom_optimizer_zero_grad(loom_optimizer *o) {
  if (!o) return loom_set_error(LOOM_ERR_INVALID_ARG, "optimizer_zero_grad: optimizer is NULL");
  for (int i = 0; i < o->n; i++) loom_zero_grad(o->params[i]);
  loom_amp_zero_copy_grads(o->params, o->n);
  return LOOM_OK;
}

void loom_optimizer_set_lr(loom_optimizer *o, double lr) {
  if (o) o->lr = lr;
}
double loom_optimizer_get_lr(const loom_optimizer *o) { return o ? o->lr : 0.0; }
int64_t loom_optimizer_steps(const loom_optimizer *o) {
  if (!o) return 0;
#ifdef LOOM_HAVE_CUDA
  if (o->counts_on_device && o->cuda) {
    /* Steps the loss scaler decided on the GPU: read the counts back (a host
     * wait, outside the training step) and keep the host copies current. */
    loom_optimizer *m = (loom_optimizer *)o;
    if (loom_cuda_opt_counts(m->cuda, m->param_steps, &m->steps) == LOOM_OK) m->counts_on_device = false;
  }
#endif
  return o->steps;
}

void loom_optimizer_free(loom_optimizer *o) {
  if (!o) return;
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
#ifdef LOOM_HAVE_CUDA
  loom_cuda_opt_free(o->cuda);
  loom_dev_table_free(o->gather_table);
#endif
  free(o);
}
