/* pool_internal.h (internal) — the pool's data structures and the helpers
 * shared by its parts (policy in pool.h):
 *   pool.c          allocation, free, record_stream, empty_cache, lifecycle
 *   pool_tree.c     the free-block index (treaps)
 *   pool_segment.c  blocks, segments and events: growing, releasing,
 *                   coalescing, garbage collection, completing pending frees
 *   pool_stats.c    statistics, summary and snapshot
 *   pool_verify.c   inspection and the full consistency check (tests)
 *
 * Data structures, all protected by the pool mutex:
 *  - segments: a sorted array (by base) of device segments; each holds a
 *    doubly linked list of blocks that tiles it exactly.
 *  - free blocks: per size class, a treap keyed by (stream, size, address)
 *    for best fit on a stream, and a second treap keyed by (size, address)
 *    holding only free blocks that span a whole segment, which is what a
 *    cross-stream take, an OOM release or a garbage collection looks for.
 *  - allocated blocks: an address -> block hash map, because callers free
 *    by pointer.
 *  - pending frees: (event, block) pairs polled at each allocation.
 * Statistics are updated at each state change so reading them is O(1);
 * loom_pool_verify recomputes them from the blocks. Every function declared
 * here expects the pool mutex held. */
#ifndef LOOM_ALLOC_POOL_INTERNAL_H
#define LOOM_ALLOC_POOL_INTERNAL_H

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/pool.h"
#include "alloc/ptrmap.h"
#include "core/error.h"
#include "prof/prof.h"
#include "core/sys.h"

#if defined(__SANITIZE_ADDRESS__)
#define LOOM_POOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_POOL_ASAN 1
#endif
#endif
#ifdef LOOM_POOL_ASAN
#include <sanitizer/asan_interface.h>
#endif

typedef struct block block;

typedef struct segment {
  uintptr_t base;
  size_t size;
  int kind;
  int arena;
  int expandable;     /* an address range that maps memory as it grows */
  size_t mapped;      /* bytes backed by memory (size unless expandable) */
  loom_stream *stream;
  block *head;
} segment;

struct block {
  uintptr_t addr;
  size_t size, requested;
  segment *seg;
  loom_stream *stream;
  block *prev, *next;  /* neighbours in the segment */
  int state;
  int event_count;
  int nuses;
  block *l[2], *r[2];  /* treap links: [0] free tree, [1] whole-segment tree */
  uint32_t prio;
  uint64_t trace_id, free_tick;
  block *spare_next;
  const char *site;    /* the op (or range) that allocated it, when sites are recorded */
  /* Kept by a recycled block (loom_pool_block_new zeroes everything before
   * them): keep these two last. */
  loom_stream **uses;  /* streams other than `stream` that used it (nuses of them) */
  int capuses;
};

/* A search key for the free-block treaps, whose comparator reads only
 * stream, size and addr: the rest of the block is left unset (zeroing all
 * of it was a third of loom_pool_malloc's time on a cache hit). */
static inline void loom_pool_tree_key(block *key, loom_stream *s, size_t size) {
  key->stream = s;
  key->size = size;
  key->addr = 0;
}

typedef struct pending_ev { void *ev; int domain; block *b; } pending_ev;
typedef struct cached_ev { void *ev; int domain; } cached_ev;

enum { H_ALLOC, H_FREE, H_FREE_COMPLETED, H_SEGMENT_ALLOC, H_SEGMENT_FREE, H_OOM };
typedef struct hist_entry {
  int action;
  uintptr_t addr;
  size_t size;
  loom_stream *stream;
  uint64_t seq;
  int64_t ts_ns;       /* CLOCK_MONOTONIC, the profiler's clock */
  const char *site;
} hist_entry;

struct loom_pool {
  pthread_mutex_t mu;
  const loom_provider *prov;
  loom_pool_config cfg;
  block *root[3][2];  /* [LOOM_POOL_SMALL/LARGE][tree] */
  loom_ptrmap live;
  segment **segs;
  int nsegs, capsegs;
  pending_ev *pend;
  int npend, cappend;
  cached_ev *evcache;
  int nevcache, capevcache;
  block *spare;
  uint32_t rng;
  uint64_t tick;
  loom_memory_stats st;
  hist_entry *hist;
  int hist_len, hist_head;
  uint64_t hist_seq;
  segment *arena;
  size_t granule;     /* expandable: the provider's mapping unit */
  size_t va_size;     /* expandable: address range reserved per (stream, class) */
  char provider_msg[256];
};

