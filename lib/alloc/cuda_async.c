/* cuda_async.c — the backend:cuda_async allocator (an implementation of
 * allocator.h; without CUDA only its constructor, which refuses): cudaMallocFromPoolAsync
 * on a memory pool per logical device, with the pool's release threshold
 * raised to "never" so freed memory stays cached by the driver across
 * synchronizations (the default threshold of 0 would return it at every
 * sync). Stream order is the driver's: memory freed on a stream is reusable
 * by later work on that stream at once. A pointer recorded on other streams
 * is freed only after its allocation stream waits (GPU-side) on events
 * recorded on them. Statistics: allocated/requested/counts are tracked
 * here; reserved comes from the pool's attributes.
 *
 * This file has only been compiled, never run: no GPU was available. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/allocator.h"
#include "alloc/alloc_internal.h"
#include "alloc/ptrmap.h"
#include "device/device_internal.h"
#include "device/sync_stats.h"
#include "prof/prof.h"
#include "core/sys.h"

#ifdef LOOM_HAVE_CUDA

typedef struct async_alloc {
  size_t size;
  loom_stream *stream;
  loom_stream **uses;
  int nuses;
} async_alloc;

typedef struct loom_async {
  loom_allocator base;  /* first: the allocator interface (allocator.h) */
  pthread_mutex_t mu;
  int index;
  char name[32];
  size_t limit;
  cudaMemPool_t pool;
  loom_ptrmap live;
  loom_memory_stats st;
} loom_async;

static const loom_allocator_ops g_async_ops;

static void bump(loom_memory_stat *a, int64_t d) {
  a[0].current += d;
  if (a[0].current > a[0].peak) a[0].peak = a[0].current;
}

