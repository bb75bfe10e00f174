/* bench_alloc_varying.c — records an allocator trace of real loom training
 * steps whose batch size changes from step to step (as with bucketed
 * sequence lengths or a last short batch), for bench_alloc_replay: the MNIST
 * MLP (784→1024→1024→10, AdamW) on random data, batch drawn uniformly from
 * [--min, --max] with a fixed seed. An epoch marker follows the warm-up
 * steps, so the replay reports the steady state after them.
 *
 * Usage: bench_alloc_varying TRACE [--steps 300] [--warmup 30] [--min 16] [--max 512] [--device cpu]
 * Prints one line: bench=alloc_varying trace=... steps=... batch_min=... batch_max=... batches_seen=...
 * then replay it:  bench_alloc_replay TRACE --conf "" --conf expandable_segments:true */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/loom.h"

static int fail(const char *what) {
  fprintf(stderr, "bench_alloc_varying: %s: %s\n", what, loom_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: %s TRACE [--steps N] [--warmup N] [--min B] [--max B] [--device D]\n", argv[0]);
    return 2;
  }
  const char *trace = argv[1], *device = "cpu";
  int steps = 300, warmup = 30;
  int64_t bmin = 16, bmax = 512;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--min")) bmin = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--max")) bmax = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--device")) device = argv[i + 1];
    else {
      fprintf(stderr, "bench_alloc_varying: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (steps < 1 || warmup < 0 || bmin < 1 || bmax < bmin) {
    fprintf(stderr, "bench_alloc_varying: need steps >= 1, warmup >= 0, 1 <= min <= max\n");
    return 2;
  }
  loom_device dev;
  if (loom_device_parse(device, &dev) != LOOM_OK) {
    printf("bench=alloc_varying skipped reason=\"%s\"\n", loom_last_error());
    return 0;
  }
  remove(trace);
  if (loom_alloc_trace_start(trace) != LOOM_OK) return fail("trace");
  loom_manual_seed(1);
  int64_t hidden[2] = {1024, 1024};
  loom_module *mlp = loom_mlp_new(784, 2, hidden, 10, dev);
  if (!mlp) return fail("model");
  int np = loom_module_num_params(mlp);
  loom_tensor *params[16];
  for (int i = 0; i < np && i < 16; i++) params[i] = loom_module_param(mlp, i);
  loom_optimizer *opt = loom_adamw_new(params, np, NULL);
  if (!opt) return fail("optimizer");
  uint64_t rs = 0x9E3779B97F4A7C15ull;
  int64_t seen_min = INT64_MAX, seen_max = 0;
  for (int step = 0; step < warmup + steps; step++) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    int64_t b = bmin + (int64_t)(rs % (uint64_t)(bmax - bmin + 1));
    if (step >= warmup) {
      if (b < seen_min) seen_min = b;
      if (b > seen_max) seen_max = b;
    }
    loom_scope_begin();
    int64_t xs[2] = {b, 784}, ys[1] = {b};
    loom_tensor *x = loom_randn(2, xs, LOOM_F32, dev);
    loom_tensor *y = loom_cast(loom_mul_scalar(loom_rand(1, ys, LOOM_F32, dev), 9.99), LOOM_I64);
    loom_tensor *loss = loom_cross_entropy(loom_module_forward(mlp, x), y);
    if (!loss || loom_optimizer_zero_grad(opt) != LOOM_OK || loom_backward(loss) != LOOM_OK ||
        loom_optimizer_step(opt) != LOOM_OK)
      return fail("training step");
    loom_scope_end();
    if (step + 1 == warmup) loom_alloc_trace_epoch(1);
  }
  loom_alloc_trace_epoch(2);
  loom_optimizer_free(opt);
  loom_module_free(mlp);
  loom_alloc_trace_stop();
  printf("bench=alloc_varying trace=%s device=%s steps=%d warmup=%d batch_min=%lld batch_max=%lld seen_min=%lld "
         "seen_max=%lld\n",
         trace, device, steps, warmup, (long long)bmin, (long long)bmax, (long long)seen_min, (long long)seen_max);
  return 0;
}
