/* test_alloc_pool.c — the caching allocator's pool logic over the fake
 * provider (simulated addresses, capacity, fault injection, events that
 * complete when the test says): size edges, split and coalesce,
 * max_split_size, stream-ordered and cross-stream reuse, limits, OOM retry
 * order, preallocation, garbage collection, statistics and snapshots, and
 * LOOM_ALLOC_CONF parsing. Every test ends with a full consistency check. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"
#include "alloc/pool.h"
#include "support/provider_fake.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define S(n) ((loom_stream *)(uintptr_t)(0x1000 * (n)))

static loom_fake *F;
static loom_pool *P;

static void make_pool(size_t capacity, const loom_pool_config *cfg) {
  F = loom_fake_create(capacity);
  cr_assert_not_null(F);
  loom_pool_config c;
  if (cfg) c = *cfg;
  else loom_pool_config_init(&c, "fake:0");
  cr_assert_eq(loom_pool_create(loom_fake_provider(F), &c, &P), LOOM_OK, "%s", loom_last_error());
}

static void check(void) {
  char err[512];
  cr_assert(loom_pool_verify(P, err, sizeof err), "pool inconsistent: %s", err);
}

static void teardown(void) {
  if (P) check();
  loom_pool_destroy(P);
  if (F) cr_assert_eq(loom_fake_live_bytes(F), 0, "destroy must return every segment");
  loom_fake_destroy(F);
  P = NULL;
  F = NULL;
}

static void *alloc_ok(size_t n, loom_stream *s) {
  void *p = NULL;
  cr_assert_eq(loom_pool_malloc(P, n, s, &p), LOOM_OK, "malloc(%zu): %s", n, loom_last_error());
  cr_assert_not_null(p);
  return p;
}

static loom_memory_stats stats(void) {
  loom_memory_stats s;
  s.struct_size = sizeof s;
  loom_pool_stats(P, &s);
  return s;
}

/* Size and state of the block at p. */
static loom_block_info block_at(void *p, loom_segment_info *seg) {
  static loom_block_info blocks[8192];
  loom_segment_info si;
  cr_assert(loom_pool_debug_segment(P, (uintptr_t)p, &si, blocks, 8192), "no segment holds %p", p);
  if (seg) *seg = si;
  for (int i = 0; i < si.nblocks; i++)
    if (blocks[i].addr == (uintptr_t)p) return blocks[i];
  cr_assert_fail("no block starts at %p", p);
  return blocks[0];
}

TestSuite(alloc_pool, .fini = teardown);

Test(alloc_pool, rounding_and_segment_sizes) {
  cr_assert_eq(loom_pool_round_size(0), 512);
  cr_assert_eq(loom_pool_round_size(1), 512);
  cr_assert_eq(loom_pool_round_size(511), 512);
  cr_assert_eq(loom_pool_round_size(512), 512);
  cr_assert_eq(loom_pool_round_size(513), 1024);
  cr_assert_eq(loom_pool_round_size(MiB - 1), MiB);
  cr_assert_eq(loom_pool_round_size(MiB), MiB);
  cr_assert_eq(loom_pool_round_size(MiB + 1), MiB + 512);
  cr_assert_eq(loom_pool_segment_size(MiB), 2 * MiB, "1 MiB is the largest small-pool request");
  cr_assert_eq(loom_pool_segment_size(MiB + 512), 20 * MiB);
  cr_assert_eq(loom_pool_segment_size(10 * MiB - 512), 20 * MiB);
  cr_assert_eq(loom_pool_segment_size(loom_pool_round_size(10 * MiB - 1)), 10 * MiB,
               "10 MiB - 1 rounds to 10 MiB, which is no longer under 10 MiB");
  cr_assert_eq(loom_pool_segment_size(loom_pool_round_size(10 * MiB + 1)), 12 * MiB);
}

