/* prof.h (internal) — the hooks other subsystems call so the profiler
 * (include/loom/prof.h) and NVTX see them.
 *
 * The one test on a hot path is LOOM_PROF_ACTIVE(): a relaxed load of one
 * global word, false unless the profiler records, NVTX is on, or allocation
 * sites are wanted. Everything else happens behind it:
 *
 *   loom_prof_range r = LOOM_PROF_RANGE_INIT;
 *   if (LOOM_PROF_ACTIVE()) loom_prof_begin(&r, LOOM_PROF_CAT_COLLECTIVE, "all_reduce", stream);
 *   ... enqueue the work on stream ...
 *   loom_prof_end(&r, 0.0, nbytes);       (no-op when begin did not run)
 *
 * name must outlive the profiler: a string literal, an op table name, or a
 * string from loom_prof_intern. stream (may be NULL) is where the range's
 * device work is queued: with device timing on for its device, events are
 * recorded on it around the range, giving a slice on that stream's track and
 * a flow arrow from the host range to it. lib/dist (collectives) uses this
 * with LOOM_PROF_CAT_COLLECTIVE on its communication stream.
 *
 * Ranges must close on the thread that opened them, innermost first.
 * Thread-safe. Built with -DLOOM_PROFILER=OFF, LOOM_PROF_ACTIVE() is 0 and
 * the compiler drops the hooks. */
#ifndef LOOM_PROF_PROF_H
#define LOOM_PROF_PROF_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include "loom/device.h"
#include "loom/prof.h"

enum {
  LOOM_PROF_RECORD = 1, /* the profiler is recording */
  LOOM_PROF_NVTX = 2,   /* NVTX ranges are on */
  LOOM_PROF_SITES = 4,  /* allocations remember the op that made them */
};

/* Categories (the trace's "cat", the summary's category). */
typedef enum loom_prof_cat {
  LOOM_PROF_CAT_OP = 0,
  LOOM_PROF_CAT_BACKWARD,
  LOOM_PROF_CAT_OPTIMIZER,
  LOOM_PROF_CAT_LOADER,
  LOOM_PROF_CAT_H2D,
  LOOM_PROF_CAT_COLLECTIVE,
  LOOM_PROF_CAT_USER,
  LOOM_PROF_CAT_STEP,
  LOOM_PROF_CAT_AMP,
  LOOM_PROF_NCAT
} loom_prof_cat;

extern _Atomic int loom_prof_flags_;

#ifndef LOOM_PROFILER_DISABLED
#define LOOM_PROF_ACTIVE() __builtin_expect(atomic_load_explicit(&loom_prof_flags_, memory_order_relaxed) != 0, 0)
#else
#define LOOM_PROF_ACTIVE() 0
#endif

typedef struct loom_prof_range {
  const char *name;
  const char *prev_site;
  int64_t t0;
  uint32_t gen;
  int32_t pair;      /* device timing handle, -1: none */
  uint32_t flow;     /* flow id linking the range to its device slice */
  int16_t tl;        /* device timeline of pair */
  uint8_t cat;
  uint8_t on;        /* begin ran: end must run */
  uint8_t record, nvtx, site;
} loom_prof_range;

#define LOOM_PROF_RANGE_INIT {NULL, NULL, 0, 0, -1, 0, -1, 0, 0, 0, 0, 0}

void loom_prof_begin(loom_prof_range *r, loom_prof_cat cat, const char *name, loom_stream *stream);
/* The same on dev's current stream (looked up only when device timing is on
 * for dev): what ops use. */
void loom_prof_begin_device(loom_prof_range *r, loom_prof_cat cat, const char *name, loom_device dev);
/* flops: work done (0: unknown); bytes: bytes moved (0: unknown). A no-op
 * (inline test) when begin did not run. */
void loom_prof_end_(loom_prof_range *r, double flops, int64_t bytes);
static inline void loom_prof_end(loom_prof_range *r, double flops, int64_t bytes) {
  if (__builtin_expect(r->on, 0)) loom_prof_end_(r, flops, bytes);
}

/* A string that lives until the process ends (same text: same pointer).
 * NULL when out of memory or past 4096 distinct strings. */
const char *loom_prof_intern(const char *s);
/* "<op> (backward)", interned. */
const char *loom_prof_backward_name(const char *op);

/* The op (or range) the calling thread is in, for allocation sites; NULL
 * outside any, or when sites are not wanted. */
const char *loom_prof_site(void);
/* A pool with allocation history wants sites (key: any stable id of the
 * pool, e.g. its slot number; on: its history is on). */
void loom_prof_sites_request(int key, bool on);

/* An allocator event (called under the pool's lock, after its statistics
 * changed): recorded as an instant on the pool's track plus a counter sample
 * of allocated/reserved/active bytes. Returns the event's timestamp (ns,
 * CLOCK_MONOTONIC; strictly increasing per pool), or 0 when not recording. */
int64_t loom_prof_alloc_event(const char *pool, const char *action, uintptr_t addr, size_t size, const void *stream,
                              const char *site, int64_t allocated, int64_t reserved, int64_t active);

/* Name the calling thread's track (copied; e.g. "loader worker 2"). Cheap;
 * call it when a thread starts. */
void loom_prof_thread_name(const char *name);

static inline int64_t loom_prof_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
