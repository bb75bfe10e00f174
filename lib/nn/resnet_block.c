/* resnet_block.c — the residual blocks of ResNets, named as torchvision
 * names them: BasicBlock (conv1, bn1, conv2, bn2, downsample) and Bottleneck
 * (conv1, bn1, conv2, bn2, conv3, bn3, downsample). The ReLUs after bn1 (and
 * bn2 in a Bottleneck) are fused into batch norm's normalize pass; the
 * residual join is one loom_add_relu.
 *
 * Shortcuts: identity when the shape is kept; otherwise a projection
 * (downsample = Sequential[Conv2d 1x1 with the stride, BatchNorm2d]) or He et
 * al.'s option A, the input subsampled by the stride and zero-padded with
 * channels on both sides. Option A is computed as a 1x1 convolution with a
 * fixed 0/1 weight that selects input channel c into output channel
 * c + pad: exact in every dtype, differentiable through the conv's input
 * gradient, not a parameter (so it is neither trained nor saved, as in the
 * reference implementations), and cheap next to the block's 3x3 convs. */
#include <stdio.h>
#include <stdlib.h>

#include "nn/module_internal.h"
#include "nn/resnet_internal.h"
#include "core/sys.h"

typedef struct block_impl {
  bool bottleneck;
  /* option A: the selection weight per dtype (f32, f16, bf16), made on first use */
  bool zero_pad;
  int64_t in_channels, out_channels, stride;
  loom_tensor *select[3];
  loom_device dev;
} block_impl;

static loom_tensor *child(loom_module *m, const char *name, loom_tensor *x) {
  return loom_module_forward(loom_module_find_child(m, name), x);
}

static int dtype_slot(loom_dtype dt) { return dt == LOOM_F16 ? 1 : dt == LOOM_BF16 ? 2 : 0; }

/* The option-A selection weight [out, in, 1, 1] in dtype dt (borrowed). */
static loom_tensor *select_weight(loom_module *m, loom_dtype dt) {
  block_impl *b = m->impl;
  int s = dtype_slot(dt);
  if (b->select[s]) return b->select[s];
  int64_t O = b->out_channels, C = b->in_channels, pad = (O - C) / 2;
  float *w = loom_sys_calloc((size_t)(O * C), sizeof *w);
  if (!w) {
    loom_set_error(LOOM_ERR_OOM, "%s: out of host memory for the shortcut", m->name);
    return NULL;
  }
  for (int64_t c = 0; c < C; c++) w[(c + pad) * C + c] = 1.0f;
  int64_t shape[4] = {O, C, 1, 1};
  loom_scope_begin();
  loom_tensor *t = loom_cast(loom_from_host(w, 4, shape, LOOM_F32, b->dev), dt);
  b->select[s] = loom_tensor_retain(t);  /* ours; the scope drops its own reference */
  loom_scope_end();
  loom_sys_free(w);
  return b->select[s];
}

static loom_tensor *shortcut(loom_module *m, loom_tensor *x) {
  block_impl *b = m->impl;
  loom_module *ds = loom_module_find_child(m, "downsample");
  if (ds) return loom_module_forward(ds, x);
  if (!b->zero_pad) return x;
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  o.stride[0] = o.stride[1] = b->stride;
  return loom_conv2d(x, select_weight(m, x->dtype), NULL, &o);
}

static loom_tensor *block_forward(loom_module *m, loom_tensor *x) {
  block_impl *b = m->impl;
  loom_tensor *y = child(m, "bn2", child(m, "conv2", child(m, "bn1", child(m, "conv1", x))));
  if (b->bottleneck) y = child(m, "bn3", child(m, "conv3", y));
  return loom_add_relu(y, shortcut(m, x));
}

static void block_destroy(loom_module *m) {
  block_impl *b = m->impl;
  if (!b) return;
  for (int i = 0; i < 3; i++) loom_tensor_release(b->select[i]);
  loom_sys_free(b);
}

/* Conv2d without bias, torchvision's init. */
static loom_module *conv(int64_t in, int64_t out, int64_t k, int64_t stride, loom_device dev) {
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  o.stride[0] = o.stride[1] = stride;
  o.padding[0] = o.padding[1] = k / 2;
  return loom_conv2d_new(in, out, k, k, &o, false, LOOM_INIT_KAIMING_NORMAL_FAN_OUT, dev);
}

static loom_module *bn(int64_t c, bool relu, loom_device dev) {
  loom_batch_norm_options o;
  loom_batch_norm_options_init(&o);
  o.act = relu ? LOOM_ACT_RELU : LOOM_ACT_NONE;
  return loom_batch_norm2d_new(c, &o, true, dev);
}

static loom_module *projection(int64_t in, int64_t out, int64_t stride, loom_device dev) {
  loom_module *seq = loom_sequential_new();
  if (loom_sequential_add(seq, conv(in, out, 1, stride, dev)) != LOOM_OK ||
      loom_sequential_add(seq, bn(out, false, dev)) != LOOM_OK) {
    loom_module_free(seq);
    return NULL;
  }
  return seq;
}

