/* records.c — a program linked with libloom.a that names no autograd
 * function other than loom_set_requires_grad (no backward): ops on a tensor
 * that requires grad must still be recorded. Ops reach autograd only
 * through the recorder it installs (lib/ops/record.h); the static linker
 * pulls lib/autograd/node.c in because loom_set_requires_grad calls
 * loom_autograd_install. Exits 0 when the results require grad. */
#include <stdio.h>

#include "loom/loom.h"

int main(void) {
  int64_t shape[1] = {3};
  loom_scope_begin();
  loom_tensor *w = loom_ones(1, shape, LOOM_F32, loom_cpu());
  if (!w || loom_set_requires_grad(w, true) != LOOM_OK) {
    fprintf(stderr, "static_link_records: setup failed: %s\n", loom_last_error());
    loom_scope_end();
    return 1;
  }
  loom_tensor *y = loom_mul_scalar(loom_add(w, w), 2.0);
  loom_tensor *v = loom_reshape(y, 1, shape);
  int ok = y && v && loom_requires_grad(y) && loom_requires_grad(v);
  if (!ok)
    fprintf(stderr, "static_link_records: results %s (%s)\n", y && v ? "do not require grad" : "failed",
            loom_last_error());
  loom_scope_end();
  if (ok) printf("static_link_records: ok\n");
  return ok ? 0 : 1;
}
