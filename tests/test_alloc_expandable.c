/* test_alloc_expandable.c — expandable segments: the pool logic over the
 * fake provider's virtual memory (2 MiB granules like CUDA's, addresses and
 * mapped intervals checked by the fake), and the same pool over real mmap'd
 * CPU memory (pages committed and given back, observed with mincore).
 * Growing in place, unmapping free granules on empty_cache / OOM retry /
 * garbage collection, one range per (stream, size class), the limit, fault
 * injection, errors, configuration, and the CPU device pool. The randomized
 * shadow-model run is in test_alloc_stress.c. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "alloc/alloc_internal.h"
#include "alloc/pool.h"
#include "support/provider_fake.h"
#include "support/testkit.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define S(n) ((loom_stream *)(uintptr_t)(0x1000 * (n)))

static loom_fake *F;
static loom_pool *P;

static void make_pool(size_t capacity, size_t limit, double gc) {
  F = loom_fake_create(capacity);
  cr_assert_not_null(F);
  loom_pool_config c;
  loom_pool_config_init(&c, "fake:x");
  c.expandable = 1;
  c.limit = limit;
  c.gc_threshold = gc;
  cr_assert_eq(loom_pool_create(loom_fake_provider(F), &c, &P), LOOM_OK, "%s", loom_last_error());
}

static void check(void) {
  char err[512];
  cr_assert(loom_pool_verify(P, err, sizeof err), "pool inconsistent: %s", err);
}

static void teardown(void) {
  if (P) check();
  loom_pool_destroy(P);
  if (F) {
    cr_assert_eq(loom_fake_live_bytes(F), 0, "destroy must unmap everything");
    cr_assert_eq(loom_fake_live_segments(F), 0, "destroy must give every range back");
  }
  loom_fake_destroy(F);
  P = NULL;
  F = NULL;
}

static void *alloc_ok(size_t n, loom_stream *s) {
  void *p = NULL;
  cr_assert_eq(loom_pool_malloc(P, n, s, &p), LOOM_OK, "malloc(%zu): %s", n, loom_last_error());
  return p;
}

static loom_memory_stats stats(void) {
  loom_memory_stats s;
  s.struct_size = sizeof s;
  loom_pool_stats(P, &s);
  return s;
}

static loom_segment_info seg_of(void *p, loom_block_info *blocks, int max) {
  loom_segment_info si;
  cr_assert(loom_pool_debug_segment(P, (uintptr_t)p, &si, blocks, max), "no segment holds %p", p);
  return si;
}

TestSuite(alloc_expandable, .fini = teardown);

Test(alloc_expandable, a_second_request_grows_the_same_range_in_place) {
  make_pool(1024 * MiB, 0, 0);
  char *a = alloc_ok(2 * MiB + 512 * KiB, S(1));
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(4 * MiB), "2.5 MiB maps two 2 MiB granules");
  char *b = alloc_ok(3 * MiB, S(1));
  cr_assert_eq(b, a + 2 * MiB + 512 * KiB, "the free tail and the new granule merge: b follows a");
  loom_memory_stats s = stats();
  cr_assert_eq(s.reserved_bytes[0].current, (int64_t)(6 * MiB), "only one more granule was mapped");
  cr_assert_eq(s.segments[0].current, 1);
  cr_assert_eq(s.num_device_allocs, 2);
  cr_assert_eq(loom_fake_maps(F), 2);
  loom_block_info blk[8];
  loom_segment_info si = seg_of(a, blk, 8);
  cr_assert(si.expandable);
  cr_assert_eq(si.mapped, 6 * MiB);
  cr_assert_eq(si.size, 1024 * MiB, "the range is the device's size");
  cr_assert_eq(si.nblocks, 3);
  cr_assert_eq(blk[2].state, LOOM_BLOCK_UNMAPPED);
  cr_assert_eq(loom_fake_mapped_within(F, si.base, si.size), 6 * MiB);
  check();
  /* Freed, the two blocks merge and serve a 6 MiB request without a map. */
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  cr_assert_eq(loom_pool_free(P, b), LOOM_OK);
  char *c = alloc_ok(6 * MiB, S(1));
  cr_assert_eq(c, a);
  cr_assert_eq(stats().num_device_allocs, 2);
  cr_assert_eq(loom_pool_free(P, c), LOOM_OK);
}

