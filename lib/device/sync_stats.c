/* sync_stats.c — per-thread counters of host waits (see sync_stats.h). */
#include "device/sync_stats.h"

static _Thread_local loom_sync_counts tl_counts;

void loom_sync_count(loom_sync_kind k) {
  if ((unsigned)k < LOOM_SYNC_KINDS) tl_counts.n[k]++;
}

loom_sync_counts loom_sync_counts_get(void) { return tl_counts; }

int64_t loom_sync_waits_between(const loom_sync_counts *before, const loom_sync_counts *after) {
  int64_t n = 0;
  for (int k = 0; k < LOOM_SYNC_KINDS; k++)
    if (k != LOOM_SYNC_SET_DEVICE) n += after->n[k] - before->n[k];
  return n;
}
