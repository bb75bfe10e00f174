/* vmm_cuda.c — virtual memory for expandable segments on CUDA devices,
 * through the driver's virtual memory management API: cuMemAddressReserve
 * for the range, then per granule cuMemCreate + cuMemMap (the handle is
 * released at once: the mapping keeps the memory alive until cuMemUnmap),
 * cuMemSetAccess for the device, and cuMemUnmap granule by granule (the
 * driver unmaps only whole earlier maps, so every granule is its own map).
 *
 * The driver functions come from cudaGetDriverEntryPointByVersion instead of
 * linking libcuda: libloom must load on machines without a driver, where
 * libcuda.so.1 does not exist. Unmapping first waits for the device, as
 * cudaFree does, because a freed block may still be read by queued kernels.
 *
 * Never run on a GPU so far (no GPU on the development machines). */
#ifdef LOOM_HAVE_CUDA
#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "alloc/vmm.h"
#include "device/device_internal.h"
#include "device/sync_stats.h"

static struct {
  PFN_cuDeviceGet_v2000 device_get;
  PFN_cuDeviceGetAttribute_v2000 device_attr;
  PFN_cuGetErrorString_v6000 error_string;
  PFN_cuMemGetAllocationGranularity_v10020 granularity;
  PFN_cuMemAddressReserve_v10020 reserve;
  PFN_cuMemAddressFree_v10020 address_free;
  PFN_cuMemCreate_v10020 create;
  PFN_cuMemRelease_v10020 release;
  PFN_cuMemMap_v10020 map;
  PFN_cuMemUnmap_v10020 unmap;
  PFN_cuMemSetAccess_v10020 set_access;
  int ok;
  char why[160];
} g_drv;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int entry(const char *name, void **fn, unsigned version) {
  enum cudaDriverEntryPointQueryResult q;
  cudaError_t e = cudaGetDriverEntryPointByVersion(name, fn, version, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn) {
    (void)cudaGetLastError();
    snprintf(g_drv.why, sizeof g_drv.why, "the CUDA driver has no %s (cudaGetDriverEntryPointByVersion: %s)", name,
             e != cudaSuccess ? cudaGetErrorString(e) : "symbol not found");
    return 0;
  }
  return 1;
}

static void load(void) {
  g_drv.ok = entry("cuDeviceGet", (void **)&g_drv.device_get, 2000) &&
             entry("cuDeviceGetAttribute", (void **)&g_drv.device_attr, 2000) &&
             entry("cuGetErrorString", (void **)&g_drv.error_string, 6000) &&
             entry("cuMemGetAllocationGranularity", (void **)&g_drv.granularity, 10020) &&
             entry("cuMemAddressReserve", (void **)&g_drv.reserve, 10020) &&
             entry("cuMemAddressFree", (void **)&g_drv.address_free, 10020) &&
             entry("cuMemCreate", (void **)&g_drv.create, 10020) &&
             entry("cuMemRelease", (void **)&g_drv.release, 10020) &&
             entry("cuMemMap", (void **)&g_drv.map, 10020) && entry("cuMemUnmap", (void **)&g_drv.unmap, 10020) &&
             entry("cuMemSetAccess", (void **)&g_drv.set_access, 10020);
}

static loom_status drv_error(CUresult r, const char *call, int idx) {
  const char *msg = NULL;
  if (g_drv.error_string) g_drv.error_string(r, &msg);
  return loom_set_error(r == CUDA_ERROR_OUT_OF_MEMORY ? LOOM_ERR_OOM : LOOM_ERR_DEVICE, "%s on cuda:%d: %s (CUresult %d)",
                        call, idx, msg ? msg : "unknown error", (int)r);
}

/* Make the device current and the driver table usable; fill prop. */
static loom_status prepare(int idx, CUmemAllocationProp *prop) {
  pthread_once(&g_once, load);
  if (!g_drv.ok) return loom_set_error(LOOM_ERR_UNSUPPORTED, "cuda:%d: expandable segments: %s", idx, g_drv.why);
  LOOM_TRY(loom_cuda_set_device(idx));
  int ordinal = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&ordinal));
  CUdevice dev;
  CUresult r = g_drv.device_get(&dev, ordinal);
  if (r != CUDA_SUCCESS) return drv_error(r, "cuDeviceGet", idx);
  memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = dev;
  return LOOM_OK;
}

