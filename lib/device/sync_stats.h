/* sync_stats.h (internal) — counters of the calls that make the host wait
 * for a device: stream/device/event synchronizations, device-to-host
 * read-backs and cudaSetDevice calls, bumped by loom's own wrappers around
 * them (device/stream.c, device/device.c, tensor/copy.c, the CUDA backend).
 * Counted per thread, so a test can assert that a training step on its
 * thread made none (issue 10: no host synchronization inside a step; loader
 * workers wait on their own threads, off the step). The CPU paths bump the
 * same counters (a CPU stream sync is a no-op but still a call), so the
 * property is tested without a GPU too. */
#ifndef LOOM_DEVICE_SYNC_STATS_H
#define LOOM_DEVICE_SYNC_STATS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loom_sync_kind {
  LOOM_SYNC_STREAM = 0,   /* loom_stream_synchronize, cudaStreamSynchronize */
  LOOM_SYNC_DEVICE = 1,   /* loom_device_synchronize, cudaDeviceSynchronize */
  LOOM_SYNC_EVENT = 2,    /* loom_event_synchronize, cudaEventSynchronize */
  LOOM_SYNC_D2H = 3,      /* a read-back of device data into host memory (loom_to_host, loom_item, ...) */
  LOOM_SYNC_SET_DEVICE = 4, /* cudaSetDevice */
  LOOM_SYNC_KINDS = 5
} loom_sync_kind;

typedef struct loom_sync_counts {
  int64_t n[LOOM_SYNC_KINDS];
} loom_sync_counts;

void loom_sync_count(loom_sync_kind k);
/* This thread's counts since it started. */
loom_sync_counts loom_sync_counts_get(void);
/* Host waits of any kind (everything but SET_DEVICE) between two readings. */
int64_t loom_sync_waits_between(const loom_sync_counts *before, const loom_sync_counts *after);

#ifdef __cplusplus
}
#endif
#endif
