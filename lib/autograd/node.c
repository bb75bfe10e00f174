/* node.c — recording ops into the autograd graph. A node keeps edges to the
 * producers of its inputs (or to leaf inputs), the input shapes, and the
 * tensors its backward rule needs, as detached aliases so that no cycle
 * tensor -> node -> tensor is formed. */
#include <stdatomic.h>
#include <stdlib.h>

#include "autograd/grad_table.h"
#include "autograd/node.h"
#include "ops/record.h"
#include "core/sys.h"

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
  if (n->custom && n->custom_ctx) n->custom->free_ctx(n->custom_ctx);
  n->custom_ctx = NULL;
  n->freed = true;
}

/* Inside a loom_offload region: replace the saved device tensors by host
 * copies (a tensor that cannot be copied stays where it is). */
static void offload_saved(loom_node *n) {
  for (int k = 0; k < LOOM_OP_MAX_IN + LOOM_OP_MAX_OUT; k++) {
    bool in = k < LOOM_OP_MAX_IN;
    int j = in ? k : k - LOOM_OP_MAX_IN;
    loom_tensor **slot = in ? &n->saved_in[j] : &n->saved_out[j];
    unsigned *ver = in ? &n->saved_in_version[j] : &n->saved_out_version[j];
    if (!*slot) continue;
    loom_tensor *h = loom_offload_to_host(*slot);
    if (!h) {
      loom_clear_error();
      continue;
    }
    n->offload_dev = (*slot)->storage->device;
    loom_tensor_release(*slot);
    *slot = h;
    *ver = atomic_load(&h->storage->version);
    n->offloaded |= 1u << (in ? j : 8 + j);
  }
}

const char *loom_node_name(const loom_node *n) { return n->custom ? n->custom->name : loom_op_get(n->op)->name; }

static loom_status record(loom_op_id op, const loom_node_custom *c, void *ctx, const loom_op_args *a) {
  const char *name = c ? c->name : loom_op_get(op)->name;
  unsigned saves = c ? (1u << LOOM_OP_MAX_IN) - 1 : loom_grad_get(op)->saves;  /* custom: every input */
  loom_node *n = loom_sys_calloc(1, sizeof *n);
  if (!n) {
    if (c) c->free_ctx(ctx);
    return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory recording autograd", name);
  }
  atomic_init(&n->refcount, 1);
  n->seq = atomic_fetch_add(&g_seq, 1) + 1;
  n->op = op;
  n->custom = c;
  n->custom_ctx = ctx;
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
    if (saves & LOOM_SAVE_IN(k)) {
      n->saved_in[k] = alias(t);
      n->saved_in_version[k] = atomic_load(&t->storage->version);
      ok = ok && n->saved_in[k];
    }
  }
  if (saves & LOOM_SAVE_OUT0) {
    n->saved_out[0] = alias(a->out[0]);
    n->saved_out_version[0] = atomic_load(&a->out[0]->storage->version);
    ok = ok && n->saved_out[0];
  }
  /* Output 1 is optional (e.g. linear's ReLU mask exists only on CUDA). */
  if ((saves & LOOM_SAVE_OUT1) && a->n_out > 1 && a->out[1]) {
    n->saved_out[1] = alias(a->out[1]);
    n->saved_out_version[1] = atomic_load(&a->out[1]->storage->version);
    ok = ok && n->saved_out[1];
  }
  if (!ok) {
    loom_node_release(n);
    return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory saving tensors for backward", name);
  }
  if (loom_offload_active()) offload_saved(n);
  loom_tensor *out = a->out[0];
  n->out_nhwc = loom_tensor_is_channels_last(out) && !loom_tensor_is_contiguous(out);
  loom_node_release(out->grad_fn);
  out->grad_fn = n;
  out->requires_grad = true;
  return LOOM_OK;
}

/* The recorder of ops (ops/record.h): an op without a backward rule in the
 * grad table is not recorded (its result does not require grad). */
static loom_status record_op(loom_op_id op, const loom_op_args *a) {
  return loom_grad_get(op) ? record(op, NULL, NULL, a) : LOOM_OK;
}

loom_status loom_node_record_custom(const loom_node_custom *c, void *ctx, const loom_op_args *a) {
  return record(LOOM_OP_COUNT, c, ctx, a);
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
    loom_sys_free(n);
    n = tail;
  }
}

void loom_autograd_install(void) {
  loom_tensor_set_grad_fn_release(loom_node_release);  /* before any node can exist */
  loom_op_set_recorder(record_op);
}

/* Recording must be on in every program that can need it, including one
 * that links libloom.a and never names some autograd function. Two things
 * make sure:
 *  - this constructor: recording is on before main in every program that
 *    links this object, and only such a program can record a node or use
 *    one: loom_backward / loom_backward_with (engine.c), loom_checkpoint and
 *    loom_offload all call into this file. (libloom.so loads every object.)
 *  - loom_set_requires_grad (leaf.c) calls loom_autograd_install: the public
 *    way a tensor comes to require grad links this object, so a program
 *    that marks parameters but never calls backward still records (and
 *    loom_requires_grad of a result still says true). The layers above that
 *    set the flag of copies they own (amp's low-precision copies, the
 *    offload optimizer's host copies) do so for a backward to fill their
 *    gradients, which links this object too.
 * ops/record.c refuses, rather than silently skipping, an op that finds
 * an input requiring grad and no recorder. */
__attribute__((constructor)) static void install_at_load(void) { loom_autograd_install(); }
