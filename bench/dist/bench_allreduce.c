/* bench_allreduce.c — all-reduce bandwidth of lib/dist, as nccl-tests
 * define it: for S bytes all-reduced in time t,
 *     algbw = S / t,    busbw = algbw * 2 (n - 1) / n
 * (busbw is what each link carries in a ring all-reduce over n ranks, so it
 * compares with the hardware's bandwidth whatever n is).
 *
 *   mpirun -np 2 --oversubscribe build/bench/bench_allreduce [device=cpu|cuda] [min=8] [max=268435456] [op=sum|avg]
 *
 * CPU tensors go over MPI (loom_comm with the MPI back end); device=cuda
 * over NCCL, one GPU per rank (local rank -> cuda:N). f32, in place, sizes
 * doubling from min to max bytes. Each size: 2 warm-up all-reduces, then
 * enough iterations for ~0.2 s (at least 3); t is the mean per iteration on
 * the slowest rank (MAX over ranks). One line per size from rank 0:
 *   bench=allreduce backend=mpi ranks=2 bytes=... iters=... time_us=... algbw_GBps=... busbw_GBps=...
 *       memcpy_GBps=... busbw_vs_memcpy=...
 * The anchor, measured in the same run on rank 0 for the same size, is a
 * local memcpy of S bytes (on a GPU: a device-to-device copy): ranks on one
 * machine exchange through shared memory, so this is the bound on CPU. */
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
  fprintf(stderr, "bench_allreduce: %s: %s\n", what, loom_last_error());
  return 1;
}

/* Seconds per copy of src into dst (the anchor). */
static double copy_time(loom_tensor *dst, loom_tensor *src, loom_device dev, int iters) {
  loom_copy_(dst, src);
  loom_device_synchronize(dev);
  double t0 = now_s();
  for (int i = 0; i < iters; i++) loom_copy_(dst, src);
  loom_device_synchronize(dev);
  return (now_s() - t0) / iters;
}

int main(int argc, char **argv) {
  const char *device = "cpu";
  int64_t min_b = 8, max_b = (int64_t)256 << 20;
  loom_reduce_op op = LOOM_REDUCE_SUM;
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "device=", 7)) device = argv[i] + 7;
    else if (!strncmp(argv[i], "min=", 4)) min_b = atoll(argv[i] + 4);
    else if (!strncmp(argv[i], "max=", 4)) max_b = atoll(argv[i] + 4);
    else if (!strcmp(argv[i], "op=avg")) op = LOOM_REDUCE_AVG;
    else if (!strcmp(argv[i], "op=sum")) op = LOOM_REDUCE_SUM;
    else {
      fprintf(stderr, "usage: mpirun -np N bench_allreduce [device=cpu|cuda] [min=8] [max=268435456] [op=sum|avg]\n");
      return 2;
    }
  }
  if (min_b < 4) min_b = 4;
  loom_device dev;
  if (loom_device_parse(device, &dev) != LOOM_OK) return fail("device");
  loom_comm_options co;
  loom_comm_options_init(&co);
  co.device = dev;
  if (dev.kind == LOOM_CUDA) {
    co.device.index = -1;            /* the GPU of this local rank */
    co.backend = LOOM_COMM_NCCL;     /* also unlaunched: a one-rank NCCL communicator */
  }
  co.timeout_s = 600;
  loom_comm *c = NULL;
  if (loom_comm_init(&co, &c) != LOOM_OK) return fail("comm_init");
  dev = loom_comm_device(c);
  int rank = loom_comm_rank(c), n = loom_comm_size(c);
  const char *backend = loom_comm_backend_name(loom_comm_get_backend(c));
  if (rank == 0)
    printf("# bench_allreduce: %s, %d rank%s, f32 in place, %s threads=%d\n", backend, n, n == 1 ? "" : "s",
           op == LOOM_REDUCE_AVG ? "avg" : "sum", loom_get_num_threads());
  int64_t max_elems = max_b / 4;
  loom_tensor *buf = loom_zeros(1, &max_elems, LOOM_F32, dev);  /* zeros: repeated sums stay finite */
  loom_tensor *tmax = loom_zeros(1, (int64_t[]){1}, LOOM_F32, dev);
  if (!buf || !tmax) return fail("allocating");
  for (int64_t bytes = min_b; bytes <= max_b; bytes *= 2) {
    int64_t elems = bytes / 4;
    loom_scope_begin();
    loom_tensor *t = loom_slice(buf, 0, 0, elems, 1);
    for (int w = 0; w < 2; w++)
      if (loom_comm_all_reduce(c, t, op) != LOOM_OK) return fail("all_reduce");
    if (loom_comm_synchronize(c) != LOOM_OK) return fail("all_reduce");
    /* Iterations for ~0.2 s, from one timed all-reduce, agreed by all ranks. */
    double t0 = now_s();
    if (loom_comm_all_reduce(c, t, op) != LOOM_OK || loom_comm_synchronize(c) != LOOM_OK) return fail("all_reduce");
    float one = (float)(now_s() - t0);
    if (loom_fill_(tmax, one) != LOOM_OK || loom_comm_all_reduce(c, tmax, LOOM_REDUCE_MAX) != LOOM_OK ||
        loom_comm_synchronize(c) != LOOM_OK || loom_to_host(tmax, &one, sizeof one, LOOM_F32) != LOOM_OK)
      return fail("agreeing on iterations");
    int iters = one > 0 ? (int)(0.2 / one) : 1000;
    if (iters < 3) iters = 3;
    if (iters > 1000) iters = 1000;
    if (loom_comm_barrier(c) != LOOM_OK) return fail("barrier");
    t0 = now_s();
    for (int i = 0; i < iters; i++)
      if (loom_comm_all_reduce(c, t, op) != LOOM_OK) return fail("all_reduce");
    if (loom_comm_synchronize(c) != LOOM_OK) return fail("all_reduce");
    float mean = (float)((now_s() - t0) / iters);
    if (loom_fill_(tmax, mean) != LOOM_OK || loom_comm_all_reduce(c, tmax, LOOM_REDUCE_MAX) != LOOM_OK ||
        loom_comm_synchronize(c) != LOOM_OK || loom_to_host(tmax, &mean, sizeof mean, LOOM_F32) != LOOM_OK)
      return fail("agreeing on the time");
    if (rank == 0) {
      loom_tensor *dst = loom_empty(1, &elems, LOOM_F32, dev);
      double tc = copy_time(dst, t, dev, iters < 50 ? iters : 50);
      double algbw = (double)bytes / mean / 1e9, busbw = algbw * 2.0 * (n - 1) / n, cbw = (double)bytes / tc / 1e9;
      printf("bench=allreduce backend=%s ranks=%d bytes=%lld iters=%d time_us=%.2f algbw_GBps=%.4f busbw_GBps=%.4f "
             "memcpy_GBps=%.3f busbw_vs_memcpy=%.4f\n",
             backend, n, (long long)bytes, iters, 1e6 * mean, algbw, busbw, cbw, cbw > 0 ? busbw / cbw : 0.0);
      fflush(stdout);
    }
    loom_scope_end();
  }
  loom_tensor_release(buf);
  loom_tensor_release(tmax);
  loom_comm_free(c);
  return loom_dist_finalize() == LOOM_OK ? 0 : fail("finalize");
}
