/* test_cuda_device_fill.c — allocator paths that need the GPU (nearly) full
 * (issue 22): the cuda_async backend filled through loom until the device
 * refuses, then freed and asked again; and an expandable segment whose
 * mapping runs out of device memory part way, which must unmap the granules
 * it had mapped (and, once emptied, give its address range back). Each test takes the whole
 * device, so ctest runs this binary alone (RUN_SERIAL, tests/CMakeLists.txt).
 * Every test needs a GPU: skipped visibly without one, failed instead under
 * LOOM_TEST_DEVICE=cuda. Unproven so far: no GPU has run it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "support/testkit.h"
#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static loom_device gpu(void) { return loom_cuda(0); }

/* Each test ends with loom_shutdown, after a failed assertion too, so that
 * compute-sanitizer --leak-check sees only what loom lost track of. */
TestSuite(cuda_fill, .fini = tk_teardown);

#ifdef LOOM_HAVE_CUDA
static loom_memory_stats stats(void) {
  loom_memory_stats st = {.struct_size = sizeof st};
  cr_assert_eq(loom_memory_stats_get(gpu(), &st), LOOM_OK, "%s", loom_last_error());
  return st;
}
#endif

/* Filled 1 GiB at a time until the device refuses: that last request fails
 * with LOOM_ERR_OOM naming the backend, after one retry (synchronize, trim
 * the pool, try again) that cannot help because every byte is live. Freed,
 * the memory stays in the pool (release threshold "never"); a request for
 * half of it then succeeds, from the cache or after the retry trims it, and
 * empty_cache gives everything back. */
