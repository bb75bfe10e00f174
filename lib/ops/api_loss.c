/* api_loss.c — log-softmax, fused cross-entropy, accuracy. */
#include <stdlib.h>

#include "ops/op.h"
#include "core/sys.h"

loom_tensor *loom_log_softmax(loom_tensor *logits, int dim) {
  if (!logits) return loom_op_run(LOOM_OP_LOG_SOFTMAX, &(loom_op_args){.n_in = 1});
  int d;
  if (logits->ndim < 1) {
    /* Checked here: the transposes below would otherwise report it as theirs. */
    loom_set_error(LOOM_ERR_SHAPE, "log_softmax: needs at least 1 dim, got a 0-d tensor");
    return NULL;
  }
  if (loom_norm_dim("log_softmax", dim, logits->ndim, &d) != LOOM_OK) return NULL;
  /* Intermediates (transposes, contiguous copies) live in a private scope:
   * outside any scope the caller must own only the result. */
  loom_scope_begin();
  loom_tensor *r;
  if (d != logits->ndim - 1) {
    /* Kernels work on the last dim: move dim there and back. */
    loom_tensor *t = loom_transpose(logits, d, -1);
    r = loom_transpose(loom_log_softmax(t, -1), d, -1);
  } else {
    loom_op_args args = {.in = {loom_tensor_is_contiguous(logits) ? logits : loom_contiguous(logits)}, .n_in = 1};
    args.i[0] = d;
    r = loom_op_run(LOOM_OP_LOG_SOFTMAX, &args);
  }
  r = loom_keep(r);
  loom_scope_end();
  return r;
}

loom_tensor *loom_cross_entropy(loom_tensor *logits, loom_tensor *labels) {
  loom_scope_begin(); /* for the contiguous copy, see loom_log_softmax */
  loom_tensor *x = logits && !loom_tensor_is_contiguous(logits) ? loom_contiguous(logits) : logits;
  loom_op_args args = {.in = {x, labels}, .n_in = 2};
  loom_tensor *r = loom_keep(loom_op_run(LOOM_OP_CROSS_ENTROPY, &args));
  loom_scope_end();
  return r;
}

loom_status loom_count_correct(loom_tensor *logits, loom_tensor *labels, int64_t *out) {
  if (!logits || !labels) return loom_last_status() != LOOM_OK ? loom_last_status() : loom_set_error(LOOM_ERR_NULL_INPUT, "accuracy: NULL input");
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "accuracy: out is NULL");
  if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0]) {
    char b1[96], b2[96];
    return loom_set_error(LOOM_ERR_SHAPE, "accuracy: expected logits [N, C] and labels [N], got %s and %s",
                          loom_shape_str(logits->ndim, logits->shape, b1, 96), loom_shape_str(labels->ndim, labels->shape, b2, 96));
  }
  int64_t n = logits->shape[0];
  bool prev = loom_set_grad_enabled(false);
  loom_scope_begin();
  loom_tensor *am = loom_argmax(logits, 1, false);
  int64_t *pred = loom_sys_malloc((size_t)(n ? n : 1) * sizeof *pred);
  int64_t *lab = loom_sys_malloc((size_t)(n ? n : 1) * sizeof *lab);
  loom_status st = (pred && lab) ? LOOM_OK : loom_set_error(LOOM_ERR_OOM, "accuracy: out of host memory");
  if (st == LOOM_OK) st = loom_to_host(am, pred, (size_t)n * sizeof *pred, LOOM_I64);
  if (st == LOOM_OK) st = loom_to_host(labels, lab, (size_t)n * sizeof *lab, LOOM_I64);
  int64_t c = 0;
  for (int64_t i = 0; st == LOOM_OK && i < n; i++) c += pred[i] == lab[i];
  loom_sys_free(pred);
  loom_sys_free(lab);
  loom_scope_end();
  loom_set_grad_enabled(prev);
  if (st == LOOM_OK) *out = c;
  return st;
}

loom_status loom_accuracy(loom_tensor *logits, loom_tensor *labels, double *out) {
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "accuracy: out is NULL");
  int64_t c;
  LOOM_TRY(loom_count_correct(logits, labels, &c));
  int64_t n = logits->shape[0];
  *out = n ? (double)c / (double)n : 0.0;
  return LOOM_OK;
}