/* ---- small helpers (static inline: one copy per part) ---------------------- */

static inline int grow(void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap) return 1;
  int nc = *cap ? *cap * 2 : 16;
  while (nc < need) nc *= 2;
  void *p = loom_sys_realloc(*arr, (size_t)nc * elem);
  if (!p) return 0;
  *arr = p;
  *cap = nc;
  return 1;
}

/* What the pool reserves from its provider (segments, address space,
 * mappings) goes through these, so fault injection (core/fault.h,
 * LOOM_FAULT_DEVICE) can make the Nth reservation of any provider fail the
 * way a full device does: LOOM_ERR_OOM. */
static inline loom_status loom_pool_injected_oom(loom_pool *p, const char *what, size_t n) {
  return loom_set_error(LOOM_ERR_OOM, "%s: out of memory %s %zu bytes (injected fault)", p->prov->name, what, n);
}
static inline loom_status loom_pool_prov_seg_alloc(loom_pool *p, size_t n, void **out) {
  if (loom_fault_fail(LOOM_FAULT_DEVICE)) return loom_pool_injected_oom(p, "allocating", n);
  return p->prov->seg_alloc(p->prov->ctx, n, out);
}
static inline loom_status loom_pool_prov_va_reserve(loom_pool *p, size_t n, void **base) {
  if (loom_fault_fail(LOOM_FAULT_DEVICE)) return loom_pool_injected_oom(p, "reserving address space of", n);
  return p->prov->va_reserve(p->prov->ctx, n, base);
}
static inline loom_status loom_pool_prov_va_map(loom_pool *p, void *addr, size_t n) {
  if (loom_fault_fail(LOOM_FAULT_DEVICE)) return loom_pool_injected_oom(p, "mapping", n);
  return p->prov->va_map(p->prov->ctx, addr, n);
}

static inline void poison(loom_pool *p, uintptr_t a, size_t n) {
#ifdef LOOM_POOL_ASAN
  if (p->cfg.poison && n) ASAN_POISON_MEMORY_REGION((void *)a, n);
#else
  (void)p, (void)a, (void)n;
#endif
}

static inline void unpoison(loom_pool *p, uintptr_t a, size_t n) {
#ifdef LOOM_POOL_ASAN
  if (p->cfg.poison && n) ASAN_UNPOISON_MEMORY_REGION((void *)a, n);
#else
  (void)p, (void)a, (void)n;
#endif
}

static inline void stat_add(loom_memory_stat *a, int kind, int64_t d) {
  a[0].current += d;
  if (a[0].current > a[0].peak) a[0].peak = a[0].current;
  a[kind].current += d;
  if (a[kind].current > a[kind].peak) a[kind].peak = a[kind].current;
}

static inline const char *fmt_bytes(char *buf, size_t n, uint64_t v) {
  if (v >= ((uint64_t)1 << 30)) snprintf(buf, n, "%.2f GiB", (double)v / (double)(1u << 30));
  else if (v >= ((uint64_t)1 << 20)) snprintf(buf, n, "%.2f MiB", (double)v / (double)(1u << 20));
  else if (v >= 1024) snprintf(buf, n, "%.2f KiB", (double)v / 1024.0);
  else snprintf(buf, n, "%" PRIu64 " B", v);
  return buf;
}

/* The history ring entry and the profiler's allocator event (pool_stats.c).
 * Called after the statistics changed, so the profiler's counter sample is
 * exact at this instant; out of line so that with both off an allocation
 * pays two predictable tests, not a call frame. */
void loom_pool_history_record(loom_pool *p, int action, uintptr_t addr, size_t size, loom_stream *s, const char *site);
static inline void history(loom_pool *p, int action, uintptr_t addr, size_t size, loom_stream *s, const char *site) {
  if (LOOM_PROF_ACTIVE() || p->hist) loom_pool_history_record(p, action, addr, size, s, site);
}