Test(alloc_pool, size_edges_land_in_the_right_pool) {
  make_pool(1024 * MiB, NULL);
  struct { size_t n, block, seg; int kind; } cases[] = {
      {0, 512, 2 * MiB, LOOM_POOL_SMALL},           {511, 512, 2 * MiB, LOOM_POOL_SMALL},
      {512, 512, 2 * MiB, LOOM_POOL_SMALL},         {513, 1024, 2 * MiB, LOOM_POOL_SMALL},
      {MiB - 1, MiB, 2 * MiB, LOOM_POOL_SMALL},     {MiB, MiB, 2 * MiB, LOOM_POOL_SMALL},
      {MiB + 1, MiB + 512, 20 * MiB, LOOM_POOL_LARGE}, {10 * MiB - 1, 10 * MiB, 10 * MiB, LOOM_POOL_LARGE},
      {10 * MiB, 10 * MiB, 10 * MiB, LOOM_POOL_LARGE}, {10 * MiB + 1, 10 * MiB + 512, 12 * MiB, LOOM_POOL_LARGE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    /* A fresh stream each time, so each request starts its own segment. */
    void *p = alloc_ok(cases[i].n, S(i + 1));
    loom_segment_info seg;
    loom_block_info b = block_at(p, &seg);
    cr_assert_eq(b.size, cases[i].block, "n=%zu: block %zu", cases[i].n, b.size);
    cr_assert_eq(b.requested, cases[i].n);
    cr_assert_eq(seg.size, cases[i].seg, "n=%zu: segment %zu", cases[i].n, seg.size);
    cr_assert_eq(seg.kind, cases[i].kind, "n=%zu", cases[i].n);
    check();
  }
  loom_memory_stats s = stats();
  cr_assert_eq(s.allocations[LOOM_MEM_SMALL_POOL].current, 6);
  cr_assert_eq(s.allocations[LOOM_MEM_LARGE_POOL].current, 4);
  cr_assert_eq(s.requested_bytes[0].current, (int64_t)(0 + 511 + 512 + 513 + (MiB - 1) + MiB + (MiB + 1) +
                                                       (10 * MiB - 1) + 10 * MiB + (10 * MiB + 1)));
}

Test(alloc_pool, zero_byte_allocations_are_unique) {
  make_pool(64 * MiB, NULL);
  void *a = alloc_ok(0, S(1)), *b = alloc_ok(0, S(1));
  cr_assert_neq(a, b);
  cr_assert_eq((uintptr_t)b - (uintptr_t)a, 512, "consecutive carving from one small segment");
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  cr_assert_eq(loom_pool_free(P, b), LOOM_OK);
}

Test(alloc_pool, small_pool_splits_down_to_512_and_reuses_exact_fit) {
  make_pool(64 * MiB, NULL);
  void *a = alloc_ok(MiB, S(1));
  void *b = alloc_ok(MiB - 512, S(1));
  cr_assert_eq((uintptr_t)b, (uintptr_t)a + MiB);
  loom_memory_stats s = stats();
  cr_assert_eq(s.inactive_split_bytes[0].current, 512, "a 512-byte remainder is kept as a free block");
  void *c = alloc_ok(1, S(1));
  cr_assert_eq((uintptr_t)c, (uintptr_t)b + MiB - 512, "exact fit takes the last 512 bytes");
  s = stats();
  cr_assert_eq(s.inactive_split_bytes[0].current, 0);
  cr_assert_eq(s.segments[0].current, 1);
  cr_assert_eq(s.num_device_allocs, 1);
  cr_assert_eq(s.num_cache_hits, 2);
}

Test(alloc_pool, large_pool_splits_only_above_1MiB_remaining) {
  make_pool(256 * MiB, NULL);
  void *a = alloc_ok(19 * MiB, S(1));
  cr_assert_eq(block_at(a, NULL).size, 20 * MiB, "1 MiB remaining is not worth a split");
  void *b = alloc_ok(19 * MiB - 512, S(2));
  cr_assert_eq(block_at(b, NULL).size, 19 * MiB - 512, "1 MiB + 512 remaining is split off");
  loom_memory_stats s = stats();
  cr_assert_eq(s.inactive_split_bytes[LOOM_MEM_LARGE_POOL].current, (int64_t)(MiB + 512));
  cr_assert_eq(s.allocated_bytes[0].current, (int64_t)(39 * MiB - 512));
}

Test(alloc_pool, free_coalesces_with_both_neighbours) {
  make_pool(64 * MiB, NULL);
  void *a = alloc_ok(4096, S(1)), *b = alloc_ok(8192, S(1)), *c = alloc_ok(4096, S(1));
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  check();
  cr_assert_eq(loom_pool_free(P, c), LOOM_OK, "c merges with the free tail");
  check();
  loom_segment_info seg;
  block_at(b, &seg);
  cr_assert_eq(seg.nblocks, 3, "a | b | (c + tail)");
  cr_assert_eq(loom_pool_free(P, b), LOOM_OK, "b merges both ways");
  block_at(a, &seg);
  cr_assert_eq(seg.nblocks, 1, "the segment is one free block again");
  loom_memory_stats s = stats();
  cr_assert_eq(s.inactive_split_bytes[0].current, 0);
  cr_assert_eq(s.active_bytes[0].current, 0);
  cr_assert_eq(s.reserved_bytes[0].current, (int64_t)(2 * MiB));
  void *d = alloc_ok(2 * 4096 + 8192, S(1));
  cr_assert_eq(d, a, "the merged space is reused from its start");
}

Test(alloc_pool, max_split_size_edges) {
  loom_pool_config c;
  loom_pool_config_init(&c, "fake:0");
  c.max_split_size = 40 * MiB;
  make_pool(1024 * MiB, &c);
  void *a = alloc_ok(40 * MiB - 512, S(1));
  cr_assert_eq(block_at(a, NULL).size, 40 * MiB, "just under max_split_size: 512 B remaining is not split");
  void *x = alloc_ok(80 * MiB, S(1));
  cr_assert_eq(block_at(x, NULL).size, 80 * MiB);
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  cr_assert_eq(loom_pool_free(P, x), LOOM_OK);
  /* Cached: 40 MiB and 80 MiB blocks, both oversize. */
  void *b = alloc_ok(30 * MiB, S(1));
  cr_assert_neq(b, a, "requests under max_split_size never take an oversize block");
  cr_assert_eq(block_at(b, NULL).size, 30 * MiB);
  void *d = alloc_ok(40 * MiB, S(1));
  cr_assert_eq(d, a, "a request at max_split_size reuses the 40 MiB block whole");
  cr_assert_eq(block_at(d, NULL).size, 40 * MiB);
  int64_t dev_allocs = stats().num_device_allocs;
  void *e = alloc_ok(60 * MiB, S(1));
  cr_assert_neq(e, x, "80 MiB is not within 20 MiB of 60 MiB");
  cr_assert_eq(stats().num_device_allocs, dev_allocs + 1);
  void *f = alloc_ok(60 * MiB + 512, S(1));
  cr_assert_eq(f, x, "80 MiB is within 20 MiB of 60 MiB + 512");
  cr_assert_eq(block_at(f, NULL).size, 80 * MiB, "oversize blocks are never split");
}

Test(alloc_pool, blocks_are_reused_on_their_stream) {
  make_pool(64 * MiB, NULL);
  void *keep = alloc_ok(4096, S(1));
  void *a = alloc_ok(4096, S(1));
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  void *b = alloc_ok(4096, S(1));
  cr_assert_eq(b, a, "same stream: immediate reuse");
  cr_assert_eq(loom_pool_free(P, b), LOOM_OK);
  void *c = alloc_ok(4096, S(2));
  cr_assert_neq(c, a, "another stream must not get a block of a partly used segment");
  loom_segment_info sa, sc;
  block_at(keep, &sa);
  block_at(c, &sc);
  cr_assert_neq(sa.base, sc.base);
  cr_assert_eq(loom_fake_waits(F), 0);
}

Test(alloc_pool, a_stream_takes_another_streams_unused_segment_with_a_wait) {
  make_pool(64 * MiB, NULL);
  void *a = alloc_ok(4096, S(1));
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  int64_t dev = stats().num_device_allocs;
  void *b = alloc_ok(8192, S(2));
  cr_assert_eq(b, a, "the whole free segment of stream 1 is taken instead of growing");
  cr_assert_eq(stats().num_device_allocs, dev);
  cr_assert_eq(stats().num_cross_stream_reuses, 1);
  cr_assert_eq(loom_fake_waits(F), 1, "stream 2 waits on stream 1 (GPU-side)");
  loom_stream *waiter, *on;
  loom_fake_last_wait(F, &waiter, &on);
  cr_assert_eq(waiter, S(2));
  cr_assert_eq(on, S(1));
  loom_segment_info seg;
  cr_assert_eq(block_at(b, &seg).stream, S(2));
  cr_assert_eq(seg.stream, S(2), "the segment now belongs to stream 2");
}

Test(alloc_pool, recorded_stream_delays_reuse_until_its_event_completes) {
  make_pool(64 * MiB, NULL);
  void *p = alloc_ok(1024, S(1));
  cr_assert_eq(loom_pool_record_stream(P, p, S(2)), LOOM_OK);
  cr_assert_eq(loom_pool_record_stream(P, p, S(1)), LOOM_OK, "its own stream is not an extra use");
  cr_assert_eq(loom_pool_free(P, p), LOOM_OK);
  cr_assert_eq(loom_fake_pending_events(F), 1);
  loom_memory_stats s = stats();
  cr_assert_eq(s.allocated_bytes[0].current, 0);
  cr_assert_eq(s.active_bytes[0].current, 1024, "still active until stream 2 is done");
  void *q = alloc_ok(1024, S(1));
  cr_assert_neq(q, p, "must not hand out a block another stream may still use");
  check();
  loom_fake_complete(F, S(3));
  void *r = alloc_ok(1024, S(1));
  cr_assert_neq(r, p, "completing an unrelated stream changes nothing");
  loom_fake_complete(F, S(2));
  void *t = alloc_ok(1024, S(1));
  cr_assert_eq(t, p, "after stream 2's event completes the block is reused (best fit)");
  cr_assert_eq(stats().active_bytes[0].current, 3 * 1024);
  cr_assert_eq(loom_pool_free(P, p), LOOM_OK, "freed without recorded streams: no event");
  cr_assert_eq(loom_fake_pending_events(F), 0);
}

Test(alloc_pool, pending_block_is_not_taken_by_another_stream_either) {
  make_pool(64 * MiB, NULL);
  void *p = alloc_ok(4096, S(1));
  cr_assert_eq(loom_pool_record_stream(P, p, S(3)), LOOM_OK);
  cr_assert_eq(loom_pool_free(P, p), LOOM_OK);
  void *q = alloc_ok(4096, S(2));
  loom_segment_info sp, sq;
  cr_assert(loom_pool_debug_segment(P, (uintptr_t)p, &sp, NULL, 0));
  block_at(q, &sq);
  cr_assert_neq(sp.base, sq.base, "the segment holding a pending block is not whole-free");
  loom_fake_complete_all(F);
  cr_assert_eq(loom_pool_empty_cache(P), LOOM_OK);
  cr_assert_eq(stats().segments[0].current, 1, "p's segment was released once its event completed");
}

Test(alloc_pool, hard_limit_caps_reserved_memory) {
  loom_pool_config c;
  loom_pool_config_init(&c, "fake:0");
  c.limit = 4 * MiB;
  make_pool(1024 * MiB, &c);
  void *a = alloc_ok(MiB, S(1)), *b = alloc_ok(MiB, S(1)), *d = alloc_ok(MiB, S(1)), *e = alloc_ok(MiB, S(1));
  void *x = NULL;
  cr_assert_eq(loom_pool_malloc(P, 4096, S(1), &x), LOOM_ERR_OOM);
  cr_assert_null(x);
  cr_assert(strstr(loom_last_error(), "limit 4.00 MiB"), "%s", loom_last_error());
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(4 * MiB));
  cr_assert_eq(stats().num_ooms, 1);
  check();
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  x = alloc_ok(4096, S(1));
  cr_assert_eq(x, a, "after a free the caller carries on");
  cr_assert_eq(loom_pool_set_controls(P, 8 * MiB, SIZE_MAX, 0, 0), LOOM_OK);
  void *y = alloc_ok(MiB, S(1));
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(6 * MiB), "a raised limit lets the pool grow");
  (void)b, (void)d, (void)e, (void)y;
}

