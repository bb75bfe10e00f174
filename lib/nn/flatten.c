/* flatten.c — the Flatten layer: merges dims start_dim..end_dim into one
 * (a view whenever the layout allows, as after a global average pool). */
#include <stdio.h>
#include <stdlib.h>

#include "nn/module_internal.h"
#include "core/sys.h"

typedef struct flatten_impl {
  int start_dim, end_dim;
} flatten_impl;

static loom_tensor *flatten_forward(loom_module *m, loom_tensor *x) {
  const flatten_impl *f = m->impl;
  return loom_flatten(x, f->start_dim, f->end_dim);
}

static void flatten_destroy(loom_module *m) { loom_sys_free(m->impl); }

loom_module *loom_flatten_new(int start_dim, int end_dim) {
  loom_module *m = loom_module_alloc(LOOM_MOD_FLATTEN, "Flatten");
  flatten_impl *f = m ? loom_sys_calloc(1, sizeof *f) : NULL;
  if (!f) {
    if (m) loom_set_error(LOOM_ERR_OOM, "flatten_new: out of host memory");
    loom_module_free(m);
    return NULL;
  }
  f->start_dim = start_dim;
  f->end_dim = end_dim;
  m->impl = f;
  m->destroy = flatten_destroy;
  m->forward = flatten_forward;
  loom_module_set_name(m, "Flatten(%d, %d)", start_dim, end_dim);
  return m;
}