loom_status loom_allocator_async_create(int index, const char *name, size_t limit, loom_allocator **out) {
  *out = NULL;
  LOOM_TRY(loom_cuda_set_device(index));
  loom_async *a = loom_sys_calloc(1, sizeof *a);
  if (!a) return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory", name);
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = loom_device_physical(index);
  cudaError_t e = cudaMemPoolCreate(&a->pool, &props);
  if (e != cudaSuccess) {
    loom_sys_free(a);
    return loom_cuda_error(e, "cudaMemPoolCreate", __FILE__, __LINE__);
  }
  uint64_t threshold = UINT64_MAX;
  e = cudaMemPoolSetAttribute(a->pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (e != cudaSuccess) {
    cudaMemPoolDestroy(a->pool);
    loom_sys_free(a);
    return loom_cuda_error(e, "cudaMemPoolSetAttribute(ReleaseThreshold)", __FILE__, __LINE__);
  }
  pthread_mutex_init(&a->mu, NULL);
  a->index = index;
  snprintf(a->name, sizeof a->name, "%s", name);
  a->limit = limit;
  a->st.struct_size = sizeof a->st;
  a->base.ops = &g_async_ops;
  a->base.backend = LOOM_ALLOC_BACKEND_CUDA_ASYNC;
  *out = &a->base;
  return LOOM_OK;
}

static void reserved_now(loom_async *a) {
  uint64_t cur = 0, high = 0;
  if (cudaMemPoolGetAttribute(a->pool, cudaMemPoolAttrReservedMemCurrent, &cur) == cudaSuccess &&
      cudaMemPoolGetAttribute(a->pool, cudaMemPoolAttrReservedMemHigh, &high) == cudaSuccess) {
    a->st.reserved_bytes[0].current = a->st.reserved_bytes[LOOM_MEM_LARGE_POOL].current = (int64_t)cur;
    a->st.reserved_bytes[0].peak = a->st.reserved_bytes[LOOM_MEM_LARGE_POOL].peak = (int64_t)high;
  }
  (void)cudaGetLastError();
}

static loom_status a_malloc(loom_allocator *base, size_t n, loom_stream *s, void **out) {
  loom_async *a = (loom_async *)base;
  size_t size = n ? n : 1;
  LOOM_TRY(loom_cuda_set_device(a->index));
  pthread_mutex_lock(&a->mu);
  if (a->limit && (size_t)a->st.allocated_bytes[0].current + size > a->limit) {
    a->st.num_ooms++;
    int64_t cur = a->st.allocated_bytes[0].current;
    pthread_mutex_unlock(&a->mu);
    return loom_set_error(LOOM_ERR_OOM, "%s (cuda_async): out of memory allocating %zu bytes: %" PRId64
                          " allocated, limit %zu. Free tensors or raise LOOM_ALLOC_CONF limit", a->name, n, cur, a->limit);
  }
  pthread_mutex_unlock(&a->mu);
  cudaStream_t cs = (cudaStream_t)loom_stream_native(s);
  void *p = NULL;
  /* Fault injection (core/fault.h): the device reports itself full. */
  cudaError_t e = loom_fault_fail(LOOM_FAULT_DEVICE) ? cudaErrorMemoryAllocation
                                                     : cudaMallocFromPoolAsync(&p, size, a->pool, cs);
  int retried = 0;
  if (e == cudaErrorMemoryAllocation) {
    /* Give cached memory back to the device and retry once. */
    (void)cudaGetLastError();
    retried = 1;
    loom_sync_count(LOOM_SYNC_DEVICE);
    if (cudaDeviceSynchronize() == cudaSuccess && cudaMemPoolTrimTo(a->pool, 0) == cudaSuccess)
      e = cudaMallocFromPoolAsync(&p, size, a->pool, cs);
  }
  pthread_mutex_lock(&a->mu);
  if (retried) a->st.num_alloc_retries++;
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    a->st.num_ooms += e == cudaErrorMemoryAllocation;
    pthread_mutex_unlock(&a->mu);
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    (void)cudaGetLastError();
    return loom_set_error(e == cudaErrorMemoryAllocation ? LOOM_ERR_OOM : LOOM_ERR_CUDA,
                          "%s (cuda_async): cudaMallocFromPoolAsync of %zu bytes failed: %s; %zu bytes free of %zu",
                          a->name, n, cudaGetErrorString(e), fr, tot);
  }
  async_alloc *r = loom_sys_calloc(1, sizeof *r);
  if (!r || !loom_ptrmap_put(&a->live, (uintptr_t)p, r)) {
    loom_sys_free(r);
    pthread_mutex_unlock(&a->mu);
    cudaFreeAsync(p, cs);
    return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory for allocator bookkeeping", a->name);
  }
  r->size = n;
  r->stream = s;
  bump(a->st.allocated_bytes, (int64_t)n);
  bump(a->st.active_bytes, (int64_t)n);
  bump(a->st.requested_bytes, (int64_t)n);
  bump(a->st.allocations, 1);
  a->st.num_allocs++;
  if (LOOM_PROF_ACTIVE()) {  /* the profiler's memory timeline */
    reserved_now(a);
    loom_prof_alloc_event(a->name, "alloc", (uintptr_t)p, n, s, loom_prof_site(), a->st.allocated_bytes[0].current,
                          a->st.reserved_bytes[0].current, a->st.active_bytes[0].current);
  }
  pthread_mutex_unlock(&a->mu);
  *out = p;
  return LOOM_OK;
}

static loom_status a_free(loom_allocator *base, void *ptr) {
  loom_async *a = (loom_async *)base;
  pthread_mutex_lock(&a->mu);
  async_alloc *r = loom_ptrmap_del(&a->live, (uintptr_t)ptr);
  if (r) {
    bump(a->st.allocated_bytes, -(int64_t)r->size);
    bump(a->st.active_bytes, -(int64_t)r->size);
    bump(a->st.requested_bytes, -(int64_t)r->size);
    bump(a->st.allocations, -1);
    a->st.num_frees++;
    if (LOOM_PROF_ACTIVE()) {
      reserved_now(a);
      loom_prof_alloc_event(a->name, "free", (uintptr_t)ptr, r->size, r->stream, NULL, a->st.allocated_bytes[0].current,
                            a->st.reserved_bytes[0].current, a->st.active_bytes[0].current);
    }
  }
  pthread_mutex_unlock(&a->mu);
  if (!r)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_free: %p was not allocated on %s, or was already freed", ptr,
                          a->name);
  loom_status st = loom_cuda_set_device(a->index);
  cudaStream_t cs = (cudaStream_t)loom_stream_native(r->stream);
  for (int i = 0; st == LOOM_OK && i < r->nuses; i++) {
    /* The allocation stream waits for the other users, then frees in order. */
    loom_event *ev = NULL;
    st = loom_event_create(loom_stream_device(r->uses[i]), &ev);
    if (st == LOOM_OK) st = loom_event_record(ev, r->uses[i]);
    if (st == LOOM_OK) st = loom_stream_wait_event(r->stream, ev);
    loom_event_free(ev);
  }
  if (st == LOOM_OK) {
    cudaError_t e = cudaFreeAsync(ptr, cs);
    if (e != cudaSuccess) st = loom_cuda_error(e, "cudaFreeAsync", __FILE__, __LINE__);
  }
  loom_sys_free(r->uses);
  loom_sys_free(r);
  return st;
}