Test(alloc_pool, oom_retry_frees_the_best_fitting_segment_then_everything) {
  loom_pool_config c;
  loom_pool_config_init(&c, "fake:0");
  c.max_split_size = 40 * MiB;  /* so cached oversize blocks cannot serve everything */
  make_pool(200 * MiB, &c);
  void *a = alloc_ok(100 * MiB, S(1)), *b = alloc_ok(80 * MiB, S(1)), *c1 = alloc_ok(1024, S(1));
  uintptr_t seg100 = (uintptr_t)a, seg80 = (uintptr_t)b, seg2 = (uintptr_t)c1;
  loom_pool_free(P, a);
  loom_pool_free(P, b);
  loom_pool_free(P, c1);
  uintptr_t bases[8];
  loom_fake_drain_freed(F, bases, NULL, 8);
  /* 182 MiB cached. 55 MiB cannot use the 80 MiB block (more than 20 MiB
   * larger) and a new 56 MiB segment does not fit in the 18 MiB left. */
  void *d = alloc_ok(55 * MiB, S(1));
  int n = loom_fake_drain_freed(F, bases, NULL, 8);
  cr_assert_eq(n, 1, "exactly one cached segment is released first");
  cr_assert_eq(bases[0], seg80, "the smallest cached segment that fits (80 MiB), not 100 MiB or the small one");
  cr_assert_eq(stats().num_alloc_retries, 1);
  cr_assert(loom_fake_is_live(F, seg100) && loom_fake_is_live(F, seg2));
  /* 130 MiB: no cached segment is big enough; the largest go first, and
   * the small pool is left alone because that was enough. */
  void *e = alloc_ok(130 * MiB, S(1));
  n = loom_fake_drain_freed(F, bases, NULL, 8);
  cr_assert_eq(n, 1);
  cr_assert_eq(bases[0], seg100);
  cr_assert(loom_fake_is_live(F, seg2));
  cr_assert_eq(stats().num_alloc_retries, 2);
  /* 150 MiB: then every unused segment goes (the small one), and it still
   * does not fit: fail with a message, stay consistent. */
  void *f = NULL;
  cr_assert_eq(loom_pool_malloc(P, 150 * MiB, S(1), &f), LOOM_ERR_OOM);
  const char *m = loom_last_error();
  n = loom_fake_drain_freed(F, bases, NULL, 8);
  cr_assert_eq(n, 1);
  cr_assert_eq(bases[0], seg2, "the last resort releases every unused segment");
  cr_assert_eq(stats().num_alloc_retries, 3);
  const char *want[] = {"fake:0", "out of memory", "150.00 MiB (157286400 bytes", "186.00 MiB allocated",
                        "186.00 MiB reserved", "limit none", "14.00 MiB free on the device (of 200.00 MiB)",
                        "largest free block 0 B", "fragmentation", "fake device full"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) cr_assert(strstr(m, want[i]), "'%s' not in: %s", want[i], m);
  cr_assert_null(f);
  cr_assert_eq(stats().num_ooms, 1);
  check();
  loom_pool_free(P, d);
  f = alloc_ok(2 * MiB, S(1));
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(150 * MiB), "the caller carries on after the OOM");
  (void)e;
}

