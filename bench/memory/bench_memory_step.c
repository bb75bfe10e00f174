/* bench_memory_step.c — memory saved and time paid by activation
 * checkpointing and offload on a training step, against the plain step
 * measured in the same run: peak allocated bytes above the model, optimizer
 * state and data, and the median step time over alternating rounds (plain,
 * checkpoint, offload, plain, ...).
 *
 * --model mlp (the default): an MLP step (forward + backward + AdamW),
 *   configurations plain, checkpoint_every_N (N from --every) and offload.
 * --model resnet56: a CIFAR-style ResNet-56 step on [batch, 3, 32, 32]
 *   (forward + cross-entropy + backward + SGD with momentum 0.9, weight
 *   decay 5e-4), configurations plain and checkpoint_every_N for each N of
 *   --every (a comma list; default 1,3,9: every block, three runs of 3 or
 *   one run of 9 per 9-block stage; loom_resnet_options.checkpoint_every).
 *
 * Usage: bench_memory_step [--model mlp|resnet56] [--device cpu|cuda] [--batch 1024 (mlp) | 128 (resnet56)]
 *                          [--layers 8] [--width 1024] [--every 2 (mlp) | 1,3,9 (resnet56)] [--rounds 7]
 * One line per configuration:
 *   bench=memory_step device=... config=plain|checkpoint_every_N|offload batch=... layers=... width=...
 *   peak_alloc_bytes=... peak_ratio=... step_ms=... time_ratio=...
 * (mlp; ratios against config=plain), or
 *   bench=memory_step model=resnet56 device=... config=plain|checkpoint_every_N batch=... model_bytes=...
 *   peak_alloc_bytes=... peak_ratio=... step_ms=... time_ratio=...
 * (model_bytes: what the model holds between steps: parameters, gradients
 * and momentum; peak_alloc_bytes is above that and the batch). On the CPU, offload
 * copies into a second CPU buffer: it shows the cost of the copies, not a
 * saving. */
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
#define MAX_EVERY 8

static loom_tensor *whole(void *ctx, int n, loom_tensor *const *in) {
  (void)n;
  return loom_module_forward(ctx, in[0]);
}

typedef struct model {
  loom_module *m;
  loom_optimizer *opt;
} model;

/* ResNet-56 checkpointing every blocks per run (0: plain), SGD. */
static int make_resnet(model *md, int every, loom_device dev) {
  loom_manual_seed(1);
  loom_resnet_options o;
  loom_resnet_options_init(&o, LOOM_RESNET56);
  o.checkpoint_every = every;
  md->m = loom_resnet_new(LOOM_RESNET56, &o, dev);
  if (!md->m) return 0;
  loom_sgd_options so;
  loom_sgd_options_init(&so);
  so.lr = 0.1, so.momentum = 0.9, so.weight_decay = 5e-4;
  md->opt = loom_sgd_new_for_module(md->m, &so);
  return md->opt != NULL;
}

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
  loom_adamw_options ao;
  loom_adamw_options_init(&ao);
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

/* Peak allocated above what is allocated before one step (after a warm-up
 * step from which gradients and optimizer state remain), in bytes; -1 on
 * failure. */
static int64_t measure_peak(model *md, int conf, loom_tensor *x, loom_tensor *y, loom_device dev) {
  if (!step(md, conf, x, y)) return -1;
  loom_device_synchronize(dev);
  loom_memory_stats st = {.struct_size = sizeof st};
  loom_memory_stats_get(dev, &st);
  int64_t base = st.allocated_bytes[0].current;
  loom_memory_reset_peaks(dev);
  if (!step(md, conf, x, y)) return -1;
  loom_device_synchronize(dev);
  loom_memory_stats_get(dev, &st);
  return st.allocated_bytes[0].peak - base;
}

