/* conv2d.c — the Conv2d layer: y = act(conv2d(x, w) + b) on the conv2d op,
 * with its low-precision weight copies under a mixed precision policy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/autograd.h"
#include "core/struct_size.h"
#include "nn/module_internal.h"
#include "nn/precision_policy.h"
#include "core/sys.h"

static loom_tensor *conv2d_forward(loom_module *m, loom_tensor *x) {
  /* Under a mixed-precision policy the policy picks the weights and casts. */
  if (m->policy) return loom_module_policy_conv2d_forward(m, x);
  loom_conv2d_options o = ((loom_conv2d_impl *)m->impl)->opt;
  o.act = m->act;
  return loom_conv2d(x, m->params[0], m->n_params > 1 ? m->params[1] : NULL, &o);
}

static void conv2d_destroy(loom_module *m) { loom_sys_free(m->impl); }

/* "Conv2d(16, 32, 3x3, stride 2, pad 1, relu)": the parts that differ from the defaults. */
void loom_conv2d_name(loom_module *m) {
  const loom_conv2d_options *o = &((loom_conv2d_impl *)m->impl)->opt;
  const loom_tensor *w = m->params[0];
  char extra[96] = "";
  size_t n = 0;
#define ADD(...) n += (size_t)snprintf(extra + n, n < sizeof extra ? sizeof extra - n : 0, __VA_ARGS__)
  if (o->stride[0] != 1 || o->stride[1] != 1) ADD(", stride %lld", (long long)o->stride[0]);
  if (o->stride[0] != o->stride[1]) ADD("x%lld", (long long)o->stride[1]);
  if (o->padding[0] || o->padding[1]) ADD(", pad %lld", (long long)o->padding[0]);
  if (o->padding[0] != o->padding[1]) ADD("x%lld", (long long)o->padding[1]);
  if (o->dilation[0] != 1 || o->dilation[1] != 1) ADD(", dilation %lldx%lld", (long long)o->dilation[0], (long long)o->dilation[1]);
  if (o->groups != 1) ADD(", groups %lld", (long long)o->groups);
  if (m->n_params < 2) ADD(", no bias");
  if (m->act == LOOM_ACT_RELU) ADD(", relu");
#undef ADD
  loom_module_set_name(m, "Conv2d(%lld, %lld, %lldx%lld%s)", (long long)m->in_features,
           (long long)m->out_features, (long long)w->shape[2], (long long)w->shape[3], extra);
}

loom_module *loom_conv2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_h, int64_t kernel_w,
                             const loom_conv2d_options *opt, bool bias, loom_init init, loom_device dev) {
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  if (LOOM_STRUCT_IN("conv2d_new", loom_conv2d_options, &o, opt) != LOOM_OK) return NULL;
  if (in_channels <= 0 || out_channels <= 0 || kernel_h <= 0 || kernel_w <= 0) {
    loom_set_error(LOOM_ERR_INVALID_ARG,
                   "conv2d_new: channels and kernel size must be positive (got %lld -> %lld, kernel %lldx%lld)",
                   (long long)in_channels, (long long)out_channels, (long long)kernel_h, (long long)kernel_w);
    return NULL;
  }
  if (o.groups < 1 || in_channels % o.groups || out_channels % o.groups) {
    loom_set_error(LOOM_ERR_INVALID_ARG,
                   "conv2d_new: groups %lld must be >= 1 and divide both in_channels %lld and out_channels %lld",
                   (long long)o.groups, (long long)in_channels, (long long)out_channels);
    return NULL;
  }
  for (int d = 0; d < 2; d++) {
    if (o.stride[d] < 1 || o.dilation[d] < 1 || o.padding[d] < 0) {
      loom_set_error(LOOM_ERR_INVALID_ARG,
                     "conv2d_new: stride and dilation must be >= 1 and padding >= 0 (got stride %lldx%lld, dilation "
                     "%lldx%lld, padding %lldx%lld)",
                     (long long)o.stride[0], (long long)o.stride[1], (long long)o.dilation[0], (long long)o.dilation[1],
                     (long long)o.padding[0], (long long)o.padding[1]);
      return NULL;
    }
  }
  if (o.act != LOOM_ACT_NONE && o.act != LOOM_ACT_RELU) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "conv2d_new: unknown activation %d", (int)o.act);
    return NULL;
  }
  if (loom_device_check(dev) != LOOM_OK) return NULL;
  loom_module *m = loom_module_alloc(LOOM_MOD_CONV2D, "Conv2d");
  if (!m) return NULL;
  m->forward = conv2d_forward;
  m->destroy = conv2d_destroy;
  m->in_features = in_channels;
  m->out_features = out_channels;
  m->act = (loom_activation)o.act;
  loom_conv2d_impl *impl = loom_sys_calloc(1, sizeof *impl);
  if (!impl) {
    loom_set_error(LOOM_ERR_OOM, "conv2d_new: out of host memory");
    loom_module_free(m);
    return NULL;
  }
  impl->opt = o;
  m->impl = impl;
  int64_t cg = in_channels / o.groups;
  int64_t ws[4] = {out_channels, cg, kernel_h, kernel_w};
  if (loom_module_add_param(m, "weight", loom_tensor_alloc_raw(4, ws, LOOM_F32, dev)) != LOOM_OK ||
      (bias && loom_module_add_param(m, "bias", loom_tensor_alloc_raw(1, &out_channels, LOOM_F32, dev)) != LOOM_OK)) {
    loom_module_free(m);
    return NULL;
  }
  /* PyTorch's fans of a conv weight: fan_in = C/groups*KH*KW, fan_out = O*KH*KW. */
  int64_t fan_in = cg * kernel_h * kernel_w, fan_out = out_channels * kernel_h * kernel_w;
  if (loom_init_(m->params[0], init, fan_in, fan_out) != LOOM_OK ||
      (bias && loom_init_(m->params[1], LOOM_INIT_DEFAULT, fan_in, fan_out) != LOOM_OK)) {
    loom_module_free(m);
    return NULL;
  }
  for (int i = 0; i < m->n_params; i++) loom_set_requires_grad(m->params[i], true);
  loom_conv2d_name(m);
  return m;
}