Test(alloc_expandable, ordinary_segments_reserve_a_second_segment_for_the_same_requests) {
  /* What expandable segments save: on ordinary segments a 2.5 MiB and an
   * 18 MiB request take a 20 MiB and an 18 MiB segment (the free 17.5 MiB of
   * the first cannot hold the second), where one range maps 22 MiB. */
  F = loom_fake_create(1024 * MiB);
  loom_pool_config c;
  loom_pool_config_init(&c, "fake:x");
  cr_assert_eq(loom_pool_create(loom_fake_provider(F), &c, &P), LOOM_OK);
  void *a = alloc_ok(2 * MiB + 512 * KiB, S(1)), *b = alloc_ok(18 * MiB, S(1));
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(38 * MiB));
  loom_pool_free(P, a);
  loom_pool_free(P, b);
}

Test(alloc_expandable, empty_cache_unmaps_whole_free_granules_and_keeps_live_blocks) {
  make_pool(1024 * MiB, 0, 0);
  char *a = alloc_ok(2 * MiB + 512 * KiB, S(1));
  char *b = alloc_ok(3 * MiB, S(1));
  loom_block_info blk[8];
  uintptr_t base = seg_of(a, blk, 8).base;
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  cr_assert_eq(loom_pool_empty_cache(P), LOOM_OK);
  /* [0, 2.5 MiB) was free: its whole granule [0, 2 MiB) goes back. */
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(4 * MiB));
  cr_assert_eq(loom_fake_mapped_within(F, base, 2 * MiB), 0);
  cr_assert_eq(loom_fake_mapped_within(F, base + 2 * MiB, 4 * MiB), 4 * MiB, "b and its granules stay mapped");
  loom_segment_info si = seg_of(b, blk, 8);
  cr_assert_eq(si.nblocks, 4);
  cr_assert_eq(blk[0].state, LOOM_BLOCK_UNMAPPED);
  cr_assert_eq(blk[1].state, LOOM_BLOCK_FREE);
  cr_assert_eq(blk[1].size, 512 * KiB);
  cr_assert_eq(blk[2].state, LOOM_BLOCK_ALLOCATED);
  cr_assert_eq(blk[3].state, LOOM_BLOCK_UNMAPPED);
  cr_assert_eq(stats().num_device_frees, 1);
  check();
  /* A 1.5 MiB request maps the hole again and merges with its free rest. */
  char *c = alloc_ok(MiB + 512 * KiB, S(1));
  cr_assert_eq((uintptr_t)c, base);
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(6 * MiB));
  check();
  cr_assert_eq(loom_pool_free(P, b), LOOM_OK);
  cr_assert_eq(loom_pool_free(P, c), LOOM_OK);
  cr_assert_eq(loom_pool_empty_cache(P), LOOM_OK);
  loom_memory_stats s = stats();
  cr_assert_eq(s.reserved_bytes[0].current, 0);
  cr_assert_eq(s.segments[0].current, 0, "a range with nothing mapped is given back");
  cr_assert_eq(loom_fake_live_bytes(F), 0);
  cr_assert_eq(loom_fake_live_segments(F), 0);
}

Test(alloc_expandable, streams_get_their_own_ranges_and_oom_unmaps_another_streams_free_granules) {
  make_pool(8 * MiB, 0, 0);
  void *a = alloc_ok(6 * MiB, S(1));
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  /* Stream 2 cannot reuse stream 1's cached memory in place; mapping 6 MiB
   * more does not fit in 8 MiB until stream 1's free granules are unmapped. */
  void *b = alloc_ok(6 * MiB, S(2));
  loom_memory_stats s = stats();
  cr_assert_eq(s.num_alloc_retries, 1);
  cr_assert_eq(s.num_cross_stream_reuses, 0);
  cr_assert_eq(s.reserved_bytes[0].current, (int64_t)(6 * MiB));
  cr_assert_eq(s.segments[0].current, 1, "stream 1's emptied range was given back");
  loom_block_info blk[4];
  cr_assert_eq(seg_of(b, blk, 4).stream, S(2));
  check();
  cr_assert_eq(loom_pool_free(P, b), LOOM_OK);
}

