/* fused.c — what SGD and AdamW share (fused.h): their construction over a
 * first group, the gather of the parameters that have gradients, the
 * per-parameter update counts (one fused update per group and count), the
 * low-precision copies refreshed inside the update (lib/amp), and the CUDA
 * step of every group in one launch with its device-resident counts. */
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "loom/autograd.h"
#ifdef LOOM_HAVE_CUDA
#include "ops/cuda/dev_table.h"
#endif
#include "core/capture.h"
#include "optim/fused.h"
#include "prof/prof.h"
#include "core/sys.h"

/* Room for `need` entries in the gather arrays. */
static loom_status reserve_scratch(loom_fused_optimizer *f, int need) {
  if (need <= f->scratch_cap) return LOOM_OK;
  int cap = f->scratch_cap ? f->scratch_cap : 8;
  while (cap < need) cap *= 2;
#define GROW(field)                                                                  \
  do {                                                                               \
    void *np_ = loom_sys_realloc((void *)f->scratch.field, (size_t)cap * sizeof *f->scratch.field); \
    if (!np_) return loom_set_error(LOOM_ERR_OOM, "optimizer: out of host memory");   \
    f->scratch.field = np_;                                                          \
  } while (0)
  GROW(pp);
  GROW(b1);
  GROW(b2);
  GROW(gp);
  GROW(numel);
  GROW(lowp);
  GROW(g16);
  GROW(g16all);
  GROW(idx);
  GROW(grp);
#undef GROW
  f->scratch_cap = cap;
  return LOOM_OK;
}

loom_fused_optimizer *loom_fused_new(size_t size, const loom_optimizer_vtable *vt, const loom_fused_update *update,
                                     loom_tensor *const *params, int n, double lr) {
  loom_device dev = params && n > 0 && params[0] ? params[0]->storage->device : loom_cpu();
  if (loom_optim_check_params("optimizer", NULL, 0, params, n, dev) != LOOM_OK) return NULL;
  loom_fused_optimizer *f = loom_sys_calloc(1, size);
  if (!f) {
    loom_set_error(LOOM_ERR_OOM, "optimizer: out of host memory");
    return NULL;
  }
  loom_optim_base_init(&f->base, vt, dev, lr);
  f->update = update;
  return f;
}

loom_optimizer *loom_fused_first_group(loom_fused_optimizer *f, loom_tensor *const *params, int n, double lr,
                                       double wd) {
  if (!f) return NULL;
  if (reserve_scratch(f, n) != LOOM_OK || loom_optim_append_group(&f->base, params, n, lr, wd, f->nbufs) != LOOM_OK) {
    loom_fused_free(&f->base);
    return NULL;
  }
  return &f->base;
}

loom_status loom_fused_add_group(loom_optimizer *o, loom_tensor *const *params, int n, double lr, double wd) {
  loom_fused_optimizer *f = (loom_fused_optimizer *)o;
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
  LOOM_TRY(reserve_scratch(f, o->n + n));
  return loom_optim_append_group(o, params, n, lr, wd, f->nbufs);
}

loom_status loom_fused_zero_grad(loom_optimizer *o) {
  loom_optim_zero_param_grads(o);
  return LOOM_OK;
}

void loom_fused_free(loom_optimizer *o) {
  loom_fused_optimizer *f = (loom_fused_optimizer *)o;
  loom_sys_free(f->scratch.pp);
  loom_sys_free(f->scratch.b1);
  loom_sys_free(f->scratch.b2);
  loom_sys_free(f->scratch.gp);
  loom_sys_free(f->scratch.numel);
  loom_sys_free(f->scratch.lowp);
  loom_sys_free((void *)f->scratch.g16);
  loom_sys_free((void *)f->scratch.g16all);
  loom_sys_free(f->scratch.idx);
  loom_sys_free(f->scratch.grp);
#ifdef LOOM_HAVE_CUDA
  loom_dev_table_free(f->gather_table);
#endif
  loom_optim_base_release(o);
  loom_sys_free(f);
}

/* ---- the step ------------------------------------------------------------------- */

/* Gather the parameters that have gradients into g (arrays of o->n); idx[k]
 * receives the parameter index of entry k. */
static loom_status fill_group(loom_optimizer *o, loom_param_group *g, float **pp, const float **gp, float **b1,
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
  g->grad16 = NULL;
  g->grad16_dtype = LOOM_F32;
  return LOOM_OK;
}

/* After fill_group: point g->lowp at the low-precision copies of the
 * parameters in g (same order), so the fused step refreshes them. lowp has
 * room for o->n entries. Leaves g->lowp NULL when no parameter has a copy. */
