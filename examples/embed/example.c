/* example.c — the README's "Use it from C" program, built so it stays true. */
#include <loom/loom.h>
#include <stdio.h>

int main(void) {
  int64_t hidden[] = {256};
  loom_module *mlp = loom_mlp_new(4, 1, hidden, 3, loom_cpu());   /* 4 -> 256 -> 3, ReLU fused */
  loom_tensor *params[4];
  for (int i = 0; i < 4; i++) params[i] = loom_module_param(mlp, i);
  loom_optimizer *opt = loom_adamw_new(params, 4, NULL);

  int64_t xs[] = {8, 4}, ys[] = {8}, labels[] = {0, 1, 2, 0, 1, 2, 0, 1};
  for (int step = 0; step < 100; step++) {
    loom_scope_begin();                        /* every tensor made below dies at scope end */
    loom_tensor *x = loom_randn(2, xs, LOOM_F32, loom_cpu());
    loom_tensor *y = loom_from_host(labels, 1, ys, LOOM_I64, loom_cpu());
    loom_tensor *loss = loom_cross_entropy(loom_module_forward(mlp, x), y);
    loom_optimizer_zero_grad(opt);
    if (loom_backward(loss) != LOOM_OK || loom_optimizer_step(opt) != LOOM_OK) {
      fprintf(stderr, "step failed: %s\n", loom_last_error());   /* says what, where, what to do */
      return 1;
    }
    loom_scope_end();
  }
  loom_optimizer_free(opt);
  loom_module_free(mlp);
  return loom_shutdown() == LOOM_OK ? 0 : 1;   /* every cache given back (optional; for leak checkers) */
}