size_t loom_vmm_cuda_granularity(void *ctx) {
  int idx = (int)(intptr_t)ctx;
  CUmemAllocationProp prop;
  if (prepare(idx, &prop) != LOOM_OK) return 0;
  int vmm = 0;
  CUresult r = g_drv.device_attr(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, prop.location.id);
  if (r != CUDA_SUCCESS) {
    drv_error(r, "cuDeviceGetAttribute", idx);
    return 0;
  }
  if (!vmm) {
    loom_set_error(LOOM_ERR_UNSUPPORTED, "cuda:%d does not support virtual memory management (needed by "
                   "expandable_segments:true); use the default segments", idx);
    return 0;
  }
  size_t g = 0;
  r = g_drv.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) {
    drv_error(r, "cuMemGetAllocationGranularity", idx);
    return 0;
  }
  return g;
}

loom_status loom_vmm_cuda_reserve(void *ctx, size_t n, void **base) {
  int idx = (int)(intptr_t)ctx;
  CUmemAllocationProp prop;
  LOOM_TRY(prepare(idx, &prop));
  size_t g = 0;
  CUresult r = g_drv.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) return drv_error(r, "cuMemGetAllocationGranularity", idx);
  CUdeviceptr p = 0;
  r = g_drv.reserve(&p, n, g, 0, 0);
  if (r != CUDA_SUCCESS) return drv_error(r, "cuMemAddressReserve", idx);
  *base = (void *)(uintptr_t)p;
  return LOOM_OK;
}

loom_status loom_vmm_cuda_release(void *ctx, void *base, size_t n) {
  int idx = (int)(intptr_t)ctx;
  CUmemAllocationProp prop;
  LOOM_TRY(prepare(idx, &prop));
  CUresult r = g_drv.address_free((CUdeviceptr)(uintptr_t)base, n);
  if (r != CUDA_SUCCESS) return drv_error(r, "cuMemAddressFree", idx);
  return LOOM_OK;
}

static void unmap_range(CUdeviceptr at, size_t n, size_t g) {
  for (size_t off = 0; off < n; off += g) g_drv.unmap(at + off, g);
}

loom_status loom_vmm_cuda_map(void *ctx, void *addr, size_t n) {
  int idx = (int)(intptr_t)ctx;
  CUmemAllocationProp prop;
  LOOM_TRY(prepare(idx, &prop));
  size_t g = 0;
  CUresult r = g_drv.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) return drv_error(r, "cuMemGetAllocationGranularity", idx);
  CUdeviceptr at = (CUdeviceptr)(uintptr_t)addr;
  size_t done = 0;
  for (; done < n; done += g) {
    CUmemGenericAllocationHandle h;
    r = g_drv.create(&h, g, &prop, 0);
    if (r != CUDA_SUCCESS) break;
    r = g_drv.map(at + done, g, 0, h, 0);
    g_drv.release(h);  /* the mapping holds the memory from here on */
    if (r != CUDA_SUCCESS) break;
  }
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, prop.location.id}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    r = g_drv.set_access(at, n, &access, 1);
    if (r == CUDA_SUCCESS) return LOOM_OK;
  }
  loom_status st = drv_error(r, done < n ? "cuMemCreate/cuMemMap" : "cuMemSetAccess", idx);
  unmap_range(at, done, g);
  return st;
}

loom_status loom_vmm_cuda_unmap(void *ctx, void *addr, size_t n) {
  int idx = (int)(intptr_t)ctx;
  CUmemAllocationProp prop;
  LOOM_TRY(prepare(idx, &prop));
  /* A host wait like any other: counted, so test_sync sees an unmap inside a
   * step (issue 22, prediction 9; never reached while a graph captures). */
  loom_sync_count(LOOM_SYNC_DEVICE);
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  size_t g = 0;
  CUresult r = g_drv.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) return drv_error(r, "cuMemGetAllocationGranularity", idx);
  CUdeviceptr at = (CUdeviceptr)(uintptr_t)addr;
  for (size_t off = 0; off < n; off += g) {
    r = g_drv.unmap(at + off, g);
    if (r != CUDA_SUCCESS) return drv_error(r, "cuMemUnmap", idx);
  }
  return LOOM_OK;
}
#endif
