/* pool.h (internal) — the caching, stream-ordered pool logic, independent of
 * where memory comes from (see provider.h).
 *
 * One pool serves one device. Its policy (docs/design.md §4, after PyTorch's
 * CUDACachingAllocator): sizes round up to 512 B; requests of at most 1 MiB
 * come from the small pool (2 MiB segments), larger ones from the large pool
 * (20 MiB segments for requests under 10 MiB, otherwise the request rounded
 * up to 2 MiB); best fit by (stream, size, address); split on allocation,
 * coalesce on free; blocks of max_split_size or more are not split and serve
 * only requests within 20 MiB of their size. A block belongs to the stream
 * its segment was allocated for; a block used on other streams
 * (loom_pool_record_stream) is reusable only once events recorded on them at
 * free time have completed (polled, never waited on). Before growing, a
 * stream may take an unused segment cached by another stream by making
 * itself wait on that stream (GPU-side). Before failing, the pool frees the
 * cached segment that fits best, then every unused segment, and retries.
 *
 * With expandable segments (a provider with virtual memory), a pool does
 * not grow by whole segments: each (stream, size class) gets a reserved
 * address range (the limit, or the device's size) into which physical
 * granules are mapped as requests need them, so the free tail of the range
 * and the new request merge into one block instead of a fresh 2/20 MiB
 * segment beside it. A growth maps only what the request lacks, rounded up
 * to the granule. Blocks tile the whole range; the parts not backed by
 * memory are blocks in the LOOM_BLOCK_UNMAPPED state (granule-aligned,
 * never next to each other). Reserved bytes count mapped bytes only. Empty
 * cache, the OOM retries and garbage collection unmap the whole granules
 * inside free blocks (oldest first for garbage collection) and give a range
 * back once nothing in it is mapped. A stream never takes another stream's
 * range: it maps its own after the other's free granules were unmapped.
 * Compact mode (expandable == 2) also unmaps, before every growth, as many
 * bytes of whole free granules of the stream's ranges as the growth maps,
 * least recently freed first, so reserved follows the live footprint.
 *
 * With preallocate, the pool reserves one arena segment up front and never
 * grows: every request is carved from it (split whenever 512 B or more
 * remain), all blocks belong to the arena's stream, and allocations on other
 * streams wait on it and are recorded as used by themselves.
 *
 * Thread-safe: one mutex per pool. */
#ifndef LOOM_ALLOC_POOL_H
#define LOOM_ALLOC_POOL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "loom/alloc.h"
#include "alloc/provider.h"

#define LOOM_POOL_MIN_BLOCK ((size_t)512)
#define LOOM_POOL_SMALL_SIZE ((size_t)1 << 20)       /* largest small-pool request */
#define LOOM_POOL_SMALL_BUFFER ((size_t)2 << 20)     /* small-pool segment */
#define LOOM_POOL_LARGE_BUFFER ((size_t)20 << 20)    /* large-pool segment for 1-10 MiB */
#define LOOM_POOL_MIN_LARGE_ALLOC ((size_t)10 << 20) /* from here: rounded to 2 MiB */
#define LOOM_POOL_ROUND_LARGE ((size_t)2 << 20)
#define LOOM_POOL_OVERSIZE_TOLERANCE ((size_t)20 << 20)

enum { LOOM_POOL_SMALL = 1, LOOM_POOL_LARGE = 2 };
enum { LOOM_BLOCK_FREE = 0, LOOM_BLOCK_ALLOCATED = 1, LOOM_BLOCK_PENDING = 2, LOOM_BLOCK_UNMAPPED = 3 };

typedef struct loom_pool loom_pool;

/* Allocation trace hooks (alloc.c's LOOM_ALLOC_TRACE), called under the
 * pool's lock. trace_alloc returns the id passed to trace_free later (0: not
 * traced). */
typedef struct loom_pool_trace {
  uint64_t (*alloc)(void *ud, size_t nbytes, loom_stream *s);
  void (*free)(void *ud, uint64_t id);
  void *ud;
} loom_pool_trace;

