/* api_reduce.c — the public reductions: sum, mean, max, argmax. */
#include <math.h>

#include "ops/op.h"

static loom_status dims_mask(const char *op, const loom_tensor *a, int ndims, const int *dims, unsigned *mask) {
  *mask = 0;
  if (ndims < 0 || (ndims > 0 && !dims)) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: bad dims list", op);
  if (ndims == 0) {
    for (int d = 0; d < a->ndim; d++) *mask |= 1u << d;
    return LOOM_OK;
  }
  for (int k = 0; k < ndims; k++) {
    int d;
    LOOM_TRY(loom_norm_dim(op, dims[k], a->ndim, &d));
    if (*mask >> d & 1) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: dim %d is listed twice", op, dims[k]);
    *mask |= 1u << d;
  }
  return LOOM_OK;
}

static loom_tensor *reduce(loom_op_id id, const char *name, loom_tensor *a, int ndims, const int *dims, bool keepdim) {
  if (!a) return loom_op_run(id, &(loom_op_args){.n_in = 1});
  unsigned mask;
  if (dims_mask(name, a, ndims, dims, &mask) != LOOM_OK) return NULL;
  loom_op_args args = {.in = {a}, .n_in = 1};
  args.i[0] = mask;
  args.i[1] = keepdim;
  return loom_op_run(id, &args);
}

loom_tensor *loom_sum(loom_tensor *a, int ndims, const int *dims, bool keepdim) {
  return reduce(LOOM_OP_SUM, "sum", a, ndims, dims, keepdim);
}

loom_tensor *loom_max(loom_tensor *a, int ndims, const int *dims, bool keepdim) {
  return reduce(LOOM_OP_MAX, "max", a, ndims, dims, keepdim);
}

loom_tensor *loom_mean(loom_tensor *a, int ndims, const int *dims, bool keepdim) {
  if (!a) return reduce(LOOM_OP_SUM, "mean", a, ndims, dims, keepdim);
  unsigned mask;
  if (dims_mask("mean", a, ndims, dims, &mask) != LOOM_OK) return NULL;
  int64_t cnt = 1;
  for (int d = 0; d < a->ndim; d++)
    if (mask >> d & 1) cnt *= a->shape[d];
  /* A private scope for the intermediate sum: outside any scope the caller
   * must get only the result, not an orphaned temporary (ownership rule). */
  loom_scope_begin();
  loom_tensor *r = loom_keep(
      loom_mul_scalar(reduce(LOOM_OP_SUM, "mean", a, ndims, dims, keepdim), cnt ? 1.0 / (double)cnt : NAN));
  loom_scope_end();
  return r;
}

loom_tensor *loom_sum_all(loom_tensor *a) { return loom_sum(a, 0, NULL, false); }
loom_tensor *loom_mean_all(loom_tensor *a) { return loom_mean(a, 0, NULL, false); }

loom_tensor *loom_argmax(loom_tensor *a, int dim, bool keepdim) {
  if (!a) return loom_op_run(LOOM_OP_ARGMAX, &(loom_op_args){.n_in = 1});
  int d;
  if (loom_norm_dim("argmax", dim, a->ndim, &d) != LOOM_OK) return NULL;
  loom_op_args args = {.in = {a}, .n_in = 1};
  args.i[0] = d;
  args.i[1] = keepdim;
  return loom_op_run(LOOM_OP_ARGMAX, &args);
}
