/* alloc_internal.h (internal) — glue between the global per-device
 * allocators (alloc.c), option parsing (config.c) and the cudaMallocAsync
 * backend (cuda_async.c). */
#ifndef LOOM_ALLOC_INTERNAL_H
#define LOOM_ALLOC_INTERNAL_H

#include "loom/alloc.h"
#include "alloc/pool.h"
#include "core/error.h"

/* Range checks shared by loom_alloc_set_config and the parser. */
loom_status loom_alloc_options_check(const loom_alloc_options *o);

/* The cuda_async backend: cudaMallocAsync from a per-device memory pool
 * whose release threshold is raised so freed memory stays cached. Built only
 * with CUDA; elsewhere loom_async_create reports LOOM_ERR_UNSUPPORTED. */
typedef struct loom_async loom_async;
loom_status loom_async_create(int index, const char *name, size_t limit, loom_async **out);
loom_status loom_async_malloc(loom_async *a, size_t n, loom_stream *s, void **out);
loom_status loom_async_free(loom_async *a, void *ptr);
loom_status loom_async_record_stream(loom_async *a, void *ptr, loom_stream *s);
loom_status loom_async_empty_cache(loom_async *a);
void loom_async_set_limit(loom_async *a, size_t limit);
void loom_async_stats(loom_async *a, loom_memory_stats *out);
void loom_async_reset_peaks(loom_async *a);
void loom_async_reset_counters(loom_async *a);
char *loom_async_summary(loom_async *a);
char *loom_async_snapshot_json(loom_async *a);

#endif