Test(alloc_expandable, the_limit_caps_mapped_bytes) {
  make_pool(1024 * MiB, 4 * MiB, 0);
  void *a = alloc_ok(3 * MiB, S(1));
  void *x = NULL;
  cr_assert_eq(loom_pool_malloc(P, MiB + 512 * KiB, S(1), &x), LOOM_ERR_OOM);
  cr_assert_null(x);
  cr_assert(strstr(loom_last_error(), "growing an expandable segment by 2.00 MiB failed"), "%s", loom_last_error());
  cr_assert(strstr(loom_last_error(), "the limit of 4.00 MiB would be exceeded"), "%s", loom_last_error());
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(4 * MiB));
  check();
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  x = alloc_ok(MiB + 512 * KiB, S(1));
  cr_assert_eq(x, a, "the freed block serves it");
  cr_assert_eq(loom_pool_free(P, x), LOOM_OK);
}

Test(alloc_expandable, a_failed_map_is_retried_after_unmapping_cache) {
  make_pool(1024 * MiB, 0, 0);
  loom_fake_fail_nth(F, 2);  /* the reservation succeeds, the map fails */
  void *x = NULL;
  cr_assert_eq(loom_pool_malloc(P, 4 * MiB, S(1), &x), LOOM_ERR_OOM, "nothing cached to give back");
  cr_assert(strstr(loom_last_error(), "injected failure mapping"), "%s", loom_last_error());
  cr_assert_eq(stats().segments[0].current, 0, "the range reserved for the failed map is given back");
  check();
  void *a = alloc_ok(4 * MiB, S(1));
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  loom_fake_fail_nth(F, 1);
  void *b = alloc_ok(6 * MiB, S(1));
  cr_assert_eq(stats().num_alloc_retries, 1);
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(6 * MiB));
  check();
  cr_assert_eq(loom_pool_free(P, b), LOOM_OK);
}

/* What the first GPU run's expandable OOM test had not allowed for: a large
 * request that fails even after its own class's cache is unmapped makes
 * the retry give back every other class's free granules too (here the
 * small range, emptied and given back), so after the OOM the pool reserves
 * exactly what its live blocks need, and the failed maps left nothing
 * mapped on the device. */
Test(alloc_expandable, a_failed_growth_leaves_only_the_live_blocks_mapped) {
  make_pool(16 * MiB, 0, 0);
  void *s = alloc_ok(4 * KiB, S(1));  /* small range: one 2 MiB granule */
  void *w = alloc_ok(4 * MiB, S(1));  /* large range, live */
  void *c = alloc_ok(6 * MiB, S(1));  /* large range, cached once freed */
  cr_assert_eq(loom_pool_free(P, s), LOOM_OK);
  cr_assert_eq(loom_pool_free(P, c), LOOM_OK);
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(12 * MiB));
  cr_assert_eq(stats().segments[0].current, 2);
  void *x = NULL;
  cr_assert_eq(loom_pool_malloc(P, 14 * MiB, S(1), &x), LOOM_ERR_OOM, "4 MiB live + 14 MiB > 16 MiB");
  cr_assert_null(x);
  loom_memory_stats st = stats();
  cr_assert_eq(st.num_alloc_retries, 2, "one retry per class given back (the large cache, then everything)");
  cr_assert_eq(st.num_ooms, 1);
  cr_assert_eq(st.reserved_bytes[0].current, (int64_t)(4 * MiB), "only w stays mapped: %lld",
               (long long)st.reserved_bytes[0].current);
  cr_assert_eq(st.reserved_bytes[LOOM_MEM_SMALL_POOL].current, 0);
  cr_assert_eq(st.segments[0].current, 1, "the emptied small range was given back");
  cr_assert_eq(loom_fake_live_bytes(F), 4 * MiB, "the failed maps left nothing mapped");
  cr_assert_eq(loom_fake_live_segments(F), 1);
  check();
  cr_assert_eq(loom_pool_free(P, w), LOOM_OK);
}

Test(alloc_expandable, garbage_collection_unmaps_the_least_recently_freed_granules_first) {
  make_pool(64 * MiB, 0, 0.4);  /* collect above 25.6 MiB */
  char *a = alloc_ok(10 * MiB, S(1)), *b = alloc_ok(10 * MiB, S(1)), *c = alloc_ok(10 * MiB, S(1));
  cr_assert_eq(b, a + 10 * MiB);
  cr_assert_eq(c, b + 10 * MiB);
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  cr_assert_eq(loom_pool_free(P, c), LOOM_OK);
  /* 12 MiB fits nowhere: growing c's free tail by 2 MiB would pass the
   * threshold, so a (freed first) is unmapped, not c. */
  char *d = alloc_ok(12 * MiB, S(1));
  cr_assert_eq(d, c);
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(22 * MiB));
  cr_assert_eq(loom_fake_mapped_within(F, (uintptr_t)a, 10 * MiB), 0);
  check();
  loom_pool_free(P, b);
  loom_pool_free(P, d);
}