static loom_status a_record(loom_allocator *base, void *ptr, loom_stream *s) {
  loom_async *a = (loom_async *)base;
  pthread_mutex_lock(&a->mu);
  async_alloc *r = loom_ptrmap_get(&a->live, (uintptr_t)ptr);
  loom_status st = LOOM_OK;
  if (!r) {
    st = loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_record_stream: %p is not a live allocation on %s", ptr, a->name);
  } else if (s != r->stream) {
    int seen = 0;
    for (int i = 0; i < r->nuses; i++) seen |= r->uses[i] == s;
    if (!seen) {
      loom_stream **u = loom_sys_realloc(r->uses, (size_t)(r->nuses + 1) * sizeof *u);
      if (!u) st = loom_set_error(LOOM_ERR_OOM, "loom_alloc_record_stream: out of host memory");
      else {
        r->uses = u;
        r->uses[r->nuses++] = s;
      }
    }
  }
  pthread_mutex_unlock(&a->mu);
  return st;
}

static int a_owns(loom_allocator *base, const void *ptr) {
  loom_async *a = (loom_async *)base;
  pthread_mutex_lock(&a->mu);
  int r = loom_ptrmap_get(&a->live, (uintptr_t)ptr) != NULL;
  pthread_mutex_unlock(&a->mu);
  return r;
}

static loom_status a_empty_cache(loom_allocator *base) {
  loom_async *a = (loom_async *)base;
  LOOM_TRY(loom_cuda_set_device(a->index));
  loom_sync_count(LOOM_SYNC_DEVICE);
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  LOOM_CUDA_CHECK(cudaMemPoolTrimTo(a->pool, 0));
  pthread_mutex_lock(&a->mu);
  a->st.num_device_frees++;
  pthread_mutex_unlock(&a->mu);
  return LOOM_OK;
}

/* Only the limit can change on a live cuda_async pool. */
static loom_status a_reconfigure(loom_allocator *base, const loom_alloc_options *o, size_t limit) {
  loom_async *a = (loom_async *)base;
  (void)o;
  pthread_mutex_lock(&a->mu);
  a->limit = limit;
  pthread_mutex_unlock(&a->mu);
  return LOOM_OK;
}

static void a_stats(loom_allocator *base, loom_memory_stats *out) {
  loom_async *a = (loom_async *)base;
  size_t want = out->struct_size < sizeof *out ? out->struct_size : sizeof *out;
  pthread_mutex_lock(&a->mu);
  reserved_now(a);
  loom_memory_stats s = a->st;
  s.limit_bytes = (int64_t)a->limit;
  s.max_split_size = -1;
  pthread_mutex_unlock(&a->mu);
  memcpy(out, &s, want);
  out->struct_size = want;
}

static void a_reset_peaks(loom_allocator *base) {
  loom_async *a = (loom_async *)base;
  pthread_mutex_lock(&a->mu);
  loom_memory_stat *arrs[] = {a->st.allocated_bytes, a->st.active_bytes, a->st.requested_bytes, a->st.allocations};
  for (int i = 0; i < 4; i++) arrs[i][0].peak = arrs[i][0].current;
  uint64_t zero = 0;
  (void)cudaMemPoolSetAttribute(a->pool, cudaMemPoolAttrReservedMemHigh, &zero);
  (void)cudaGetLastError();
  pthread_mutex_unlock(&a->mu);
}

