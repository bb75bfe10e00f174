/* api_linalg.c — matmul and the fused linear layer. */
#include "ops/op.h"

loom_tensor *loom_matmul_ex(loom_tensor *a, loom_tensor *b, bool trans_a, bool trans_b) {
  loom_op_args args = {.in = {a, b}, .n_in = 2};
  args.i[0] = trans_a;
  args.i[1] = trans_b;
  return loom_op_run(LOOM_OP_MATMUL, &args);
}

loom_tensor *loom_matmul(loom_tensor *a, loom_tensor *b) { return loom_matmul_ex(a, b, false, false); }

loom_tensor *loom_linear(loom_tensor *x, loom_tensor *w, loom_tensor *b, loom_activation act) {
  if (b && w && b->dtype != w->dtype) {
    loom_set_error(LOOM_ERR_DTYPE, "linear: bias is %s but the weight is %s", loom_dtype_name(b->dtype),
                   loom_dtype_name(w->dtype));
    return NULL;
  }
  /* The kernels read x, w and b as dense arrays. The copies are
   * intermediates: a private scope keeps them from outliving the call when
   * the caller has no scope open (ownership rule). */
  loom_scope_begin();
  loom_tensor *xc = x && !loom_tensor_is_contiguous(x) ? loom_contiguous(x) : x;
  loom_tensor *wc = w && !loom_tensor_is_contiguous(w) ? loom_contiguous(w) : w;
  loom_tensor *bc = b && !loom_tensor_is_contiguous(b) ? loom_contiguous(b) : b;
  loom_tensor *r = NULL;
  if (b && !bc) {
    /* Copying the bias failed: do not silently run without it. */
  } else {
    loom_op_args args = {.in = {xc, wc, bc}, .n_in = b ? 3 : 2};
    args.i[0] = act;
    r = loom_keep(loom_op_run(LOOM_OP_LINEAR, &args));
  }
  loom_scope_end();
  return r;
}
