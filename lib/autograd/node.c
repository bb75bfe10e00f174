/* node.c — recording ops into the autograd graph. A node keeps edges to the
 * producers of its inputs (or to leaf inputs), the input shapes, and the
 * tensors its backward rule needs, as detached aliases so that no cycle
 * tensor -> node -> tensor is formed. */
#include <stdatomic.h>
#include <stdlib.h>

#include "autograd/node.h"

static atomic_uint_fast64_t g_seq;

static loom_tensor *alias(loom_tensor *t) {
  if (!t) return NULL;
  return loom_tensor_new_header(t->storage, t->offset, t->dtype, t->ndim, t->shape, t->strides);
}

void loom_node_free_saved(loom_node *n) {
  for (int k = 0; k < LOOM_OP_MAX_IN; k++) {
    loom_tensor_release(n->saved_in[k]);
    n->saved_in[k] = NULL;
  }
  for (int k = 0; k < LOOM_OP_MAX_OUT; k++) {
    loom_tensor_release(n->saved_out[k]);
    n->saved_out[k] = NULL;
  }
  loom_tensor_release(n->given_db);
  n->given_db = NULL;
  n->freed = true;
}

loom_status loom_node_record(loom_op_id op, const loom_op_args *a) {
  const loom_op_def *d = loom_op_get(op);
  loom_node *n = calloc(1, sizeof *n);
  if (!n) return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory recording autograd", d->name);
  atomic_init(&n->refcount, 1);
  n->seq = atomic_fetch_add(&g_seq, 1) + 1;
  n->op = op;
  n->args = *a;
  for (int k = 0; k < LOOM_OP_MAX_IN; k++) n->args.in[k] = NULL;
  for (int k = 0; k < LOOM_OP_MAX_OUT; k++) n->args.out[k] = NULL;
  n->n_in = a->n_in;
  bool ok = true;
  for (int k = 0; k < a->n_in; k++) {
    loom_tensor *t = a->in[k];
    if (!t) continue;
    n->in_ndim[k] = t->ndim;
    n->in_dtype[k] = t->dtype;
    for (int dd = 0; dd < t->ndim; dd++) n->in_shape[k][dd] = t->shape[dd];
    if (t->grad_fn) {
      n->needs_grad[k] = true;
      atomic_fetch_add(&t->grad_fn->refcount, 1);
      t->grad_fn->consumers++;
      n->next[k].node = t->grad_fn;
    } else if (t->requires_grad) {
      n->needs_grad[k] = true;
      n->next[k].leaf = loom_tensor_retain(t);
    }
    if (d->saves & LOOM_SAVE_IN(k)) {
      n->saved_in[k] = alias(t);
      n->saved_in_version[k] = atomic_load(&t->storage->version);
      ok = ok && n->saved_in[k];
    }
  }
  if (d->saves & LOOM_SAVE_OUT0) {
    n->saved_out[0] = alias(a->out[0]);
    n->saved_out_version[0] = atomic_load(&a->out[0]->storage->version);
    ok = ok && n->saved_out[0];
  }
  /* Output 1 is optional (e.g. linear's ReLU mask exists only on CUDA). */
  if ((d->saves & LOOM_SAVE_OUT1) && a->n_out > 1 && a->out[1]) {
    n->saved_out[1] = alias(a->out[1]);
    n->saved_out_version[1] = atomic_load(&a->out[1]->storage->version);
    ok = ok && n->saved_out[1];
  }
  if (!ok) {
    loom_node_release(n);
    return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory saving tensors for backward", d->name);
  }
  loom_tensor *out = a->out[0];
  n->out_nhwc = loom_tensor_is_channels_last(out) && !loom_tensor_is_contiguous(out);
  loom_node_release(out->grad_fn);
  out->grad_fn = n;
  out->requires_grad = true;
  return LOOM_OK;
}

void loom_node_release(loom_node *n) {
  /* Iterative over single-parent chains so long graphs do not exhaust the stack. */
  while (n) {
    if (atomic_fetch_sub(&n->refcount, 1) != 1) return;
    loom_node_free_saved(n);
    loom_tensor_release(n->pending_grad);
    loom_node *tail = NULL;
    for (int k = 0; k < LOOM_OP_MAX_IN; k++) {
      loom_tensor_release(n->next[k].leaf);
      if (n->next[k].node) {
        if (!tail) tail = n->next[k].node;
        else loom_node_release(n->next[k].node);
      }
    }
    free(n);
    n = tail;
  }
}
