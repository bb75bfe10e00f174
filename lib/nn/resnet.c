/* resnet.c — ResNet builders: CIFAR-style ResNet-20/32/44/56/110 (He et al.
 * 2016, section 4.2) and ImageNet-style ResNet-18/34/50/101/152
 * (torchvision), with torchvision's module structure and parameter names,
 * Kaiming (fan-out) convolution init, BN weight 1 / bias 0, and a forward
 * that brings its input into the network's memory format and compute dtype
 * in one pass before the stem. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/autograd.h"
#include "core/struct_size.h"
#include "nn/module_internal.h"
#include "nn/precision_policy.h"
#include "nn/resnet_internal.h"
#include "core/sys.h"

typedef struct resnet_impl {
  loom_resnet_arch arch;
  loom_memory_format format;
  int64_t in_channels;
} resnet_impl;

static const struct arch_info {
  const char *name;
  bool cifar, bottleneck;
  int blocks[4];  /* per stage (CIFAR-style: 3 stages) */
} ARCHS[] = {
    [LOOM_RESNET20] = {"resnet20", true, false, {3, 3, 3, 0}},
    [LOOM_RESNET32] = {"resnet32", true, false, {5, 5, 5, 0}},
    [LOOM_RESNET44] = {"resnet44", true, false, {7, 7, 7, 0}},
    [LOOM_RESNET56] = {"resnet56", true, false, {9, 9, 9, 0}},
    [LOOM_RESNET110] = {"resnet110", true, false, {18, 18, 18, 0}},
    [LOOM_RESNET18] = {"resnet18", false, false, {2, 2, 2, 2}},
    [LOOM_RESNET34] = {"resnet34", false, false, {3, 4, 6, 3}},
    [LOOM_RESNET50] = {"resnet50", false, true, {3, 4, 6, 3}},
    [LOOM_RESNET101] = {"resnet101", false, true, {3, 4, 23, 3}},
    [LOOM_RESNET152] = {"resnet152", false, true, {3, 8, 36, 3}},
};
#define N_ARCHS ((int)(sizeof ARCHS / sizeof ARCHS[0]))

/* Options written before checkpoint_every was appended are 40 bytes long:
 * the new field must lie past them (an older struct_size copies only those). */
_Static_assert(offsetof(loom_resnet_options, checkpoint_every) == 40, "checkpoint_every past the 40-byte options");

static bool arch_valid(int a) { return a >= 0 && a < N_ARCHS && ARCHS[a].name; }

const char *loom_resnet_arch_name(loom_resnet_arch arch) { return arch_valid((int)arch) ? ARCHS[arch].name : "?"; }

loom_status loom_resnet_parse(const char *name, loom_resnet_arch *out) {
  if (!name || !out) return loom_set_error(LOOM_ERR_INVALID_ARG, "resnet_parse: name and out must not be NULL");
  for (int a = 0; a < N_ARCHS; a++) {
    if (!strcmp(name, ARCHS[a].name)) {
      *out = (loom_resnet_arch)a;
      return LOOM_OK;
    }
  }
  return loom_set_error(LOOM_ERR_INVALID_ARG,
                        "resnet: unknown model '%s'; use resnet20, resnet32, resnet44, resnet56, resnet110 (CIFAR-style) "
                        "or resnet18, resnet34, resnet50, resnet101, resnet152 (ImageNet-style)",
                        name);
}

void loom_resnet_options_init(loom_resnet_options *o, loom_resnet_arch arch) {
  if (!o) return;
  bool cifar = arch_valid((int)arch) ? ARCHS[arch].cifar : true;
  *o = (loom_resnet_options){sizeof *o, 3, cifar ? 10 : 1000, LOOM_SHORTCUT_PROJECTION, LOOM_FORMAT_NCHW, false, 0};
}

/* x in the network's memory format and dtype. Without autograd on x this is
 * one strided copy that converts both (the usual case: a batch from the
 * loader); with it, the differentiable conversion and cast. */