static loom_status fill_lowp(loom_optimizer *o, loom_param_group *g, uint16_t **lowp) {
  /* Same walk as fill_group: parameters that have a gradient. */
  int k = 0, any = 0;
  loom_dtype dt = LOOM_F16;
  for (int i = 0; i < o->n; i++) {
    loom_tensor *p = o->params[i];
    if (!p->grad) continue;
    loom_tensor *c = loom_amp_copy_of(p);
    lowp[k] = NULL;
    if (c) {
      if (any && c->dtype != dt)
        return loom_set_error(LOOM_ERR_UNSUPPORTED,
                              "optimizer: parameters have both f16 and bf16 copies; give each precision policy its "
                              "own optimizer");
      if (!loom_tensor_is_contiguous(c) || c->storage->device.kind != p->storage->device.kind)
        return loom_set_error(LOOM_ERR_INTERNAL, "optimizer: low-precision copy of parameter %d is not dense", i);
      dt = c->dtype;
      any = 1;
      lowp[k] = loom_tensor_ptr(c);
    }
    k++;
  }
  if (k != g->n) return loom_set_error(LOOM_ERR_INTERNAL, "optimizer: parameter group changed while filling copies");
  g->lowp = any ? lowp : NULL;
  g->lowp_dtype = dt;
  return LOOM_OK;
}

/* The CUDA step of every group at once: one launch whatever the
 * parameters' counts (they are on the device, per parameter) and groups
 * (each table entry names its group; the groups' lr and weight decay travel
 * by value in the launch), vetoed by *skip. */
#ifdef LOOM_HAVE_CUDA
static loom_status cuda_step(loom_fused_optimizer *f, loom_param_group *g, const int *idx, const int32_t *skip) {
  loom_optimizer *o = &f->base;
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
    f->scratch.grp[k] = gi;
  }
  loom_lr_params sp = loom_lr_params_of(&o->sched);
  /* beta1 / beta2 are AdamW's (its update fills them in); 0 for SGD. */
  loom_opt_cuda_args a = {&o->cuda,       o->n,        idx, o->param_steps,
                          o->steps,       0.0,         0.0, skip,
                          f->scratch.grp, o->n_groups, glr, gwd,
                          o->has_sched ? &sp : NULL, o->sched_step, o->sched_reseed};
  bool fresh = o->cuda == NULL;
  loom_status st = f->update->cuda(f, g, glr[0], gwd[0], &a);
  if (fresh && o->cuda) o->synced_replays = loom_graph_replay_count();  /* seeded from the host's counts */
  /* No gradients: nothing launched moved the device's schedule position. */
  if (st == LOOM_OK && o->has_sched) o->sched_reseed = g->n == 0;
  return st;
}
#endif

/* Parameters keep their own update counts, as in PyTorch: one that first
 * gets a gradient late starts its momentum and bias correction then. In the
 * usual case every parameter has the same count and this is one fused call. */
static loom_status step_by_count(loom_fused_optimizer *f, loom_param_group *g, const int *idx,
                                 const loom_optim_group *grp) {
  const int64_t *steps = f->base.param_steps;
  bool uniform = true;
  for (int j = 1; j < g->n; j++) uniform = uniform && steps[idx[j]] == steps[idx[0]];
  if (uniform) return g->n ? f->update->cpu(f, g, steps[idx[0]], grp) : LOOM_OK;
  int n = g->n;
  size_t ptrs = (size_t)n * sizeof(void *);
  float **pp = loom_sys_malloc(ptrs), **b1 = loom_sys_malloc(ptrs), **b2 = loom_sys_malloc(ptrs);
  const float **gp = loom_sys_malloc(ptrs);
  uint16_t **lp = loom_sys_malloc(ptrs);
  const uint16_t **g16 = loom_sys_malloc(ptrs);
  int64_t *numel = loom_sys_malloc((size_t)n * sizeof *numel);
  bool *done = loom_sys_calloc((size_t)n, sizeof *done);
  loom_status st = (pp && b1 && b2 && gp && lp && g16 && numel && done) ? LOOM_OK
                   : loom_set_error(LOOM_ERR_OOM, "optimizer_step: out of host memory");
  for (int j0 = 0; j0 < n && st == LOOM_OK; j0++) {
    if (done[j0]) continue;
    int64_t c = steps[idx[j0]];
    loom_param_group sub = *g;
    sub.n = 0;
    sub.param = pp, sub.grad = gp, sub.buf1 = g->buf1 ? b1 : NULL, sub.buf2 = g->buf2 ? b2 : NULL;
    sub.lowp = g->lowp ? lp : NULL, sub.numel = numel, sub.grad16 = g->grad16 ? g16 : NULL;
    for (int j = j0; j < n; j++) {
      if (done[j] || steps[idx[j]] != c) continue;
      pp[sub.n] = g->param[j];
      gp[sub.n] = g->grad[j];
      if (g->buf1) b1[sub.n] = g->buf1[j];
      if (g->buf2) b2[sub.n] = g->buf2[j];
      if (g->lowp) lp[sub.n] = g->lowp[j];
      if (g->grad16) g16[sub.n] = g->grad16[j];
      numel[sub.n] = g->numel[j];
      sub.n++;
      done[j] = true;
    }
    st = f->update->cpu(f, &sub, c, grp);
  }
  loom_sys_free(pp), loom_sys_free(b1), loom_sys_free(b2), loom_sys_free(gp), loom_sys_free(lp);
  loom_sys_free((void *)g16), loom_sys_free(numel), loom_sys_free(done);
  return st;
}

