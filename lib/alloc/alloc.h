/* alloc.h (internal) — the one per-device allocation interface that tensor
 * storage, workspaces and the data loader use. Behind it sits the caching
 * allocator (lib/alloc); callers never talk to a provider directly.
 *
 * Thread-safe. */
#ifndef LOOM_ALLOC_ALLOC_H
#define LOOM_ALLOC_ALLOC_H

#include <stddef.h>
#include <stdint.h>
#include "loom/device.h"

/* Allocate nbytes on dev for use on stream (NULL = the device's current
 * stream). nbytes == 0 yields a valid unique pointer. Errors: LOOM_ERR_OOM
 * with a message, LOOM_ERR_DEVICE. Memory is 64-byte aligned at least. */
loom_status loom_alloc_malloc(loom_device dev, size_t nbytes, loom_stream *stream, void **out);
/* loom_alloc_malloc from the device's own pool even while this thread
 * captures a graph: for runtime state that outlives any one graph (the
 * cuBLASLt workspace), which must not land in a capture's private pool.
 * Freed with loom_alloc_free. */
loom_status loom_alloc_malloc_uncaptured(loom_device dev, size_t nbytes, loom_stream *stream, void **out);
/* Return memory obtained from loom_alloc_malloc (NULL is a no-op). */
void loom_alloc_free(loom_device dev, void *ptr);
/* Page-locked host memory for H2D staging (plain host memory without CUDA). */
loom_status loom_alloc_pinned_malloc(size_t nbytes, void **out);
void loom_alloc_pinned_free(void *ptr);
/* Mark that the allocation at ptr (on dev) is used by work on stream, which
 * may belong to another device for pinned memory: freeing it then waits,
 * GPU-side, for that work before the memory is reused. */
loom_status loom_alloc_record_stream(loom_device dev, void *ptr, loom_stream *stream);
loom_status loom_alloc_pinned_record_stream(void *ptr, loom_stream *stream);

/* Graph capture (lib/graph/graph.c): from begin until end, this thread's
 * allocations on dev come from a new private pool (*out); frees and
 * record_stream calls on its blocks find it from any thread. destroy (with
 * the graph) gives the pool back at once when none of its blocks is still
 * allocated, else retires it: it stays, serving frees only, until its last
 * block is freed (a tensor, optimizer state or kernel table made while
 * capturing may outlive the graph). While a capture is open on a device,
 * its pools give no memory back (pool.h). backend:cuda_async devices refuse
 * (LOOM_ERR_UNSUPPORTED). */
typedef struct loom_allocator loom_allocator;
loom_status loom_alloc_private_begin(loom_device dev, loom_allocator **out);
void loom_alloc_private_end(void);
void loom_alloc_private_destroy(loom_allocator *p);
/* Bytes p holds from the device (reserved). */
int64_t loom_alloc_private_reserved(loom_allocator *p);
/* Private pools alive, retired ones included (tests). */
int loom_alloc_private_count(void);

#endif