static void a_reset_counters(loom_allocator *base) {
  loom_async *a = (loom_async *)base;
  pthread_mutex_lock(&a->mu);
  a->st.num_allocs = a->st.num_frees = a->st.num_alloc_retries = a->st.num_ooms = a->st.num_device_frees = 0;
  pthread_mutex_unlock(&a->mu);
}

static char *a_summary(loom_allocator *base) {
  loom_async *a = (loom_async *)base;
  loom_memory_stats s;
  s.struct_size = sizeof s;
  a_stats(&a->base, &s);
  char *buf = loom_sys_malloc(1024);
  if (!buf) {
    loom_set_error(LOOM_ERR_OOM, "out of host memory");
    return NULL;
  }
  snprintf(buf, 1024,
           "loom memory summary: %s (backend cuda_async: cudaMallocAsync pool, release threshold raised)\n"
           "  allocated %" PRId64 " (peak %" PRId64 "), reserved %" PRId64 " (peak %" PRId64 "), limit %" PRId64 "\n"
           "  allocs %" PRId64 ", frees %" PRId64 ", retries %" PRId64 ", OOMs %" PRId64 "\n",
           a->name, s.allocated_bytes[0].current, s.allocated_bytes[0].peak, s.reserved_bytes[0].current,
           s.reserved_bytes[0].peak, s.limit_bytes, s.num_allocs, s.num_frees, s.num_alloc_retries, s.num_ooms);
  return buf;
}

static char *a_snapshot(loom_allocator *base) {
  loom_async *a = (loom_async *)base;
  loom_memory_stats s;
  s.struct_size = sizeof s;
  a_stats(&a->base, &s);
  char *buf = loom_sys_malloc(512);
  if (!buf) {
    loom_set_error(LOOM_ERR_OOM, "out of host memory");
    return NULL;
  }
  snprintf(buf, 512,
           "{\"device\":\"%s\",\"backend\":\"cuda_async\",\"stats\":{\"allocated_bytes\":%" PRId64
           ",\"reserved_bytes\":%" PRId64 ",\"allocations\":%" PRId64 "},\"segments\":[],\"history\":[]}",
           a->name, s.allocated_bytes[0].current, s.reserved_bytes[0].current, s.allocations[0].current);
  return buf;
}

/* Live allocations are freed with the pool (like loom_pool_destroy). A
 * pool destroyed with allocations outstanding or frees still in flight
 * keeps its memory until they are freed and complete (cudaMemPoolDestroy),
 * which for a live allocation is never: so the device is drained, each is
 * freed (on the NULL stream: its own stream may be gone by now), the device
 * drained again and the pool trimmed before it is destroyed. */
static void a_destroy(loom_allocator *base) {
  loom_async *a = (loom_async *)base;
  if (!a) return;
  (void)loom_cuda_set_device(a->index);
  loom_sync_count(LOOM_SYNC_DEVICE);
  (void)cudaDeviceSynchronize();
  for (size_t i = 0; i < a->live.cap; i++)
    if (a->live.keys[i]) {
      async_alloc *r = a->live.vals[i];
      (void)cudaFreeAsync((void *)a->live.keys[i], 0);
      loom_sys_free(r->uses);
      loom_sys_free(r);
    }
  loom_sync_count(LOOM_SYNC_DEVICE);
  (void)cudaDeviceSynchronize();
  (void)cudaMemPoolTrimTo(a->pool, 0);
  (void)cudaMemPoolDestroy(a->pool);
  (void)cudaGetLastError();
  loom_ptrmap_free(&a->live);
  pthread_mutex_destroy(&a->mu);
  loom_sys_free(a);
}

static const loom_allocator_ops g_async_ops = {
    a_malloc,         a_free,    a_record,   a_owns,        a_stats,        a_reset_peaks,
    a_reset_counters, a_summary, a_snapshot, a_empty_cache, a_reconfigure, a_destroy,
};

#else /* !LOOM_HAVE_CUDA */

loom_status loom_allocator_async_create(int index, const char *name, size_t limit, loom_allocator **out) {
  (void)index, (void)limit;
  *out = NULL;
  return loom_set_error(LOOM_ERR_UNSUPPORTED, "%s: backend:cuda_async needs loom built with CUDA", name);
}
#endif
