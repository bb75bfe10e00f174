/* providers.c — the real providers: CPU memory (aligned_alloc), CUDA device
 * memory (cudaMalloc) and pinned host memory (cudaHostAlloc), with the
 * virtual-memory calls of vmm_cpu.c / vmm_cuda.c for expandable segments
 * (pinned memory has none). Events and
 * stream waits go through lib/device's loom_event, which is synchronous on
 * the CPU and a cudaEvent_t on GPUs, so all three share that code. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "alloc/provider.h"
#include "alloc/vmm.h"
#include "device/device_internal.h"
#include "core/sys.h"

/* ---- events, shared by every real provider ------------------------------ */

static int ev_domain(void *ctx, loom_stream *s) {
  (void)ctx;
  if (!s) return 0;
  loom_device d = loom_stream_device(s);
  return d.kind * 4096 + d.index + 1;
}

static loom_status ev_create(void *ctx, loom_stream *s, void **out) {
  (void)ctx;
  loom_event *e = NULL;
  LOOM_TRY(loom_event_create(s ? loom_stream_device(s) : loom_cpu(), &e));
  *out = e;
  return LOOM_OK;
}

static void ev_free(void *ctx, void *ev) {
  (void)ctx;
  loom_event_free((loom_event *)ev);
}

static loom_status ev_record(void *ctx, void *ev, loom_stream *s) {
  (void)ctx;
  return loom_event_record((loom_event *)ev, s);
}

static int ev_query(void *ctx, void *ev) {
  (void)ctx;
  return loom_event_query((loom_event *)ev);
}

static loom_status ev_wait(void *ctx, loom_stream *waiter, void *ev) {
  (void)ctx;
  if (!waiter) return loom_event_synchronize((loom_event *)ev);
  return loom_stream_wait_event(waiter, (loom_event *)ev);
}

static loom_status host_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes) {
  (void)ctx;
  long page = sysconf(_SC_PAGESIZE), total = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
  *total_bytes = (page > 0 && total > 0) ? (size_t)page * (size_t)total : 0;
  *free_bytes = (page > 0 && avail > 0) ? (size_t)page * (size_t)avail : 0;
  return LOOM_OK;
}

/* ---- CPU ----------------------------------------------------------------- */

static loom_status cpu_seg_alloc(void *ctx, size_t n, void **out) {
  (void)ctx;
  void *p = loom_sys_aligned_alloc(64, n);
  if (!p) return loom_set_error(LOOM_ERR_OOM, "aligned_alloc of %zu bytes failed (host memory exhausted)", n);
  *out = p;
  return LOOM_OK;
}

static loom_status cpu_seg_free(void *ctx, void *p, size_t n) {
  (void)ctx;
  (void)n;
  loom_sys_free(p);
  return LOOM_OK;
}

static const loom_provider g_cpu = {
    "cpu", NULL, cpu_seg_alloc, cpu_seg_free, ev_domain, ev_create, ev_free,
    ev_record, ev_query, ev_wait, host_mem_info, 1,
    loom_vmm_cpu_granularity, loom_vmm_cpu_reserve, loom_vmm_cpu_release, loom_vmm_cpu_map, loom_vmm_cpu_unmap,
};

const loom_provider *loom_provider_cpu(void) { return &g_cpu; }

/* ---- CUDA ---------------------------------------------------------------- */

#ifdef LOOM_HAVE_CUDA
#define LOOM_MAX_CUDA_PROVIDERS 64

static int is_oom(cudaError_t e) { return e == cudaErrorMemoryAllocation; }

static loom_status cuda_seg_alloc(void *ctx, size_t n, void **out) {
  int idx = (int)(intptr_t)ctx;
  LOOM_TRY(loom_cuda_set_device(idx));
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, n);
  if (is_oom(e)) {
    (void)cudaGetLastError();
    return loom_set_error(LOOM_ERR_OOM, "cudaMalloc of %zu bytes on cuda:%d: %s", n, idx, cudaGetErrorString(e));
  }
  if (e != cudaSuccess) return loom_cuda_error(e, "cudaMalloc", __FILE__, __LINE__);
  *out = p;
  return LOOM_OK;
}

static loom_status cuda_seg_free(void *ctx, void *p, size_t n) {
  (void)n;
  LOOM_TRY(loom_cuda_set_device((int)(intptr_t)ctx));
  LOOM_CUDA_CHECK(cudaFree(p));
  return LOOM_OK;
}

static loom_status cuda_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes) {
  LOOM_TRY(loom_cuda_set_device((int)(intptr_t)ctx));
  LOOM_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
  return LOOM_OK;
}

static loom_provider g_cuda[LOOM_MAX_CUDA_PROVIDERS];
static int g_cuda_init[LOOM_MAX_CUDA_PROVIDERS];

const loom_provider *loom_provider_cuda(int index) {
  if (index < 0 || index >= LOOM_MAX_CUDA_PROVIDERS) return NULL;
  /* Written once per index under the allocator's global lock. */
  if (!g_cuda_init[index]) {
    loom_provider p = {"cuda", (void *)(intptr_t)index, cuda_seg_alloc, cuda_seg_free, ev_domain, ev_create,
                       ev_free, ev_record, ev_query, ev_wait, cuda_mem_info, 0,
                       loom_vmm_cuda_granularity, loom_vmm_cuda_reserve, loom_vmm_cuda_release, loom_vmm_cuda_map,
                       loom_vmm_cuda_unmap};
    g_cuda[index] = p;
    g_cuda_init[index] = 1;
  }
  return &g_cuda[index];
}

static loom_status pinned_seg_alloc(void *ctx, size_t n, void **out) {
  (void)ctx;
  void *p = NULL;
  cudaError_t e = cudaHostAlloc(&p, n, cudaHostAllocPortable);
  if (is_oom(e)) {
    (void)cudaGetLastError();
    return loom_set_error(LOOM_ERR_OOM, "cudaHostAlloc of %zu bytes: %s", n, cudaGetErrorString(e));
  }
  if (e != cudaSuccess) return loom_cuda_error(e, "cudaHostAlloc", __FILE__, __LINE__);
  *out = p;
  return LOOM_OK;
}

static loom_status pinned_seg_free(void *ctx, void *p, size_t n) {
  (void)ctx;
  (void)n;
  LOOM_CUDA_CHECK(cudaFreeHost(p));
  return LOOM_OK;
}

static const loom_provider g_pinned = {
    "pinned", NULL, pinned_seg_alloc, pinned_seg_free, ev_domain, ev_create, ev_free,
    ev_record, ev_query, ev_wait, host_mem_info, 0, NULL, NULL, NULL, NULL, NULL,
};

const loom_provider *loom_provider_pinned(void) { return &g_pinned; }
#else
const loom_provider *loom_provider_cuda(int index) {
  (void)index;
  return NULL;
}
const loom_provider *loom_provider_pinned(void) { return NULL; }
#endif
