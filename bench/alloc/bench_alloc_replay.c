/* bench_alloc_replay.c — replays an allocation trace through loom's pool and
 * reports how frugal it was: peak reserved vs peak allocated, and device
 * allocations after the first epoch marker (a warmed-up training loop should
 * make none).
 *
 * Trace format (what LOOM_ALLOC_TRACE=path / loom_alloc_trace_start write),
 * one event per line:
 *   alloc <id> <bytes> <stream>   allocate; <id> is unique, <stream> a small int
 *   free <id>                      free an earlier allocation
 *   epoch <n>                      epoch n has ended; statistics restart at the
 *                                  first marker, so what follows is the
 *                                  warmed-up steady state
 *   # ...                          comment ("# stream <k> <device>" names streams)
 *
 * Usage:
 *   bench_alloc_replay TRACE [--device fake|cpu] [--conf LOOM_ALLOC_CONF-string]... [--granule BYTES]
 *   bench_alloc_replay --synthesize TRACE [epochs]   write a synthetic
 *       training-loop trace (forward activations freed in backward, gradients,
 *       a workspace on a second stream) to try the replayer without loom-mnist
 * --device fake (default) replays on a simulated device (no memory touched,
 * any trace fits); cpu replays on real CPU memory through the same pool.
 * Each --conf (repeatable; default "") is one replay and one output line,
 * e.g. --conf "" --conf expandable_segments:true. --granule sets the fake
 * device's mapping unit for expandable segments (default 2 MiB, CUDA's; the
 * CPU's is its page size).
 * Output: one line per configuration,
 *   bench=alloc_replay trace=... device=... events=... peak_allocated=... peak_reserved=...
 *   reserved_over_allocated=... device_allocs_after_epoch1=... (+ whole-run values)
 * (peak_requested, the bytes asked for before rounding, is printed too:
 * allocated counts whole blocks, so it includes rounding and unsplit rests) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/alloc_internal.h"
#include "alloc/pool.h"
#include "alloc/ptrmap.h"
#include "support/provider_fake.h"

#define MAX_STREAMS 64

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int synthesize(const char *path, int epochs) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "bench_alloc_replay: cannot write %s\n", path);
    return 1;
  }
  fprintf(f, "# synthetic trace: MLP-like steps, 2 streams\n# stream 0 cpu\n# stream 1 cpu\n");
  uint64_t id = 0, rs = 88172645463325252ull;
  const size_t layers[] = {784 * 4 * 128, 1024 * 4 * 128, 1024 * 4 * 128, 10 * 4 * 128};
  uint64_t params[8];
  for (int l = 0; l < 4; l++) {  /* parameters live for the whole run */
    params[l] = ++id;
    fprintf(f, "alloc %llu %zu 0\n", (unsigned long long)params[l], layers[l] * 8);
  }
  for (int e = 0; e < epochs; e++) {
    for (int step = 0; step < 200; step++) {
      uint64_t act[4], tmp;
      rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
      size_t batch_jitter = (size_t)(rs % 3) * 512;
      for (int l = 0; l < 4; l++) {
        act[l] = ++id;
        fprintf(f, "alloc %llu %zu 0\n", (unsigned long long)act[l], layers[l] + batch_jitter);
      }
      tmp = ++id;
      fprintf(f, "alloc %llu %d 1\nfree %llu\n", (unsigned long long)tmp, 12 << 20, (unsigned long long)tmp);
      for (int l = 3; l >= 0; l--) {
        uint64_t g = ++id;
        fprintf(f, "alloc %llu %zu 0\nfree %llu\nfree %llu\n", (unsigned long long)g, layers[l] * 8,
                (unsigned long long)act[l], (unsigned long long)g);
      }
    }
    fprintf(f, "epoch %d\n", e + 1);  /* written when the epoch ends */
  }
  for (int l = 0; l < 4; l++) fprintf(f, "free %llu\n", (unsigned long long)params[l]);
  fclose(f);
  return 0;
}

typedef struct replay_opts { const char *trace, *device, *conf; size_t granule; } replay_opts;

