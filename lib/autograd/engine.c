/* engine.c — loom_backward: walk the recorded graph in reverse recording
 * order, accumulate gradients, fire grad-ready hooks, free saved tensors as
 * each node finishes. Grad mode (per thread) is the tensor layer's
 * (tensor/grad_mode.c). */
#include <stdlib.h>
#include <string.h>

#include "autograd/grad_table.h"
#include "autograd/node.h"
#include "loom/autograd.h"
#include "prof/prof.h"
#include "core/sys.h"

/* Channels-last: 4-D, NHWC strides, not also contiguous. */
static bool nhwc(const loom_tensor *t) { return loom_tensor_is_channels_last(t) && !loom_tensor_is_contiguous(t); }

/* Gradients reach a node in the layout of its forward output, and a leaf in
 * its own layout: channels-last when that was (CNNs trained in NHWC keep
 * NHWC gradients without copies), else contiguous (what every backward rule
 * may assume otherwise). */
static bool in_layout(const loom_tensor *g, bool want_nhwc) {
  return want_nhwc ? nhwc(g) : loom_tensor_is_contiguous(g);
}

/* Held by exactly one reference and sharing storage with nobody. */
static bool exclusive(const loom_tensor *t) {
  return atomic_load(&t->refcount) == 1 && atomic_load(&t->storage->refcount) == 1 && t->offset == 0;
}

typedef struct vec {
  void **p;
  size_t n, cap;
} vec;

static int vec_push(vec *v, void *x) {
  if (v->n == v->cap) {
    size_t nc = v->cap ? v->cap * 2 : 64;
    void **np = loom_sys_realloc(v->p, nc * sizeof *np);
    if (!np) return 0;
    v->p = np;
    v->cap = nc;
  }
  v->p[v->n++] = x;
  return 1;
}

static int by_seq_desc(const void *a, const void *b) {
  const loom_node *x = *(loom_node *const *)a, *y = *(loom_node *const *)b;
  return x->seq < y->seq ? 1 : x->seq > y->seq ? -1 : 0;
}

/* Leaves reached by this backward, with how many edges still owe them. */
typedef struct leaf_count {
  loom_tensor *t;
  int remaining;
} leaf_count;

static leaf_count *find_leaf(leaf_count *lc, size_t n, loom_tensor *t) {
  for (size_t i = 0; i < n; i++)
    if (lc[i].t == t) return &lc[i];
  return NULL;
}

/* A private copy of g that belongs to no scope: channels-last (4-D g) or
 * contiguous. */
static loom_tensor *clone_raw(loom_tensor *g, bool want_nhwc) {
  loom_tensor *c = loom_tensor_alloc_raw(g->ndim, g->shape, g->dtype, g->storage->device);
  if (!c) return NULL;
  if (want_nhwc && g->ndim == 4) loom_set_channels_last_strides(c);
  loom_op_args a = {.in = {g}, .n_in = 1, .out = {c}, .n_out = 1};
  if (loom_op_run_into(LOOM_OP_COPY, &a) != LOOM_OK) {
    loom_tensor_release(c);
    return NULL;
  }
  return c;
}

/* Add g (a reference the engine holds) into *slot. A node's pending
 * gradient may share g with another slot (add_relu hands one tensor to
 * both of its inputs): the first addition into a slot still shared then
 * copies it (copy on write), and the node that receives it sees gy as not
 * exclusive. A leaf's grad is the user's and the optimizer's, who scale it
 * in place: it never shares. */