static loom_tensor *prepare_input(loom_module *m, loom_tensor *x) {
  const resnet_impl *r = m->impl;
  if (x->ndim != 4 || x->shape[1] != r->in_channels) {
    char b[96];
    loom_set_error(LOOM_ERR_SHAPE, "%s: expects input [N, %lld, H, W], got %s", m->name, (long long)r->in_channels,
                   loom_shape_str(x->ndim, x->shape, b, sizeof b));
    return NULL;
  }
  const loom_module_policy *pol = m->policy;
  loom_dtype cdt = pol ? loom_precision_compute_dtype(pol->precision) : LOOM_F32;
  bool nhwc = r->format == LOOM_FORMAT_NHWC;
  bool in_format = nhwc ? loom_tensor_is_channels_last(x) : loom_tensor_is_contiguous(x);
  if (in_format && x->dtype == cdt) return x;
  if (loom_requires_grad(x)) return loom_cast(loom_to_memory_format(x, r->format), cdt);
  loom_tensor *t = loom_tensor_alloc_raw(4, x->shape, cdt, x->storage->device);
  if (!t) return NULL;
  if (nhwc) {
    const int64_t C = x->shape[1], H = x->shape[2], W = x->shape[3];
    t->strides[0] = H * W * C, t->strides[1] = 1, t->strides[2] = W * C, t->strides[3] = C;
  }
  if (loom_copy_(t, x) != LOOM_OK) {
    loom_tensor_release(t);
    return NULL;
  }
  return loom_tensor_adopt(t);
}

static loom_tensor *resnet_forward(loom_module *m, loom_tensor *x) {
  x = prepare_input(m, x);
  for (int i = 0; i < m->n_children && x; i++) {
    loom_module *c = m->children[i];
    if (!strcmp(m->child_names[i], "fc")) x = loom_flatten(x, 1, -1);
    x = loom_module_forward(c, x);
    /* A 1-channel input is NCHW and NHWC at once, and ops read such a
     * tensor as NCHW: a channels-last network converts the stem's output. */
    if (i == 0 && x && ((resnet_impl *)m->impl)->format == LOOM_FORMAT_NHWC && !loom_tensor_is_channels_last(x))
      x = loom_to_memory_format(x, LOOM_FORMAT_NHWC);
  }
  return x;
}

static void resnet_destroy(loom_module *m) { loom_sys_free(m->impl); }

loom_status loom_resnet_set_memory_format(loom_module *m, loom_memory_format f) {
  if (!m || m->kind != LOOM_MOD_RESNET) return loom_set_error(LOOM_ERR_INVALID_ARG, "resnet_set_memory_format: not a ResNet");
  if (f != LOOM_FORMAT_NCHW && f != LOOM_FORMAT_NHWC)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "resnet_set_memory_format: format %d is not NCHW (0) or NHWC (1)", (int)f);
  ((resnet_impl *)m->impl)->format = f;
  return LOOM_OK;
}

static loom_module *stage(const struct arch_info *a, int64_t *in, int64_t planes, int n, int64_t stride,
                          const loom_resnet_options *o, loom_device dev) {
  loom_module *seq = loom_sequential_new();
  for (int b = 0; b < n && seq; b++) {
    loom_module *blk = loom_resnet_block_make(a->bottleneck, *in, planes, b == 0 ? stride : 1,
                                              a->cifar ? (loom_resnet_shortcut)o->shortcut : LOOM_SHORTCUT_PROJECTION,
                                              o->zero_init_residual, dev);
    if (loom_sequential_add(seq, blk) != LOOM_OK) {
      loom_module_free(seq);
      return NULL;
    }
    *in = a->bottleneck ? 4 * planes : planes;
  }
  /* Checkpoint each run of checkpoint_every blocks (0: off). */
  if (seq && loom_sequential_set_checkpoint_every(seq, (int)o->checkpoint_every) != LOOM_OK) {
    loom_module_free(seq);
    return NULL;
  }
  return seq;
}

