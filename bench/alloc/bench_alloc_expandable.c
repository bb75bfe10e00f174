/* bench_alloc_expandable.c — expandable segments on a real device (real
 * mmap'd CPU memory; on a GPU, the CUDA driver's virtual memory calls of
 * vmm_cuda.c), against default segments in the same run: how much memory
 * the pool reserves for the same work and what its mapping costs in time.
 * (bench_alloc_replay measures the same policy on a simulated device; this
 * is the one that pays real map/unmap calls, which scripts/gpu-suite.sh runs
 * on the GPU node.)
 *
 * The work: training-loop-like allocation steps of an MLP whose batch size
 * is drawn from [16, 512] each step (a fixed seed): 6 parameters of 16 MiB
 * and their gradients live for the run; each step allocates the forward
 * activations (batch x 2048 floats each) with a temporary of the same size
 * freed at once, then in backward an activation gradient per layer, freeing
 * the activations in reverse. Every configuration sees the same sequence.
 *
 * Per device, configurations alternate round by round (A B C A B C ...) on a
 * fresh allocator each round (loom_shutdown between them); per round 20
 * warm-up steps (timed: the pool grows there, by segments or by mappings),
 * then the measured steps. Output, one line per (device, configuration),
 * times as medians over the rounds:
 *   bench=alloc_expandable device=cpu conf=expandable_segments:true rounds=5 steps=2000 warmup_ms=...
 *   warmup_ratio=... us_per_step=... time_ratio=... peak_allocated=... peak_reserved=...
 *   reserved_over_allocated=... reserved_ratio=... device_allocs=... device_frees=...
 * The ratios are against conf=default in the same run (below 1: faster /
 * reserves less). Peaks and counts cover the measured steps (the same every
 * round); device_allocs counts segment allocations or, with expandable
 * segments, mappings.
 *
 * Usage: bench_alloc_expandable [--rounds 5] [--steps 2000] [--device cpu|cuda|all] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/alloc.h"
#include "loom/loom.h"

#define LAYERS 6
#define WIDTH 2048
#define WARMUP 20
#define MAX_ROUNDS 64

static const char *const k_confs[] = {"", "expandable_segments:true", "expandable_segments:compact"};
enum { NCONF = 3 };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct result {
  double us_per_step, warmup_ms;
  int64_t peak_allocated, peak_reserved, device_allocs, device_frees;
} result;

static uint64_t g_rng;
static int64_t next_batch(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return 16 + (int64_t)((g_rng >> 33) % (512 - 16 + 1));
}

static int fail(const char *what) {
  fprintf(stderr, "bench_alloc_expandable: %s: %s\n", what, loom_last_error());
  return 1;
}

static int alloc(loom_device dev, size_t n, void **p) {
  if (loom_alloc_malloc(dev, n, NULL, p) != LOOM_OK) return fail("allocation");
  return 0;
}

/* One step: forward (activation + a temporary per layer), backward (an
 * activation gradient per layer, the activations freed in reverse). */
static int step(loom_device dev, int64_t batch) {
  void *act[LAYERS], *grad = NULL, *tmp = NULL;
  size_t n = (size_t)batch * WIDTH * sizeof(float);
  for (int l = 0; l < LAYERS; l++) {
    if (alloc(dev, n, &act[l]) || alloc(dev, n, &tmp)) return 1;
    loom_alloc_free(dev, tmp);
  }
  for (int l = LAYERS - 1; l >= 0; l--) {
    void *g = NULL;
    if (alloc(dev, n, &g)) return 1;
    if (grad) loom_alloc_free(dev, grad);
    grad = g;
    loom_alloc_free(dev, act[l]);
  }
  loom_alloc_free(dev, grad);
  return 0;
}