static loom_status fused_step(loom_fused_optimizer *f, const int32_t *skip) {
  loom_optimizer *o = &f->base;
  bool on_gpu = o->device.kind == LOOM_CUDA;
  if (skip && !on_gpu) return loom_set_error(LOOM_ERR_INTERNAL, "optimizer_step: a device skip flag on the CPU");
  /* The first GPU step uploads the device state (optim_cuda.c refuses it
   * inside a capture too): refused here before moment buffers are made in
   * the capture's pool. */
  if (on_gpu && !o->cuda && loom_capture_current())
    return loom_set_error(LOOM_ERR_STATE, "optimizer step: the first step of an optimizer on cuda:%d cannot be "
                          "captured (it uploads the optimizer's device state); take one step before "
                          "loom_graph_capture_begin", o->device.index);
  int *idx = f->scratch.idx;
  loom_param_group g;
  /* Mixed precision (lib/amp): masters whose low-precision copies got the
   * gradient receive it in f32 first; the fused step refreshes the copies. */
  /* On the CPU the widening of 16-bit gradients is deferred into the
   * update's blocks (one pass through memory instead of two). */
  loom_dtype g16dt = LOOM_F32;
  loom_status st = on_gpu ? loom_amp_unscale_grads(o->params, o->n, 1.0f, false, NULL, &f->gather_table)
                          : loom_amp_unscale_grads_deferred(o->params, o->n, f->scratch.g16all, &g16dt);
  if (st == LOOM_OK)
    st = fill_group(o, &g, f->scratch.pp, f->scratch.gp, f->scratch.b1, f->scratch.b2, f->scratch.numel, idx);
  if (st == LOOM_OK) st = fill_lowp(o, &g, f->scratch.lowp);
  bool deferred = false;
  if (!on_gpu && st == LOOM_OK && g16dt != LOOM_F32) {
    for (int k = 0; k < g.n; k++) f->scratch.g16[k] = f->scratch.g16all[idx[k]];
    g.grad16 = f->scratch.g16;
    g.grad16_dtype = g16dt;
    deferred = true;
  }
#ifdef LOOM_HAVE_CUDA
  if (st == LOOM_OK && on_gpu) st = cuda_step(f, &g, idx, skip);
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
      sub.grad16 = g.grad16 ? g.grad16 + k0 : NULL;
      st = step_by_count(f, &sub, idx + k0, grp);
      k0 = k1;
    }
  }
  /* The deferred gradients are consumed (widened by the update; by the
   * finish when a failure came first). */
  if (!on_gpu && g16dt != LOOM_F32)
    loom_amp_deferred_finish(o->params, o->n, f->scratch.g16all, g16dt, !deferred || st != LOOM_OK);
  if (st == LOOM_OK) {
    /* A step the device may veto is counted on the device only; the host
     * copies catch up when asked (loom_optimizer_steps). */
    if (skip) o->counts_on_device = true;
    for (int j = 0; j < g.n; j++) {
      loom_tensor *p = o->params[idx[j]];
      if (!skip) o->param_steps[idx[j]]++;
      loom_tensor_bump_version(p);
      loom_tensor_bump_version(loom_amp_copy_of(p));
    }
    if (!skip) o->steps++;
  }
  return st;
}

/* The step in a profiler / NVTX range (device-timed on the optimizer's device). */
loom_status loom_fused_step(loom_optimizer *o, const int32_t *skip) {
  loom_fused_optimizer *f = (loom_fused_optimizer *)o;
  loom_prof_range pr = LOOM_PROF_RANGE_INIT;
  if (LOOM_PROF_ACTIVE()) loom_prof_begin_device(&pr, LOOM_PROF_CAT_OPTIMIZER, f->update->prof_name, o->device);
  loom_status st = fused_step(f, skip);
  loom_prof_end(&pr, 0.0, 0);
  return st;
}
