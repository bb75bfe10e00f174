/* prof.h — the profiler: where time and memory go.
 *
 * loom_profiler_start records, until loom_profiler_stop, every op (forward,
 * and the ops its backward runs inside an "<op> (backward)" range), the
 * allocator's calls with its allocated/reserved/active bytes, loader waits
 * and batch fills, host-to-device batch copies, optimizer steps, collective
 * calls and user ranges (loom_range_push/pop). Each gets host time; on CUDA
 * each op also gets device time from CUDA events recorded around it on its
 * stream, read back in batches (stop waits on the host for the last event;
 * nothing stalls a stream).
 *
 * At stop the profiler writes a Chrome trace-event JSON file (open it in
 * https://ui.perfetto.dev or chrome://tracing): one track per host thread,
 * one track per device stream with flow arrows from each launch to its
 * device slice, counter tracks of allocated/reserved/active bytes per device
 * (the memory timeline) and the allocator's events (alloc, free,
 * free_completed, segment_alloc, segment_free, oom) with the op that made
 * each allocation. loom_profiler_summary gives the same data as a table per
 * name: calls, host and device time, share of step time, GFLOP/s where the
 * op knows its FLOPs.
 *
 * LOOM_PROFILE=path.json profiles the whole process: it starts at library
 * load and writes path.json and prints the summary table at exit (same as
 * loom_profiler_start with trace_path = path and print_summary).
 *
 * NVTX: in a CUDA build the same ranges (ops, backward, optimizer, loader,
 * copies, collectives, user ranges) are also emitted as NVTX v3 ranges in the
 * "loom" domain, so Nsight Systems shows loom's structure. They are on when
 * an NVTX tool is attached (NVTX_INJECTION64_PATH is set, as `nsys profile`
 * does), or with LOOM_NVTX=1 / loom_nvtx_set_enabled(true); LOOM_NVTX=0
 * turns them off.
 *
 * When neither the profiler nor NVTX is on, an op pays one predictable
 * branch.
 *
 * Threads: every call may be made from any thread. Ranges are per thread
 * (push and pop on the same thread). Start, stop, step and the summary calls
 * are serialized internally; a recording made on other threads while stop
 * runs may lose the events of ranges that straddle it. */
#ifndef LOOM_PROF_H
#define LOOM_PROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "export.h"
#include "status.h"
#include "free.h"

LOOM_EXTERN_C_BEGIN

/* Which devices get device time (append-only). */
typedef enum loom_profiler_device_timing {
  LOOM_PROFILER_DEVICE_TIME_AUTO = 0, /* CUDA streams (CPU work is synchronous: host time is its time) */
  LOOM_PROFILER_DEVICE_TIME_ALL = 1,  /* also the CPU stream (host timestamps, same code path) */
  LOOM_PROFILER_DEVICE_TIME_OFF = 2,  /* host time only */
} loom_profiler_device_timing;

/* Options; initialize them with loom_profiler_options_init. */
typedef struct loom_profiler_options {
  size_t struct_size;         /* sizeof(loom_profiler_options) */
  const char *trace_path;     /* write the Chrome trace here at stop (copied; NULL: only in memory,
                                 see loom_profiler_write_trace) */
  int32_t device_timing;      /* loom_profiler_device_timing (AUTO) */
  bool record_memory;         /* allocator counters and events (true) */
  bool print_summary;         /* print the summary table to stderr at stop (false) */
  int64_t max_events;         /* recording stops adding events beyond this many and counts the
                                 rest as dropped (0: 2,000,000, about 200 MiB) */
} loom_profiler_options;

/* Sets struct_size and every default (noted beside each field). */
LOOM_API void loom_profiler_options_init(loom_profiler_options *o);

/* Start recording (o may be NULL for the defaults). The trace file is created
 * now, so a bad path fails here (LOOM_ERR_IO). LOOM_ERR_STATE if already
 * running. The previous recording is discarded. */
LOOM_API loom_status loom_profiler_start(const loom_profiler_options *o);
/* Stop recording: collect device times, write the trace (when a path was
 * given) and print the summary (when asked). The recording stays available
 * for loom_profiler_summary* and loom_profiler_write_trace until the next
 * start. LOOM_ERR_STATE if not running. A failure (writing the trace, out of
 * memory) is returned after recording has stopped; a failed start leaves the
 * profiler stopped. Either way the next start works. */
LOOM_API loom_status loom_profiler_stop(void);
LOOM_API bool loom_profiler_is_running(void);
/* Mark the end of a training step: the time since the previous mark (or the
 * start) becomes a "step N" range, and the summary's step share is taken
 * over the marked steps. No-op when not running. */
LOOM_API void loom_profiler_step(void);

/* Write the last stopped recording as Chrome trace JSON to path. */
LOOM_API loom_status loom_profiler_write_trace(const char *path);
/* The summary table of the last stopped recording (at most max_rows rows,
 * 0: all), sorted by device time when there is any, else by host self time.
 * Free it with loom_free. NULL + error if nothing was recorded. */
LOOM_API char *loom_profiler_summary(int max_rows);

/* One row of the summary. Grows at the end; the caller says how big its
 * struct is (row_size below). Times are in microseconds. */
typedef struct loom_profiler_row {
  char name[64];              /* op name, "<op> (backward)", range name... */
  char category[16];          /* op, backward, optimizer, loader, h2d, collective, user, step, amp */
  int64_t calls;
  double host_total_us;       /* inclusive host time */
  double host_self_us;        /* minus the ranges nested in it on the same thread */
  double device_total_us;     /* device time (0 when none was recorded) */
  double step_share;          /* host self (or device, when recorded) time / step time */
  double flops;               /* total FLOPs (0: the op does not know them) */
  double gflops_per_s;        /* flops / (device time, else host inclusive time) */
} loom_profiler_row;

/* Fill up to max rows (each row_size bytes apart, row_size <=
 * sizeof(loom_profiler_row); older smaller structs are filled as far as they
 * go) in the table's order; returns the number of rows there are (which may
 * exceed max), or -1 with an error. */
LOOM_API int loom_profiler_summary_rows(loom_profiler_row *rows, size_t row_size, int max);
/* Events the last recording dropped because max_events was reached. */
LOOM_API int64_t loom_profiler_dropped_events(void);

/* User ranges on the calling thread. name is copied (interned; keep the
 * number of distinct names modest). Ranges nest: pop closes the innermost.
 * They are recorded while the profiler runs (a range pushed before start is
 * clipped to the start) and emitted to NVTX when NVTX is on. A range still
 * open at stop is closed there and marked "unclosed". Errors: NULL name
 * (LOOM_ERR_INVALID_ARG), nesting deeper than 64 or pop without push
 * (LOOM_ERR_STATE). */
LOOM_API loom_status loom_range_push(const char *name);
LOOM_API loom_status loom_range_pop(void);

/* NVTX ranges on or off (see above). LOOM_ERR_UNSUPPORTED when this build
 * has no NVTX (built without CUDA) and on is true. */
LOOM_API loom_status loom_nvtx_set_enabled(bool on);
LOOM_API bool loom_nvtx_enabled(void);

LOOM_EXTERN_C_END
#endif
