/* iter.c — building a coalesced strided iteration over an output shape. */
#include <stdbool.h>

#include "ops/iter.h"

void loom_iter_init(loom_iter *it, int nops, loom_tensor *const *ops) {
  const loom_tensor *out = ops[0];
  int nd = out->ndim;
  it->nops = nops;
  int64_t shape[LOOM_MAX_DIMS];
  int64_t st[3][LOOM_MAX_DIMS];
  /* Walk the output in its memory order: dims by decreasing output stride
   * (the identity for contiguous outputs; NHWC outputs, e.g. a gradient
   * accumulated in place, then coalesce into one run instead of W-runs of
   * stride C). Only for outputs without zero or negative strides, where the
   * order of the writes cannot matter. */
  int order[LOOM_MAX_DIMS];
  bool sortable = true;
  for (int d = 0; d < nd; d++) {
    order[d] = d;
    if (out->shape[d] != 1 && out->strides[d] <= 0) sortable = false;
  }
  for (int i = 1; sortable && i < nd; i++)
    for (int j = i; j > 0 && out->strides[order[j - 1]] < out->strides[order[j]]; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  for (int d = 0; d < nd; d++) shape[d] = out->shape[order[d]];
  for (int k = 0; k < nops; k++) {
    const loom_tensor *t = ops[k];
    int off = nd - t->ndim;
    for (int d = 0; d < nd; d++) {
      int td = order[d] - off;
      if (td < 0 || t->shape[td] == 1) st[k][d] = 0;
      else st[k][d] = t->strides[td];
    }
  }
  /* Drop size-1 dims, then coalesce neighbours that are contiguous for all. */
  int n = 0;
  for (int d = 0; d < nd; d++) {
    if (shape[d] == 1) continue;
    if (n > 0) {
      int ok = 1;
      for (int k = 0; k < nops; k++)
        if (it->strides[k][n - 1] != st[k][d] * shape[d]) { ok = 0; break; }
      if (ok) {
        it->shape[n - 1] *= shape[d];
        for (int k = 0; k < nops; k++) it->strides[k][n - 1] = st[k][d];
        continue;
      }
    }
    it->shape[n] = shape[d];
    for (int k = 0; k < nops; k++) it->strides[k][n] = st[k][d];
    n++;
  }
  if (n == 0) {
    it->shape[0] = 1;
    for (int k = 0; k < nops; k++) it->strides[k][0] = 1;
    n = 1;
  }
  it->ndim = n;
  it->inner = it->shape[n - 1];
  it->rows = 1;
  for (int d = 0; d < n - 1; d++) it->rows *= it->shape[d];
}

void loom_iter_row_offsets(const loom_iter *it, int64_t r, int64_t *offs) {
  for (int k = 0; k < it->nops; k++) offs[k] = 0;
  for (int d = it->ndim - 2; d >= 0; d--) {
    int64_t idx = r % it->shape[d];
    r /= it->shape[d];
    for (int k = 0; k < it->nops; k++) offs[k] += idx * it->strides[k][d];
  }
}
