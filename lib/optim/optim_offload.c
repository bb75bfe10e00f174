/* optim_offload.c — optimizer offload (loom_adamw_offload_new): a wrapper
 * optimizer over the device parameters that owns an inner AdamW over host
 * f32 copies of them, where the state and the update live. Each step brings
 * the gradients to the host, steps the inner optimizer on the CPU and writes
 * the updated values back to the device parameters. The wrapper's header
 * (lr, groups, counts) is the truth; every change to it is handed on to the
 * inner optimizer, so the two never disagree. Copies are synchronous through
 * loom's host<->device copies (pinned buffers and overlap with the backward
 * pass are not done yet). */
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "loom/autograd.h"
#include "ops/op.h"
#include "optim/optim_internal.h"
#include "core/sys.h"

typedef struct offload_optimizer {
  loom_optimizer base;        /* first: the device parameters; no state tensors */
  loom_optimizer *inner;      /* over host_params, on the CPU: the state and the update */
  loom_tensor **host_params;  /* owned host f32 copies, parallel to base.params */
  int host_cap;
} offload_optimizer;

static offload_optimizer *of(loom_optimizer *o) { return (offload_optimizer *)o; }
static const offload_optimizer *cof(const loom_optimizer *o) { return (const offload_optimizer *)o; }

/* dst (host, contiguous) <- src (any device, contiguous), or the reverse. */
static loom_status to_host(loom_tensor *src, loom_tensor *dst) {
  if (src->storage->device.kind == LOOM_CPU) {
    memcpy(loom_tensor_ptr(dst), loom_tensor_ptr(src), (size_t)loom_tensor_numel(src) * loom_dtype_size(src->dtype));
    return LOOM_OK;
  }
  return loom_copy_to_host_raw(src, loom_tensor_ptr(dst));
}

static loom_status from_host(loom_tensor *src, loom_tensor *dst) {
  if (dst->storage->device.kind == LOOM_CPU) {
    memcpy(loom_tensor_ptr(dst), loom_tensor_ptr(src), (size_t)loom_tensor_numel(src) * loom_dtype_size(src->dtype));
    return LOOM_OK;
  }
  return loom_copy_from_host_raw(dst, loom_tensor_ptr(src));
}

/* A host copy of parameter p (f32, contiguous, no scope) that requires grad. */
static loom_tensor *host_copy(loom_tensor *p) {
  if (p->dtype != LOOM_F32 || !loom_tensor_is_contiguous(p)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "adamw_offload: parameters must be contiguous f32 tensors");
    return NULL;
  }
  loom_tensor *h = loom_tensor_alloc_raw(p->ndim, p->shape, LOOM_F32, loom_cpu());
  if (h && to_host(p, h) != LOOM_OK) {
    loom_tensor_release(h);
    return NULL;
  }
  if (h) h->requires_grad = true;
  return h;
}

/* Room for `need` host copies. */
static loom_status reserve_host(offload_optimizer *w, int need) {
  if (need <= w->host_cap) return LOOM_OK;
  int cap = w->host_cap ? w->host_cap : 8;
  while (cap < need) cap *= 2;
  loom_tensor **nh = loom_sys_realloc(w->host_params, (size_t)cap * sizeof *nh);
  if (!nh) return loom_set_error(LOOM_ERR_OOM, "adamw_offload: out of host memory");
  w->host_params = nh;
  w->host_cap = cap;
  return LOOM_OK;
}

/* ---- the interface ------------------------------------------------------------- */

