/* sequential.c — Sequential containers (with automatic Linear→ReLU fusion)
 * and the MLP builder. */
#include <stdio.h>
#include <stdlib.h>

#include "nn/module_internal.h"

static loom_tensor *seq_forward(loom_module *m, loom_tensor *x) {
  for (int i = 0; i < m->n_children && x; i++) x = loom_module_forward(m->children[i], x);
  return x;
}

loom_module *loom_sequential_new(void) {
  loom_module *m = loom_module_alloc(LOOM_MOD_SEQUENTIAL, "Sequential[0]");
  if (m) m->forward = seq_forward;
  return m;
}

loom_status loom_sequential_add(loom_module *seq, loom_module *child) {
  if (!seq || seq->kind != LOOM_MOD_SEQUENTIAL) {
    loom_module_free(child);
    return loom_set_error(LOOM_ERR_INVALID_ARG, "sequential_add: not a Sequential module");
  }
  if (!child) return loom_last_status() != LOOM_OK ? loom_last_status() : loom_set_error(LOOM_ERR_NULL_INPUT, "sequential_add: child is NULL");
  /* Linear followed by ReLU: one fused op. */
  if (child->kind == LOOM_MOD_RELU && seq->n_children > 0) {
    loom_module *prev = seq->children[seq->n_children - 1];
    if (prev->kind == LOOM_MOD_LINEAR && prev->act == LOOM_ACT_NONE) {
      loom_module_free(child);
      return loom_linear_set_activation(prev, LOOM_ACT_RELU);
    }
  }
  loom_status st = loom_module_add_child(seq, NULL, child);
  if (st != LOOM_OK) return st;
  snprintf(seq->name, sizeof seq->name, "Sequential[%d]", seq->n_children);
  return LOOM_OK;
}

loom_module *loom_mlp_new(int64_t in_features, int n_hidden, const int64_t *hidden, int64_t out_features, loom_device dev) {
  if (n_hidden < 0 || (n_hidden > 0 && !hidden)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "mlp_new: bad hidden layer list");
    return NULL;
  }
  loom_module *seq = loom_sequential_new();
  if (!seq) return NULL;
  int64_t prev = in_features;
  for (int i = 0; i <= n_hidden; i++) {
    int64_t out = i < n_hidden ? hidden[i] : out_features;
    /* Hidden layers feed a ReLU: Kaiming init; the last layer: default. */
    loom_module *lin = loom_linear_new(prev, out, true, i < n_hidden ? LOOM_INIT_KAIMING_UNIFORM : LOOM_INIT_DEFAULT, dev);
    if (loom_sequential_add(seq, lin) != LOOM_OK || (i < n_hidden && loom_sequential_add(seq, loom_relu_new()) != LOOM_OK)) {
      loom_module_free(seq);
      return NULL;
    }
    prev = out;
  }
  return seq;
}
