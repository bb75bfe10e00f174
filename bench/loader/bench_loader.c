/* bench_loader.c — loader throughput (samples/s) on CIFAR-sized samples
 * (3x32x32 u8, synthetic, in memory) with random crop (pad 4) + horizontal
 * flip + normalize to f32, batch 128: a synchronous loop doing the same work
 * in one thread (the anchor), then the loader with 1, 2 and 4 workers, all in
 * one run. One machine-readable line per result:
 *   bench=loader mode=<sync|loader> workers=N prefetch=P samples=S seconds=T samples_per_s=R speedup=X
 * speedup is against the synchronous loop of the same run. With a device
 * (cuda), the loader delivers batches on the GPU (pinned ring, H2D copies on
 * its copy stream, the compute stream waiting on an event): the lines say
 * device=cuda and wait_fraction is the consumer's data wait there; the
 * anchor stays the host loop (it is the same decode/augment work).
 *
 * Usage: bench_loader [samples (default 20000)] [epochs (default 3)] [device cpu|cuda (default cpu)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/data.h"
#include "data/data_internal.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const float k_mean[3] = {0.4914f, 0.4822f, 0.4465f};
static const float k_std[3] = {0.2470f, 0.2435f, 0.2616f};

static loom_device g_dev;

static loom_loader_options options(int workers) {
  loom_loader_options o;
  loom_loader_options_init(&o);
  o.device = g_dev;
  o.batch_size = 128;
  o.shuffle = true;
  o.seed = 42;
  o.workers = workers;
  o.prefetch = 4;
  o.crop_padding = 4;
  o.hflip = true;
  o.scale = 1.0f / 255.0f;
  o.mean = k_mean;
  o.std = k_std;
  o.norm_channels = 3;
  return o;
}

/* The consumer touches every batch so the work cannot be skipped. */
static volatile double g_sink;

/* The anchor: the same reads, transforms and label conversion in one thread,
 * in the same shuffled order, into one reused batch buffer. */
static int run_sync(loom_dataset *ds, int epochs, double *secs, int64_t *samples) {
  loom_loader_options o = options(0);
  o.device = loom_cpu();
  loom_transform tf;
  if (loom_transform_init(&tf, ds, &o) != LOOM_OK) return -1;
  int64_t n = loom_dataset_length(ds);
  int64_t *order = malloc(sizeof(int64_t) * (size_t)(n + 2)), *perm = malloc(sizeof(int64_t) * (size_t)(n + 1));
  float *xb = malloc(tf.out_bytes * (size_t)o.batch_size);
  int64_t *yb = malloc(sizeof(int64_t) * (size_t)o.batch_size);
  unsigned char src[3072], lab;
  if (!order || !perm || !xb || !yb) return -1;
  double t0 = now_s();
  int64_t done = 0;
  for (int e = 0; e < epochs; e++) {
    int64_t m = loom_data_shard_order(n, true, o.seed, e, 0, 1, false, order, perm);
    for (int64_t s = 0; s < m; s += o.batch_size) {
      int64_t bn = m - s < o.batch_size ? m - s : o.batch_size;
      for (int64_t j = 0; j < bn; j++) {
        int64_t idx = order[s + j];
        if (loom_dataset_read(ds, idx, src, &lab) != LOOM_OK) return -1;
        uint64_t key = loom_data_mix(loom_data_mix(o.seed, (uint64_t)e), (uint64_t)idx);
        loom_transform_apply(&tf, src, (unsigned char *)xb + (size_t)j * tf.out_bytes, key);
        loom_label_convert(LOOM_U8, &lab, LOOM_I64, &yb[j]);
      }
      g_sink += xb[0] + (double)yb[bn - 1];
      done += bn;
    }
  }
  *secs = now_s() - t0;
  *samples = done;
  loom_transform_destroy(&tf);
  free(order);
  free(perm);
  free(xb);
  free(yb);
  return 0;
}

static int run_loader(loom_dataset *ds, int workers, int epochs, double *secs, int64_t *samples, double *wait) {
  loom_loader_options o = options(workers);
  loom_loader *l = loom_loader_new(ds, &o);
  if (!l) return -1;
  double t0 = now_s();
  int64_t done = 0;
  for (int e = 0; e < epochs; e++) {
    for (;;) {
      loom_raw_batch b;
      if (loom_loader_next_raw(l, &b, 1) != LOOM_OK) { loom_loader_free(l); return -1; }
      if (b.n == 0) break;
      if (g_dev.kind == LOOM_CPU) g_sink += ((float *)b.x)[0] + (double)((int64_t *)b.y)[b.n - 1];
      done += b.n;
      loom_loader_release_raw(b.buf);
    }
  }
  *secs = now_s() - t0;
  *samples = done;
  loom_loader_stats st;
  st.struct_size = sizeof st;
  loom_loader_stats_get(l, &st);
  *wait = st.wait_fraction;
  loom_loader_free(l);
  return 0;
}

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? atoll(argv[1]) : 20000;
  int epochs = argc > 2 ? atoi(argv[2]) : 3;
  if (n < 1 || epochs < 1) {
    fprintf(stderr, "usage: bench_loader [samples >= 1] [epochs >= 1] [device cpu|cuda]\n");
    return 2;
  }
  if (loom_device_parse(argc > 3 ? argv[3] : "cpu", &g_dev) != LOOM_OK) {
    printf("bench=loader device=%s skipped reason=\"%s\"\n", argv[3], loom_last_error());
    return 0;
  }
  char dn[32];
  loom_device_str(g_dev, dn, sizeof dn);
  unsigned char *x = malloc((size_t)n * 3072), *y = malloc((size_t)n);
  if (!x || !y) {
    fprintf(stderr, "bench_loader: out of memory for %lld samples\n", (long long)n);
    return 1;
  }
  uint64_t s = 88172645463325252ull;  /* xorshift: synthetic pixels */
  for (int64_t i = 0; i < n * 3072; i++) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    x[i] = (unsigned char)s;
  }
  for (int64_t i = 0; i < n; i++) y[i] = (unsigned char)(i % 10);
  const int64_t shape[3] = {3, 32, 32};
  loom_dataset *ds = loom_dataset_memory(x, LOOM_U8, 3, shape, y, LOOM_U8, n, false);
  if (!ds) {
    fprintf(stderr, "bench_loader: %s\n", loom_last_error());
    return 1;
  }
  double secs;
  int64_t samples;
  if (run_sync(ds, epochs, &secs, &samples) != 0) {
    fprintf(stderr, "bench_loader: sync loop failed: %s\n", loom_last_error());
    return 1;
  }
  double base = (double)samples / secs;
  printf("bench=loader mode=sync workers=0 prefetch=0 samples=%lld seconds=%.4f samples_per_s=%.0f speedup=1.00\n",
         (long long)samples, secs, base);
  const int workers[] = {0, 1, 2, 4};
  for (int k = 0; k < 4; k++) {
    double wait = 0;
    if (run_loader(ds, workers[k], epochs, &secs, &samples, &wait) != 0) {
      fprintf(stderr, "bench_loader: loader with %d workers failed: %s\n", workers[k], loom_last_error());
      return 1;
    }
    double rate = (double)samples / secs;
    printf("bench=loader mode=loader device=%s workers=%d prefetch=4 samples=%lld seconds=%.4f samples_per_s=%.0f "
           "speedup=%.2f wait_fraction=%.3f\n",
           dn, workers[k], (long long)samples, secs, rate, rate / base, wait);
  }
  loom_dataset_release(ds);
  free(x);
  free(y);
  return 0;
}