static int replay(const replay_opts *ro) {
  const char *trace = ro->trace, *device = ro->device;
  loom_alloc_options o;
  loom_alloc_options_init(&o);
  if (loom_alloc_options_parse(ro->conf, &o) != LOOM_OK) {
    fprintf(stderr, "bench_alloc_replay: %s\n", loom_last_error());
    return 2;
  }
  loom_fake *fake = NULL;
  const loom_provider *prov;
  if (strcmp(device, "fake") == 0) {
    fake = loom_fake_create((size_t)1 << 46);
    loom_fake_set_auto_complete(fake, 1);
    loom_fake_set_granularity(fake, ro->granule);
    prov = loom_fake_provider(fake);
  } else if (strcmp(device, "cpu") == 0) {
    prov = loom_provider_cpu();
  } else {
    fprintf(stderr, "bench_alloc_replay: --device must be fake or cpu\n");
    return 2;
  }
  loom_pool_config cfg;
  loom_pool_config_init(&cfg, device);
  cfg.limit = o.limit_bytes;
  cfg.max_split_size = o.max_split_size;
  cfg.gc_threshold = o.gc_threshold;
  cfg.preallocate = o.preallocate_fraction;
  cfg.expandable = o.expandable_segments;
  loom_pool *pool = NULL;
  if (loom_pool_create(prov, &cfg, &pool) != LOOM_OK) {
    fprintf(stderr, "bench_alloc_replay: %s\n", loom_last_error());
    loom_fake_destroy(fake);
    return 1;
  }
  FILE *f = fopen(trace, "r");
  if (!f) {
    fprintf(stderr, "bench_alloc_replay: cannot open %s\n", trace);
    loom_pool_destroy(pool);
    loom_fake_destroy(fake);
    return 1;
  }
  loom_ptrmap ids = {0};
  loom_stream *streams[MAX_STREAMS];
  for (int i = 0; i < MAX_STREAMS; i++) streams[i] = (loom_stream *)(uintptr_t)(0x1000 * (i + 1));
  char line[256];
  long events = 0, lineno = 0, ooms = 0;
  int epoch_seen = 0, rc = 0;
  loom_memory_stats whole = {0};
  double t0 = now();
  while (fgets(line, sizeof line, f)) {
    lineno++;
    unsigned long long id;
    size_t n;
    int s, ep;
    if (line[0] == '#' || line[0] == '\n') continue;
    if (sscanf(line, "alloc %llu %zu %d", &id, &n, &s) == 3) {
      if (s < 0 || s >= MAX_STREAMS || id == 0) {
        fprintf(stderr, "%s:%ld: bad stream or id\n", trace, lineno);
        rc = 1;
        break;
      }
      void *p = NULL;
      if (loom_pool_malloc(pool, n, streams[s], &p) != LOOM_OK) {
        ooms++;
        continue;
      }
      loom_ptrmap_put(&ids, (uintptr_t)id, p);
    } else if (sscanf(line, "free %llu", &id) == 1) {
      void *p = loom_ptrmap_del(&ids, (uintptr_t)id);
      if (p) loom_pool_free(pool, p);
    } else if (sscanf(line, "epoch %d", &ep) == 1) {
      if (!epoch_seen) {
        whole.struct_size = sizeof whole;
        loom_pool_stats(pool, &whole);
        loom_pool_reset_peaks(pool);
        loom_pool_reset_counters(pool);
        epoch_seen = 1;
      }
      continue;
    } else {
      fprintf(stderr, "%s:%ld: cannot parse: %s", trace, lineno, line);
      rc = 1;
      break;
    }
    events++;
  }
  double dt = now() - t0;
  fclose(f);
  if (rc == 0) {
    loom_memory_stats st;
    st.struct_size = sizeof st;
    loom_pool_stats(pool, &st);
    int64_t pa = st.allocated_bytes[0].peak, pr = st.reserved_bytes[0].peak;
    printf("bench=alloc_replay trace=%s device=%s conf=%s granule=%zu events=%ld events_per_s=%.0f ooms=%ld %s "
           "peak_allocated=%lld peak_requested=%lld peak_reserved=%lld reserved_over_allocated=%.3f device_allocs=%lld "
           "cache_hits=%lld",
           trace, device, *ro->conf ? ro->conf : "default", cfg.expandable ? (fake ? ro->granule : (size_t)0) : 0,
           events, (double)events / (dt > 0 ? dt : 1e-9), ooms,
           epoch_seen ? "after_epoch1=1" : "after_epoch1=0(no epoch marker: whole run)", (long long)pa,
           (long long)st.requested_bytes[0].peak, (long long)pr, pa ? (double)pr / (double)pa : 0.0,
           (long long)st.num_device_allocs, (long long)st.num_cache_hits);
    if (epoch_seen)
      printf(" before_epoch1_peak_reserved=%lld before_epoch1_device_allocs=%lld", (long long)whole.reserved_bytes[0].peak,
             (long long)whole.num_device_allocs);
    printf("\n");
  }
  loom_ptrmap_free(&ids);
  loom_pool_destroy(pool);
  loom_fake_destroy(fake);
  return rc;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "--synthesize") == 0) return synthesize(argv[2], argc > 3 ? atoi(argv[3]) : 3);
  if (argc < 2) {
    fprintf(stderr, "usage: %s TRACE [--device fake|cpu] [--conf CONF]... [--granule BYTES] | --synthesize TRACE "
            "[epochs]\n", argv[0]);
    return 2;
  }
  replay_opts ro = {argv[1], "fake", "", (size_t)2 << 20};
  const char *confs[32];
  int nconf = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--device") == 0) ro.device = argv[i + 1];
    else if (strcmp(argv[i], "--conf") == 0 && nconf < 32) confs[nconf++] = argv[i + 1];
    else if (strcmp(argv[i], "--granule") == 0) {
      char *end = NULL;
      unsigned long long g = strtoull(argv[i + 1], &end, 10);
      if (*end || g < 512 || (g & (g - 1))) {
        fprintf(stderr, "bench_alloc_replay: --granule must be a power of two >= 512, got %s\n", argv[i + 1]);
        return 2;
      }
      ro.granule = (size_t)g;
    } else {
      fprintf(stderr, "bench_alloc_replay: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (nconf == 0) confs[nconf++] = "";
  for (int c = 0; c < nconf; c++) {
    ro.conf = confs[c];
    int rc = replay(&ro);
    if (rc) return rc;
  }
  return 0;
}
