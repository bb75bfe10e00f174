/* dropout.c — the Dropout layer: loom_dropout in training mode, the
 * identity in eval mode (the module's mode decides, not the caller). */
#include <stdio.h>
#include <stdlib.h>

#include "nn/module_internal.h"
#include "core/sys.h"

typedef struct dropout_impl {
  double p;
} dropout_impl;

static loom_tensor *dropout_forward(loom_module *m, loom_tensor *x) {
  return loom_dropout(x, ((dropout_impl *)m->impl)->p, m->training);
}

static void dropout_destroy(loom_module *m) { loom_sys_free(m->impl); }

loom_module *loom_dropout_new(double p) {
  if (!(p >= 0.0 && p <= 1.0)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "dropout_new: p = %g must be in [0, 1]", p);
    return NULL;
  }
  loom_module *m = loom_module_alloc(LOOM_MOD_DROPOUT, "Dropout");
  dropout_impl *d = m ? loom_sys_calloc(1, sizeof *d) : NULL;
  if (!d) {
    if (m) loom_set_error(LOOM_ERR_OOM, "dropout_new: out of host memory");
    loom_module_free(m);
    return NULL;
  }
  d->p = p;
  m->impl = d;
  m->destroy = dropout_destroy;
  m->forward = dropout_forward;
  loom_module_set_name(m, "Dropout(p=%g)", p);
  return m;
}
