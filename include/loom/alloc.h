/* alloc.h — the caching allocator's controls and statistics.
 *
 * Every tensor's memory comes from a caching, stream-ordered allocator per
 * device (CPU memory, each CUDA device, and pinned host memory for H2D
 * staging). Freed blocks are cached and reused, so the hot path of a training
 * step never calls cudaMalloc/cudaFree. This header is how a user tunes and
 * observes it; allocation itself happens through tensors.
 *
 * Configuration: LOOM_ALLOC_CONF (read at the first allocation) or
 * loom_alloc_configure() take the same comma-separated key:value list:
 *   preallocate:F               reserve F (0 < F <= 1) of the device (or of
 *                               the limit) up front and never grow beyond it
 *   limit:BYTES | limit:F       hard cap on reserved memory: bytes (suffixes
 *                               K, M, G, KiB, MiB, GiB) or, with a decimal
 *                               point, a fraction of the device ("0.5")
 *   max_split_size_mb:N         blocks of N MiB or more are never split and are
 *                               reused only for requests within 20 MiB of
 *                               their size (N > 20)
 *   garbage_collection_threshold:F
 *                               when reserved memory passes F (0 < F < 1) of
 *                               the limit (or of the device), release the
 *                               least recently freed unused segments first
 *   backend:native|cuda_async   native pools, or cudaMallocAsync on a memory
 *                               pool (CUDA devices only; CPU/pinned stay native)
 *   history:N                   keep the last N allocator events for snapshots
 *   expandable_segments:true|false|compact
 *                               instead of separate 2/20 MiB segments, reserve
 *                               an address range per (stream, size class) and
 *                               map memory into it as the pool grows (CUDA's
 *                               virtual memory API, 2 MiB granules; mmap on
 *                               the CPU, page granules), so freed space merges
 *                               with what comes next and little is reserved
 *                               beyond the peak; empty-cache unmaps free
 *                               granules. compact: before every growth, also
 *                               unmap the least recently freed whole free
 *                               granules of the stream first, so reserved
 *                               memory follows the live footprint when shapes
 *                               vary (costs map/unmap calls in the steady
 *                               state; on CUDA each unmap waits for the
 *                               device). CPU and CUDA pools (the pinned pool
 *                               keeps ordinary segments); not with preallocate
 *                               or backend:cuda_async
 * Unknown keys and bad values are errors (LOOM_ERR_INVALID_ARG, with a
 * message); a bad LOOM_ALLOC_CONF makes every allocation fail with that
 * message rather than be ignored.
 *
 * LOOM_ALLOC_TRACE=path (or loom_alloc_trace_start) appends one line per
 * allocation event to path, for bench/bench_alloc_replay:
 *   alloc <id> <bytes> <stream>     free <id>     epoch <n>
 * (<stream> is a small integer per distinct device stream, in order of first
 * use; lines starting with '#' are comments).
 *
 * Threads: every call here is thread-safe. The strings returned by
 * loom_memory_summary and loom_memory_snapshot_json belong to the caller:
 * free them with loom_free. */
#ifndef LOOM_ALLOC_PUBLIC_H
#define LOOM_ALLOC_PUBLIC_H

#include <stddef.h>
#include <stdint.h>
#include "export.h"
#include "status.h"
#include "free.h"
#include "device.h"

LOOM_EXTERN_C_BEGIN

/* Append-only. */
typedef enum loom_alloc_backend {
  LOOM_ALLOC_BACKEND_NATIVE = 0,
  LOOM_ALLOC_BACKEND_CUDA_ASYNC = 1,
} loom_alloc_backend;

/* Options; initialize them with loom_alloc_options_init. */
typedef struct loom_alloc_options {
  size_t struct_size;          /* sizeof(loom_alloc_options) */
  int32_t backend;             /* loom_alloc_backend */
  int32_t history;             /* allocator events kept for snapshots (0: off) */
  double preallocate_fraction; /* 0: grow on demand */
  double limit_fraction;       /* 0: none; else cap = fraction of device memory */
  size_t limit_bytes;          /* 0: none; with limit_fraction, the smaller wins */
  size_t max_split_size;       /* SIZE_MAX: split every block */
  double gc_threshold;         /* 0: off */
  int32_t expandable_segments; /* 0 off, 1 on, 2 compact (see above) */
} loom_alloc_options;

