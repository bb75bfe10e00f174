/* pool.c — the pooling layers: MaxPool2d, AvgPool2d and AdaptiveAvgPool2d
 * on the pooling ops (no parameters; the options live in impl). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/struct_size.h"
#include "nn/module_internal.h"
#include "core/sys.h"

typedef struct pool_impl {
  loom_pool2d_options opt;   /* max / avg */
  int64_t out_h, out_w;      /* adaptive */
} pool_impl;

static loom_tensor *max_forward(loom_module *m, loom_tensor *x) {
  return loom_max_pool2d(x, &((pool_impl *)m->impl)->opt);
}
static loom_tensor *avg_forward(loom_module *m, loom_tensor *x) {
  return loom_avg_pool2d(x, &((pool_impl *)m->impl)->opt);
}
static loom_tensor *adaptive_forward(loom_module *m, loom_tensor *x) {
  const pool_impl *p = m->impl;
  return loom_adaptive_avg_pool2d(x, p->out_h, p->out_w);
}

static void pool_destroy(loom_module *m) { loom_sys_free(m->impl); }

static loom_module *pool_new(int kind, const char *what, const loom_pool2d_options *opt) {
  if (!opt) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "%s_new: options are NULL; make them with loom_pool2d_options_init(&o, kh, kw)",
                   what);
    return NULL;
  }
  loom_pool2d_options o;
  loom_pool2d_options_init(&o, 0, 0);
  char fn[32];
  snprintf(fn, sizeof fn, "%s_new", what);
  if (LOOM_STRUCT_IN(fn, loom_pool2d_options, &o, opt) != LOOM_OK) return NULL;
  for (int d = 0; d < 2; d++) {
    if (o.kernel[d] < 1 || o.stride[d] < 0 || o.padding[d] < 0 || 2 * o.padding[d] > o.kernel[d]) {
      loom_set_error(LOOM_ERR_INVALID_ARG,
                     "%s_new: need kernel >= 1, stride >= 0 (0: the kernel) and 0 <= padding <= kernel/2 (got kernel "
                     "%lldx%lld, stride %lldx%lld, padding %lldx%lld)",
                     what, (long long)o.kernel[0], (long long)o.kernel[1], (long long)o.stride[0], (long long)o.stride[1],
                     (long long)o.padding[0], (long long)o.padding[1]);
      return NULL;
    }
  }
  loom_module *m = loom_module_alloc(kind, what);
  pool_impl *p = m ? loom_sys_calloc(1, sizeof *p) : NULL;
  if (!p) {
    if (m) loom_set_error(LOOM_ERR_OOM, "%s_new: out of host memory", what);
    loom_module_free(m);
    return NULL;
  }
  p->opt = o;
  m->impl = p;
  m->destroy = pool_destroy;
  m->forward = kind == LOOM_MOD_MAXPOOL2D ? max_forward : avg_forward;
  int64_t sh = o.stride[0] ? o.stride[0] : o.kernel[0], sw = o.stride[1] ? o.stride[1] : o.kernel[1];
  loom_module_set_name(m, "%s(%lldx%lld, stride %lldx%lld, pad %lldx%lld)",
           kind == LOOM_MOD_MAXPOOL2D ? "MaxPool2d" : "AvgPool2d", (long long)o.kernel[0], (long long)o.kernel[1],
           (long long)sh, (long long)sw, (long long)o.padding[0], (long long)o.padding[1]);
  return m;
}

loom_module *loom_max_pool2d_new(const loom_pool2d_options *opt) {
  return pool_new(LOOM_MOD_MAXPOOL2D, "max_pool2d", opt);
}

loom_module *loom_avg_pool2d_new(const loom_pool2d_options *opt) {
  return pool_new(LOOM_MOD_AVGPOOL2D, "avg_pool2d", opt);
}

loom_module *loom_adaptive_avg_pool2d_new(int64_t out_h, int64_t out_w) {
  if (out_h < 1 || out_w < 1) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "adaptive_avg_pool2d_new: output size must be >= 1 (got %lldx%lld)",
                   (long long)out_h, (long long)out_w);
    return NULL;
  }
  loom_module *m = loom_module_alloc(LOOM_MOD_ADAPTIVE_AVGPOOL2D, "AdaptiveAvgPool2d");
  pool_impl *p = m ? loom_sys_calloc(1, sizeof *p) : NULL;
  if (!p) {
    if (m) loom_set_error(LOOM_ERR_OOM, "adaptive_avg_pool2d_new: out of host memory");
    loom_module_free(m);
    return NULL;
  }
  p->out_h = out_h;
  p->out_w = out_w;
  m->impl = p;
  m->destroy = pool_destroy;
  m->forward = adaptive_forward;
  loom_module_set_name(m, "AdaptiveAvgPool2d(%lldx%lld)", (long long)out_h, (long long)out_w);
  return m;
}
