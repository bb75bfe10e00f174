/* bench_cuda_graph.c — the MNIST MLP training step (784→1024→1024→10, AdamW,
 * f32) run eagerly and replayed from a captured CUDA graph, in the same run:
 * warm-up, N eager steps, one captured step, N replays (each after writing
 * the batch into the captured input buffers). Prints one line:
 *   bench=cuda_graph device=... batch=... eager_ms=... graph_ms=... speedup=...
 * The replays train on a batch the eager steps never saw, the same one each
 * time, so their loss must fall: after the timed replays it must be below
 * half the first replay's, or the bench fails (the first GPU run timed
 * replays that did not train).
 * On the CPU there are no graphs: it checks that the step is capture-safe
 * and prints skipped=... instead of the timings. The GPU path has not run
 * yet (no GPU on the development machines).
 *
 * Usage: bench_cuda_graph [--device cuda] [--batch 128] [--steps 200] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/loom.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One step; *keep (when asked): its loss, owned by the caller. */
static int step(loom_module *m, loom_optimizer *opt, loom_tensor *x, loom_tensor *y, loom_tensor **keep) {
  loom_scope_begin();
  loom_tensor *loss = loom_cross_entropy(loom_module_forward(m, x), y);
  loom_optimizer_zero_grad(opt);
  int ok = loom_backward(loss) == LOOM_OK && loom_optimizer_step(opt) == LOOM_OK;
  if (keep) *keep = ok ? loom_tensor_retain(loss) : NULL;
  loom_scope_end();
  return ok;
}

static int fail(const char *what) {
  fprintf(stderr, "bench_cuda_graph: %s: %s\n", what, loom_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const char *device = "cuda";
  int64_t batch = 128;
  int steps = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--device")) device = argv[i + 1];
    else if (!strcmp(argv[i], "--batch")) batch = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "bench_cuda_graph: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  loom_device dev;
  if (loom_device_parse(device, &dev) != LOOM_OK || loom_device_check(dev) != LOOM_OK) {
    printf("bench=cuda_graph device=%s skipped=\"%s\"\n", device, loom_last_error());
    return 0;
  }
  loom_manual_seed(1);
  int64_t hidden[2] = {1024, 1024};
  loom_module *m = loom_mlp_new(784, 2, hidden, 10, dev);
  if (!m) return fail("model");
  int np = loom_module_num_params(m);
  loom_tensor *params[8];
  for (int i = 0; i < np; i++) params[i] = loom_module_param(m, i);
  loom_adamw_options ao;
  loom_adamw_options_init(&ao);
  loom_optimizer *opt = loom_adamw_new(params, np, &ao);
  int64_t xs[2] = {batch, 784}, ys[1] = {batch};
  int64_t *lab = malloc((size_t)batch * sizeof *lab);
  for (int64_t i = 0; i < batch; i++) lab[i] = i % 10;
  /* The static input buffers, and the next batch (on the host side of a
   * loader this would be the pinned ring) written into them before a step. */
  loom_tensor *x = loom_randn(2, xs, LOOM_F32, dev), *y = loom_from_host(lab, 1, ys, LOOM_I64, dev);
  loom_tensor *nx = loom_randn(2, xs, LOOM_F32, dev), *gx = loom_randn(2, xs, LOOM_F32, dev);
  free(lab);
  if (!opt || !x || !y || !nx || !gx) return fail("setup");
  for (int i = 0; i < 5; i++)
    if (!step(m, opt, x, y, NULL)) return fail("warm-up step");
  loom_device_synchronize(dev);
  double t0 = now();
  for (int i = 0; i < steps; i++) {
    if (loom_copy_(x, nx) != LOOM_OK || !step(m, opt, x, y, NULL)) return fail("eager step");
  }
  loom_device_synchronize(dev);
  double eager = (now() - t0) / steps;
  loom_graph *g = NULL;
  if (loom_graph_capture_begin(dev, &g) != LOOM_OK) return fail("capture begin");
  loom_tensor *loss = NULL;  /* the captured step's loss: every replay rewrites it */
  int ok = step(m, opt, x, y, &loss);
  if (loom_graph_capture_end(g) != LOOM_OK || !ok) return fail("capture");
  if (loom_copy_(x, gx) != LOOM_OK) return fail("the replays' batch");
  if (loom_graph_replay(g) == LOOM_ERR_UNSUPPORTED) {
    printf("bench=cuda_graph device=%s batch=%lld eager_ms=%.3f capture_safe=1 skipped=\"no graphs on %s\"\n", device,
           (long long)batch, 1e3 * eager, device);
    loom_clear_error();
  } else {
    double first = 0, last = 0;
    if (loom_item(loss, &first) != LOOM_OK) return fail("reading the first replay's loss");
    loom_device_synchronize(dev);
    t0 = now();
    for (int i = 0; i < steps; i++)
      if (loom_copy_(x, gx) != LOOM_OK || loom_graph_replay(g) != LOOM_OK) return fail("replay");
    loom_device_synchronize(dev);
    double graph = (now() - t0) / steps;
    if (loom_item(loss, &last) != LOOM_OK) return fail("reading the last replay's loss");
    printf("bench=cuda_graph device=%s batch=%lld eager_ms=%.3f graph_ms=%.3f speedup=%.2f graph_loss_first=%.4g "
           "graph_loss_last=%.4g\n",
           device, (long long)batch, 1e3 * eager, 1e3 * graph, eager / graph, first, last);
    if (!(last < 0.5 * first)) {
      fprintf(stderr, "bench_cuda_graph: the replays did not train (loss %g after the first replay, %g after %d more)\n",
              first, last, steps);
      return 1;
    }
  }
  loom_tensor_release(loss);
  /* The captured step's gradients live in the graph's pool: drop them first. */
  loom_optimizer_zero_grad(opt);
  loom_graph_free(g);
  loom_tensor_release(x);
  loom_tensor_release(y);
  loom_tensor_release(nx);
  loom_tensor_release(gx);
  loom_optimizer_free(opt);
  loom_module_free(m);
  return 0;
}
