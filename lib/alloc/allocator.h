/* allocator.h (internal) — the interface every allocator back end
 * implements, so that alloc.c's entry points call through one table instead
 * of switching on the kind of back end. The implementations:
 *   allocator_pool.c  the native caching pool (pool.h): each device's own
 *                     pool, and the private pools of graph captures;
 *   cuda_async.c      backend:cuda_async, cudaMallocAsync on a driver pool
 *                     (CUDA builds only);
 *   capture_pools.c   the capture router every device is reached through:
 *                     while a capture is open on a thread, that thread's
 *                     allocations go to the graph's private pool, and every
 *                     pointer operation (free, record_stream) goes to the
 *                     private pool that owns the pointer, else to the
 *                     device's own back end. Being the back end alloc.c
 *                     holds, no entry point can miss a private pool.
 * Every operation is thread-safe. */
#ifndef LOOM_ALLOC_ALLOCATOR_H
#define LOOM_ALLOC_ALLOCATOR_H

#include <stddef.h>
#include "loom/alloc.h"
#include "alloc/alloc.h"  /* the loom_allocator typedef */
#include "alloc/pool.h"
#include "alloc/provider.h"

typedef struct loom_allocator_ops {
  /* Memory for use on stream s (NULL for the pinned pool: the host). */
  loom_status (*malloc)(loom_allocator *a, size_t nbytes, loom_stream *s, void **out);
  loom_status (*free)(loom_allocator *a, void *ptr);
  /* ptr is used by work on s too: its reuse waits for that work. */
  loom_status (*record_stream)(loom_allocator *a, void *ptr, loom_stream *s);
  /* Is ptr a live allocation of a? */
  int (*owns)(loom_allocator *a, const void *ptr);
  /* loom_memory_stats_get's contract: filled as far as out->struct_size goes. */
  void (*stats)(loom_allocator *a, loom_memory_stats *out);
  void (*reset_peaks)(loom_allocator *a);
  void (*reset_counters)(loom_allocator *a);
  char *(*summary)(loom_allocator *a);
  char *(*snapshot_json)(loom_allocator *a);
  loom_status (*empty_cache)(loom_allocator *a);
  /* Options changed after creation: the live ones take effect (limit
   * already resolved to bytes); LOOM_ERR_STATE for ones fixed at creation. */
  loom_status (*reconfigure)(loom_allocator *a, const loom_alloc_options *o, size_t limit);
  void (*destroy)(loom_allocator *a);
} loom_allocator_ops;

/* Every implementation's instance starts with this. */
struct loom_allocator {
  const loom_allocator_ops *ops;
  int backend;  /* the loom_alloc_backend it is (what LOOM_ALLOC_CONF's backend: chose) */
};

/* The native pool over prov (loom_pool_create's errors). sites_key >= 0:
 * the profiler is asked to record allocation sites for it while its
 * history is on (loom_prof_sites_request). expandable_fixed: a change of
 * expandable_segments after creation is an error (not for pools that never
 * expand, like the pinned one). */
loom_status loom_allocator_pool_create(const loom_provider *prov, const loom_pool_config *cfg, int sites_key,
                                       int expandable_fixed, loom_allocator **out);

/* backend:cuda_async on logical CUDA device index; LOOM_ERR_UNSUPPORTED
 * in a build without CUDA. */
loom_status loom_allocator_async_create(int index, const char *name, size_t limit, loom_allocator **out);

/* The capture router of a device slot (any small integer naming the
 * device) over its own back end inner. */
loom_status loom_allocator_router_create(int slot, loom_allocator *inner, loom_allocator **out);
/* The device's own back end behind a router (never a private pool). */
loom_allocator *loom_allocator_router_own(loom_allocator *router);

#endif