Test(alloc_pool, injected_device_failure_is_retried_after_releasing_cache) {
  make_pool(256 * MiB, NULL);
  void *a = alloc_ok(4096, S(1));
  loom_pool_free(P, a);
  loom_fake_fail_nth(F, 1);
  void *b = alloc_ok(4 * MiB, S(1));
  loom_memory_stats s = stats();
  cr_assert_eq(s.num_alloc_retries, 1, "the failed device allocation was retried");
  cr_assert_eq(s.segments[0].current, 1, "the cached small segment was released for it");
  loom_fake_fail_nth(F, 1);
  void *c = NULL;
  cr_assert_eq(loom_pool_malloc(P, 40 * MiB, S(1), &c), LOOM_ERR_OOM, "nothing cached to free: fails");
  cr_assert(strstr(loom_last_error(), "injected"), "%s", loom_last_error());
  c = alloc_ok(40 * MiB, S(1));
  (void)b;
}

Test(alloc_pool, preallocation_reserves_once_and_never_grows) {
  loom_pool_config c;
  loom_pool_config_init(&c, "fake:0");
  c.preallocate = 0.5;
  c.arena_stream = S(1);
  make_pool(100 * MiB, &c);
  loom_memory_stats s = stats();
  cr_assert_eq(s.reserved_bytes[0].current, (int64_t)(50 * MiB));
  cr_assert_eq(s.num_device_allocs, 1);
  void *a = alloc_ok(1000, S(1)), *b = alloc_ok(30 * MiB, S(1)), *d = alloc_ok(512, S(1));
  cr_assert_eq((uintptr_t)b, (uintptr_t)a + 1024, "small and large requests are carved from the arena");
  cr_assert_eq((uintptr_t)d, (uintptr_t)b + 30 * MiB);
  void *x = NULL;
  cr_assert_eq(loom_pool_malloc(P, 20 * MiB, S(1), &x), LOOM_ERR_OOM);
  cr_assert(strstr(loom_last_error(), "preallocated"), "%s", loom_last_error());
  cr_assert_eq(stats().num_device_allocs, 1, "never grows");
  /* Another stream waits on the arena's stream and is recorded as a user. */
  void *e = alloc_ok(4096, S(2));
  cr_assert_eq(loom_fake_waits(F), 1);
  cr_assert_eq(loom_pool_free(P, e), LOOM_OK);
  cr_assert_eq(loom_fake_pending_events(F), 1, "its free waits for stream 2");
  void *g = alloc_ok(4096, S(1));
  cr_assert_neq(g, e);
  loom_fake_complete(F, S(2));
  loom_pool_free(P, g);
  void *h = alloc_ok(4096, S(1));
  cr_assert_eq(h, e, "reused once stream 2 is done");
  cr_assert_eq(loom_pool_empty_cache(P), LOOM_OK);
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(50 * MiB), "the arena stays reserved");
  (void)d;
}

