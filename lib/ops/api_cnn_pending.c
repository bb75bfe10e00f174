/* api_cnn_pending.c — TEMPORARY: batch norm, pooling, dropout, flatten and
 * add_relu declared in ops.h, failing with LOOM_ERR_UNSUPPORTED until those
 * ops land (issue 11). That work deletes this file. */
#include "ops/op.h"

#define PENDING(name)                                                      \
  do {                                                                     \
    loom_set_error(LOOM_ERR_UNSUPPORTED, name ": not implemented yet");    \
    return NULL;                                                           \
  } while (0)

loom_batch_norm_options loom_batch_norm_defaults(void) {
  loom_batch_norm_options o = {sizeof(loom_batch_norm_options), true, 0.1, 1e-5, LOOM_ACT_NONE};
  return o;
}

loom_pool2d_options loom_pool2d_defaults(int64_t kernel_h, int64_t kernel_w) {
  loom_pool2d_options o = {sizeof(loom_pool2d_options), {kernel_h, kernel_w}, {0, 0}, {0, 0}, false, true};
  return o;
}

loom_tensor *loom_batch_norm(loom_tensor *x, loom_tensor *rm, loom_tensor *rv, loom_tensor *w, loom_tensor *b,
                             const loom_batch_norm_options *opt) {
  (void)x, (void)rm, (void)rv, (void)w, (void)b, (void)opt;
  PENDING("batch_norm");
}
loom_tensor *loom_max_pool2d(loom_tensor *x, const loom_pool2d_options *opt) { (void)x, (void)opt; PENDING("max_pool2d"); }
loom_tensor *loom_avg_pool2d(loom_tensor *x, const loom_pool2d_options *opt) { (void)x, (void)opt; PENDING("avg_pool2d"); }
loom_tensor *loom_adaptive_avg_pool2d(loom_tensor *x, int64_t oh, int64_t ow) {
  (void)x, (void)oh, (void)ow;
  PENDING("adaptive_avg_pool2d");
}
loom_tensor *loom_dropout(loom_tensor *x, double p, bool training) { (void)x, (void)p, (void)training; PENDING("dropout"); }
loom_tensor *loom_flatten(loom_tensor *x, int s, int e) { (void)x, (void)s, (void)e; PENDING("flatten"); }
loom_tensor *loom_add_relu(loom_tensor *a, loom_tensor *b) { (void)a, (void)b; PENDING("add_relu"); }
