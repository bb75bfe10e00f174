/* ddp_plan.c — how loom_ddp packs gradients into buckets: reverse
 * registration order (backward produces the last layer's gradients first),
 * a small first bucket so communication starts early, then large ones so
 * each all-reduce moves enough bytes to run near link bandwidth. Pure
 * function, tested on its own (tests/test_dist.c). */
#include "dist/dist_internal.h"

int loom_ddp_plan(int n, const int64_t *numel, const loom_dtype *dtype, size_t first_cap, size_t cap, int *bucket_of,
                  int64_t *offset_of) {
  int b = -1;
  size_t bytes = 0, limit = first_cap;
  int64_t elems = 0;
  loom_dtype cur = LOOM_F32;
  for (int i = n - 1; i >= 0; i--) {
    size_t pb = (size_t)numel[i] * loom_dtype_size(dtype[i]);
    bool open_new = b < 0 || dtype[i] != cur || (bytes > 0 && bytes + pb > limit);
    if (open_new) {
      if (b >= 0) limit = cap;  /* the first bucket is closed: the rest use cap */
      b++;
      bytes = 0;
      elems = 0;
      cur = dtype[i];
    }
    bucket_of[i] = b;
    offset_of[i] = elems;
    bytes += pb;
    elems += numel[i];
  }
  return b + 1;
}