Test(alloc_pool, preallocation_failure_is_reported) {
  F = loom_fake_create(100 * MiB);
  loom_pool_config c;
  loom_pool_config_init(&c, "fake:0");
  c.preallocate = 0.5;
  loom_fake_fail_nth(F, 1);
  cr_assert_eq(loom_pool_create(loom_fake_provider(F), &c, &P), LOOM_ERR_OOM);
  cr_assert_null(P);
  cr_assert(strstr(loom_last_error(), "preallocate:0.5"), "%s", loom_last_error());
}

Test(alloc_pool, garbage_collection_releases_oldest_unused_segments) {
  loom_pool_config c;
  loom_pool_config_init(&c, "fake:0");
  c.limit = 100 * MiB;
  c.gc_threshold = 0.5;
  make_pool(1024 * MiB, &c);
  void *a = alloc_ok(20 * MiB, S(1)), *b = alloc_ok(20 * MiB, S(1));
  loom_pool_free(P, a);  /* a is the older free */
  loom_pool_free(P, b);
  uintptr_t bases[4];
  loom_fake_drain_freed(F, bases, NULL, 4);
  void *d = alloc_ok(30 * MiB, S(1));  /* 40 + 30 > 50: collect */
  int n = loom_fake_drain_freed(F, bases, NULL, 4);
  cr_assert_eq(n, 1, "one segment was enough to get under the threshold");
  cr_assert_eq(bases[0], (uintptr_t)a, "the least recently freed goes first");
  cr_assert_eq(stats().reserved_bytes[0].current, (int64_t)(50 * MiB));
  (void)d;
}

