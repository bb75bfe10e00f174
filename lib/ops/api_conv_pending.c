/* api_conv_pending.c — TEMPORARY: the public conv2d entry points declared in
 * ops.h, failing with LOOM_ERR_UNSUPPORTED until the conv op lands (issue 11).
 * The conv work deletes this file. */
#include "ops/op.h"

loom_conv2d_options loom_conv2d_defaults(void) {
  loom_conv2d_options o = {sizeof(loom_conv2d_options), {1, 1}, {0, 0}, {1, 1}, 1, LOOM_ACT_NONE};
  return o;
}

loom_tensor *loom_conv2d(loom_tensor *x, loom_tensor *w, loom_tensor *b, const loom_conv2d_options *opt) {
  (void)x, (void)w, (void)b, (void)opt;
  loom_set_error(LOOM_ERR_UNSUPPORTED, "conv2d: not implemented yet");
  return NULL;
}