Test(alloc_expandable, compact_mode_unmaps_the_least_recently_freed_granules_before_growing) {
  F = loom_fake_create(1024 * MiB);
  loom_pool_config c;
  loom_pool_config_init(&c, "fake:x");
  c.expandable = 2;
  cr_assert_eq(loom_pool_create(loom_fake_provider(F), &c, &P), LOOM_OK, "%s", loom_last_error());
  char *a = alloc_ok(4 * MiB, S(1)), *b = alloc_ok(4 * MiB, S(1));
  /* Small blocks fill 4 MiB of the small range; freed, they are stale. (Had
   * they been freed before a grew, a's growth would have unmapped them.) */
  void *sm[3];
  for (int i = 0; i < 3; i++) sm[i] = alloc_ok(MiB, S(1));
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(12 * MiB));
  for (int i = 0; i < 3; i++) loom_pool_free(P, sm[i]);
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  /* 6 MiB fits in no free block. Before mapping 6 MiB, 6 MiB of free
   * granules go back, oldest first: the small range (then given back) and
   * 2 MiB of a. */
  char *d = alloc_ok(6 * MiB, S(1));
  cr_assert_eq(d, b + 4 * MiB);
  loom_memory_stats s = stats();
  cr_assert_eq(s.reserved_bytes[0].current, (int64_t)(12 * MiB), "no more than before: 4 (b) + 6 (d) + 2 (rest of a)");
  cr_assert_eq(s.segments[0].current, 1, "the emptied small range was given back");
  cr_assert_eq(loom_fake_mapped_within(F, (uintptr_t)a, 4 * MiB), 2 * MiB);
  check();
  loom_pool_free(P, b);
  loom_pool_free(P, d);
}

Test(alloc_expandable, small_and_large_requests_use_separate_ranges) {
  make_pool(1024 * MiB, 0, 0);
  void *s1 = alloc_ok(4 * KiB, S(1)), *l1 = alloc_ok(4 * MiB, S(1));
  loom_block_info blk[4];
  loom_segment_info a = seg_of(s1, blk, 4), b = seg_of(l1, blk, 4);
  cr_assert_neq(a.base, b.base);
  cr_assert_eq(a.kind, LOOM_POOL_SMALL);
  cr_assert_eq(b.kind, LOOM_POOL_LARGE);
  cr_assert_eq(a.mapped, 2 * MiB);
  cr_assert_eq(stats().reserved_bytes[LOOM_MEM_SMALL_POOL].current, (int64_t)(2 * MiB));
  cr_assert_eq(stats().reserved_bytes[LOOM_MEM_LARGE_POOL].current, (int64_t)(4 * MiB));
  loom_pool_free(P, s1);
  loom_pool_free(P, l1);
}

Test(alloc_expandable, summary_and_snapshot_show_ranges_and_unmapped_blocks) {
  make_pool(1024 * MiB, 0, 0);
  void *a = alloc_ok(3 * MiB, S(1)), *b = alloc_ok(5 * MiB, S(1));
  loom_pool_free(P, a);
  loom_pool_empty_cache(P);
  char *sum = loom_pool_summary(P), *js = loom_pool_snapshot_json(P);
  cr_assert(strstr(sum, "expandable segments, 2.00 MiB granules"), "%s", sum);
  cr_assert(strstr(js, "\"expandable_segments\":true"), "%s", js);
  cr_assert(strstr(js, "\"expandable\":true"), "%s", js);
  cr_assert(strstr(js, "\"state\":\"unmapped\""), "%s", js);
  cr_assert(strstr(js, "\"mapped\":6291456"), "%s", js);
  free(sum);
  free(js);
  loom_pool_free(P, b);
}

