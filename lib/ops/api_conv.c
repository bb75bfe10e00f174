/* api_conv.c — loom_conv2d: options, layout normalisation, the op call. */
#include "core/struct_size.h"
#include "ops/conv.h"

void loom_conv2d_options_init(loom_conv2d_options *o) {
  if (!o) return;
  *o = (loom_conv2d_options){sizeof *o, {1, 1}, {0, 0}, {1, 1}, 1, LOOM_ACT_NONE};
}

loom_tensor *loom_conv2d(loom_tensor *x, loom_tensor *w, loom_tensor *b, const loom_conv2d_options *opt) {
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  if (LOOM_STRUCT_IN("conv2d", loom_conv2d_options, &o, opt) != LOOM_OK) return NULL;
  /* x must be NCHW or NHWC (a strided view becomes NCHW: the rule for
   * every CNN op); w may have any strides (the kernels gather it); b is read
   * densely. The copies are intermediates: a private scope keeps them from
   * outliving the call when the caller has no scope open. */
  loom_scope_begin();
  loom_tensor *xc = x && loom_tensor_memory_format(x) == LOOM_FORMAT_STRIDED ? loom_contiguous(x) : x;
  loom_tensor *bc = b && !loom_tensor_is_contiguous(b) ? loom_contiguous(b) : b;
  loom_tensor *r = NULL;
  if (!(b && !bc)) {
    loom_op_args a = {.in = {xc, w, bc}, .n_in = b ? 3 : 2};
    a.i[LOOM_CONV_I_STRIDE_H] = o.stride[0];
    a.i[LOOM_CONV_I_STRIDE_W] = o.stride[1];
    a.i[LOOM_CONV_I_PAD_H] = o.padding[0];
    a.i[LOOM_CONV_I_PAD_W] = o.padding[1];
    a.i[LOOM_CONV_I_DIL_H] = o.dilation[0];
    a.i[LOOM_CONV_I_DIL_W] = o.dilation[1];
    a.i[LOOM_CONV_I_GROUPS] = o.groups;
    a.i[LOOM_CONV_I_ACT] = o.act;
    r = loom_keep(loom_op_run(LOOM_OP_CONV2D, &a));
  }
  loom_scope_end();
  return r;
}