Test(alloc_pool, empty_cache_returns_every_unused_segment) {
  make_pool(1024 * MiB, NULL);
  void *keep = alloc_ok(4096, S(1));
  void *x[6];
  for (int i = 0; i < 6; i++) x[i] = alloc_ok((size_t)(i + 1) * 3 * MiB, S(1 + i % 2));
  for (int i = 0; i < 6; i++) loom_pool_free(P, x[i]);
  cr_assert_eq(loom_pool_empty_cache(P), LOOM_OK);
  loom_memory_stats s = stats();
  cr_assert_eq(s.segments[0].current, 1);
  cr_assert_eq(s.reserved_bytes[0].current, (int64_t)(2 * MiB));
  cr_assert_eq(loom_fake_live_bytes(F), 2 * MiB);
  loom_pool_free(P, keep);
  cr_assert_eq(loom_pool_empty_cache(P), LOOM_OK);
  cr_assert_eq(stats().reserved_bytes[0].current, 0);
  cr_assert_eq(loom_fake_live_bytes(F), 0);
  cr_assert_eq(stats().num_device_allocs, stats().num_device_frees);
}

Test(alloc_pool, statistics_peaks_counters_and_resets) {
  make_pool(1024 * MiB, NULL);
  void *a = alloc_ok(100, S(1)), *b = alloc_ok(3 * MiB, S(1));
  loom_pool_free(P, a);
  loom_memory_stats s = stats();
  cr_assert_eq(s.allocated_bytes[0].current, (int64_t)(3 * MiB));
  cr_assert_eq(s.allocated_bytes[0].peak, (int64_t)(3 * MiB + 512));
  cr_assert_eq(s.allocated_bytes[LOOM_MEM_SMALL_POOL].peak, 512);
  cr_assert_eq(s.requested_bytes[0].peak, (int64_t)(3 * MiB + 100));
  cr_assert_eq(s.reserved_bytes[0].current, (int64_t)(22 * MiB));
  cr_assert_eq(s.inactive_split_bytes[LOOM_MEM_LARGE_POOL].current, (int64_t)(17 * MiB));
  cr_assert_eq(s.num_allocs, 2);
  cr_assert_eq(s.num_frees, 1);
  cr_assert_eq(s.num_device_allocs, 2);
  cr_assert_eq(s.max_split_size, -1);
  loom_pool_reset_peaks(P);
  s = stats();
  cr_assert_eq(s.allocated_bytes[0].peak, (int64_t)(3 * MiB));
  cr_assert_eq(s.num_allocs, 2, "peaks reset leaves counters");
  loom_pool_reset_counters(P);
  s = stats();
  cr_assert_eq(s.num_allocs, 0);
  cr_assert_eq(s.num_device_allocs, 0);
  cr_assert_eq(s.allocated_bytes[0].current, (int64_t)(3 * MiB), "counters reset leaves current values");
  /* An older caller's smaller struct is filled only as far as it goes. */
  loom_memory_stats small;
  memset(&small, 0x5a, sizeof small);
  small.struct_size = offsetof(loom_memory_stats, reserved_bytes);
  loom_pool_stats(P, &small);
  cr_assert_eq(small.allocated_bytes[0].current, (int64_t)(3 * MiB));
  cr_assert_eq(small.reserved_bytes[0].current, 0x5a5a5a5a5a5a5a5a);
  (void)b;
}

