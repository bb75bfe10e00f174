/* batch_norm.c — the BatchNorm2d layer on the batch_norm op: f32 weight and
 * bias, running statistics and num_batches_tracked as buffers (PyTorch's
 * names), batch statistics in training mode and running ones in eval mode,
 * and an optional fused ReLU (Conv→BN→ReLU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/autograd.h"
#include "core/struct_size.h"
#include "nn/module_internal.h"
#include "tensor/grad_mode.h"
#include "core/sys.h"

typedef struct bn_impl {
  loom_batch_norm_options opt;  /* momentum, eps (training and act come from the module) */
  bool affine;
} bn_impl;

/* Buffer indices (added in this order). */
enum { BN_RUNNING_MEAN = 0, BN_RUNNING_VAR = 1, BN_TRACKED = 2 };

/* num_batches_tracked += 1 without recording autograd and without a host
 * wait: on the CPU in place; on a GPU through f32 on the device (exact up to
 * 2^24 batches). Reading the tensor each time (rather than a host counter)
 * keeps a restored checkpoint's value. */
static loom_status bump_tracked(loom_tensor *t) {
  if (t->storage->device.kind == LOOM_CPU) {
    int64_t *p = loom_tensor_ptr(t);
    *p += 1;
    loom_tensor_bump_version(t);
    return LOOM_OK;
  }
  bool prev = loom_set_grad_enabled(false);
  loom_scope_begin();
  loom_tensor *next = loom_cast(loom_add_scalar(loom_cast(t, LOOM_F32), 1.0), LOOM_I64);
  loom_status st = next ? loom_copy_(t, next) : loom_last_status();
  loom_scope_end();
  loom_set_grad_enabled(prev);
  return st;
}

static loom_tensor *bn_forward(loom_module *m, loom_tensor *x) {
  const bn_impl *b = m->impl;
  if (x->ndim != 4) {
    char sb[96];
    loom_set_error(LOOM_ERR_SHAPE, "%s: expects a 4-D [N, C, H, W] input, got %s", m->name,
                   loom_shape_str(x->ndim, x->shape, sb, sizeof sb));
    return NULL;
  }
  loom_batch_norm_options o = b->opt;
  o.training = m->training;
  o.act = m->act;
  loom_tensor *w = b->affine ? m->params[0] : NULL, *bias = b->affine ? m->params[1] : NULL;
  loom_tensor *y = loom_batch_norm(x, m->buffers[BN_RUNNING_MEAN], m->buffers[BN_RUNNING_VAR], w, bias, &o);
  /* Inside a checkpointed segment recomputed in backward the forward pass
   * counted this batch already (and loom_batch_norm left the running
   * statistics alone): count it once, as the plain run does. */
  if (y && m->training && !loom_checkpoint_recomputing() && bump_tracked(m->buffers[BN_TRACKED]) != LOOM_OK) {
    loom_error_prefix("%s: num_batches_tracked", m->name);
    if (loom_scope_depth() == 0) loom_tensor_release(y);  /* else the open scope owns it */
    return NULL;
  }
  return y;
}

static void bn_destroy(loom_module *m) { loom_sys_free(m->impl); }

/* A module-owned tensor filled with v (not adopted by any scope). */
static loom_tensor *filled(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev, double v) {
  loom_tensor *t = loom_tensor_alloc_raw(ndim, shape, dt, dev);
  if (t && loom_fill_(t, v) != LOOM_OK) {
    loom_tensor_release(t);
    return NULL;
  }
  return t;
}

void loom_batch_norm2d_name(loom_module *m) {
  const bn_impl *b = m->impl;
  loom_module_set_name(m, "BatchNorm2d(%lld%s%s)", (long long)m->out_features, b->affine ? "" : ", no affine",
           m->act == LOOM_ACT_RELU ? ", relu" : "");
}

loom_module *loom_batch_norm2d_new(int64_t num_features, const loom_batch_norm_options *opt, bool affine,
                                   loom_device dev) {
  loom_batch_norm_options o;
  loom_batch_norm_options_init(&o);
  if (LOOM_STRUCT_IN("batch_norm2d_new", loom_batch_norm_options, &o, opt) != LOOM_OK) return NULL;
  if (num_features <= 0) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "batch_norm2d_new: num_features must be positive (got %lld)",
                   (long long)num_features);
    return NULL;
  }
  if (!(o.momentum >= 0 && o.momentum <= 1) || !(o.eps > 0 && o.eps < 1)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "batch_norm2d_new: need momentum in [0, 1] and eps in (0, 1) (got %g, %g)",
                   o.momentum, o.eps);
    return NULL;
  }
  if (o.act != LOOM_ACT_NONE && o.act != LOOM_ACT_RELU) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "batch_norm2d_new: unknown activation %d", (int)o.act);
    return NULL;
  }
  if (loom_device_check(dev) != LOOM_OK) return NULL;
  loom_module *m = loom_module_alloc(LOOM_MOD_BATCHNORM2D, "BatchNorm2d");
  if (!m) return NULL;
  bn_impl *b = loom_sys_calloc(1, sizeof *b);
  if (!b) {
    loom_set_error(LOOM_ERR_OOM, "batch_norm2d_new: out of host memory");
    loom_module_free(m);
    return NULL;
  }
  b->opt = o;
  b->affine = affine;
  m->impl = b;
  m->forward = bn_forward;
  m->destroy = bn_destroy;
  m->in_features = m->out_features = num_features;
  m->act = (loom_activation)o.act;
  int64_t c = num_features, one = 1;
  bool ok = true;
  if (affine) {
    ok = loom_module_add_param(m, "weight", filled(1, &c, LOOM_F32, dev, 1.0)) == LOOM_OK &&
         loom_module_add_param(m, "bias", filled(1, &c, LOOM_F32, dev, 0.0)) == LOOM_OK;
  }
  ok = ok && loom_module_add_buffer(m, "running_mean", filled(1, &c, LOOM_F32, dev, 0.0)) == LOOM_OK &&
       loom_module_add_buffer(m, "running_var", filled(1, &c, LOOM_F32, dev, 1.0)) == LOOM_OK &&
       loom_module_add_buffer(m, "num_batches_tracked", filled(0, &one, LOOM_I64, dev, 0.0)) == LOOM_OK;
  if (!ok) {
    loom_module_free(m);
    return NULL;
  }
  for (int i = 0; i < m->n_params; i++) loom_set_requires_grad(m->params[i], true);
  loom_batch_norm2d_name(m);
  return m;
}