loom_module *loom_resnet_block_make(bool bottleneck, int64_t in, int64_t planes, int64_t stride,
                                    loom_resnet_shortcut sc, bool zero_init_residual, loom_device dev) {
  const char *what = bottleneck ? "bottleneck_new" : "basic_block_new";
  int64_t out = bottleneck ? 4 * planes : planes;
  if (in <= 0 || planes <= 0 || stride <= 0) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "%s: in_channels, planes and stride must be positive (got %lld, %lld, %lld)",
                   what, (long long)in, (long long)planes, (long long)stride);
    return NULL;
  }
  if (sc != LOOM_SHORTCUT_PROJECTION && sc != LOOM_SHORTCUT_ZERO_PAD) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "%s: unknown shortcut %d", what, (int)sc);
    return NULL;
  }
  bool reshape = stride != 1 || in != out;
  bool zero_pad = reshape && sc == LOOM_SHORTCUT_ZERO_PAD;
  if (zero_pad && (out < in || (out - in) % 2)) {
    loom_set_error(LOOM_ERR_INVALID_ARG,
                   "%s: the zero-padding shortcut needs out_channels - in_channels even and >= 0 (got %lld -> %lld); use "
                   "LOOM_SHORTCUT_PROJECTION",
                   what, (long long)in, (long long)out);
    return NULL;
  }
  if (loom_device_check(dev) != LOOM_OK) return NULL;
  loom_module *m = loom_module_alloc(bottleneck ? LOOM_MOD_BOTTLENECK : LOOM_MOD_BASIC_BLOCK, what);
  block_impl *b = m ? loom_sys_calloc(1, sizeof *b) : NULL;
  if (!b) {
    if (m) loom_set_error(LOOM_ERR_OOM, "%s: out of host memory", what);
    loom_module_free(m);
    return NULL;
  }
  *b = (block_impl){.bottleneck = bottleneck, .zero_pad = zero_pad, .in_channels = in, .out_channels = out,
                    .stride = stride, .dev = dev};
  m->impl = b;
  m->destroy = block_destroy;
  m->forward = block_forward;
  m->in_features = in;
  m->out_features = out;
  loom_status st;
  if (!bottleneck) {
    st = loom_module_add_child(m, "conv1", conv(in, planes, 3, stride, dev));
    if (st == LOOM_OK) st = loom_module_add_child(m, "bn1", bn(planes, true, dev));
    if (st == LOOM_OK) st = loom_module_add_child(m, "conv2", conv(planes, planes, 3, 1, dev));
    if (st == LOOM_OK) st = loom_module_add_child(m, "bn2", bn(planes, false, dev));
  } else {
    /* torchvision's v1.5: the stride sits on the 3x3 convolution. */
    st = loom_module_add_child(m, "conv1", conv(in, planes, 1, 1, dev));
    if (st == LOOM_OK) st = loom_module_add_child(m, "bn1", bn(planes, true, dev));
    if (st == LOOM_OK) st = loom_module_add_child(m, "conv2", conv(planes, planes, 3, stride, dev));
    if (st == LOOM_OK) st = loom_module_add_child(m, "bn2", bn(planes, true, dev));
    if (st == LOOM_OK) st = loom_module_add_child(m, "conv3", conv(planes, out, 1, 1, dev));
    if (st == LOOM_OK) st = loom_module_add_child(m, "bn3", bn(out, false, dev));
  }
  if (st == LOOM_OK && reshape && !zero_pad)
    st = loom_module_add_child(m, "downsample", projection(in, out, stride, dev));
  /* torchvision's zero_init_residual: each block starts as the identity. */
  if (st == LOOM_OK && zero_init_residual)
    st = loom_fill_(loom_module_param(loom_module_find_child(m, bottleneck ? "bn3" : "bn2"), 0), 0.0);
  if (st != LOOM_OK) {
    loom_error_prefix("%s", what);
    loom_module_free(m);
    return NULL;
  }
  char st_s[32] = "";
  if (stride != 1) snprintf(st_s, sizeof st_s, ", stride %lld", (long long)stride);
  loom_module_set_name(m, "%s(%lld, %lld%s%s)", bottleneck ? "Bottleneck" : "BasicBlock", (long long)in,
           (long long)out, st_s, zero_pad ? ", zero-pad shortcut" : "");
  return m;
}

loom_module *loom_basic_block_new(int64_t in_channels, int64_t planes, int64_t stride, loom_resnet_shortcut shortcut,
                                  loom_device dev) {
  return loom_resnet_block_make(false, in_channels, planes, stride, shortcut, false, dev);
}

loom_module *loom_bottleneck_new(int64_t in_channels, int64_t planes, int64_t stride, loom_device dev) {
  return loom_resnet_block_make(true, in_channels, planes, stride, LOOM_SHORTCUT_PROJECTION, false, dev);
}