loom_module *loom_resnet_new(loom_resnet_arch arch, const loom_resnet_options *opt, loom_device dev) {
  if (!arch_valid((int)arch)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "resnet_new: unknown architecture %d; use a loom_resnet_arch value", (int)arch);
    return NULL;
  }
  loom_resnet_options o;
  loom_resnet_options_init(&o, arch);
  if (LOOM_STRUCT_IN("resnet_new", loom_resnet_options, &o, opt) != LOOM_OK) return NULL;
  if (o.in_channels < 1 || o.num_classes < 1) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "resnet_new: in_channels and num_classes must be positive (got %lld, %lld)",
                   (long long)o.in_channels, (long long)o.num_classes);
    return NULL;
  }
  if (o.memory_format != LOOM_FORMAT_NCHW && o.memory_format != LOOM_FORMAT_NHWC) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "resnet_new: memory_format %d is not NCHW (0) or NHWC (1)", (int)o.memory_format);
    return NULL;
  }
  if (o.shortcut != LOOM_SHORTCUT_PROJECTION && o.shortcut != LOOM_SHORTCUT_ZERO_PAD) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "resnet_new: unknown shortcut %d", (int)o.shortcut);
    return NULL;
  }
  if (o.checkpoint_every < 0 || o.checkpoint_every > INT32_MAX) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "resnet_new: checkpoint_every = %lld must be >= 0 (0: off; n: checkpoint each "
                   "run of n residual blocks within a stage)", (long long)o.checkpoint_every);
    return NULL;
  }
  if (loom_device_check(dev) != LOOM_OK) return NULL;
  const struct arch_info *a = &ARCHS[arch];
  loom_module *m = loom_module_alloc(LOOM_MOD_RESNET, a->name);
  resnet_impl *r = m ? loom_sys_calloc(1, sizeof *r) : NULL;
  if (!r) {
    if (m) loom_set_error(LOOM_ERR_OOM, "resnet_new: out of host memory");
    loom_module_free(m);
    return NULL;
  }
  *r = (resnet_impl){arch, (loom_memory_format)o.memory_format, o.in_channels};
  m->impl = r;
  m->destroy = resnet_destroy;
  m->forward = resnet_forward;
  int64_t width = a->cifar ? 16 : 64, in = width;
  loom_conv2d_options stem;
  loom_conv2d_options_init(&stem);
  int64_t k = a->cifar ? 3 : 7;
  stem.stride[0] = stem.stride[1] = a->cifar ? 1 : 2;
  stem.padding[0] = stem.padding[1] = k / 2;
  loom_batch_norm_options bno;
  loom_batch_norm_options_init(&bno);
  bno.act = LOOM_ACT_RELU;
  loom_status st = loom_module_add_child(
      m, "conv1", loom_conv2d_new(o.in_channels, width, k, k, &stem, false, LOOM_INIT_KAIMING_NORMAL_FAN_OUT, dev));
  if (st == LOOM_OK) st = loom_module_add_child(m, "bn1", loom_batch_norm2d_new(width, &bno, true, dev));
  if (st == LOOM_OK && !a->cifar) {
    loom_pool2d_options mp;
    loom_pool2d_options_init(&mp, 3, 3);
    mp.stride[0] = mp.stride[1] = 2;
    mp.padding[0] = mp.padding[1] = 1;
    st = loom_module_add_child(m, "maxpool", loom_max_pool2d_new(&mp));
  }
  int stages = a->cifar ? 3 : 4;
  for (int s = 0; s < stages && st == LOOM_OK; s++) {
    char name[16];
    snprintf(name, sizeof name, "layer%d", s + 1);
    st = loom_module_add_child(m, name, stage(a, &in, width << s, a->blocks[s], s == 0 ? 1 : 2, &o, dev));
  }
  if (st == LOOM_OK) st = loom_module_add_child(m, "avgpool", loom_adaptive_avg_pool2d_new(1, 1));
  if (st == LOOM_OK) st = loom_module_add_child(m, "fc", loom_linear_new(in, o.num_classes, true, LOOM_INIT_DEFAULT, dev));
  if (st != LOOM_OK) {
    loom_error_prefix("resnet_new (%s)", a->name);
    loom_module_free(m);
    return NULL;
  }
  loom_module_set_name(m, "ResNet-%s(%lld -> %lld%s)", a->name + 6, (long long)o.in_channels,
           (long long)o.num_classes, a->cifar && o.shortcut == LOOM_SHORTCUT_ZERO_PAD ? ", option A" : "");
  return m;
}
