/* bench_op_overhead.c — host overhead of one tiny op: c = a + b on
 * 1-element f32 tensors, without and with autograd recording (an input that
 * requires grad), in loom; bench/op_overhead/pytorch_op_overhead.py does the same in
 * PyTorch eager and bench/op_overhead/run_op_overhead.sh prints the ratio measured in
 * one run.
 *
 * The op is run in batches of BATCH; each batch is timed on the host clock
 * from its first call to its last return (host_us_per_op: dispatch, shape
 * rule, output allocation, tape record, kernel launch — what the host pays
 * per op), then the device is synchronized outside the timer, so on a GPU
 * the launch queue starts empty for every batch. wall_us_per_op also
 * includes those synchronizations (on a GPU: the kernels' own time once the
 * host is faster than the GPU). Outputs die at the end of each batch's
 * scope, which is inside the timer (PyTorch frees them on reassignment).
 *
 * Usage: bench_op_overhead [--device cpu|cuda] [--iters N] [--reps R]
 * Prints, per grad mode, the best of R repetitions:
 *   bench=op_overhead impl=loom device=cpu grad=0 iters=... host_us_per_op=... wall_us_per_op=...
 * or "bench=op_overhead impl=loom device=cuda skipped reason=..." (exit 0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/loom.h"

#define BATCH 200

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* iters ops in batches; returns 0 on success and the two times per op. */
static int run(loom_device dev, int grad, long iters, double *host_us, double *wall_us) {
  int64_t one = 1;
  loom_tensor *a = loom_ones(1, &one, LOOM_F32, dev), *b = loom_ones(1, &one, LOOM_F32, dev);
  if (!a || !b) return -1;
  if (grad && loom_set_requires_grad(a, true) != LOOM_OK) return -1;
  /* Measure what the mode says: the output is recorded exactly when grad is on. */
  loom_scope_begin();
  loom_tensor *probe = loom_add(a, b);
  bool recorded = probe && loom_requires_grad(probe);
  loom_scope_end();
  if (recorded != (grad != 0)) {
    fprintf(stderr, "bench_op_overhead: grad=%d but the add was %srecorded\n", grad, recorded ? "" : "not ");
    return -1;
  }
  double host = 0;
  int rc = 0;
  if (loom_device_synchronize(dev) != LOOM_OK) rc = -1;
  double w0 = now_s();
  for (long done = 0; done < iters && rc == 0; done += BATCH) {
    double t0 = now_s();
    loom_scope_begin();
    for (int k = 0; k < BATCH; k++)
      if (!loom_add(a, b)) { rc = -1; break; }
    loom_scope_end();
    host += now_s() - t0;
    if (loom_device_synchronize(dev) != LOOM_OK) rc = -1;
  }
  double wall = now_s() - w0;
  long n = (iters + BATCH - 1) / BATCH * BATCH;
  *host_us = host / (double)n * 1e6;
  *wall_us = wall / (double)n * 1e6;
  loom_tensor_release(a);
  loom_tensor_release(b);
  return rc;
}

int main(int argc, char **argv) {
  const char *devs = "cpu";
  long iters = 200000;
  int reps = 3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) devs = argv[++i];
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atol(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--device cpu|cuda|cuda:N] [--iters N] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  if (iters < BATCH) iters = BATCH;
  if (reps < 1) reps = 1;
  loom_device dev;
  if (loom_device_parse(devs, &dev) != LOOM_OK) {
    printf("bench=op_overhead impl=loom device=%s skipped reason=\"%s\"\n", devs, loom_last_error());
    return 0;
  }
  char dn[32];
  loom_device_str(dev, dn, sizeof dn);
  for (int grad = 0; grad <= 1; grad++) {
    double best_h = 1e30, best_w = 1e30, h, w;
    if (run(dev, grad, iters / 10, &h, &w) != 0) goto fail;  /* warm-up: caches, pools, kernels loaded */
    for (int r = 0; r < reps; r++) {
      if (run(dev, grad, iters, &h, &w) != 0) goto fail;
      if (h < best_h) best_h = h;
      if (w < best_w) best_w = w;
    }
    printf("bench=op_overhead impl=loom device=%s grad=%d iters=%ld host_us_per_op=%.3f wall_us_per_op=%.3f\n", dn, grad,
           iters, best_h, best_w);
  }
  return 0;
fail:
  fprintf(stderr, "bench_op_overhead: %s\n", loom_last_error());
  return 1;
}
