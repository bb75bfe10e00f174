/* precision_policy.h (internal) — a module's mixed precision policy
 * (precision_policy.c): the record a module keeps in m->policy, and the
 * Linear / Conv2d forwards under a policy. */
#ifndef LOOM_NN_PRECISION_POLICY_H
#define LOOM_NN_PRECISION_POLICY_H

#include <stdbool.h>
#include "nn/module_internal.h"

/* Stored in loom_module.policy (plain malloc memory; module.c frees it). */
typedef struct loom_module_policy {
  loom_precision precision;
  bool keep_last_fp32;   /* as requested on the module it was set on */
  bool fp32_layer;       /* this Linear is the kept-f32 last layer */
} loom_module_policy;

/* The Linear forward under m's policy (linear.c), and Conv2d's (conv2d.c):
 * the low-precision weight copies and x cast to the compute dtype. */
loom_tensor *loom_module_policy_linear_forward(loom_module *m, loom_tensor *x);
loom_tensor *loom_module_policy_conv2d_forward(loom_module *m, loom_tensor *x);

#endif
