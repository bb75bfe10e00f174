/* bench_profiler.c — what the profiler costs: the MNIST MLP training step of
 * bench_mlp_step (784→1024→1024→10, batch 128, AdamW) with the profiler
 * off and on, interleaved round by round so drifting machine load hits both
 * alike, plus "off vs off" (two interleaved sets of the same thing) as the
 * noise floor the comparison has to beat. work=tiny_op does the same with
 * a 1-element add, where dispatch dominates: the per-op cost.
 *
 * Usage: bench_profiler [--device cpu|cuda|auto] [--work mlp_step|tiny_op]
 *                   [--rounds 9] [--steps 20] [--device-timing auto|all|off]
 *                   [--threads T] [--off-only]
 * On CUDA, "on" records device time from CUDA events (the default
 * --device-timing auto); --device-timing all also times the CPU stream.
 * Prints one line:
 *   bench=prof_overhead device=... work=... timing=... threads=... rounds=... steps=...
 *     off_ms=... on_ms=... on_vs_off=... off_vs_off=... best_on_vs_off=...
 *     best_off_vs_off=... ranges_per_step=...
 * off_ms/on_ms: medians of ms per step; on_vs_off: median over rounds of
 * that round's on/off (on_vs_off - 1 is the overhead); best_*: the same
 * from each set's fastest round (what a loaded machine disturbs least).
 * --off-only times the profiler-off case alone and prints
 *   bench=prof_off device=... work=... ms=...
 * which bench/profiler/run_profiler_off.sh compares between a normal build and one with
 * the hooks compiled out (-DLOOM_PROFILER=OFF): the cost of the one branch
 * per op when the profiler is off.
 * Without the device: bench=prof_overhead skipped reason=... (exit 0). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/loom.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
  fprintf(stderr, "bench_profiler: %s: %s\n", what, loom_last_error());
  return 1;
}

typedef struct work {
  bool tiny;
  loom_device dev;
  loom_module *model;
  loom_optimizer *opt;
  loom_tensor *params[8];
  loom_tensor *x, *y, *one;
} work;

static loom_status step(work *w) {
  loom_status st = LOOM_OK;
  loom_scope_begin();
  if (w->tiny) {
    for (int i = 0; i < 100 && st == LOOM_OK; i++)
      if (!loom_add(w->one, w->one)) st = loom_last_status();
  } else {
    loom_tensor *loss = loom_cross_entropy(loom_module_forward(w->model, w->x), w->y);
    if (!loss) st = loom_last_status();
    if (st == LOOM_OK) st = loom_backward(loss);
    if (st == LOOM_OK) st = loom_optimizer_step(w->opt);
    if (st == LOOM_OK) st = loom_optimizer_zero_grad(w->opt);
  }
  loom_scope_end();
  return st;
}

/* ms per step over n steps (device work included). */
static loom_status timed(work *w, int n, double *ms) {
  loom_status st = loom_device_synchronize(w->dev);
  double t0 = now_s();
  for (int i = 0; i < n && st == LOOM_OK; i++) st = step(w);
  if (st == LOOM_OK) st = loom_device_synchronize(w->dev);
  *ms = 1e3 * (now_s() - t0) / n;
  return st;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
  const char *device = "cpu", *timing = "auto";
  int rounds = 9, steps = 20;
  bool tiny = false, off_only = false;
  int threads = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--work") && i + 1 < argc) {
      const char *v = argv[++i];
      if (strcmp(v, "mlp_step") && strcmp(v, "tiny_op")) {
        fprintf(stderr, "bench_profiler: --work is mlp_step or tiny_op\n");
        return 2;
      }
      tiny = !strcmp(v, "tiny_op");
    } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--device-timing") && i + 1 < argc) timing = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--off-only")) off_only = true;
    else {
      fprintf(stderr, "usage: %s [--device cpu|cuda|auto] [--work mlp_step|tiny_op] [--rounds N] [--steps N] "
                      "[--device-timing auto|all|off] [--threads T] [--off-only]\n", argv[0]);
      return 2;
    }
  }
  int dt = !strcmp(timing, "all") ? LOOM_PROFILER_DEVICE_TIME_ALL
           : !strcmp(timing, "off") ? LOOM_PROFILER_DEVICE_TIME_OFF
           : !strcmp(timing, "auto") ? LOOM_PROFILER_DEVICE_TIME_AUTO : -1;
  if (rounds < 1 || rounds > 1000 || steps < 1 || dt < 0) {
    fprintf(stderr, "bench_profiler: rounds 1..1000, steps >= 1, --device-timing auto|all|off\n");
    return 2;
  }
  if (threads > 0) loom_set_num_threads(threads);
  work w;
  memset(&w, 0, sizeof w);
  w.tiny = tiny;
  if (loom_device_parse(device, &w.dev) != LOOM_OK || loom_device_check(w.dev) != LOOM_OK) {
    printf("bench=prof_overhead skipped reason=\"%s\"\n", loom_last_error());
    return 0;
  }
  char dname[32];
  loom_device_str(w.dev, dname, sizeof dname);
  const char *wname = tiny ? "tiny_op" : "mlp_step";
  loom_manual_seed(1234);
  if (tiny) {
    int64_t s1[1] = {1};
    w.one = loom_ones(1, s1, LOOM_F32, w.dev);
    if (!w.one) return fail("tensor");
  } else {
    const int64_t hidden[2] = {1024, 1024}, batch = 128;
    w.model = loom_mlp_new(784, 2, hidden, 10, w.dev);
    if (!w.model) return fail("mlp");
    int np = loom_module_num_params(w.model);
    for (int i = 0; i < np && i < 8; i++) w.params[i] = loom_module_param(w.model, i);
    loom_adamw_options ao;
    loom_adamw_options_init(&ao);
    w.opt = loom_adamw_new(w.params, np, &ao);
    int64_t xs[2] = {batch, 784};
    int64_t labels[128];
    for (int i = 0; i < 128; i++) labels[i] = (i * 7 + 3) % 10;
    w.x = loom_rand(2, xs, LOOM_F32, w.dev);
    w.y = loom_from_host(labels, 1, &batch, LOOM_I64, w.dev);
    if (!w.opt || !w.x || !w.y) return fail("setup");
  }
  double ms;
  if (timed(&w, steps, &ms) != LOOM_OK) return fail("warm-up");  /* caches, optimizer state */

  double *off = malloc(sizeof(double) * (size_t)rounds), *on = malloc(sizeof(double) * (size_t)rounds);
  double *off2 = malloc(sizeof(double) * (size_t)rounds);
  if (!off || !on || !off2) return 1;
  loom_profiler_options po;
  loom_profiler_options_init(&po);
  po.device_timing = dt;
  int64_t events = 0;
  for (int r = 0; r < rounds; r++) {
    if (timed(&w, steps, &off[r]) != LOOM_OK) return fail("step");
    if (off_only) continue;
    if (loom_profiler_start(&po) != LOOM_OK) return fail("profiler start");
    if (timed(&w, steps, &on[r]) != LOOM_OK) return fail("profiled step");
    if (loom_profiler_stop() != LOOM_OK) return fail("profiler stop");
    loom_profiler_row rows[64];
    int n = loom_profiler_summary_rows(rows, sizeof rows[0], 64);
    events = 0;
    for (int i = 0; i < n && i < 64; i++) events += rows[i].calls;
    if (timed(&w, steps, &off2[r]) != LOOM_OK) return fail("step");
  }
  double best_off = off[0], best_on = on[0], best_off2 = off2[0];
  for (int r = 1; r < rounds; r++) {
    if (off[r] < best_off) best_off = off[r];
    if (on[r] < best_on) best_on = on[r];
    if (off2[r] < best_off2) best_off2 = off2[r];
  }
  if (off_only) {
    printf("bench=prof_off device=%s work=%s threads=%d rounds=%d steps=%d ms=%.5f best_ms=%.5f\n", dname, wname,
           loom_get_num_threads(), rounds, steps, median(off, rounds), best_off);
  } else {
    double *ron = malloc(sizeof(double) * (size_t)rounds), *roff = malloc(sizeof(double) * (size_t)rounds);
    if (!ron || !roff) return 1;
    for (int r = 0; r < rounds; r++) {
      ron[r] = on[r] / off[r];
      roff[r] = off2[r] / off[r];
    }
    printf("bench=prof_overhead device=%s work=%s timing=%s threads=%d rounds=%d steps=%d off_ms=%.5f on_ms=%.5f "
           "on_vs_off=%.4f off_vs_off=%.4f best_on_vs_off=%.4f best_off_vs_off=%.4f ranges_per_step=%.1f\n",
           dname, wname, timing, loom_get_num_threads(), rounds, steps, median(off, rounds), median(on, rounds),
           median(ron, rounds), median(roff, rounds), best_on / best_off, best_off2 / best_off,
           (double)events / steps);
    free(ron);
    free(roff);
  }
  free(off);
  free(on);
  free(off2);
  loom_tensor_release(w.one);
  loom_tensor_release(w.x);
  loom_tensor_release(w.y);
  loom_optimizer_free(w.opt);
  loom_module_free(w.model);
  return 0;
}