static int run_round(loom_device dev, const char *conf, int steps, result *r) {
  loom_alloc_options o;
  loom_alloc_options_init(&o);
  if (loom_alloc_options_parse(conf, &o) != LOOM_OK) return fail(conf);
  if (loom_alloc_set_device_config(dev, &o) != LOOM_OK) return fail("loom_alloc_set_device_config");
  void *params[2 * LAYERS];
  for (int i = 0; i < 2 * LAYERS; i++)  /* weights and their gradients */
    if (alloc(dev, (size_t)WIDTH * WIDTH * sizeof(float), &params[i])) return 1;
  g_rng = 42;
  if (loom_device_synchronize(dev) != LOOM_OK) return fail("synchronize");
  double tw = now();
  for (int k = 0; k < WARMUP; k++)
    if (step(dev, next_batch())) return 1;
  if (loom_device_synchronize(dev) != LOOM_OK) return fail("synchronize");
  r->warmup_ms = 1e3 * (now() - tw);
  if (loom_memory_reset_peaks(dev) != LOOM_OK || loom_memory_reset_counters(dev) != LOOM_OK) return fail("reset");
  double t0 = now();
  for (int k = 0; k < steps; k++)
    if (step(dev, next_batch())) return 1;
  if (loom_device_synchronize(dev) != LOOM_OK) return fail("synchronize");
  double dt = now() - t0;
  loom_memory_stats st = {.struct_size = sizeof st};
  if (loom_memory_stats_get(dev, &st) != LOOM_OK) return fail("stats");
  r->us_per_step = 1e6 * dt / steps;
  r->peak_allocated = st.allocated_bytes[0].peak;
  r->peak_reserved = st.reserved_bytes[0].peak;
  r->device_allocs = st.num_device_allocs;
  r->device_frees = st.num_device_frees;
  for (int i = 0; i < 2 * LAYERS; i++) loom_alloc_free(dev, params[i]);
  if (loom_shutdown() != LOOM_OK) return fail("loom_shutdown");
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int bench_device(loom_device dev, int rounds, int steps) {
  char name[32];
  loom_device_str(dev, name, sizeof name);
  static result res[NCONF][MAX_ROUNDS];
  for (int r = 0; r < rounds; r++)  /* ABCABC...: the machine's load hits every configuration alike */
    for (int c = 0; c < NCONF; c++)
      if (run_round(dev, k_confs[c], steps, &res[c][r])) {
        printf("bench=alloc_expandable device=%s conf=%s error=\"%s\"\n", name, *k_confs[c] ? k_confs[c] : "default",
               loom_last_error());
        return 1;
      }
  double us[NCONF], wm[NCONF];
  for (int c = 0; c < NCONF; c++) {
    double v[MAX_ROUNDS], w[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
      v[r] = res[c][r].us_per_step;
      w[r] = res[c][r].warmup_ms;
    }
    us[c] = median(v, rounds);
    wm[c] = median(w, rounds);
  }
  for (int c = 0; c < NCONF; c++) {
    const result *x = &res[c][0], *d = &res[0][0];  /* memory figures are the same every round */
    printf("bench=alloc_expandable device=%s conf=%s rounds=%d steps=%d warmup_ms=%.2f warmup_ratio=%.3f "
           "us_per_step=%.2f time_ratio=%.3f peak_allocated=%lld peak_reserved=%lld reserved_over_allocated=%.3f reserved_ratio=%.3f device_allocs=%lld "
           "device_frees=%lld\n",
           name, *k_confs[c] ? k_confs[c] : "default", rounds, steps, wm[c], wm[c] / wm[0], us[c], us[c] / us[0], (long long)x->peak_allocated,
           (long long)x->peak_reserved, x->peak_allocated ? (double)x->peak_reserved / (double)x->peak_allocated : 0.0,
           d->peak_reserved ? (double)x->peak_reserved / (double)d->peak_reserved : 0.0, (long long)x->device_allocs,
           (long long)x->device_frees);
    fflush(stdout);
  }
  return 0;
}

int main(int argc, char **argv) {
  int rounds = 5, steps = 2000;
  const char *which = "all";
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--steps") == 0) steps = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--device") == 0) which = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--rounds N (1-%d)] [--steps N] [--device cpu|cuda|all]\n", argv[0], MAX_ROUNDS);
      return 2;
    }
  }
  if (rounds < 1 || rounds > MAX_ROUNDS || steps < 1 ||
      (strcmp(which, "cpu") && strcmp(which, "cuda") && strcmp(which, "all"))) {
    fprintf(stderr, "bench_alloc_expandable: --rounds must be 1-%d, --steps positive, --device cpu, cuda or all\n",
            MAX_ROUNDS);
    return 2;
  }
  int rc = 0;
  if (strcmp(which, "cuda") != 0) rc |= bench_device(loom_cpu(), rounds, steps);
  if (strcmp(which, "cpu") != 0) {
    if (loom_device_count(LOOM_CUDA) == 0) printf("bench=alloc_expandable device=cuda skipped=\"%s\"\n",
                                                  loom_cuda_unavailable_reason());
    else rc |= bench_device(loom_cuda(0), rounds, steps);
  }
  return rc;
}
