/* provider.h (internal) — what the pool logic needs from a kind of memory.
 *
 * The pool (pool.c) decides which bytes to hand out; a provider only
 * obtains and returns whole segments and handles events. Keeping the two
 * apart lets one pool implementation serve CPU memory, CUDA device memory,
 * pinned host memory and, in tests, a fake device with simulated addresses.
 *
 * Streams are opaque to the pool: it compares and hashes loom_stream
 * pointers and passes them back to the provider, never dereferencing them
 * (the fake provider uses made-up stream pointers). NULL means "the host":
 * work on it is synchronous. */
#ifndef LOOM_ALLOC_PROVIDER_H
#define LOOM_ALLOC_PROVIDER_H

#include <stddef.h>
#include "loom/device.h"

typedef struct loom_provider {
  const char *name;
  void *ctx;
  /* A segment of exactly nbytes (a multiple of 512). LOOM_ERR_OOM when the
   * device is full (the pool then frees cache and retries); any other code is
   * passed to the caller as is. */
  loom_status (*seg_alloc)(void *ctx, size_t nbytes, void **out);
  loom_status (*seg_free)(void *ctx, void *ptr, size_t nbytes);
  /* Events can be recycled only among streams of one domain (device). */
  int (*event_domain)(void *ctx, loom_stream *s);
  loom_status (*event_create)(void *ctx, loom_stream *s, void **out);
  void (*event_free)(void *ctx, void *ev);
  loom_status (*event_record)(void *ctx, void *ev, loom_stream *s);
  /* 1 complete, 0 pending, -1 error. Never blocks. */
  int (*event_query)(void *ctx, void *ev);
  /* Future work on waiter waits for ev (GPU-side). waiter NULL: the host
   * waits. */
  loom_status (*stream_wait)(void *ctx, loom_stream *waiter, void *ev);
  loom_status (*mem_info)(void *ctx, size_t *free_bytes, size_t *total_bytes);
  /* Memory is ordinary host memory (AddressSanitizer may poison free blocks). */
  int host_accessible;
  /* Virtual memory, for expandable segments (all NULL when unsupported): a
   * range of address space is reserved once and physical memory is mapped
   * into it and unmapped from it in granules as the pool grows and shrinks.
   * va_granularity: the mapping unit (a power of two, a multiple of 512),
   * or 0 with an error when the device cannot do it. va_reserve: nbytes
   * (a granule multiple) of address space, granule-aligned, nothing mapped.
   * va_map / va_unmap: granule-aligned ranges inside a reservation; a range
   * may span several earlier maps, and va_unmap waits for work still queued
   * on the device (like cudaFree does). va_map fails with LOOM_ERR_OOM when
   * the device is full. va_release: a reservation with nothing mapped. */
  size_t (*va_granularity)(void *ctx);
  loom_status (*va_reserve)(void *ctx, size_t nbytes, void **base);
  loom_status (*va_release)(void *ctx, void *base, size_t nbytes);
  loom_status (*va_map)(void *ctx, void *addr, size_t nbytes);
  loom_status (*va_unmap)(void *ctx, void *addr, size_t nbytes);
} loom_provider;

/* CPU memory, 64-byte aligned; events are loom_event (complete at once).
 * Expandable segments: mmap'd PROT_NONE reservations, committed page by page
 * with mprotect and given back with a fresh PROT_NONE mapping (vmm_cpu.c). */
const loom_provider *loom_provider_cpu(void);
/* cudaMalloc on logical CUDA device index (NULL when built without CUDA).
 * Expandable segments: the CUDA virtual memory API (vmm_cuda.c). */
const loom_provider *loom_provider_cuda(int index);
/* cudaHostAlloc (NULL when built without CUDA). */
const loom_provider *loom_provider_pinned(void);

/* Simulated GPUs (loom_device_testing_fake_gpus, for tests) have no memory
 * of their own: the test registers a factory (tests/support/fake_gpus.c)
 * that hands out the provider of each simulated physical GPU (capacity:
 * its size in bytes), and every logical device on that GPU allocates from
 * it. Called under the allocator's lock, once per device pool or graph
 * pool created; it must return the same provider for the same GPU. */
typedef const loom_provider *(*loom_provider_factory)(void *ud, int physical_gpu, size_t capacity);
/* Register (f NULL: remove) the factory. Before the first allocation on a
 * simulated GPU. */
void loom_provider_set_fake_gpu_factory(loom_provider_factory f, void *ud);
/* The registered factory's provider for physical GPU phys; NULL when none
 * is registered or it has none. */
const loom_provider *loom_provider_fake_gpu(int phys);

#endif