typedef struct loom_pool_config {
  char name[32];              /* "cpu", "cuda:0": used in messages */
  size_t limit;               /* hard cap on reserved bytes; 0: none */
  size_t max_split_size;      /* SIZE_MAX: no limit */
  double gc_threshold;        /* 0: off */
  double preallocate;         /* 0: grow on demand; else fraction of capacity */
  int history;                /* event ring entries; 0: off */
  loom_stream *arena_stream;  /* stream the preallocated arena belongs to */
  int poison;                 /* ASan-poison free blocks (host memory only) */
  int expandable;             /* expandable segments (needs the provider's va_* calls): 1, or 2 compact */
  loom_pool_trace trace;
  /* Graph captures open on this pool's device (NULL: never). While it is
   * above 0 the pool gives nothing back to the provider — no garbage
   * collection, no freeing or unmapping of cached segments before an OOM,
   * no compaction, and empty_cache is refused — because cudaFree and the
   * unmap's device synchronization are illegal while a stream is captured
   * (and would invalidate the capture). */
  const atomic_int *captures;
} loom_pool_config;

void loom_pool_config_init(loom_pool_config *c, const char *name);

/* Preallocation happens here (and may fail with LOOM_ERR_OOM); expandable
 * segments on a provider without virtual memory are LOOM_ERR_UNSUPPORTED. */
loom_status loom_pool_create(const loom_provider *prov, const loom_pool_config *cfg, loom_pool **out);
/* Returns every segment to the provider, including ones still allocated. */
void loom_pool_destroy(loom_pool *p);

loom_status loom_pool_malloc(loom_pool *p, size_t nbytes, loom_stream *s, void **out);
loom_status loom_pool_free(loom_pool *p, void *ptr);
loom_status loom_pool_record_stream(loom_pool *p, void *ptr, loom_stream *s);
/* Poll pending events; blocks whose streams are done become reusable. */
void loom_pool_process_events(loom_pool *p);
loom_status loom_pool_empty_cache(loom_pool *p);
/* Live-settable controls (the others are fixed at creation). */
loom_status loom_pool_set_controls(loom_pool *p, size_t limit, size_t max_split_size, double gc_threshold,
                                   int history);
int loom_pool_preallocated(const loom_pool *p);
int loom_pool_expandable(const loom_pool *p);
/* Is ptr a live allocation of p? */
int loom_pool_owns(loom_pool *p, const void *ptr);
int loom_pool_has_allocated(loom_pool *p);

void loom_pool_stats(loom_pool *p, loom_memory_stats *out);
void loom_pool_reset_peaks(loom_pool *p);
void loom_pool_reset_counters(loom_pool *p);
char *loom_pool_summary(loom_pool *p);
char *loom_pool_snapshot_json(loom_pool *p);

/* Size policy, exposed for tests. */
size_t loom_pool_round_size(size_t n);
size_t loom_pool_segment_size(size_t rounded);

/* ---- inspection for tests ------------------------------------------------ */
typedef struct loom_block_info {
  uintptr_t addr;
  size_t size, requested;
  int state;               /* LOOM_BLOCK_* */
  loom_stream *stream;
} loom_block_info;

typedef struct loom_segment_info {
  uintptr_t base;
  size_t size;             /* the address range (for an expandable segment, reserved) */
  size_t mapped;           /* bytes backed by memory (= size unless expandable) */
  int expandable;
  int kind;                /* LOOM_POOL_SMALL / LOOM_POOL_LARGE */
  loom_stream *stream;
  int nblocks;
} loom_segment_info;

/* The segment containing addr and its blocks in address order (up to max
 * written to blocks; seg->nblocks says how many there are). 0 if addr is in
 * no segment. */
int loom_pool_debug_segment(loom_pool *p, uintptr_t addr, loom_segment_info *seg, loom_block_info *blocks,
                            int max);
/* Number of segments; with segs != NULL, the first max of them by address. */
int loom_pool_debug_segments(loom_pool *p, loom_segment_info *segs, int max);
/* Full consistency check (tiling, merging, free-tree and map contents, every
 * statistic recomputed from the blocks). 1 if consistent; otherwise 0 with a
 * description in err. O(blocks). */
int loom_pool_verify(loom_pool *p, char *err, size_t n);

#endif
