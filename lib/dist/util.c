/* util.c — small helpers of lib/dist: the monotonic clock, the polling
 * pause used by every bounded wait, and the CPU thread default for ranks
 * that share a machine (cores / ranks, so that N ranks do not oversubscribe
 * the cores and OpenMP workers do not spin against each other). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist_internal.h"
#include "loom/log.h"
#include "ops/cpu_threads.h"

double loom_dist_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void loom_dist_pause(int iter, int max_us) {
  /* The first polls only yield (a collective that is nearly done completes
   * within microseconds); then sleep, doubling up to max_us, so a waiting
   * thread does not take a core from the ranks' compute threads. */
  if (iter < 32) {
    sched_yield();
    return;
  }
  long us = 8L << ((iter - 32) / 8 < 10 ? (iter - 32) / 8 : 10);
  if (us > max_us) us = max_us;
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, NULL);
}

int loom_dist_threads_for(int cpus_in_mask, int ranks_sharing) {
  if (cpus_in_mask < 1) cpus_in_mask = 1;
  if (ranks_sharing < 1) ranks_sharing = 1;
  int t = cpus_in_mask / ranks_sharing;
  return t < 1 ? 1 : t;
}

int loom_dist_affinity(unsigned char *mask, int mask_bytes) {
  memset(mask, 0, (size_t)mask_bytes);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < n && i < mask_bytes * 8; i++) mask[i / 8] |= (unsigned char)(1u << (i % 8));
    return n > 0 ? (int)n : 1;
  }
  int n = 0;
  for (int i = 0; i < CPU_SETSIZE && i < mask_bytes * 8; i++) {
    if (CPU_ISSET(i, &set)) {
      mask[i / 8] |= (unsigned char)(1u << (i % 8));
      n++;
    }
  }
  return n > 0 ? n : 1;
}

/* The count this module set last (a later communicator may set it again;
 * only a count chosen by the user is left alone). */
static atomic_int g_dist_threads;

void loom_dist_apply_threads(loom_comm *c) {
  int cur = loom_get_num_threads();
  bool user_set = (loom_cpu_threads_explicit() && cur != atomic_load(&g_dist_threads)) || getenv("OMP_NUM_THREADS");
  if (user_set) {
    if (cur != c->default_threads)
      loom_log_msg(LOOM_LOG_INFO, "dist: rank %d keeps the %d CPU threads set explicitly (the default for %d rank%s here "
                   "is %d)", c->rank, cur, c->local_size, c->local_size == 1 ? "" : "s", c->default_threads);
    return;
  }
  if (c->default_threads != cur) {
    loom_log_msg(LOOM_LOG_INFO, "dist: rank %d uses %d CPU thread%s (%d rank%s share this machine's cores)", c->rank,
                 c->default_threads, c->default_threads == 1 ? "" : "s", c->local_size, c->local_size == 1 ? "" : "s");
    atomic_store(&g_dist_threads, c->default_threads);
    loom_set_num_threads(c->default_threads);
  }
}