static int run_resnet(loom_device dev, int64_t batch, const int *evs, int n_ev, int rounds) {
  int nc = 1 + n_ev;
  int64_t xs[4] = {batch, 3, 32, 32}, ys[1] = {batch};
  loom_tensor *x = loom_randn(4, xs, LOOM_F32, dev);
  int64_t *lab = malloc((size_t)batch * sizeof *lab);
  for (int64_t i = 0; i < batch; i++) lab[i] = i % 10;
  loom_tensor *y = loom_from_host(lab, 1, ys, LOOM_I64, dev);
  free(lab);
  if (!x || !y) {
    fprintf(stderr, "bench_memory_step: data: %s\n", loom_last_error());
    return 1;
  }
  model md[1 + MAX_EVERY];
  int64_t peak[1 + MAX_EVERY], base[1 + MAX_EVERY];  /* base: what the model holds between steps */
  double *times[1 + MAX_EVERY], med[1 + MAX_EVERY];
  /* One model at a time for the peaks (what the others hold is in base, not
   * in the peak), then all of them for the alternating timed rounds. */
  for (int c = 0; c < nc; c++) {
    if (!make_resnet(&md[c], c == 0 ? 0 : evs[c - 1], dev)) {
      fprintf(stderr, "bench_memory_step: model: %s\n", loom_last_error());
      return 1;
    }
    loom_device_synchronize(dev);
    loom_memory_stats st = {.struct_size = sizeof st};
    loom_memory_stats_get(dev, &st);
    base[c] = st.allocated_bytes[0].current;
    peak[c] = measure_peak(&md[c], PLAIN, x, y, dev);
    loom_memory_stats_get(dev, &st);
    base[c] = st.allocated_bytes[0].current - base[c];
    if (peak[c] < 0) {
      fprintf(stderr, "bench_memory_step: step: %s\n", loom_last_error());
      return 1;
    }
    times[c] = malloc((size_t)rounds * sizeof(double));
  }
  for (int r = 0; r < rounds; r++)
    for (int c = 0; c < nc; c++) {
      double t0 = now();
      if (!step(&md[c], PLAIN, x, y)) {
        fprintf(stderr, "bench_memory_step: step: %s\n", loom_last_error());
        return 1;
      }
      loom_device_synchronize(dev);
      times[c][r] = now() - t0;
    }
  char dn[32];
  loom_device_str(dev, dn, sizeof dn);
  for (int c = 0; c < nc; c++) {
    qsort(times[c], (size_t)rounds, sizeof(double), cmp_d);
    med[c] = times[c][rounds / 2];
  }
  for (int c = 0; c < nc; c++) {
    char name[48];
    if (c == 0) snprintf(name, sizeof name, "plain");
    else snprintf(name, sizeof name, "checkpoint_every_%d", evs[c - 1]);
    printf("bench=memory_step model=resnet56 device=%s config=%s batch=%lld model_bytes=%lld peak_alloc_bytes=%lld "
           "peak_ratio=%.3f step_ms=%.2f time_ratio=%.3f\n",
           dn, name, (long long)batch, (long long)base[c], (long long)peak[c], (double)peak[c] / (double)peak[0],
           1e3 * med[c], med[c] / med[0]);
    loom_optimizer_free(md[c].opt);
    loom_module_free(md[c].m);
    free(times[c]);
  }
  loom_tensor_release(x);
  loom_tensor_release(y);
  return 0;
}

int main(int argc, char **argv) {
  const char *device = "cpu", *model_name = "mlp", *every_arg = NULL;
  int64_t batch = 0, width = 1024;
  int layers = 8, every = 2, rounds = 7;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) {
      fprintf(stderr, "bench_memory_step: %s needs a value\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--device")) device = argv[i + 1];
    else if (!strcmp(argv[i], "--model")) model_name = argv[i + 1];
    else if (!strcmp(argv[i], "--batch")) batch = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--layers")) layers = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--width")) width = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--every")) every_arg = argv[i + 1];
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "bench_memory_step: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  bool resnet = !strcmp(model_name, "resnet56");
  if (!resnet && strcmp(model_name, "mlp")) {
    fprintf(stderr, "bench_memory_step: unknown --model %s (mlp or resnet56)\n", model_name);
    return 2;
  }
  /* --every: one N for the MLP, a comma list for the ResNet. */
  int evs[MAX_EVERY], n_ev = 0;
  const char *e = every_arg ? every_arg : resnet ? "1,3,9" : "2";
  while (*e && n_ev < MAX_EVERY) {
    char *end;
    long v = strtol(e, &end, 10);
    if (end == e || v < 1 || v > 1000 || (*end && *end != ',')) {
      n_ev = 0;
      break;
    }
    evs[n_ev++] = (int)v;
    e = *end ? end + 1 : end;
  }
  if (n_ev == 0 || *e || (!resnet && n_ev != 1)) {
    fprintf(stderr, "bench_memory_step: --every takes N >= 1 (mlp) or a list N,N,... of up to %d (resnet56)\n",
            MAX_EVERY);
    return 2;
  }
  every = evs[0];
  if (batch == 0) batch = resnet ? 128 : 1024;
  if (layers < 1 || layers > 64 || rounds < 1 || batch < 1) {
    fprintf(stderr, "bench_memory_step: layers in 1..64, rounds and batch >= 1\n");
    return 2;
  }
  loom_device dev;
  if (loom_device_parse(device, &dev) != LOOM_OK || loom_device_check(dev) != LOOM_OK) {
    fprintf(stderr, "bench_memory_step: %s\n", loom_last_error());
    return 1;
  }
  if (resnet) return run_resnet(dev, batch, evs, n_ev, rounds);
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
