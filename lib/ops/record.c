/* record.c — the autograd recording hook of ops (record.h). */
#include "ops/record.h"

static _Atomic(loom_op_recorder_fn) g_recorder;

void loom_op_set_recorder(loom_op_recorder_fn fn) { atomic_store(&g_recorder, fn); }

loom_status loom_op_record(loom_op_id op, const loom_op_args *a) {
  /* An integer result (a cast to i32/i64/u8) ends the graph: it cannot carry
   * a gradient, and recording it would make an integer tensor report
   * requires_grad, which loom_set_requires_grad forbids. */
  if (!loom_is_grad_enabled() || !a->out[0] || !loom_dtype_is_float(a->out[0]->dtype)) return LOOM_OK;
  bool any = false;
  for (int k = 0; k < a->n_in; k++) any = any || loom_requires_grad(a->in[k]);
  if (!any) return LOOM_OK;
  loom_op_recorder_fn rec = atomic_load(&g_recorder);
  if (!rec) {
    /* Unreachable while autograd installs itself wherever a tensor can come
     * to require grad (node.c); refuse rather than drop a gradient. */
    const loom_op_def *d = loom_op_get(op);
    return loom_set_error(LOOM_ERR_INTERNAL, "%s: an input requires grad but autograd's recorder is not installed",
                          d ? d->name : "op");
  }
  return rec(op, a);
}
