/* vmm.h (internal) — the virtual-memory calls behind expandable segments,
 * one set per kind of memory (see provider.h for their contract):
 * vmm_cpu.c (mmap/mprotect) and vmm_cuda.c (the CUDA driver's virtual
 * memory management API). providers.c plugs them into the providers. */
#ifndef LOOM_ALLOC_VMM_H
#define LOOM_ALLOC_VMM_H

#include <stddef.h>
#include "loom/status.h"

size_t loom_vmm_cpu_granularity(void *ctx);
loom_status loom_vmm_cpu_reserve(void *ctx, size_t n, void **base);
loom_status loom_vmm_cpu_release(void *ctx, void *base, size_t n);
loom_status loom_vmm_cpu_map(void *ctx, void *addr, size_t n);
loom_status loom_vmm_cpu_unmap(void *ctx, void *addr, size_t n);

#ifdef LOOM_HAVE_CUDA
/* ctx is the logical CUDA device index, as for the cudaMalloc provider. The
 * driver API is reached through cudaGetDriverEntryPointByVersion, so libloom
 * does not link libcuda (absent on machines without a driver). */
size_t loom_vmm_cuda_granularity(void *ctx);
loom_status loom_vmm_cuda_reserve(void *ctx, size_t n, void **base);
loom_status loom_vmm_cuda_release(void *ctx, void *base, size_t n);
loom_status loom_vmm_cuda_map(void *ctx, void *addr, size_t n);
loom_status loom_vmm_cuda_unmap(void *ctx, void *addr, size_t n);
#endif

#endif
