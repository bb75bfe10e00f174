/* cases_cat.c — the op sweep's case for CAT (loom_cat): three inputs joined
 * along the channel dim, in every dtype, layout and shape class, and (in the
 * small class) seven joined along dim 0, which loom_cat chains as two CAT ops
 * past LOOM_OP_MAX_IN. */
#include <stdlib.h>

#include "op_sweep/sweep.h"

static loom_tensor *cat3_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_cat(3, in, 1);
}

static loom_tensor *cat7_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_cat(7, in, 0);
}

void sw_case_cat(const sw_config *c) {
  const int64_t *d = sw_nchw[c->shape];
  int64_t s[3][4], so[4] = {d[0], 0, d[2], d[3]};
  double *v[3];
  loom_tensor *in[7];
  for (int k = 0; k < 3; k++) {
    s[k][0] = d[0], s[k][1] = d[1] + k, s[k][2] = d[2], s[k][3] = d[3];
    so[1] += s[k][1];
    in[k] = sw_input(c, 4, s[k], -2, 2, 0, &v[k]);
  }
  int64_t hw = d[2] * d[3];
  double *want = sw_alloc(sw_numel(4, so));
  for (int64_t i = 0; i < d[0]; i++)
    for (int j = 0, at = 0; j < 3; j++)
      for (int64_t r = 0; r < s[j][1]; r++, at++)
        for (int64_t e = 0; e < hw; e++) want[(i * so[1] + at) * hw + e] = v[j][(i * s[j][1] + r) * hw + e];
  if (sw_expect(c, cat3_fn(in, NULL), 4, so, want, 1, "cat of three along dim 1"))
    sw_gradcheck(c, cat3_fn, NULL, in, 3, 7u, 1e-2, "gradient");
  for (int k = 0; k < 3; k++) free(v[k]);
  free(want);
  if (c->shape != SW_SMALL) return;
  int64_t r1[1] = {2}, r7[1] = {14};
  double *w[7], want7[14];
  for (int k = 0; k < 7; k++) {
    in[k] = sw_input(c, 1, r1, -2, 2, 0, &w[k]);
    want7[2 * k] = w[k][0], want7[2 * k + 1] = w[k][1];
  }
  if (sw_expect(c, cat7_fn(in, NULL), 1, r7, want7, 1, "cat of seven along dim 0"))
    sw_gradcheck(c, cat7_fn, NULL, in, 7, 0x7fu, 1e-2, "gradient of seven");
  for (int k = 0; k < 7; k++) free(w[k]);
}
