/* module.c — the generic module: forward dispatch, parameter walk, free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/module_internal.h"

loom_module *loom_module_alloc(int kind, const char *name) {
  loom_module *m = calloc(1, sizeof *m);
  if (!m) {
    loom_set_error(LOOM_ERR_OOM, "%s: out of host memory", name);
    return NULL;
  }
  m->kind = kind;
  snprintf(m->name, sizeof m->name, "%s", name);
  return m;
}

loom_tensor *loom_module_forward(loom_module *m, loom_tensor *x) {
  if (!m) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "module_forward: module is NULL");
    return NULL;
  }
  if (!x) {
    if (loom_last_status() == LOOM_OK) loom_set_error(LOOM_ERR_NULL_INPUT, "%s: input is NULL", m->name);
    return NULL;
  }
  return m->forward(m, x);
}

const char *loom_module_name(const loom_module *m) { return m ? m->name : ""; }
int loom_module_num_children(const loom_module *m) { return m ? m->n_children : 0; }
loom_module *loom_module_child(const loom_module *m, int i) {
  return (m && i >= 0 && i < m->n_children) ? m->children[i] : NULL;
}

int loom_module_num_params(const loom_module *m) {
  if (!m) return 0;
  int n = m->n_params;
  for (int i = 0; i < m->n_children; i++) n += loom_module_num_params(m->children[i]);
  return n;
}

static loom_tensor *param_at(const loom_module *m, int *i) {
  if (*i < m->n_params) return m->params[*i];
  *i -= m->n_params;
  for (int c = 0; c < m->n_children; c++) {
    loom_tensor *t = param_at(m->children[c], i);
    if (t) return t;
  }
  return NULL;
}

loom_tensor *loom_module_param(const loom_module *m, int i) {
  if (!m || i < 0) return NULL;
  return param_at(m, &i);
}

int64_t loom_module_num_param_elements(const loom_module *m) {
  int64_t n = 0;
  for (int i = 0; i < loom_module_num_params(m); i++) n += loom_tensor_numel(loom_module_param(m, i));
  return n;
}

void loom_module_free(loom_module *m) {
  if (!m) return;
  for (int i = 0; i < m->n_params; i++) loom_tensor_release(m->params[i]);
  for (int i = 0; i < m->n_children; i++) loom_module_free(m->children[i]);
  free(m->params);
  free(m->children);
  free(m->policy);  /* lib/amp's policy record is plain malloc memory */
  free(m);
}