static loom_status accumulate(loom_tensor **slot, loom_tensor *g, bool want_nhwc, bool may_share) {
  if (!*slot) {
    if ((may_share || exclusive(g)) && in_layout(g, want_nhwc)) {
      *slot = g;
      return LOOM_OK;
    }
    loom_tensor *c = clone_raw(g, want_nhwc);  /* a fresh buffer that we may add into later */
    loom_tensor_release(g);
    if (!c) return loom_last_status();
    *slot = c;
    return LOOM_OK;
  }
  if (may_share && !exclusive(*slot)) {
    loom_tensor *c = clone_raw(*slot, want_nhwc);
    if (!c) {
      loom_tensor_release(g);
      return loom_last_status();
    }
    loom_tensor_release(*slot);
    *slot = c;
  }
  loom_status st = loom_add_inplace(*slot, g);
  loom_tensor_release(g);
  return st;
}

/* Refuse to differentiate through tensors that were written in place after
 * the forward pass saved them (checked before any node runs, so a refused
 * backward leaves the graph intact). */
static loom_status check_saved_versions(const loom_node *n) {
  for (int k = 0; k < LOOM_OP_MAX_IN; k++) {
    const loom_tensor *t = n->saved_in[k];
    if (t && atomic_load(&t->storage->version) != n->saved_in_version[k]) {
      char b[96];
      return loom_set_error(LOOM_ERR_STATE,
                            "backward: input %d of %s (shape %s), saved for the gradient, was modified in place after "
                            "the forward pass (copy_, fill_ or an optimizer step); run the forward pass again",
                            k, loom_node_name(n), loom_shape_str(t->ndim, t->shape, b, 96));
    }
  }
  for (int k = 0; k < LOOM_OP_MAX_OUT; k++) {
    const loom_tensor *t = n->saved_out[k];
    if (t && atomic_load(&t->storage->version) != n->saved_out_version[k])
      return loom_set_error(LOOM_ERR_STATE,
                            "backward: the output of %s, saved for the gradient, was modified in place after the "
                            "forward pass; run the forward pass again",
                            loom_node_name(n));
  }
  return LOOM_OK;
}