/* Sets struct_size and every default (noted beside each field). */
LOOM_API void loom_alloc_options_init(loom_alloc_options *o);
/* Apply a LOOM_ALLOC_CONF-style string on top of *o. On error *o is left as
 * it was. */
LOOM_API loom_status loom_alloc_options_parse(const char *conf, loom_alloc_options *o);
/* Options for every device (existing pools and future ones), replacing
 * LOOM_ALLOC_CONF. limit, max_split_size, gc threshold and history apply to
 * existing pools at once; backend and preallocation cannot change on a pool
 * that has already allocated (LOOM_ERR_STATE). */
LOOM_API loom_status loom_alloc_set_config(const loom_alloc_options *o);
/* Same as loom_alloc_set_config(parse(conf)) over the defaults. */
LOOM_API loom_status loom_alloc_configure(const char *conf);
/* Options for one device only (overrides the global ones for it). */
LOOM_API loom_status loom_alloc_set_device_config(loom_device dev, const loom_alloc_options *o);

/* The pinned host pool, accepted by the memory functions below only. */
static inline loom_device loom_pinned_host(void) { loom_device d = {LOOM_CPU, -1}; return d; }

typedef struct loom_memory_stat {
  int64_t current;
  int64_t peak;
} loom_memory_stat;

/* Index of the per-pool arrays below. */
enum { LOOM_MEM_ALL = 0, LOOM_MEM_SMALL_POOL = 1, LOOM_MEM_LARGE_POOL = 2, LOOM_MEM_POOLS = 3 };

typedef struct loom_memory_stats {
  size_t struct_size;                              /* sizeof(loom_memory_stats) */
  loom_memory_stat allocated_bytes[LOOM_MEM_POOLS];      /* held by callers (rounded) */
  loom_memory_stat reserved_bytes[LOOM_MEM_POOLS];       /* obtained from the device */
  loom_memory_stat active_bytes[LOOM_MEM_POOLS];         /* allocated + freed but still in use by a stream */
  loom_memory_stat inactive_split_bytes[LOOM_MEM_POOLS]; /* free blocks inside split segments */
  loom_memory_stat requested_bytes[LOOM_MEM_POOLS];      /* as asked for, before rounding */
  loom_memory_stat allocations[LOOM_MEM_POOLS];          /* live allocations (count) */
  loom_memory_stat segments[LOOM_MEM_POOLS];             /* device segments (count) */
  int64_t num_allocs;
  int64_t num_frees;
  int64_t num_cache_hits;          /* served without a device allocation */
  int64_t num_cross_stream_reuses; /* a stream took another stream's cached segment */
  int64_t num_device_allocs;
  int64_t num_device_frees;
  int64_t num_alloc_retries;       /* device allocations retried after releasing cache */
  int64_t num_ooms;
  int64_t limit_bytes;             /* 0: no limit */
  int64_t max_split_size;          /* -1: unlimited */
} loom_memory_stats;

/* Fill *out (set out->struct_size = sizeof(loom_memory_stats) first; older,
 * smaller structs are filled as far as they go). */
LOOM_API loom_status loom_memory_stats_get(loom_device dev, loom_memory_stats *out);
LOOM_API loom_status loom_memory_reset_peaks(loom_device dev);
LOOM_API loom_status loom_memory_reset_counters(loom_device dev);
/* A readable table of the statistics; NULL on error. Free it with
 * loom_free. */
LOOM_API char *loom_memory_summary(loom_device dev);
/* Every segment and block, the statistics and the event history as JSON;
 * NULL on error. Free it with loom_free. */
LOOM_API char *loom_memory_snapshot_json(loom_device dev);
/* Return every cached, unused segment to the device. */
LOOM_API loom_status loom_empty_cache(loom_device dev);

/* Allocation trace for bench/bench_alloc_replay (format above). Appends. */
LOOM_API loom_status loom_alloc_trace_start(const char *path);
LOOM_API void loom_alloc_trace_stop(void);
/* Write "epoch <n>" to the trace (no-op when not tracing). Call it when
 * epoch n ends: the replayer reports what follows the first marker (the
 * warmed-up steady state, which should make no device allocations). */
LOOM_API void loom_alloc_trace_epoch(int n);

LOOM_EXTERN_C_END
#endif
