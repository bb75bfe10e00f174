/* sequential.c — Sequential containers (with automatic fusion of a ReLU into
 * the Linear, Conv2d or BatchNorm2d before it), the activation setter those
 * layers share, and the MLP builder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/autograd.h"
#include "core/struct_size.h"
#include "nn/module_internal.h"
#include "core/sys.h"

/* One checkpointed run of children [lo, hi) of Sequential m (the ctx of
 * its loom_checkpoint). */
typedef struct seq_run {
  loom_module *m;
  int lo, hi;
} seq_run;

typedef struct seq_runs {
  struct seq_runs *old;
  int cap;
  seq_run runs[];
} seq_runs;

static loom_tensor *run_children(void *ctx, int n, loom_tensor *const *in) {
  (void)n;
  const seq_run *r = ctx;
  loom_tensor *x = in[0];
  for (int i = r->lo; i < r->hi && x; i++) x = loom_module_forward(r->m->children[i], x);
  return x;
}

static loom_tensor *seq_forward(loom_module *m, loom_tensor *x) {
  int every = m->checkpoint_every;
  if (every <= 0 || !loom_is_grad_enabled()) {
    for (int i = 0; i < m->n_children && x; i++) x = loom_module_forward(m->children[i], x);
    return x;
  }
  /* The runs' bounds must outlive the forward call (backward recomputes
   * them): they live in the module, one per run; a table outgrown by added
   * children is kept (graphs may still point into it) until the module dies. */
  int need = (m->n_children + every - 1) / every;
  seq_runs *t = m->impl;
  if (!t || t->cap < need) {
    seq_runs *nt = loom_sys_calloc(1, sizeof *nt + (size_t)need * sizeof(seq_run));
    if (!nt) {
      loom_set_error(LOOM_ERR_OOM, "%s: out of host memory for checkpointing", m->name);
      return NULL;
    }
    nt->cap = need;
    nt->old = t;
    m->impl = t = nt;
  }
  seq_run *runs = t->runs;
  for (int r = 0, lo = 0; lo < m->n_children && x; r++, lo += every) {
    runs[r] = (seq_run){m, lo, lo + every < m->n_children ? lo + every : m->n_children};
    x = loom_checkpoint(run_children, &runs[r], 1, &x);
  }
  return x;
}

static void seq_destroy(loom_module *m) {
  for (seq_runs *t = m->impl, *nx; t; t = nx) {
    nx = t->old;
    loom_sys_free(t);
  }
  m->impl = NULL;
}

loom_status loom_sequential_set_checkpoint_every(loom_module *seq, int n) {
  if (!seq || seq->kind != LOOM_MOD_SEQUENTIAL)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "sequential_set_checkpoint_every: not a Sequential module");
  if (n < 0) return loom_set_error(LOOM_ERR_INVALID_ARG, "sequential_set_checkpoint_every: n = %d must be >= 0 (0: off)", n);
  seq->checkpoint_every = n;
  return LOOM_OK;
}

loom_module *loom_sequential_new(void) {
  loom_module *m = loom_module_alloc(LOOM_MOD_SEQUENTIAL, "Sequential[0]");
  if (m) {
    m->forward = seq_forward;
    m->destroy = seq_destroy;
  }
  return m;
}

loom_status loom_sequential_add(loom_module *seq, loom_module *child) {
  if (!seq || seq->kind != LOOM_MOD_SEQUENTIAL) {
    loom_module_free(child);
    return loom_set_error(LOOM_ERR_INVALID_ARG, "sequential_add: not a Sequential module");
  }
  if (!child) return loom_last_status() != LOOM_OK ? loom_last_status() : loom_set_error(LOOM_ERR_NULL_INPUT, "sequential_add: child is NULL");
  /* Linear / Conv2d / BatchNorm2d followed by ReLU: one fused op. */
  if (child->kind == LOOM_MOD_RELU && seq->n_children > 0) {
    loom_module *prev = seq->children[seq->n_children - 1];
    bool fusable = prev->kind == LOOM_MOD_LINEAR || prev->kind == LOOM_MOD_CONV2D || prev->kind == LOOM_MOD_BATCHNORM2D;
    if (fusable && prev->act == LOOM_ACT_NONE) {
      loom_module_free(child);
      return loom_module_set_activation(prev, LOOM_ACT_RELU);
    }
  }
  loom_status st = loom_module_add_child(seq, NULL, child);
  if (st != LOOM_OK) return st;
  snprintf(seq->name, sizeof seq->name, "Sequential[%d]", seq->n_children);
  return LOOM_OK;
}

loom_status loom_module_set_activation(loom_module *m, loom_activation act) {
  if (!m) return loom_set_error(LOOM_ERR_INVALID_ARG, "module_set_activation: module is NULL");
  if (m->kind == LOOM_MOD_LINEAR) return loom_linear_set_activation(m, act);
  if (m->kind != LOOM_MOD_CONV2D && m->kind != LOOM_MOD_BATCHNORM2D)
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "module_set_activation: %s has no fused activation (Linear, Conv2d and BatchNorm2d do)", m->name);
  if (act != LOOM_ACT_NONE && act != LOOM_ACT_RELU)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "module_set_activation: unknown activation %d", (int)act);
  m->act = act;
  if (m->kind == LOOM_MOD_CONV2D) loom_conv2d_name(m);
  else loom_batch_norm2d_name(m);
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

void loom_mlp_options_init(loom_mlp_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
}

loom_module *loom_mlp_new_ex(int64_t in_features, int n_hidden, const int64_t *hidden, int64_t out_features,
                             loom_device dev, const loom_mlp_options *opt) {
  loom_mlp_options o;
  loom_mlp_options_init(&o);
  if (LOOM_STRUCT_IN("mlp_new_ex", loom_mlp_options, &o, opt) != LOOM_OK) return NULL;
  if (o.checkpoint_every < 0) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "mlp_new_ex: checkpoint_every = %d must be >= 0 (0: off)", o.checkpoint_every);
    return NULL;
  }
  loom_module *m = loom_mlp_new(in_features, n_hidden, hidden, out_features, dev);
  if (m && loom_sequential_set_checkpoint_every(m, o.checkpoint_every) != LOOM_OK) {
    loom_module_free(m);
    return NULL;
  }
  return m;
}