static inline int is_split(const block *b) { return b->prev != NULL || b->next != NULL; }
/* The whole-segment tree holds free blocks that are a whole ordinary
 * segment: what a cross-stream take or a release looks for. */
static inline int in_whole_tree(const block *b) { return !is_split(b) && !b->seg->arena && !b->seg->expandable; }

/* ---- pool_tree.c ----------------------------------------------------------- */
/* First block >= key in tree t (strict: > key); t 0 is the free tree, 1 the
 * whole-segment tree. */
block *loom_pool_tree_lower(int t, block *n, const block *key, int strict);
void loom_pool_tree_insert(loom_pool *p, block *b);
void loom_pool_tree_remove(loom_pool *p, block *b);

/* ---- pool_segment.c -------------------------------------------------------- */
block *loom_pool_block_new(loom_pool *p);
void loom_pool_block_recycle(loom_pool *p, block *b);
/* Index of the segment holding addr, or -1. */
int loom_pool_seg_index(loom_pool *p, uintptr_t addr);
loom_status loom_pool_event_get(loom_pool *p, loom_stream *s, void **ev, int *dom);
void loom_pool_event_put(loom_pool *p, void *ev, int dom);
/* Make `waiter` wait (GPU-side) for what is queued on `on` now. */
loom_status loom_pool_wait_for_stream(loom_pool *p, loom_stream *waiter, loom_stream *on);
/* A segment [base, base + n) in p's sorted table, with one head block over
 * all of it (state left to the caller); NULL on bookkeeping OOM, with
 * provider_msg set (the caller gives the memory back and reports it). */
segment *loom_pool_seg_add(loom_pool *p, int kind, loom_stream *s, uintptr_t base, size_t n);
/* Take sg out of the table (the caller frees its memory, block and struct). */
void loom_pool_seg_remove(loom_pool *p, segment *sg);
loom_status loom_pool_seg_new(loom_pool *p, int kind, size_t n, loom_stream *s, block **out);
/* b spans a whole unused segment and sits in the free trees. */
loom_status loom_pool_seg_release(loom_pool *p, block *b);
/* Release every unused segment; returns how many (first error into *st). */
int loom_pool_release_all(loom_pool *p, loom_status *st);
int loom_pool_release_fitting(loom_pool *p, int kind, size_t n);
/* Over the threshold, give back the least recently freed unused segments. */
void loom_pool_garbage_collect(loom_pool *p, size_t need);
/* May the pool give memory back to the provider now? Not while a graph
 * capture is open on its device (pool.h, loom_pool_config.captures). */
static inline int loom_pool_may_give_back(const loom_pool *p) {
  return !p->cfg.captures || atomic_load_explicit(p->cfg.captures, memory_order_acquire) == 0;
}
/* Insert free block b into the index, merged with free neighbours; returns
 * the merged block. */
block *loom_pool_merge_insert(loom_pool *p, block *b);
void loom_pool_block_free(loom_pool *p, block *b);
void loom_pool_process_events_locked(loom_pool *p);

/* ---- pool_expandable.c ----------------------------------------------------- */
/* Map memory into an expandable segment of (kind, s), reserving a new range
 * if none can hold size, and return the free block of at least size bytes
 * that now exists (taken out of the free index). LOOM_ERR_OOM with
 * p->provider_msg set when the limit or the device refuses. */
loom_status loom_pool_exp_grow(loom_pool *p, int kind, loom_stream *s, size_t size, block **out);
/* Unmap the whole granules inside free block b of an expandable segment
 * (giving the range back when nothing in it stays mapped). Returns the bytes
 * unmapped; a provider error goes to *st (when *st is LOOM_OK). */
size_t loom_pool_exp_unmap_block(loom_pool *p, block *b, loom_status *st);
/* loom_pool_exp_unmap_block over every free block of every expandable segment of
 * kind (0: both classes); returns the bytes unmapped. */
size_t loom_pool_exp_unmap_all(loom_pool *p, int kind, loom_status *st);
/* Unmap and unreserve everything (pool destruction). */
void loom_pool_exp_destroy_segment(loom_pool *p, segment *sg);

#endif