Test(cuda_fill, cuda_async_fills_the_device_then_frees_and_allocates_again) {
  tk_require_device(gpu());
#ifdef LOOM_HAVE_CUDA
  cr_assert_eq(loom_alloc_configure("backend:cuda_async"), LOOM_OK, "%s", loom_last_error());
  enum { MAX = 1024 };  /* 1 TiB: more than any GPU has */
  void **ps = calloc(MAX, sizeof *ps);
  int n = 0;
  loom_status r = LOOM_OK;
  while (n < MAX && (r = loom_alloc_malloc(gpu(), GiB, NULL, &ps[n])) == LOOM_OK) n++;
  cr_assert_lt(n, MAX, "1 TiB was allocated");
  cr_assert_geq(n, 1, "not even 1 GiB could be allocated: %s", loom_last_error());
  tk_assert_error(r, LOOM_ERR_OOM, "cuda_async");
  loom_memory_stats st = stats();
  cr_assert_geq(st.num_alloc_retries, 1, "the refused request was not retried");
  cr_assert_geq(st.num_ooms, 1);
  cr_assert_eq(st.allocated_bytes[LOOM_MEM_ALL].current, (int64_t)((size_t)n * GiB));
  for (int i = 0; i < n; i++) loom_alloc_free(gpu(), ps[i]);
  cr_assert_eq(loom_device_synchronize(gpu()), LOOM_OK, "%s", loom_last_error());
  st = stats();
  cr_assert_eq(st.allocated_bytes[LOOM_MEM_ALL].current, 0);
  cr_assert_geq(st.reserved_bytes[LOOM_MEM_ALL].current, (int64_t)((size_t)n * GiB), "the pool gave memory back early");
  void *big = NULL;
  size_t half = (size_t)n * GiB / 2;
  cr_assert_eq(loom_alloc_malloc(gpu(), half, NULL, &big), LOOM_OK, "%zu bytes after freeing %d GiB: %s", half, n,
               loom_last_error());
  cr_assert_eq(cudaMemsetAsync(big, 0, half, (cudaStream_t)loom_stream_native(loom_stream_current(gpu()))),
               cudaSuccess);
  loom_alloc_free(gpu(), big);
  cr_assert_eq(loom_empty_cache(gpu()), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(stats().reserved_bytes[LOOM_MEM_ALL].current, 0, "empty_cache kept memory in the pool");
  free(ps);
#endif
}

/* Expandable segments (vmm_cuda.c): a live 4 MiB tensor keeps a large-block
 * range reserved, and an 8 MiB one freed leaves cached granules for the
 * pool's OOM retry to give back. With all but about 256 MiB of the device
 * taken by a plain cudaMalloc, a tensor of twice what is left grows that
 * range in place: the provider maps granule after granule until cuMemCreate
 * fails part way. The map must unmap the granules it had mapped, on the
 * first try and on the pool's retry: afterwards the pool reserves exactly
 * what its live blocks need (what it reserved after an empty_cache with the
 * same blocks live: the retry gave the cache back, the failed maps left
 * nothing), the device has as much free memory as before (within 16 MiB of
 * driver bookkeeping), and half of what is left can be allocated, filled and
 * summed through loom (mapped at the very addresses the failed map had used,
 * which the driver refuses while any of them is still mapped). Once
 * everything is freed, empty_cache gives the range back down to the
 * baseline: the CUDA context's 32 MiB GEMM workspace (cuda_context.c) comes
 * from this allocator at the first op and stays allocated until
 * loom_shutdown, which the first GPU run's version of this test did not
 * allow for, nor for the OOM retry giving back the small range that the
 * fills' 0-dim sources had left cached. */
Test(cuda_fill, expandable_map_failing_part_way_unmaps_what_it_mapped) {
  tk_require_device(gpu());
#ifdef LOOM_HAVE_CUDA
  loom_alloc_options o;
  loom_alloc_options_init(&o);
  o.expandable_segments = 1;
  cr_assert_eq(loom_alloc_set_device_config(gpu(), &o), LOOM_OK, "%s", loom_last_error());
  int64_t one = 1;
  loom_tensor *warm = loom_zeros(1, &one, LOOM_F32, gpu());  /* makes the CUDA context (its workspace) */
  cr_assert_not_null(warm, "%s", loom_last_error());
  loom_tensor_release(warm);
  cr_assert_eq(loom_empty_cache(gpu()), LOOM_OK, "%s", loom_last_error());
  loom_memory_stats base = stats();
  int64_t wn = (int64_t)(4 * MiB / sizeof(float)), cn = (int64_t)(8 * MiB / sizeof(float));
  loom_tensor *w = loom_zeros(1, &wn, LOOM_F32, gpu());
  cr_assert_not_null(w, "%s", loom_last_error());
  cr_assert_eq(loom_device_synchronize(gpu()), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_empty_cache(gpu()), LOOM_OK, "%s", loom_last_error());
  loom_memory_stats s0 = stats();  /* what the live blocks (workspace, w) need */
  cr_assert_geq(s0.segments[LOOM_MEM_ALL].current, 1);
  loom_tensor *c = loom_zeros(1, &cn, LOOM_F32, gpu());
  cr_assert_not_null(c, "%s", loom_last_error());
  loom_tensor_release(c);  /* cached: the retry's to give back */
  cr_assert_eq(loom_device_synchronize(gpu()), LOOM_OK, "%s", loom_last_error());
  cr_assert_geq(stats().reserved_bytes[LOOM_MEM_ALL].current, s0.reserved_bytes[LOOM_MEM_ALL].current + (int64_t)(8 * MiB),
                "the freed 8 MiB tensor was not cached");
  size_t fr = 0, tot = 0;
  cr_assert_eq(cudaMemGetInfo(&fr, &tot), cudaSuccess);
  void *filler = NULL;
  size_t want = fr > 512 * MiB ? fr - 256 * MiB : 0;
  while (want > 0 && cudaMalloc(&filler, want) != cudaSuccess) {
    (void)cudaGetLastError();
    filler = NULL;
    want = want > 64 * MiB ? want - 64 * MiB : 0;
  }
  size_t left = 0;
  cr_assert_eq(cudaMemGetInfo(&left, &tot), cudaSuccess);
  cr_assert(left >= 16 * MiB && left <= 2 * GiB, "could not leave a few hundred MiB free: %zu bytes free", left);
  int64_t n = (int64_t)(2 * left / sizeof(float));
  tk_assert_fails(loom_zeros(1, &n, LOOM_F32, gpu()), LOOM_ERR_OOM, "cuda:0");
  loom_memory_stats st = stats();
  cr_assert_eq(st.reserved_bytes[LOOM_MEM_ALL].current, s0.reserved_bytes[LOOM_MEM_ALL].current,
               "granules of the failed map stay counted as mapped, or the retry kept cache: %lld bytes reserved, the "
               "live blocks need %lld", (long long)st.reserved_bytes[LOOM_MEM_ALL].current,
               (long long)s0.reserved_bytes[LOOM_MEM_ALL].current);
  cr_assert_eq(st.segments[LOOM_MEM_ALL].current, s0.segments[LOOM_MEM_ALL].current,
               "a range was left behind: %lld ranges, %lld before", (long long)st.segments[LOOM_MEM_ALL].current,
               (long long)s0.segments[LOOM_MEM_ALL].current);
  cr_assert_geq(st.num_alloc_retries, 1, "the cached 8 MiB made no retry");
  size_t after = 0;
  cr_assert_eq(cudaMemGetInfo(&after, &tot), cudaSuccess);
  cr_assert_geq(after + 16 * MiB, left, "the granules mapped before the failure were not unmapped: %zu bytes free "
                "before, %zu after", left, after);
  int64_t h = (int64_t)(left / 2 / sizeof(float));
  loom_tensor *t = loom_full(1, &h, 1.0, LOOM_F32, gpu());
  cr_assert_not_null(t, "half of the free memory after the failed map: %s", loom_last_error());
  loom_tensor *sum = loom_sum_all(t);
  double v = 0;
  cr_assert_eq(loom_item(sum, &v), LOOM_OK, "%s", loom_last_error());
  cr_assert(fabs(v - (double)h) <= 1e-4 * (double)h, "sum %g of %lld ones", v, (long long)h);
  loom_tensor_release(sum);
  loom_tensor_release(t);
  loom_tensor_release(w);
  if (filler) cudaFree(filler);
  cr_assert_eq(loom_empty_cache(gpu()), LOOM_OK, "%s", loom_last_error());
  st = stats();
  cr_assert_eq(st.allocated_bytes[LOOM_MEM_ALL].current, base.allocated_bytes[LOOM_MEM_ALL].current,
               "the test's tensors are all freed");
  cr_assert_eq(st.reserved_bytes[LOOM_MEM_ALL].current, base.reserved_bytes[LOOM_MEM_ALL].current,
               "empty_cache kept %lld bytes over the workspace's %lld", (long long)st.reserved_bytes[LOOM_MEM_ALL].current,
               (long long)base.reserved_bytes[LOOM_MEM_ALL].current);
  cr_assert_eq(st.segments[LOOM_MEM_ALL].current, base.segments[LOOM_MEM_ALL].current, "empty_cache kept an address range");
#endif
}
