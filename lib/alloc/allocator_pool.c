/* allocator_pool.c — the native caching pool (pool.h) behind the
 * allocator interface (allocator.h). */
#include <stdio.h>
#include <stdlib.h>

#include "alloc/allocator.h"
#include "core/error.h"
#include "prof/prof.h"
#include "core/sys.h"

typedef struct pool_allocator {
  loom_allocator base;
  loom_pool *pool;
  int sites_key;         /* -1: no allocation sites for the profiler */
  int expandable_fixed;
  char name[32];         /* the pool's, for messages */
} pool_allocator;

static loom_pool *pool_of(loom_allocator *a) { return ((pool_allocator *)a)->pool; }

static loom_status p_malloc(loom_allocator *a, size_t n, loom_stream *s, void **out) {
  return loom_pool_malloc(pool_of(a), n, s, out);
}
static loom_status p_free(loom_allocator *a, void *ptr) { return loom_pool_free(pool_of(a), ptr); }
static loom_status p_record(loom_allocator *a, void *ptr, loom_stream *s) {
  return loom_pool_record_stream(pool_of(a), ptr, s);
}
static int p_owns(loom_allocator *a, const void *ptr) { return loom_pool_owns(pool_of(a), ptr); }
static void p_stats(loom_allocator *a, loom_memory_stats *out) { loom_pool_stats(pool_of(a), out); }
static void p_reset_peaks(loom_allocator *a) { loom_pool_reset_peaks(pool_of(a)); }
static void p_reset_counters(loom_allocator *a) { loom_pool_reset_counters(pool_of(a)); }
static char *p_summary(loom_allocator *a) { return loom_pool_summary(pool_of(a)); }
static char *p_snapshot(loom_allocator *a) { return loom_pool_snapshot_json(pool_of(a)); }
static loom_status p_empty_cache(loom_allocator *a) { return loom_pool_empty_cache(pool_of(a)); }

static loom_status p_reconfigure(loom_allocator *a, const loom_alloc_options *o, size_t limit) {
  pool_allocator *pa = (pool_allocator *)a;
  loom_pool *p = pa->pool;
  const char *name = pa->name;
  if ((o->preallocate_fraction > 0) != (loom_pool_preallocated(p) != 0))
    return loom_set_error(LOOM_ERR_STATE, "%s: preallocation cannot change after the device's first allocation; set "
                          "LOOM_ALLOC_CONF or call loom_alloc_set_config before allocating", name);
  if (pa->expandable_fixed && (o->expandable_segments != 0) != (loom_pool_expandable(p) != 0))
    return loom_set_error(LOOM_ERR_STATE, "%s: expandable_segments cannot change after the device's first allocation; "
                          "set LOOM_ALLOC_CONF or call loom_alloc_set_config before allocating", name);
  loom_status st = loom_pool_set_controls(p, limit, o->max_split_size, o->gc_threshold, o->history);
  if (st == LOOM_OK && pa->sites_key >= 0) loom_prof_sites_request(pa->sites_key, o->history > 0);
  return st;
}

static void p_destroy(loom_allocator *a) {
  if (!a) return;
  loom_pool_destroy(pool_of(a));
  loom_sys_free(a);
}

static const loom_allocator_ops g_pool_ops = {
    p_malloc, p_free,     p_record,    p_owns,        p_stats,       p_reset_peaks,
    p_reset_counters,     p_summary,   p_snapshot,    p_empty_cache, p_reconfigure, p_destroy,
};

loom_status loom_allocator_pool_create(const loom_provider *prov, const loom_pool_config *cfg, int sites_key,
                                       int expandable_fixed, loom_allocator **out) {
  *out = NULL;
  pool_allocator *pa = loom_sys_calloc(1, sizeof *pa);
  if (!pa) return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory", cfg->name);
  loom_status st = loom_pool_create(prov, cfg, &pa->pool);
  if (st != LOOM_OK) {
    loom_sys_free(pa);
    return st;
  }
  pa->base.ops = &g_pool_ops;
  pa->base.backend = LOOM_ALLOC_BACKEND_NATIVE;
  pa->sites_key = sites_key;
  pa->expandable_fixed = expandable_fixed;
  snprintf(pa->name, sizeof pa->name, "%s", cfg->name);
  if (sites_key >= 0) loom_prof_sites_request(sites_key, cfg->history > 0);  /* history on: blocks remember the op that made them */
  *out = &pa->base;
  return LOOM_OK;
}