Test(alloc_expandable, needs_a_provider_with_virtual_memory_and_no_preallocation) {
  loom_fake *f = loom_fake_create(64 * MiB);
  loom_provider plain = *loom_fake_provider(f);
  plain.va_map = NULL;
  loom_pool_config c;
  loom_pool_config_init(&c, "fake:plain");
  c.expandable = 1;
  loom_pool *p = NULL;
  tk_assert_error(loom_pool_create(&plain, &c, &p), LOOM_ERR_UNSUPPORTED, "fake:plain", "expandable_segments",
                  "virtual memory");
  cr_assert_null(p);
  c.preallocate = 0.5;
  tk_assert_error(loom_pool_create(loom_fake_provider(f), &c, &p), LOOM_ERR_INVALID_ARG, "exclude each other");
  cr_assert_null(p);
  loom_fake_destroy(f);
}

/* ---- real memory: mmap'd CPU ranges -------------------------------------- */

static size_t resident(void *addr, size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = (n + page - 1) / page, r = 0;
  unsigned char *v = malloc(pages);
  cr_assert_eq(mincore(addr, n, v), 0, "mincore(%p, %zu): %s", addr, n, strerror(errno));
  for (size_t i = 0; i < pages; i++) r += v[i] & 1;
  free(v);
  return r * page;
}

Test(alloc_expandable, cpu_ranges_commit_pages_and_give_them_back) {
  loom_pool_config c;
  loom_pool_config_init(&c, "cpu:x");
  c.expandable = 1;
  cr_assert_eq(loom_pool_create(loom_provider_cpu(), &c, &P), LOOM_OK, "%s", loom_last_error());
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char *big = alloc_ok(8 * MiB + 100, NULL);
  memset(big, 7, 8 * MiB + 100);
  char *keep = alloc_ok(2 * MiB, NULL);  /* keeps the large range alive */
  memset(keep, 2, 2 * MiB);
  char *small = alloc_ok(100, NULL);
  memset(small, 1, 100);
  size_t big_pages = (8 * MiB + 512 + page - 1) / page * page;
  cr_assert_eq(stats().reserved_bytes[LOOM_MEM_LARGE_POOL].current, (int64_t)(big_pages + 2 * MiB),
               "the large range maps whole pages, no more");
  cr_assert_eq(stats().reserved_bytes[LOOM_MEM_SMALL_POOL].current, (int64_t)page);
  cr_assert_geq(resident(big, 8 * MiB), 8 * MiB - 16 * page, "written pages are resident");
  check();
  cr_assert_eq(loom_pool_free(P, big), LOOM_OK);
  cr_assert_eq(loom_pool_empty_cache(P), LOOM_OK);
  cr_assert_eq(resident(big, 8 * MiB), 0, "given back to the kernel");
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(2 * MiB + page), "keep's pages and small's page stay");
  cr_assert_eq(small[99], 1);
  cr_assert_eq(keep[2 * MiB - 1], 2);
  /* Grow again into the hole: fresh zeroed pages. */
  char *again = alloc_ok(4 * MiB, NULL);
  cr_assert_eq(again, big);
  cr_assert_eq(again[0], 0);
  memset(again, 3, 4 * MiB);
  check();
  loom_pool_free(P, again);
  loom_pool_free(P, keep);
  loom_pool_free(P, small);
  cr_assert_eq(loom_pool_empty_cache(P), LOOM_OK);
  cr_assert_eq(stats().reserved_bytes[0].current, 0);
  cr_assert_eq(stats().segments[0].current, 0);
  unsigned char v[1];
  errno = 0;
  cr_assert(mincore(big, page, v) == -1 && errno == ENOMEM, "the emptied range itself was unmapped");
}

/* ---- configuration --------------------------------------------------------- */