static loom_status offload_step(loom_optimizer *o, const int32_t *skip) {
  if (skip)
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "adamw_offload: the loss scaler's device-side skip is not supported "
                          "with an offloaded optimizer; use bf16 or fp32, or loom_adamw_new");
  offload_optimizer *w = of(o);
  for (int i = 0; i < o->n; i++) {
    loom_tensor *p = o->params[i], *h = w->host_params[i];
    if (loom_amp_copy_of(p))
      return loom_set_error(LOOM_ERR_UNSUPPORTED, "adamw_offload: parameter %d has a low-precision copy (mixed "
                            "precision); offloading covers f32 models for now", i);
    loom_zero_grad(h);
    if (!p->grad) continue;
    loom_tensor *g = loom_tensor_alloc_raw(h->ndim, h->shape, LOOM_F32, loom_cpu());
    if (!g) return loom_last_status();
    loom_tensor *src = loom_tensor_is_contiguous(p->grad) ? loom_tensor_retain(p->grad) : NULL;
    loom_status st = src ? to_host(src, g)
                         : loom_set_error(LOOM_ERR_INTERNAL, "adamw_offload: gradient %d is not contiguous", i);
    loom_tensor_release(src);
    if (st != LOOM_OK) {
      loom_tensor_release(g);
      return st;
    }
    h->grad = g;
  }
  LOOM_TRY(loom_optimizer_step(w->inner));
  for (int i = 0; i < o->n; i++) {
    if (!o->params[i]->grad) continue;
    LOOM_TRY(from_host(w->host_params[i], o->params[i]));
    loom_tensor_bump_version(o->params[i]);
    o->param_steps[i]++;
  }
  o->steps = w->inner->steps;
  return LOOM_OK;
}

static loom_status offload_zero_grad(loom_optimizer *o) {
  loom_optim_zero_param_grads(o);
  return loom_optimizer_zero_grad(of(o)->inner);
}

static void offload_set_lr(loom_optimizer *o, int g, double lr) {
  loom_optim_base_set_lr(o, g, lr);
  if (g < 0) loom_optimizer_set_lr(of(o)->inner, lr);
  else (void)loom_optimizer_set_group_lr(of(o)->inner, g, lr);
}

static void offload_set_weight_decay(loom_optimizer *o, int g, double wd) {
  loom_optim_base_set_weight_decay(o, g, wd);
  loom_optimizer *in = of(o)->inner;
  for (int k = g < 0 ? 0 : g; k < (g < 0 ? o->n_groups : g + 1); k++)
    (void)loom_optimizer_set_group_weight_decay(in, k, wd);
}

static loom_status offload_add_group(loom_optimizer *o, loom_tensor *const *params, int n, double lr, double wd) {
  offload_optimizer *w = of(o);
  LOOM_TRY(reserve_host(w, o->n + n));
  loom_tensor **h = w->host_params + o->n;
  loom_status st = LOOM_OK;
  int made = 0;
  while (made < n && st == LOOM_OK) {
    h[made] = host_copy(params[made]);
    if (h[made]) made++;
    else st = loom_last_status();
  }
  if (st == LOOM_OK) st = loom_optim_append_group(o, params, n, lr, wd, 0);
  if (st == LOOM_OK) {
    loom_param_group_options go;
    loom_param_group_options_init(&go);
    go.lr = lr;
    go.weight_decay = wd;
    st = loom_optimizer_add_param_group(w->inner, h, n, &go);
    if (st != LOOM_OK) loom_optim_pop_group(o);
  }
  if (st != LOOM_OK)
    for (int i = 0; i < made; i++) loom_tensor_release(h[i]);
  return st;
}

/* The state and the implementation's hyper-parameters are the inner's. */
static double offload_default_wd(const loom_optimizer *o) {
  const loom_optimizer *in = cof(o)->inner;
  return in->vt->default_weight_decay(in);
}

static int offload_param_state(const loom_optimizer *o, int i, const char **names, loom_tensor **tensors) {
  const loom_optimizer *in = cof(o)->inner;
  return in->vt->param_state(in, i, names, tensors);
}

static void offload_put_hparams(const loom_optimizer *o, loom_optim_hparam_writer *w) {
  const loom_optimizer *in = cof(o)->inner;
  in->vt->put_hparams(in, w);
}

static loom_status offload_check_hparams(const loom_optimizer *o, loom_optim_lookup lookup, void *ctx) {
  const loom_optimizer *in = cof(o)->inner;
  return in->vt->check_hparams(in, lookup, ctx);
}

