/* bench_memory_step.c — memory saved and time paid by activation
 * checkpointing and offload on an MLP training step (forward + backward +
 * AdamW), against the plain step measured in the same run: peak allocated
 * bytes above the model and optimizer state, and the median step time over
 * alternating rounds (plain, checkpoint, offload, plain, ...).
 *
 * Usage: bench_memory_step [--device cpu|cuda] [--batch 1024] [--layers 8] [--width 1024] [--every 2] [--rounds 7]
 * One line per configuration:
 *   bench=memory_step device=... config=plain|checkpoint_every_N|offload batch=... layers=... width=...
 *   peak_alloc_bytes=... peak_ratio=... step_ms=... time_ratio=...
 * (ratios against config=plain). On the CPU, offload copies into a second
 * CPU buffer: it shows the cost of the copies, not a saving. */
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

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum { PLAIN, CKPT, OFFLOAD, NCONF };

static loom_tensor *whole(void *ctx, int n, loom_tensor *const *in) {
  (void)n;
  return loom_module_forward(ctx, in[0]);
}

typedef struct model {
  loom_module *m;
  loom_optimizer *opt;
} model;

static int make(model *md, int conf, int layers, int64_t width, int every, loom_device dev) {
  loom_manual_seed(1);
  int64_t hidden[64];
  for (int i = 0; i < layers; i++) hidden[i] = width;
  loom_mlp_options o;
  loom_mlp_options_init(&o);
  o.checkpoint_every = conf == CKPT ? every : 0;
  md->m = loom_mlp_new_ex(784, layers, hidden, 10, dev, &o);
  if (!md->m) return 0;
  int np = loom_module_num_params(md->m);
  loom_tensor **p = malloc((size_t)np * sizeof *p);
  for (int i = 0; i < np; i++) p[i] = loom_module_param(md->m, i);
  loom_adamw_options ao = loom_adamw_defaults();
  md->opt = loom_adamw_new(p, np, &ao);
  free(p);
  return md->opt != NULL;
}

static int step(model *md, int conf, loom_tensor *x, loom_tensor *y) {
  loom_scope_begin();
  loom_tensor *in[1] = {x};
  loom_tensor *logits = conf == OFFLOAD ? loom_offload(whole, md->m, 1, in) : loom_module_forward(md->m, x);
  loom_tensor *loss = loom_cross_entropy(logits, y);
  loom_optimizer_zero_grad(md->opt);
  int ok = loom_backward(loss) == LOOM_OK && loom_optimizer_step(md->opt) == LOOM_OK;
  loom_scope_end();
  return ok;
}

int main(int argc, char **argv) {
  const char *device = "cpu";
  int64_t batch = 1024, width = 1024;
  int layers = 8, every = 2, rounds = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--device")) device = argv[i + 1];
    else if (!strcmp(argv[i], "--batch")) batch = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--layers")) layers = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--width")) width = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--every")) every = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "bench_memory_step: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (layers < 1 || layers > 64 || rounds < 1 || every < 1) {
    fprintf(stderr, "bench_memory_step: layers in 1..64, rounds and every >= 1\n");
    return 2;
  }
  loom_device dev;
  if (loom_device_parse(device, &dev) != LOOM_OK || loom_device_check(dev) != LOOM_OK) {
    fprintf(stderr, "bench_memory_step: %s\n", loom_last_error());
    return 1;
  }
  int64_t xs[2] = {batch, 784}, ys[1] = {batch};
  loom_tensor *x = loom_randn(2, xs, LOOM_F32, dev);
  int64_t *lab = malloc((size_t)batch * sizeof *lab);
  for (int64_t i = 0; i < batch; i++) lab[i] = i % 10;
  loom_tensor *y = loom_from_host(lab, 1, ys, LOOM_I64, dev);
  free(lab);
  model md[NCONF];
  int64_t peak[NCONF];
  double *times[NCONF];
  for (int c = 0; c < NCONF; c++) {
    if (!make(&md[c], c, layers, width, every, dev)) {
      fprintf(stderr, "bench_memory_step: model: %s\n", loom_last_error());
      return 1;
    }
    times[c] = malloc((size_t)rounds * sizeof(double));
  }
  /* Peak memory: one warm step each, from an emptied cache. */
  for (int c = 0; c < NCONF; c++) {
    step(&md[c], c, x, y);
    loom_device_synchronize(dev);
    loom_memory_stats st = {.struct_size = sizeof st};
    loom_memory_stats_get(dev, &st);
    int64_t base = st.allocated_bytes[0].current;
    loom_memory_reset_peaks(dev);
    if (!step(&md[c], c, x, y)) {
      fprintf(stderr, "bench_memory_step: step: %s\n", loom_last_error());
      return 1;
    }
    loom_device_synchronize(dev);
    loom_memory_stats_get(dev, &st);
    peak[c] = st.allocated_bytes[0].peak - base;
  }
  for (int r = 0; r < rounds; r++)
    for (int c = 0; c < NCONF; c++) {
      double t0 = now();
      step(&md[c], c, x, y);
      loom_device_synchronize(dev);
      times[c][r] = now() - t0;
    }
  double med[NCONF];
  for (int c = 0; c < NCONF; c++) {
    qsort(times[c], (size_t)rounds, sizeof(double), cmp_d);
    med[c] = times[c][rounds / 2];
  }
  char dn[32];
  loom_device_str(dev, dn, sizeof dn);
  for (int c = 0; c < NCONF; c++) {
    char name[48];
    if (c == PLAIN) snprintf(name, sizeof name, "plain");
    else if (c == CKPT) snprintf(name, sizeof name, "checkpoint_every_%d", every);
    else snprintf(name, sizeof name, "offload");
    printf("bench=memory_step device=%s config=%s batch=%lld layers=%d width=%lld peak_alloc_bytes=%lld "
           "peak_ratio=%.3f step_ms=%.2f time_ratio=%.3f\n",
           dn, name, (long long)batch, layers, (long long)width, (long long)peak[c],
           (double)peak[c] / (double)peak[PLAIN], 1e3 * med[c], med[c] / med[PLAIN]);
    loom_optimizer_free(md[c].opt);
    loom_module_free(md[c].m);
    free(times[c]);
  }
  loom_tensor_release(x);
  loom_tensor_release(y);
  return 0;
}