static loom_status run_backward(loom_tensor *root, loom_tensor *seed) {
  vec nodes = {0}, stack = {0};
  leaf_count *leaves = NULL;
  size_t nleaves = 0, capleaves = 0;
  loom_status st = LOOM_OK;

  /* 1. Collect reachable nodes (each once) and count edges into each. */
  if (!vec_push(&stack, root->grad_fn)) goto oom;
  root->grad_fn->deps = 0;
  root->grad_fn->pending_grad = NULL;
  if (!vec_push(&nodes, root->grad_fn)) goto oom;
  root->grad_fn->deps = -1;  /* marks "visited" during collection */
  while (stack.n) {
    loom_node *n = stack.p[--stack.n];
    if (n->freed) {
      st = loom_set_error(LOOM_ERR_STATE,
                          "backward: a node of this graph (%s) already ran backward and freed its saved tensors; "
                          "run the forward pass again",
                          loom_node_name(n));
      goto done;
    }
    st = check_saved_versions(n);
    if (st != LOOM_OK) goto done;
    for (int k = 0; k < LOOM_OP_MAX_IN; k++) {
      if (!n->needs_grad[k]) continue;
      loom_node *m = n->next[k].node;
      if (m) {
        if (m->deps != -1) {
          m->deps = -1;
          m->pending_grad = NULL;
          if (!vec_push(&nodes, m) || !vec_push(&stack, m)) goto oom;
        }
      } else if (n->next[k].leaf) {
        leaf_count *lc = find_leaf(leaves, nleaves, n->next[k].leaf);
        if (!lc) {
          if (nleaves == capleaves) {
            size_t nc = capleaves ? capleaves * 2 : 32;
            leaf_count *nl = loom_sys_realloc(leaves, nc * sizeof *nl);
            if (!nl) goto oom;
            leaves = nl;
            capleaves = nc;
          }
          lc = &leaves[nleaves++];
          lc->t = n->next[k].leaf;
          lc->remaining = 0;
        }
        lc->remaining++;
      }
    }
  }
  /* 2. Reverse recording order is a valid order: inputs are always older. */
  qsort(nodes.p, nodes.n, sizeof *nodes.p, by_seq_desc);
  for (size_t i = 0; i < nodes.n; i++) ((loom_node *)nodes.p[i])->deps = 0;

  /* The seed too arrives in the layout of the output it seeds. */
  bool root_nhwc = root->grad_fn->out_nhwc;
  root->grad_fn->pending_grad = in_layout(seed, root_nhwc) ? loom_tensor_retain(seed) : clone_raw(seed, root_nhwc);
  if (!root->grad_fn->pending_grad) {
    st = loom_last_status() != LOOM_OK ? loom_last_status() : LOOM_ERR_OOM;
    goto done;
  }
  bool prev = loom_set_grad_enabled(false);
  for (size_t i = 0; i < nodes.n && st == LOOM_OK; i++) {
    loom_node *n = nodes.p[i];
    loom_tensor *gy = n->pending_grad;
    n->pending_grad = NULL;
    if (!gy) {
      loom_node_free_saved(n);
      continue;
    }
    /* Offloaded activations: this node's back on the device, and the next
     * ones' on their way (synchronous copies for now, see offload.c). */
    for (size_t j = i; j < nodes.n && j <= i + 2 && st == LOOM_OK; j++) st = loom_offload_prefetch(nodes.p[j]);
    if (st != LOOM_OK) {
      loom_tensor_release(gy);
      break;
    }
    loom_tensor *gx[LOOM_OP_MAX_IN] = {0};
    n->gy_exclusive = exclusive(gy);
    loom_scope_begin();
    loom_prof_range pr = LOOM_PROF_RANGE_INIT;
    if (LOOM_PROF_ACTIVE()) loom_prof_begin(&pr, LOOM_PROF_CAT_BACKWARD, loom_prof_backward_name(n->custom ? "custom" : loom_op_get(n->op)->name), NULL);
    st = n->custom ? n->custom->backward(n, gy, gx) : loom_grad_get(n->op)->backward(n, gy, gx);
    loom_prof_end(&pr, 0.0, 0);
    for (int k = 0; k < LOOM_OP_MAX_IN && st == LOOM_OK; k++) {
      if (n->needs_grad[k] && !gx[k]) {
        st = loom_last_status() != LOOM_OK ? loom_last_status()
                                            : loom_set_error(LOOM_ERR_INTERNAL, "backward of %s produced no gradient",
                                                             loom_node_name(n));
        loom_error_prefix("backward of %s", loom_node_name(n));
      }
    }
    for (int k = 0; k < LOOM_OP_MAX_IN; k++) loom_tensor_retain(gx[k]);
    loom_scope_end();
    loom_tensor_release(gy);
    loom_node_free_saved(n);
    for (int k = 0; k < LOOM_OP_MAX_IN; k++) {
      if (!gx[k]) continue;
      if (st != LOOM_OK || !n->needs_grad[k]) {
        loom_tensor_release(gx[k]);
        continue;
      }
      if (n->next[k].node) {
        st = accumulate(&n->next[k].node->pending_grad, gx[k], n->next[k].node->out_nhwc, true);
      } else {
        loom_tensor *leaf = n->next[k].leaf;
        st = accumulate(&leaf->grad, gx[k], nhwc(leaf), false);
        leaf_count *lc = find_leaf(leaves, nleaves, leaf);
        if (st == LOOM_OK && lc && --lc->remaining == 0 && leaf->hook) leaf->hook(leaf, leaf->grad, leaf->hook_user);
      }
    }
  }
  loom_set_grad_enabled(prev);
  /* Drop grads of nodes that never ran because of an error. */
  for (size_t i = 0; i < nodes.n; i++) {
    loom_node *n = nodes.p[i];
    loom_tensor_release(n->pending_grad);
    n->pending_grad = NULL;
  }
  goto done;
oom:
  st = loom_set_error(LOOM_ERR_OOM, "backward: out of host memory walking the graph");
done:
  /* deps doubles as the "visited" mark during collection: clear it on every
   * exit, or an early error (a freed node, OOM) would leave nodes marked and
   * a later backward through them would skip them as already visited. */
  for (size_t i = 0; i < nodes.n; i++) ((loom_node *)nodes.p[i])->deps = 0;
  loom_sys_free(nodes.p);
  loom_sys_free(stack.p);
  loom_sys_free(leaves);
  return st;
}