Test(alloc_pool, summary_and_snapshot_describe_segments_blocks_and_history) {
  loom_pool_config c;
  loom_pool_config_init(&c, "fake:0");
  c.history = 4;
  make_pool(1024 * MiB, &c);
  void *a = alloc_ok(1000, S(1)), *b = alloc_ok(2000, S(1));
  loom_pool_free(P, a);
  char *sum = loom_pool_summary(P);
  cr_assert_not_null(sum);
  cr_assert(strstr(sum, "fake:0") && strstr(sum, "allocated") && strstr(sum, "inactive split") &&
            strstr(sum, "device allocs 1"), "%s", sum);
  free(sum);
  char *js = loom_pool_snapshot_json(P);
  cr_assert_not_null(js);
  cr_assert(strstr(js, "\"segments\":[{"), "%s", js);
  cr_assert(strstr(js, "\"state\":\"active_allocated\",") || strstr(js, "\"state\":\"active_allocated\"}"), "%s", js);
  cr_assert(strstr(js, "\"requested\":2000"), "%s", js);
  cr_assert(strstr(js, "\"state\":\"inactive\""), "%s", js);
  /* The ring keeps the last 4 of: segment_alloc, alloc, alloc, free. */
  cr_assert(strstr(js, "\"action\":\"segment_alloc\""), "%s", js);
  cr_assert(strstr(js, "\"action\":\"free\""), "%s", js);
  void *d = alloc_ok(10, S(1));
  free(js);
  js = loom_pool_snapshot_json(P);
  cr_assert_null(strstr(js, "segment_alloc"), "the oldest event left the ring: %s", js);
  free(js);
  (void)b, (void)d;
}