Test(alloc_expandable_config, parses_and_rejects_bad_values_and_combinations) {
  loom_alloc_options o;
  loom_alloc_options_init(&o);
  cr_assert_eq(o.expandable_segments, 0, "off by default");
  cr_assert_eq(loom_alloc_options_parse("expandable_segments:true", &o), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(o.expandable_segments, 1);
  cr_assert_eq(loom_alloc_options_parse("expandable_segments:compact", &o), LOOM_OK);
  cr_assert_eq(o.expandable_segments, 2);
  cr_assert_eq(loom_alloc_options_parse("expandable_segments:false", &o), LOOM_OK);
  cr_assert_eq(o.expandable_segments, 0);
  tk_assert_error(loom_alloc_options_parse("expandable_segments:maybe", &o), LOOM_ERR_INVALID_ARG,
                  "expandable_segments:maybe must be true, false or compact");
  tk_assert_error(loom_alloc_options_parse("expandable_segments:true,preallocate:0.5", &o), LOOM_ERR_INVALID_ARG,
                  "exclude each other");
  tk_assert_error(loom_alloc_options_parse("backend:cuda_async,expandable_segments:true", &o), LOOM_ERR_INVALID_ARG,
                  "cuda_async");
  cr_assert_eq(o.expandable_segments, 0, "options unchanged on error");
  tk_assert_error(loom_alloc_options_parse("expandable:true", &o), LOOM_ERR_INVALID_ARG, "expandable_segments");
}

Test(alloc_expandable_config, the_cpu_device_pool_uses_it_and_it_cannot_change_later) {
  cr_assert_eq(loom_alloc_configure("expandable_segments:true"), LOOM_OK, "%s", loom_last_error());
  int64_t shape[2] = {512, 1024};
  loom_tensor *t = loom_ones(2, shape, LOOM_F32, loom_cpu());
  cr_assert_not_null(t, "%s", loom_last_error());
  double v = 0;
  loom_tensor *s = loom_sum_all(t);
  cr_assert_eq(loom_item(s, &v), LOOM_OK);
  cr_assert_float_eq(v, 512.0 * 1024.0, 0);
  char *js = loom_memory_snapshot_json(loom_cpu());
  cr_assert(strstr(js, "\"expandable_segments\":true"), "%s", js);
  loom_free(js);
  tk_assert_error(loom_alloc_configure(""), LOOM_ERR_STATE, "expandable_segments cannot change");
  loom_tensor_release(s);
  loom_tensor_release(t);
  cr_assert_eq(loom_empty_cache(loom_cpu()), LOOM_OK);
  loom_memory_stats st = {.struct_size = sizeof st};
  cr_assert_eq(loom_memory_stats_get(loom_cpu(), &st), LOOM_OK);
  cr_assert_eq(st.reserved_bytes[0].current, 0);
  tk_leak_check();
}

/* The CUDA tests end with loom_shutdown, after a failed assertion too, so
 * that compute-sanitizer --leak-check sees only what loom lost track of. */
TestSuite(alloc_expandable_cuda, .fini = tk_teardown);

/* Stats of a real device (the public query). */
static loom_memory_stats dev_stats(loom_device dev) {
  loom_memory_stats st = {.struct_size = sizeof st};
  cr_assert_eq(loom_memory_stats_get(dev, &st), LOOM_OK, "%s", loom_last_error());
  return st;
}

/* The CUDA virtual-memory provider (vmm_cuda.c): a range grows in place by
 * whole granules, the memory is usable by kernels and copies, and
 * empty-cache unmaps it. Two other users share the allocator: the first
 * CUDA op takes the CUDA context's 32 MiB GEMM workspace from it (large
 * pool, cuda_context.c, live until loom_shutdown), and every fill a 0-dim
 * source tensor (small pool, its own range). The first GPU run counted
 * both (2 segments, and a workspace that empty_cache cannot unmap), so the
 * context is made first and a, b are measured against that baseline: one
 * large range holds the workspace, a and b, b right after a. Skips visibly
 * without a GPU (fails under LOOM_TEST_DEVICE=cuda). */
Test(alloc_expandable_cuda, vmm_ranges_grow_in_place_hold_data_and_unmap) {
  tk_require_device(loom_cuda(0));
  loom_device dev = loom_cuda(0);
  loom_alloc_options o;
  loom_alloc_options_init(&o);
  o.expandable_segments = 1;
  cr_assert_eq(loom_alloc_set_device_config(dev, &o), LOOM_OK, "%s", loom_last_error());
  int64_t one = 1;
  loom_tensor *warm = loom_zeros(1, &one, LOOM_F32, dev);  /* makes the CUDA context (its workspace) */
  cr_assert_not_null(warm, "%s", loom_last_error());
  loom_tensor_release(warm);
  cr_assert_eq(loom_empty_cache(dev), LOOM_OK, "%s", loom_last_error());
  const int L = LOOM_MEM_LARGE_POOL;
  loom_memory_stats s0 = dev_stats(dev);
  cr_assert_leq(s0.segments[L].current, 1, "%lld large ranges before a and b", (long long)s0.segments[L].current);
  int64_t sa[1] = {3 * 1024 * 1024 / 4}, sb[1] = {5 * 1024 * 1024 / 4};
  loom_tensor *a = loom_full(1, sa, 2.0, LOOM_F32, dev), *b = loom_full(1, sb, 3.0, LOOM_F32, dev);
  cr_assert(a && b, "%s", loom_last_error());
  loom_memory_stats st = dev_stats(dev);
  cr_assert_eq(st.segments[L].current, 1, "b grew a's range instead of a new segment: %lld large ranges (%lld before)",
               (long long)st.segments[L].current, (long long)s0.segments[L].current);
  uintptr_t pa = (uintptr_t)loom_tensor_data(a), pb = (uintptr_t)loom_tensor_data(b);
  cr_assert(pb > pa && pb - pa < 5 * MiB, "b (%#lx) does not follow a (%#lx) in the same range", (unsigned long)pb,
            (unsigned long)pa);
  int64_t grew = st.reserved_bytes[L].current - s0.reserved_bytes[L].current;
  cr_assert(grew >= (int64_t)(8 * MiB) && grew <= (int64_t)(8 * MiB + 2 * MiB),
            "a and b mapped %lld bytes: granule-rounded 8 MiB, not a 20 MiB segment", (long long)grew);
  loom_tensor *sa_sum = loom_sum_all(a), *sb_sum = loom_sum_all(b);
  double va = 0, vb = 0;
  cr_assert_eq(loom_item(sa_sum, &va), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_item(sb_sum, &vb), LOOM_OK, "%s", loom_last_error());
  cr_assert_float_eq(va, 2.0 * (double)sa[0], 0);
  cr_assert_float_eq(vb, 3.0 * (double)sb[0], 0);
  loom_tensor_release(sa_sum);
  loom_tensor_release(sb_sum);
  loom_tensor_release(a);
  loom_tensor_release(b);
  cr_assert_eq(loom_empty_cache(dev), LOOM_OK, "%s", loom_last_error());
  st = dev_stats(dev);
  cr_assert_eq(st.allocated_bytes[0].current, s0.allocated_bytes[0].current, "the test's tensors are all freed");
  cr_assert_eq(st.reserved_bytes[0].current, s0.reserved_bytes[0].current,
               "empty_cache unmapped every granule of a and b: %lld reserved, %lld before them",
               (long long)st.reserved_bytes[0].current, (long long)s0.reserved_bytes[0].current);
  cr_assert_eq(st.segments[0].current, s0.segments[0].current, "and gave back the small range the fills used");
}

/* The CUDA provider gives each range's address space back
 * (cuMemAddressFree) when empty_cache unmaps its last granule (issue 22):
 * 8192 rounds of allocate / free / empty_cache each reserve a range as large
 * as the device's memory (80 GiB on an H100: 640 TiB in all, more than a 47-
 * or 49-bit address space holds, so leaked ranges make a later round fail),
 * and every round must succeed with no range left over. Skips visibly
 * without a GPU. */
Test(alloc_expandable_cuda, empty_cache_gives_the_address_range_back) {
  tk_require_device(loom_cuda(0));
  loom_device dev = loom_cuda(0);
  loom_alloc_options o;
  loom_alloc_options_init(&o);
  o.expandable_segments = 1;
  cr_assert_eq(loom_alloc_set_device_config(dev, &o), LOOM_OK, "%s", loom_last_error());
  loom_memory_stats st = {.struct_size = sizeof st};
  for (int k = 0; k < 8192; k++) {
    void *p = NULL;
    cr_assert_eq(loom_alloc_malloc(dev, MiB, NULL, &p), LOOM_OK, "round %d: %s", k, loom_last_error());
    if (k == 0) {
      cr_assert_eq(loom_memory_stats_get(dev, &st), LOOM_OK);
      cr_assert_eq(st.segments[0].current, 1);
    }
    loom_alloc_free(dev, p);
    cr_assert_eq(loom_empty_cache(dev), LOOM_OK, "round %d: %s", k, loom_last_error());
  }
  cr_assert_eq(loom_memory_stats_get(dev, &st), LOOM_OK);
  cr_assert_eq(st.segments[0].current, 0, "a range outlived empty_cache");
  cr_assert_eq(st.reserved_bytes[0].current, 0);
  cr_assert_eq(st.num_device_frees, 8192, "one unmap per round");
}