loom_status loom_backward_with(loom_tensor *out, loom_tensor *grad_out) {
  if (!out) {
    if (loom_last_status() != LOOM_OK) return loom_last_status();
    return loom_set_error(LOOM_ERR_NULL_INPUT, "backward: the output tensor is NULL");
  }
  if (!grad_out) return loom_set_error(LOOM_ERR_NULL_INPUT, "backward: the output gradient is NULL");
  /* The seed must match the output exactly: same dims (not only the same
   * element count, which let [3, 2] seed a [2, 3] output), dtype and device.
   * Checked before anything runs, so a bad seed does not free the graph. */
  bool same = grad_out->ndim == out->ndim;
  for (int d = 0; same && d < out->ndim; d++) same = grad_out->shape[d] == out->shape[d];
  if (!same) {
    char b1[96], b2[96];
    return loom_set_error(LOOM_ERR_SHAPE, "backward: the output gradient has shape %s but the output has shape %s",
                          loom_shape_str(grad_out->ndim, grad_out->shape, b1, 96), loom_shape_str(out->ndim, out->shape, b2, 96));
  }
  if (grad_out->dtype != out->dtype)
    return loom_set_error(LOOM_ERR_DTYPE, "backward: the output gradient is %s but the output is %s; cast it first",
                          loom_dtype_name(grad_out->dtype), loom_dtype_name(out->dtype));
  if (!loom_device_eq(grad_out->storage->device, out->storage->device)) {
    char b1[32], b2[32];
    return loom_set_error(LOOM_ERR_DEVICE, "backward: the output gradient is on %s but the output is on %s",
                          loom_device_str(grad_out->storage->device, b1, 32), loom_device_str(out->storage->device, b2, 32));
  }
  if (!out->grad_fn) {
    if (out->requires_grad) {
      /* A leaf: its gradient is the seed itself; its gradient is then
       * complete, so its grad-ready hook fires as for any other leaf. */
      loom_tensor *g = clone_raw(grad_out, nhwc(out));
      if (!g) return loom_last_status();
      loom_status st = accumulate(&out->grad, g, nhwc(out), false);
      if (st == LOOM_OK && out->hook) out->hook(out, out->grad, out->hook_user);
      return st;
    }
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "backward: the tensor does not require grad (no input of the ops that made it requires grad, "
                          "or it was made under no-grad)");
  }
  loom_prof_range pr = LOOM_PROF_RANGE_INIT;
  if (LOOM_PROF_ACTIVE()) loom_prof_begin(&pr, LOOM_PROF_CAT_BACKWARD, "backward", NULL);
  loom_status st = run_backward(out, grad_out);
  loom_prof_end(&pr, 0.0, 0);
  return st;
}

loom_status loom_backward(loom_tensor *loss) {
  if (!loss) return loom_backward_with(NULL, NULL);
  if (loom_shape_numel(loss->ndim, loss->shape) != 1) {
    char b[96];
    return loom_set_error(LOOM_ERR_SHAPE, "backward: the loss must have one element, got shape %s; use loom_backward_with",
                          loom_shape_str(loss->ndim, loss->shape, b, 96));
  }
  loom_tensor *seed = loom_tensor_alloc_raw(loss->ndim, loss->shape, loss->dtype, loss->storage->device);
  if (!seed) return loom_last_status();
  loom_status st = loom_fill_(seed, 1.0);
  if (st == LOOM_OK) st = loom_backward_with(loss, seed);
  loom_tensor_release(seed);
  return st;
}
