/* sync_stats.c — per-thread counters of host waits (see sync_stats.h). */
#include <stddef.h>

#include "core/capture.h"
#include "device/sync_stats.h"

static _Thread_local loom_sync_counts tl_counts;

void loom_sync_count(loom_sync_kind k) {
  static const char *const what[LOOM_SYNC_KINDS] = {
      "the host wait for a stream (synchronize)", "the host wait for the device (synchronize)",
      "the host wait for an event (synchronize)", "a read-back of device data to the host (a host wait)", NULL};
  if ((unsigned)k < LOOM_SYNC_KINDS) {
    tl_counts.n[k]++;
    if (what[k]) loom_capture_note_unsafe(what[k]);  /* invalidates an open graph capture */
  }
}

loom_sync_counts loom_sync_counts_get(void) { return tl_counts; }

int64_t loom_sync_waits_between(const loom_sync_counts *before, const loom_sync_counts *after) {
  int64_t n = 0;
  for (int k = 0; k < LOOM_SYNC_KINDS; k++)
    if (k != LOOM_SYNC_SET_DEVICE) n += after->n[k] - before->n[k];
  return n;
}