static void offload_apply_hparams(loom_optimizer *o, loom_optim_lookup lookup, void *ctx) {
  loom_optimizer *in = of(o)->inner;
  in->vt->apply_hparams(in, lookup, ctx);
}

/* A restore wrote the device parameters, the inner's state tensors and the
 * header: the host copies take the parameters' values, the inner optimizer
 * the lr, groups and counts. */
static loom_status offload_restored(loom_optimizer *o) {
  offload_optimizer *w = of(o);
  loom_optimizer *in = w->inner;
  for (int i = 0; i < o->n; i++) LOOM_TRY(to_host(o->params[i], w->host_params[i]));
  for (int g = 0; g < o->n_groups; g++) {
    LOOM_TRY(loom_optimizer_set_group_lr(in, g, o->groups[g].lr));
    LOOM_TRY(loom_optimizer_set_group_weight_decay(in, g, o->groups[g].weight_decay));
  }
  for (int i = 0; i < o->n; i++) loom_optim_set_param_steps(in, i, o->param_steps[i]);
  in->steps = o->steps;
  return loom_optim_counts_restored(in);
}

static void offload_free(loom_optimizer *o) {
  offload_optimizer *w = of(o);
  loom_optimizer_free(w->inner);
  for (int i = 0; i < o->n; i++) loom_tensor_release(w->host_params[i]);
  loom_sys_free(w->host_params);
  loom_optim_base_release(o);
  loom_sys_free(w);
}

static const loom_optimizer_vtable offload_vtable = {
  .type = "adamw",
  .step = offload_step,
  .zero_grad = offload_zero_grad,
  .set_lr = offload_set_lr,
  .set_weight_decay = offload_set_weight_decay,
  .add_group = offload_add_group,
  .default_weight_decay = offload_default_wd,
  .param_state = offload_param_state,
  .put_hparams = offload_put_hparams,
  .check_hparams = offload_check_hparams,
  .apply_hparams = offload_apply_hparams,
  .restored = offload_restored,
  .free = offload_free,
};

loom_optimizer *loom_optim_offload_inner(const loom_optimizer *o) {
  return o && o->vt == &offload_vtable ? cof(o)->inner : NULL;
}

loom_optimizer *loom_adamw_offload_new(loom_tensor *const *params, int n, const loom_adamw_options *opt) {
  /* Validate the options and build the state on the host copies first. */
  offload_optimizer *w = loom_sys_calloc(1, sizeof *w);
  if (!w || reserve_host(w, n > 0 ? n : 1) != LOOM_OK) {
    loom_sys_free(w);
    loom_set_error(LOOM_ERR_OOM, "adamw_offload: out of host memory");
    return NULL;
  }
  loom_tensor **host = w->host_params;
  bool ok = params && n > 0;
  int made = 0;
  while (ok && made < n) {
    if (!params[made]) loom_set_error(LOOM_ERR_NULL_INPUT, "adamw_offload: parameter %d is NULL", made);
    ok = params[made] && (host[made] = host_copy(params[made])) != NULL;
    if (ok) made++;
  }
  if (ok) w->inner = loom_adamw_new(host, n, opt);
  /* The device side: parameters only, no state, with the inner's groups. */
  if (w->inner) {
    const loom_optim_group *g0 = &w->inner->groups[0];
    loom_device dev = params[0]->storage->device;
    ok = loom_optim_check_params("optimizer", NULL, 0, params, n, dev) == LOOM_OK;
    if (ok) {
      loom_optim_base_init(&w->base, &offload_vtable, dev, w->inner->lr);
      ok = loom_optim_append_group(&w->base, params, n, g0->lr, g0->weight_decay, 0) == LOOM_OK;
    }
  }
  if (!w->inner || !ok) {
    if (!params || n <= 0) loom_set_error(LOOM_ERR_INVALID_ARG, "adamw_offload: needs at least one parameter (got %d)", n);
    loom_optimizer_free(w->inner);
    for (int i = 0; i < made; i++) loom_tensor_release(host[i]);
    loom_sys_free(host);
    loom_optim_base_release(&w->base);
    loom_sys_free(w);
    return NULL;
  }
  return &w->base;
}
