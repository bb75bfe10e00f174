/* vmm_cpu.c — virtual memory for expandable segments on the CPU: address
 * space is reserved with an inaccessible, unbacked mmap (PROT_NONE,
 * MAP_NORESERVE), committed granule by granule with mprotect, and given
 * back by mapping fresh PROT_NONE pages over the range (MAP_FIXED), which
 * returns the pages to the kernel at once. The granule is the page size. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc/vmm.h"
#include "core/error.h"
#include "core/sys.h"

size_t loom_vmm_cpu_granularity(void *ctx) {
  (void)ctx;
  long page = sysconf(_SC_PAGESIZE);
  return page >= 512 ? (size_t)page : 4096;
}

loom_status loom_vmm_cpu_reserve(void *ctx, size_t n, void **base) {
  (void)ctx;
  void *p = loom_sys_mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return loom_set_error(LOOM_ERR_OOM, "mmap reserving %zu bytes of address space: %s", n, strerror(errno));
  *base = p;
  return LOOM_OK;
}

loom_status loom_vmm_cpu_release(void *ctx, void *base, size_t n) {
  (void)ctx;
  if (loom_sys_munmap(base, n) != 0)
    return loom_set_error(LOOM_ERR_INTERNAL, "munmap of the %zu-byte reservation at %p: %s", n, base, strerror(errno));
  return LOOM_OK;
}

loom_status loom_vmm_cpu_map(void *ctx, void *addr, size_t n) {
  (void)ctx;
  if (mprotect(addr, n, PROT_READ | PROT_WRITE) != 0)
    return loom_set_error(errno == ENOMEM ? LOOM_ERR_OOM : LOOM_ERR_INTERNAL, "mprotect committing %zu bytes at %p: %s",
                          n, addr, strerror(errno));
  return LOOM_OK;
}

loom_status loom_vmm_cpu_unmap(void *ctx, void *addr, size_t n) {
  (void)ctx;
  void *p = loom_sys_mmap(addr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED)
    return loom_set_error(LOOM_ERR_INTERNAL, "mmap decommitting %zu bytes at %p: %s", n, addr, strerror(errno));
  return LOOM_OK;
}
