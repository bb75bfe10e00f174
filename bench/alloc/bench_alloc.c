/* bench_alloc.c — cache-hit allocation speed of loom's allocator against the
 * provider's raw allocation, as a ratio measured in one run.
 *
 * For each size: alloc+free pairs per second through loom_alloc_malloc /
 * loom_alloc_free (after a warm-up, every pair is a cache hit), against
 * malloc/free on the CPU, and against cudaMalloc/cudaFree and
 * cudaMallocAsync/cudaFreeAsync (on the current stream) on each GPU when one
 * is present. One line per result:
 *   bench=alloc device=cpu size=4096 loom_pairs_per_s=... raw=malloc raw_pairs_per_s=... ratio=...
 * Usage: bench_alloc [seconds per measurement, default 0.3]
 *        bench_alloc --pairs N [--size BYTES]   fixed work, loom on the CPU only:
 *   bench=alloc_pairs device=cpu size=512 pairs=N ns_per_pair=...
 * (for comparing two builds round by round, where a time-boxed rate
 * against malloc is too noisy on a loaded machine) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/alloc.h"
#include "loom/alloc.h"
#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef int (*pair_fn)(void *ctx, size_t n);

/* Pairs per second of fn, run in batches until `secs` have passed. */
static double rate(pair_fn fn, void *ctx, size_t n, double secs) {
  for (int i = 0; i < 100; i++)
    if (fn(ctx, n)) return -1;
  long iters = 0, batch = 64;
  double t0 = now(), t;
  do {
    for (long i = 0; i < batch; i++)
      if (fn(ctx, n)) return -1;
    iters += batch;
    if (batch < (1L << 20)) batch *= 2;
  } while ((t = now()) - t0 < secs);
  return (double)iters / (t - t0);
}

static volatile uintptr_t sink;

static int loom_pair(void *ctx, size_t n) {
  loom_device dev = *(loom_device *)ctx;
  void *p = NULL;
  if (loom_alloc_malloc(dev, n, NULL, &p) != LOOM_OK) return 1;
  sink = (uintptr_t)p;
  loom_alloc_free(dev, p);
  return 0;
}

static int malloc_pair(void *ctx, size_t n) {
  (void)ctx;
  void *p = malloc(n);
  if (!p) return 1;
  sink = (uintptr_t)p;
  free(p);
  return 0;
}

#ifdef LOOM_HAVE_CUDA
static int cuda_pair(void *ctx, size_t n) {
  (void)ctx;
  void *p = NULL;
  if (cudaMalloc(&p, n) != cudaSuccess) return 1;
  sink = (uintptr_t)p;
  return cudaFree(p) != cudaSuccess;
}

static int cuda_async_pair(void *ctx, size_t n) {
  cudaStream_t s = (cudaStream_t)ctx;
  void *p = NULL;
  if (cudaMallocAsync(&p, n, s) != cudaSuccess) return 1;
  sink = (uintptr_t)p;
  return cudaFreeAsync(p, s) != cudaSuccess;
}
#endif

static void report(const char *dev, size_t n, double loom_r, const char *raw, double raw_r) {
  if (loom_r < 0 || raw_r < 0) {
    printf("bench=alloc device=%s size=%zu error=\"%s\"\n", dev, n, loom_last_error());
    return;
  }
  printf("bench=alloc device=%s size=%zu loom_pairs_per_s=%.0f raw=%s raw_pairs_per_s=%.0f ratio=%.2f\n", dev, n,
         loom_r, raw, raw_r, loom_r / raw_r);
  fflush(stdout);
}

/* Fixed work: n loom alloc+free pairs of `size` bytes on the CPU. */
static int pairs_only(long n, size_t size) {
  loom_device cpu = loom_cpu();
  if (loom_pair(&cpu, size)) return 1;  /* the pool's first segment */
  double t0 = now();
  for (long i = 0; i < n; i++)
    if (loom_pair(&cpu, size)) {
      printf("bench=alloc_pairs device=cpu size=%zu error=\"%s\"\n", size, loom_last_error());
      return 1;
    }
  double dt = now() - t0;
  printf("bench=alloc_pairs device=cpu size=%zu pairs=%ld ns_per_pair=%.1f\n", size, n, 1e9 * dt / (double)n);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "--pairs") == 0) {
    long n = atol(argv[2]);
    size_t size = argc > 4 && strcmp(argv[3], "--size") == 0 ? (size_t)atol(argv[4]) : 512;
    if (n <= 0 || size == 0) {
      fprintf(stderr, "usage: %s --pairs N [--size BYTES]\n", argv[0]);
      return 2;
    }
    return pairs_only(n, size);
  }
  double secs = argc > 1 ? atof(argv[1]) : 0.3;
  if (secs <= 0) secs = 0.3;
  const size_t sizes[] = {512, 4096, 65536, 1 << 20, 4 << 20, 32 << 20};
  const int nsizes = (int)(sizeof sizes / sizeof sizes[0]);
  loom_device cpu = loom_cpu();
  for (int i = 0; i < nsizes; i++) {
    double l = rate(loom_pair, &cpu, sizes[i], secs);
    double r = rate(malloc_pair, NULL, sizes[i], secs);
    report("cpu", sizes[i], l, "malloc", r);
  }
  int ngpu = loom_device_count(LOOM_CUDA);
  if (ngpu == 0) printf("bench=alloc device=cuda skipped=\"%s\"\n", loom_cuda_unavailable_reason());
#ifdef LOOM_HAVE_CUDA
  for (int g = 0; g < ngpu; g++) {
    loom_device dev = loom_cuda(g);
    char name[16];
    loom_device_str(dev, name, sizeof name);
    cudaStream_t s = (cudaStream_t)loom_stream_native(loom_stream_current(dev));
    for (int i = 0; i < nsizes; i++) {
      double l = rate(loom_pair, &dev, sizes[i], secs);
      cudaSetDevice(g);
      double r = rate(cuda_pair, NULL, sizes[i], secs);
      report(name, sizes[i], l, "cudaMalloc", r);
      double ra = rate(cuda_async_pair, s, sizes[i], secs);
      report(name, sizes[i], l, "cudaMallocAsync", ra);
    }
  }
#endif
  return 0;
}
