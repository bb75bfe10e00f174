/* api_cat.c — concatenation along a dimension: the CAT op's shape rule, its
 * kernel (one strided COPY per input into its stretch of the output, so it
 * runs on every device that has the copy kernel) and loom_cat, which
 * chains ops of up to LOOM_OP_MAX_IN inputs for longer lists. */
#include <stdio.h>

#include "ops/op.h"
#include "ops/shape_rules.h"

/* in[0..n_in) have one rank and agree on every dimension but i[0] (already
 * normalized); the result is contiguous, of their dtype. */
loom_status loom_infer_cat(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *t0 = a->in[0];
  int d = (int)a->i[0];
  if (t0->ndim == 0) return loom_set_error(LOOM_ERR_SHAPE, "%s: cannot concatenate 0-d tensors", opname);
  if (d < 0 || d >= t0->ndim)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: dim %d is out of range for %d dimensions", opname, d, t0->ndim);
  o[0].ndim = t0->ndim;
  o[0].dtype = t0->dtype;
  for (int k = 0; k < t0->ndim; k++) o[0].shape[k] = t0->shape[k];
  o[0].shape[d] = 0;
  for (int j = 0; j < a->n_in; j++) {
    const loom_tensor *t = a->in[j];
    bool same = t->ndim == t0->ndim;
    for (int k = 0; same && k < t0->ndim; k++) same = k == d || t->shape[k] == t0->shape[k];
    if (!same) {
      char b0[96], bj[96];
      return loom_set_error(LOOM_ERR_SHAPE, "%s: input %d is %s but input 0 is %s; all must agree except in dim %d",
                            opname, j, loom_shape_str(t->ndim, t->shape, bj, 96),
                            loom_shape_str(t0->ndim, t0->shape, b0, 96), d);
    }
    o[0].shape[d] += t->shape[d];
  }
  return LOOM_OK;
}

loom_status loom_kernel_cat(loom_op_args *a) {
  loom_tensor *out = a->out[0];
  int d = (int)a->i[0];
  int64_t at = 0;
  for (int j = 0; j < a->n_in; j++) {
    loom_tensor *in = a->in[j];
    /* The output's stretch [at, at + len) along d, as a strided header over its storage. */
    loom_tensor *part = loom_tensor_new_header(out->storage, out->offset + at * out->strides[d], out->dtype, out->ndim,
                                               in->shape, out->strides);
    if (!part) return loom_last_status();
    loom_op_args c = {.in = {in}, .n_in = 1, .out = {part}, .n_out = 1};
    c.i[0] = out->dtype;
    loom_status st = in->shape[d] ? loom_op_run_into(LOOM_OP_COPY, &c) : LOOM_OK;
    loom_tensor_release(part);
    LOOM_TRY(st);
    at += in->shape[d];
  }
  return LOOM_OK;
}

loom_tensor *loom_cat(int n, loom_tensor *const *tensors, int dim) {
  if (n < 1 || !tensors) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "cat: needs at least one tensor (n = %d)", n);
    return NULL;
  }
  for (int j = 0; j < n; j++) {
    if (!tensors[j]) {
      if (loom_last_status() == LOOM_OK) loom_set_error(LOOM_ERR_NULL_INPUT, "cat: tensor %d is NULL", j);
      return NULL;
    }
  }
  int d;
  if (loom_norm_dim("cat", dim, tensors[0]->ndim, &d) != LOOM_OK) return NULL;
  /* Longer lists: the first LOOM_OP_MAX_IN, then that result with the next
   * LOOM_OP_MAX_IN - 1, ... (each step is one recorded op). */
  loom_tensor *acc = NULL;
  int j = 0;
  do {
    loom_op_args a = {.n_in = 0};
    a.i[0] = d;
    if (acc) a.in[a.n_in++] = acc;
    while (j < n && a.n_in < LOOM_OP_MAX_IN) a.in[a.n_in++] = tensors[j++];
    loom_tensor *next = loom_op_run(LOOM_OP_CAT, &a);
    /* Outside a scope the caller owns each result: drop the partial one. */
    if (acc && loom_scope_depth() == 0) loom_tensor_release(acc);
    acc = next;
  } while (acc && j < n);
  return acc;
}