Test(alloc_pool, bad_frees_are_errors_not_crashes) {
  make_pool(64 * MiB, NULL);
  void *a = alloc_ok(4096, S(1));
  cr_assert_eq(loom_pool_free(P, (char *)a + 512), LOOM_ERR_INVALID_ARG, "interior pointer");
  cr_assert(strstr(loom_last_error(), "was not allocated"), "%s", loom_last_error());
  cr_assert_eq(loom_pool_free(P, a), LOOM_OK);
  cr_assert_eq(loom_pool_free(P, a), LOOM_ERR_INVALID_ARG, "double free");
  cr_assert_eq(loom_pool_record_stream(P, a, S(2)), LOOM_ERR_INVALID_ARG);
  cr_assert_eq(loom_pool_free(P, NULL), LOOM_OK);
  void *x = NULL;
  cr_assert_eq(loom_pool_malloc(P, SIZE_MAX, S(1), &x), LOOM_ERR_OOM, "absurd sizes fail without overflow");
  cr_assert_null(x);
}

/* ---- LOOM_ALLOC_CONF parsing ------------------------------------------------ */

Test(alloc_config, parses_every_key) {
  loom_alloc_options o;
  loom_alloc_options_init(&o);
  cr_assert_eq(loom_alloc_options_parse(" preallocate:0.25, limit:512MiB ,max_split_size_mb:64,"
                                        "garbage_collection_threshold:0.8,backend:cuda_async,history:100,", &o),
               LOOM_OK, "%s", loom_last_error());
  cr_assert_float_eq(o.preallocate_fraction, 0.25, 1e-12);
  cr_assert_eq(o.limit_bytes, 512 * MiB);
  cr_assert_eq(o.max_split_size, 64 * MiB);
  cr_assert_float_eq(o.gc_threshold, 0.8, 1e-12);
  cr_assert_eq(o.backend, LOOM_ALLOC_BACKEND_CUDA_ASYNC);
  cr_assert_eq(o.history, 100);
  cr_assert_eq(loom_alloc_options_check(&o), LOOM_OK);
  cr_assert_eq(loom_alloc_options_parse("limit:0.5", &o), LOOM_OK);
  cr_assert_float_eq(o.limit_fraction, 0.5, 1e-12);
  cr_assert_eq(o.limit_bytes, 0, "a fraction replaces a byte limit");
  cr_assert_eq(loom_alloc_options_parse("limit:1073741824", &o), LOOM_OK);
  cr_assert_eq(o.limit_bytes, 1024 * MiB);
  cr_assert_eq(loom_alloc_options_parse("limit:2G,backend:native", &o), LOOM_OK);
  cr_assert_eq(o.limit_bytes, 2048 * MiB);
  cr_assert_eq(o.backend, LOOM_ALLOC_BACKEND_NATIVE);
  cr_assert_eq(loom_alloc_options_parse("", &o), LOOM_OK, "empty is no change");
}

Test(alloc_config, rejects_unknown_keys_and_bad_values_with_a_message) {
  struct { const char *conf, *needle; } bad[] = {
      {"colour:blue", "unknown key 'colour'"},
      {"limit", "not key:value"},
      {"preallocate:0", "preallocate:0 must be a fraction"},
      {"preallocate:1.5", "(0, 1]"},
      {"preallocate:abc", "preallocate:abc"},
      {"limit:1.5", "fraction of the device"},
      {"limit:12XB", "neither bytes"},
      {"limit:-5", "neither bytes"},
      {"max_split_size_mb:20", "above 20"},
      {"max_split_size_mb:3x", "max_split_size_mb:3x"},
      {"garbage_collection_threshold:1.0", "(0, 1)"},
      {"backend:magic", "native or cuda_async"},
      {"history:-1", "history:-1"},
      {"limit:1G,bogus:1", "unknown key 'bogus'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    loom_alloc_options o, before;
    loom_alloc_options_init(&o);
    o.history = 7;
    before = o;
    cr_assert_eq(loom_alloc_options_parse(bad[i].conf, &o), LOOM_ERR_INVALID_ARG, "'%s' was accepted", bad[i].conf);
    cr_assert(strstr(loom_last_error(), bad[i].needle), "'%s': message '%s' lacks '%s'", bad[i].conf,
              loom_last_error(), bad[i].needle);
    cr_assert_eq(memcmp(&o, &before, sizeof o), 0, "'%s': options changed on error", bad[i].conf);
  }
}
