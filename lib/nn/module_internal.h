/* module_internal.h (internal) — the module object: a small vtable plus
 * owned parameters and children. */
#ifndef LOOM_NN_MODULE_INTERNAL_H
#define LOOM_NN_MODULE_INTERNAL_H

#include "loom/nn.h"
#include "tensor/tensor_internal.h"

enum { LOOM_MOD_LINEAR = 1, LOOM_MOD_RELU = 2, LOOM_MOD_SEQUENTIAL = 3 };

struct loom_module {
  int kind;
  char name[64];
  loom_tensor *(*forward)(loom_module *m, loom_tensor *x);
  loom_tensor **params;   /* owned */
  int n_params;
  loom_module **children; /* owned */
  int n_children, cap_children;
  /* Linear */
  int64_t in_features, out_features;
  loom_activation act;
  /* Precision policy hook (lib/amp): NULL = fp32. */
  void *policy;
};

loom_module *loom_module_alloc(int kind, const char *name);

#endif
