/* test_alloc_stress.c — randomized allocator tests checked against a shadow
 * model, and concurrent use from several threads.
 *
 * randomized_1M_ops_checked_after_every_step: 1,000,000 random operations
 * (allocations of edge and random sizes, frees, record_stream, completion of
 * a stream's events, empty_cache, injected device failures) over 4 streams
 * from 2 threads, on the fake provider. Each step runs under a test-level
 * lock together with its check, so the check sees a quiescent pool (the
 * allocator's own locking under true concurrency is covered by the second
 * test). How "checked after every step" stays cheap, honestly:
 *  - Local invariants are checked on every segment the step could have
 *    changed: the segment of the block allocated or freed, the segments of
 *    pending frees whose events the step let complete, and the segments the
 *    step returned to the provider (reported by the fake). No other segment
 *    can change in a step. For each of those the whole segment is walked:
 *    blocks tile it exactly, no two free neighbours are left unmerged, one
 *    stream per segment, and the returned block is the one asked for.
 *  - No two live blocks overlap: a bitmap of 512-byte granules over the
 *    simulated address space, independent of the pool, is set on allocation
 *    (every granule must be clear) and cleared on free.
 *  - Every statistic equals what the blocks add up to: each walked segment's
 *    contribution (allocated, active, inactive-split, requested bytes,
 *    allocation count, per pool) replaces its previous one in running
 *    totals, which are compared with the pool's statistics in O(1) after
 *    every step. Independently, allocated/requested/count/active are compared
 *    with the shadow's own sums and reserved/segments with the fake device.
 *  - Every 50,000 steps and at the end, loom_pool_verify rescans everything
 *    (including the free trees and the pointer map) and the running
 *    per-segment table is rebuilt from scratch and compared.
 * After freeing everything, completing all events and empty_cache nothing
 * may be reserved.
 *
 * The same run with expandable segments (address reservations on the fake
 * device that map 2 MiB granules, with garbage collection on so that
 * unmapping also happens inside allocations; and a shorter run in compact
 * mode with 64 KiB granules, where every growth unmaps first): reserved
 * bytes are mapped bytes, so a walk also checks that the unmapped blocks are
 * granule-aligned, never neighbours and hold no mapped byte, and that the
 * fake device's mapped bytes in the reservation equal the pool's; the
 * segments the step mapped into or unmapped from (reported by the fake) are
 * walked like the others; device allocations/frees equal the fake's
 * maps/unmaps. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/pool.h"
#include "device/device_internal.h"
#include "support/provider_fake.h"

#define MiB ((size_t)1 << 20)
#define NSTREAMS 4
#define NTHREADS 2
#define OPS_TOTAL 1000000L
#define FULL_EVERY 50000L
#define MAX_LIVE 400
#define MAXB 8192
#define SLOT_SHIFT 21
#define S(i) ((loom_stream *)(uintptr_t)(0x1000 * ((i) + 1)))

enum { V_ALLOC, V_ACTIVE, V_INACTIVE, V_REQ, V_COUNT, NV };

typedef struct live_rec { uintptr_t addr, seg; size_t n, size; int stream; unsigned uses; } live_rec;
typedef struct pend_rec { uintptr_t seg; size_t size; unsigned mask; } pend_rec;
typedef struct segc { int used; uintptr_t base; size_t size, mapped; int kind, expandable; int64_t v[NV]; } segc;

static struct {
  pthread_mutex_t mu;
  loom_fake *f;
  loom_pool *p;
  uint64_t *bits;
  uintptr_t base;
  size_t nslots;
  segc *segs;
  int64_t tot[3][NV], tot_reserved[3], tot_segs[3];
  int64_t sh_alloc, sh_req, sh_count, sh_pending;
  pend_rec pend[4096];
  int npend;
  loom_block_info blk[MAXB];
  uintptr_t touched[4096];
  int ntouched;
  uintptr_t remapped[4096];
  int nremapped;
  int expandable;
  size_t granule;
  long steps, ooms, ops;
  int failed;
  char why[1024];
} G;

#define REQ(cond, ...)                                                   \
  do {                                                                   \
    if (!(cond)) {                                                       \
      if (!G.failed) {                                                   \
        int k_ = snprintf(G.why, sizeof G.why, "step %ld: ", G.steps);  \
        snprintf(G.why + k_, sizeof G.why - (size_t)k_, __VA_ARGS__);    \
      }                                                                  \
      G.failed = 1;                                                      \
      return 0;                                                          \
    }                                                                    \
  } while (0)

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* ---- overlap bitmap -------------------------------------------------------- */

static int bits_update(uintptr_t addr, size_t size, int set) {
  size_t i = (addr - G.base) / 512, n = size / 512;
  for (; n && (i & 63); i++, n--) {
    uint64_t m = 1ull << (i & 63);
    REQ(((G.bits[i >> 6] & m) != 0) == !set, "%s granule of block %#lx", set ? "overlapping" : "unmarked",
        (unsigned long)addr);
    G.bits[i >> 6] ^= m;
  }
  for (; n >= 64; i += 64, n -= 64) {
    REQ(G.bits[i >> 6] == (set ? 0 : ~0ull), "%s granules in block %#lx", set ? "overlapping" : "unmarked",
        (unsigned long)addr);
    G.bits[i >> 6] = set ? ~0ull : 0;
  }
  for (; n; i++, n--) {
    uint64_t m = 1ull << (i & 63);
    REQ(((G.bits[i >> 6] & m) != 0) == !set, "%s granule of block %#lx", set ? "overlapping" : "unmarked",
        (unsigned long)addr);
    G.bits[i >> 6] ^= m;
  }
  return 1;
}

/* ---- per-segment contributions ---------------------------------------------- */

static void contrib(segc *c, int sign) {
  for (int v = 0; v < NV; v++) {
    G.tot[0][v] += sign * c->v[v];
    G.tot[c->kind][v] += sign * c->v[v];
  }
  G.tot_reserved[0] += sign * (int64_t)c->mapped;
  G.tot_reserved[c->kind] += sign * (int64_t)c->mapped;
  G.tot_segs[0] += sign;
  G.tot_segs[c->kind] += sign;
}

/* Walk one segment: local invariants, then refresh its contribution. */
static int walk_segment(uintptr_t addr, uintptr_t *base_out) {
  loom_segment_info si;
  size_t slot;
  if (!loom_pool_debug_segment(G.p, addr, &si, G.blk, MAXB)) {
    slot = (addr - G.base) >> SLOT_SHIFT;
    REQ(!(G.segs[slot].used && G.segs[slot].base == addr), "segment %#lx vanished without being freed",
        (unsigned long)addr);
    if (base_out) *base_out = 0;
    return 1;
  }
  REQ(si.nblocks <= MAXB, "segment with %d blocks", si.nblocks);
  slot = (si.base - G.base) >> SLOT_SHIFT;
  REQ(si.base % (2 * MiB) == 0 && slot < G.nslots, "odd segment base %#lx", (unsigned long)si.base);
  REQ(si.expandable == G.expandable, "segment %#lx: expandable %d in a pool with expandable %d",
      (unsigned long)si.base, si.expandable, G.expandable);
  segc c = {1, si.base, si.size, si.mapped, si.kind, si.expandable, {0}};
  uintptr_t at = si.base;
  size_t mapped = 0;
  for (int i = 0; i < si.nblocks; i++) {
    loom_block_info *b = &G.blk[i];
    if (b->state == LOOM_BLOCK_UNMAPPED) {
      REQ(si.expandable && b->addr % G.granule == 0 && b->size % G.granule == 0,
          "unmapped block %#lx (%zu bytes) misaligned or in an ordinary segment", (unsigned long)b->addr, b->size);
      REQ(!(i > 0 && G.blk[i - 1].state == LOOM_BLOCK_UNMAPPED), "unmapped neighbours %#lx and %#lx left unmerged",
          (unsigned long)G.blk[i - 1].addr, (unsigned long)b->addr);
      REQ(loom_fake_mapped_within(G.f, b->addr, b->size) == 0, "unmapped block %#lx has memory mapped in it",
          (unsigned long)b->addr);
      REQ(b->addr == at, "segment %#lx: unmapped block at %#lx, expected %#lx", (unsigned long)si.base,
          (unsigned long)b->addr, (unsigned long)at);
      at += b->size;
      continue;
    }
    mapped += b->size;
    REQ(b->addr == at, "segment %#lx: block at %#lx, expected %#lx (gap or overlap)", (unsigned long)si.base,
        (unsigned long)b->addr, (unsigned long)at);
    REQ(b->size >= 512 && b->size % 512 == 0, "block %#lx has size %zu", (unsigned long)b->addr, b->size);
    REQ(b->stream == si.stream, "block %#lx on another stream than its segment", (unsigned long)b->addr);
    REQ(!(i > 0 && b->state == LOOM_BLOCK_FREE && G.blk[i - 1].state == LOOM_BLOCK_FREE),
        "free neighbours %#lx and %#lx left unmerged", (unsigned long)G.blk[i - 1].addr, (unsigned long)b->addr);
    if (b->state == LOOM_BLOCK_ALLOCATED) {
      c.v[V_ALLOC] += (int64_t)b->size;
      c.v[V_ACTIVE] += (int64_t)b->size;
      c.v[V_REQ] += (int64_t)b->requested;
      c.v[V_COUNT]++;
    } else if (b->state == LOOM_BLOCK_PENDING) {
      c.v[V_ACTIVE] += (int64_t)b->size;
    } else if (si.nblocks > 1) {
      c.v[V_INACTIVE] += (int64_t)b->size;
    }
    at += b->size;
  }
  REQ(at == si.base + si.size, "segment %#lx: blocks cover %zu of %zu bytes", (unsigned long)si.base,
      (size_t)(at - si.base), si.size);
  REQ(mapped == si.mapped, "segment %#lx: %zu bytes in mapped blocks, the pool says %zu", (unsigned long)si.base,
      mapped, si.mapped);
  if (si.expandable)
    REQ(loom_fake_reservation_mapped(G.f, si.base) == mapped && mapped > 0,
        "segment %#lx: the device has %zu bytes mapped in it, the blocks %zu", (unsigned long)si.base,
        loom_fake_reservation_mapped(G.f, si.base), mapped);
  if (G.segs[slot].used) contrib(&G.segs[slot], -1);
  G.segs[slot] = c;
  contrib(&G.segs[slot], +1);
  if (base_out) *base_out = si.base;
  return 1;
}

static int drain_released(void) {
  /* G.touched: segments whose pending frees completed in this step. */
  uintptr_t bases[256];
  size_t sizes[256];
  int n;
  while ((n = loom_fake_drain_freed(G.f, bases, sizes, 256)) > 0) {
    for (int i = 0; i < n; i++) {
      size_t slot = (bases[i] - G.base) >> SLOT_SHIFT;
      /* A reservation made in this step may be given back in it unseen
       * (its map failed); the fake reported it as remapped. */
      int fresh = 0;
      for (int j = 0; j < G.nremapped; j++) fresh |= G.remapped[j] == bases[i];
      if (G.expandable && fresh && !(G.segs[slot].used && G.segs[slot].base == bases[i])) continue;
      REQ(G.segs[slot].used && G.segs[slot].base == bases[i] && G.segs[slot].size == sizes[i],
          "released segment %#lx was not known", (unsigned long)bases[i]);
      /* Unless a pending free in it completed during this step, its last
       * walk must have seen it whole and unused. */
      int touched = 0;
      for (int j = 0; j < G.ntouched; j++) touched |= G.touched[j] == bases[i];
      /* An expandable one is given back after its free blocks were unmapped
       * in this very step, so only "unused" can be asked of it. */
      REQ(touched || (G.segs[slot].v[V_ACTIVE] == 0 && (G.segs[slot].expandable || G.segs[slot].v[V_INACTIVE] == 0)),
          "segment %#lx released while in use or split", (unsigned long)bases[i]);
      contrib(&G.segs[slot], -1);
      G.segs[slot].used = 0;
    }
  }
  return 1;
}

/* Pending frees whose streams are all done: the next poll frees them. */
static void take_completed(void) {
  G.ntouched = 0;
  for (int i = 0; i < G.npend;) {
    if (G.pend[i].mask == 0) {
      G.sh_pending -= (int64_t)G.pend[i].size;
      G.touched[G.ntouched++] = G.pend[i].seg;
      G.pend[i] = G.pend[--G.npend];
    } else {
      i++;
    }
  }
}

/* Segments mapped into or unmapped from since the last call (expandable). */
static void take_remapped(void) {
  G.nremapped = loom_fake_drain_remapped(G.f, G.remapped, 4096);
}

static int walk_touched(void) {
  for (int i = 0; i < G.ntouched; i++)
    if (!walk_segment(G.touched[i], NULL)) return 0;
  for (int i = 0; i < G.nremapped; i++)
    if (!walk_segment(G.remapped[i], NULL)) return 0;
  return 1;
}

static int check_totals(void) {
  loom_memory_stats s;
  s.struct_size = sizeof s;
  loom_pool_stats(G.p, &s);
  REQ(s.allocated_bytes[0].current == G.sh_alloc, "allocated %ld, shadow %ld", (long)s.allocated_bytes[0].current,
      (long)G.sh_alloc);
  REQ(s.requested_bytes[0].current == G.sh_req, "requested %ld, shadow %ld", (long)s.requested_bytes[0].current,
      (long)G.sh_req);
  REQ(s.allocations[0].current == G.sh_count, "allocations %ld, shadow %ld", (long)s.allocations[0].current,
      (long)G.sh_count);
  REQ(s.active_bytes[0].current == G.sh_alloc + G.sh_pending, "active %ld, shadow %ld",
      (long)s.active_bytes[0].current, (long)(G.sh_alloc + G.sh_pending));
  REQ((size_t)s.reserved_bytes[0].current == loom_fake_live_bytes(G.f), "reserved %ld, device says %zu",
      (long)s.reserved_bytes[0].current, loom_fake_live_bytes(G.f));
  REQ(s.segments[0].current == loom_fake_live_segments(G.f), "segments %ld, device says %ld",
      (long)s.segments[0].current, loom_fake_live_segments(G.f));
  if (G.expandable)
    REQ(s.num_device_allocs == loom_fake_maps(G.f) && s.num_device_frees == loom_fake_unmaps(G.f),
        "device allocs/frees %ld/%ld, the device mapped %ld and unmapped %ld times", (long)s.num_device_allocs,
        (long)s.num_device_frees, loom_fake_maps(G.f), loom_fake_unmaps(G.f));
  else
    REQ(s.num_device_allocs - s.num_device_frees == s.segments[0].current, "device allocs - frees != segments");
  for (int k = 0; k < 3; k++) {
    REQ(s.allocated_bytes[k].current == G.tot[k][V_ALLOC], "pool %d allocated %ld, blocks add up to %ld", k,
        (long)s.allocated_bytes[k].current, (long)G.tot[k][V_ALLOC]);
    REQ(s.active_bytes[k].current == G.tot[k][V_ACTIVE], "pool %d active %ld, blocks %ld", k,
        (long)s.active_bytes[k].current, (long)G.tot[k][V_ACTIVE]);
    REQ(s.inactive_split_bytes[k].current == G.tot[k][V_INACTIVE], "pool %d inactive split %ld, blocks %ld", k,
        (long)s.inactive_split_bytes[k].current, (long)G.tot[k][V_INACTIVE]);
    REQ(s.requested_bytes[k].current == G.tot[k][V_REQ], "pool %d requested %ld, blocks %ld", k,
        (long)s.requested_bytes[k].current, (long)G.tot[k][V_REQ]);
    REQ(s.allocations[k].current == G.tot[k][V_COUNT], "pool %d allocations mismatch", k);
    REQ(s.reserved_bytes[k].current == G.tot_reserved[k], "pool %d reserved %ld, segments %ld", k,
        (long)s.reserved_bytes[k].current, (long)G.tot_reserved[k]);
    REQ(s.segments[k].current == G.tot_segs[k], "pool %d segment count mismatch", k);
    REQ(s.allocated_bytes[k].peak >= s.allocated_bytes[k].current && s.reserved_bytes[k].peak >= s.reserved_bytes[k].current,
        "peak below current");
  }
  return 1;
}

static int full_check(void) {
  char err[512];
  REQ(loom_pool_verify(G.p, err, sizeof err), "verify: %s", err);
  /* Rebuild the per-segment table from scratch and compare. */
  static loom_segment_info list[4096];
  int n = loom_pool_debug_segments(G.p, list, 4096);
  REQ(n <= 4096, "too many segments");
  int known = 0;
  for (size_t i = 0; i < G.nslots; i++) known += G.segs[i].used;
  REQ(known == n, "table knows %d segments, pool has %d", known, n);
  for (int i = 0; i < n; i++) {
    size_t slot = (list[i].base - G.base) >> SLOT_SHIFT;
    segc before = G.segs[slot];
    REQ(before.used && before.base == list[i].base, "segment %#lx missing from the table", (unsigned long)list[i].base);
    if (!walk_segment(list[i].base, NULL)) return 0;
    REQ(memcmp(&before, &G.segs[slot], sizeof before) == 0, "stale contribution for segment %#lx",
        (unsigned long)list[i].base);
  }
  return 1;
}

static size_t pick_size(uint64_t *rs) {
  static const size_t edges[] = {0, 1, 511, 512, 513, MiB - 1, MiB, MiB + 1, 10 * MiB - 1, 10 * MiB, 10 * MiB + 1};
  uint64_t r = rnd(rs) % 100;
  if (r < 5) return edges[rnd(rs) % (sizeof edges / sizeof edges[0])];
  if (r < 65) return rnd(rs) % (32 << 10);
  if (r < 85) return rnd(rs) % MiB;
  if (r < 97) return MiB + rnd(rs) % (11 * MiB);
  return 12 * MiB + rnd(rs) % (30 * MiB);
}

typedef struct thread_state { uint64_t rng; live_rec live[MAX_LIVE + 8]; int nlive; } thread_state;

static int do_malloc(thread_state *t) {
  size_t n = pick_size(&t->rng);
  int s = (int)(rnd(&t->rng) % NSTREAMS);
  take_completed();
  void *ptr = NULL;
  loom_status st = loom_pool_malloc(G.p, n, S(s), &ptr);
  take_remapped();
  if (!drain_released() || !walk_touched()) return 0;
  if (st == LOOM_ERR_OOM) {
    REQ(ptr == NULL, "OOM but a pointer came back");
    G.ooms++;
    return 1;
  }
  REQ(st == LOOM_OK && ptr, "malloc(%zu) failed: %s", n, loom_last_error());
  uintptr_t seg = 0;
  if (!walk_segment((uintptr_t)ptr, &seg)) return 0;
  REQ(seg != 0, "no segment holds %p", ptr);
  loom_segment_info si;
  loom_pool_debug_segment(G.p, (uintptr_t)ptr, &si, G.blk, MAXB);
  loom_block_info *b = NULL;
  for (int i = 0; i < si.nblocks && !b; i++)
    if (G.blk[i].addr == (uintptr_t)ptr) b = &G.blk[i];
  REQ(b, "no block starts at %p", ptr);
  REQ(b->state == LOOM_BLOCK_ALLOCATED && b->requested == n && b->size >= loom_pool_round_size(n) &&
          b->stream == S(s),
      "block %p: state %d requested %zu size %zu for a request of %zu on stream %d", ptr, b->state, b->requested,
      b->size, n, s);
  REQ((si.kind == LOOM_POOL_SMALL) == (loom_pool_round_size(n) <= MiB), "request %zu in the wrong pool", n);
  if (!bits_update(b->addr, b->size, 1)) return 0;
  t->live[t->nlive++] = (live_rec){b->addr, seg, n, b->size, s, 0};
  G.sh_alloc += (int64_t)b->size;
  G.sh_req += (int64_t)n;
  G.sh_count++;
  return 1;
}

static int do_free(thread_state *t) {
  int i = (int)(rnd(&t->rng) % (uint64_t)t->nlive);
  live_rec r = t->live[i];
  t->live[i] = t->live[--t->nlive];
  if (!bits_update(r.addr, r.size, 0)) return 0;
  REQ(loom_pool_free(G.p, (void *)r.addr) == LOOM_OK, "free: %s", loom_last_error());
  G.sh_alloc -= (int64_t)r.size;
  G.sh_req -= (int64_t)r.n;
  G.sh_count--;
  if (r.uses) {
    REQ(G.npend < 4096, "too many pending frees");
    G.pend[G.npend++] = (pend_rec){r.seg, r.size, r.uses};
    G.sh_pending += (int64_t)r.size;
  }
  return walk_segment(r.seg, NULL);
}

static int step(thread_state *t) {
  uint64_t r = rnd(&t->rng) % 1000;
  if (t->nlive >= MAX_LIVE || (r >= 450 && r < 880 && t->nlive > 0)) {
    if (!do_free(t)) return 0;
  } else if (r < 880) {
    if (!do_malloc(t)) return 0;
  } else if (r < 960) {
    int s = (int)(rnd(&t->rng) % NSTREAMS);
    loom_fake_complete(G.f, S(s));
    for (int i = 0; i < G.npend; i++) G.pend[i].mask &= ~(1u << s);
  } else if (r < 964) {
    take_completed();
    REQ(loom_pool_empty_cache(G.p) == LOOM_OK, "empty_cache: %s", loom_last_error());
    take_remapped();
    if (!drain_released() || !walk_touched()) return 0;
  } else if (r < 967) {
    loom_fake_fail_nth(G.f, (long)(1 + rnd(&t->rng) % 3));
  } else if (t->nlive > 0) {
    live_rec *l = &t->live[rnd(&t->rng) % (uint64_t)t->nlive];
    int s = (int)(rnd(&t->rng) % NSTREAMS);
    REQ(loom_pool_record_stream(G.p, (void *)l->addr, S(s)) == LOOM_OK, "record_stream: %s", loom_last_error());
    if (s != l->stream) l->uses |= 1u << s;
  }
  if (!check_totals()) return 0;
  if (++G.steps % FULL_EVERY == 0 && !full_check()) return 0;
  return 1;
}

static void *worker(void *arg) {
  thread_state *t = arg;
  for (long i = 0; i < G.ops / NTHREADS; i++) {
    pthread_mutex_lock(&G.mu);
    int ok = !G.failed && step(t);
    pthread_mutex_unlock(&G.mu);
    if (!ok) break;
  }
  /* Free what is left, still checking every step. */
  pthread_mutex_lock(&G.mu);
  while (!G.failed && t->nlive > 0)
    if (!do_free(t) || !check_totals()) break;
  pthread_mutex_unlock(&G.mu);
  return NULL;
}

/* expandable: 0 ordinary segments, 1 expandable, 2 expandable compact. */
static void run_randomized(long ops, int expandable, size_t granule) {
  size_t cap = 1024 * MiB;
  G.f = loom_fake_create(cap);
  G.ops = ops;
  G.expandable = expandable != 0;
  G.granule = granule ? granule : 2 * MiB;
  loom_fake_set_granularity(G.f, G.granule);
  loom_pool_config c;
  loom_pool_config_init(&c, "fake:stress");
  c.expandable = expandable;
  if (expandable == 1) c.gc_threshold = 0.7;  /* unmapping inside allocations too */
  cr_assert_eq(loom_pool_create(loom_fake_provider(G.f), &c, &G.p), LOOM_OK);
  pthread_mutex_init(&G.mu, NULL);
  G.base = loom_fake_base(G.f);
  size_t span = loom_fake_span(G.f);
  G.bits = calloc(span / 512 / 64 + 1, sizeof(uint64_t));
  G.nslots = (span >> SLOT_SHIFT) + 1;
  G.segs = calloc(G.nslots, sizeof(segc));
  cr_assert(G.bits && G.segs);
  static thread_state ts[NTHREADS];
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    ts[i].rng = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    pthread_create(&th[i], NULL, worker, &ts[i]);
  }
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  cr_assert(!G.failed, "%s", G.why);
  cr_assert_geq(G.steps, ops);
  /* Everything freed: finish the pending frees and empty the cache. */
  loom_fake_complete_all(G.f);
  for (int i = 0; i < G.npend; i++) G.pend[i].mask = 0;
  take_completed();
  cr_assert_eq(loom_pool_empty_cache(G.p), LOOM_OK);
  take_remapped();
  cr_assert(drain_released() && walk_touched() && check_totals() && full_check(), "%s", G.why);
  loom_memory_stats s;
  s.struct_size = sizeof s;
  loom_pool_stats(G.p, &s);
  cr_assert_eq(s.reserved_bytes[0].current, 0, "nothing may stay reserved");
  cr_assert_eq(s.active_bytes[0].current, 0);
  cr_assert_eq(loom_fake_live_bytes(G.f), 0);
  cr_assert_gt(s.num_cache_hits, s.num_allocs / 2, "the cache served most requests");
  if (expandable) {
    cr_assert_eq(s.segments[0].current, 0, "every reservation given back");
    cr_assert_gt(loom_fake_unmaps(G.f), 0, "unmapping was exercised");
    cr_assert_eq(s.num_cross_stream_reuses, 0, "streams never take each other's ranges");
  } else {
    cr_assert_gt(s.num_cross_stream_reuses, 0, "cross-stream takes were exercised");
  }
  cr_assert_gt(s.num_alloc_retries, 0, "OOM retries were exercised");
  cr_assert_gt(G.ooms, 0, "OOM failures were exercised");
  cr_log_info("stress (expandable %d): %ld steps, %ld allocs, %ld cache hits, %ld cross-stream, %ld device allocs, %ld retries, %ld OOMs",
              expandable, G.steps, (long)s.num_allocs, (long)s.num_cache_hits, (long)s.num_cross_stream_reuses,
              (long)s.num_device_allocs, (long)s.num_alloc_retries, (long)s.num_ooms);
  loom_pool_destroy(G.p);
  loom_fake_destroy(G.f);
  free(G.bits);
  free(G.segs);
}

Test(alloc_stress, randomized_1M_ops_checked_after_every_step, .timeout = 600) { run_randomized(OPS_TOTAL, 0, 0); }

Test(alloc_stress, expandable_segments_randomized_1M_ops_checked_after_every_step, .timeout = 600) {
  run_randomized(OPS_TOTAL, 1, 2 * MiB);
}

/* Compact: every growth first unmaps least recently freed granules. */
Test(alloc_stress, expandable_segments_compact_64KiB_granules_randomized_300k_ops, .timeout = 600) {
  run_randomized(300000, 2, 64 << 10);
}

/* ---- true concurrency on real memory ------------------------------------------ */

#define CT_THREADS 4
#define CT_OPS 100000

typedef struct ct_arg { loom_pool *p; loom_stream **streams; int id; int bad; char why[256]; } ct_arg;

static void *ct_worker(void *argp) {
  ct_arg *a = argp;
  uint64_t rs = 0x1234567ull * (uint64_t)(a->id + 1);
  struct { unsigned char *p; size_t n; unsigned char tag; } live[64];
  int nlive = 0;
  for (int op = 0; op < CT_OPS && !a->bad; op++) {
    if (nlive == 64 || (nlive > 0 && rnd(&rs) % 2)) {
      int i = (int)(rnd(&rs) % (uint64_t)nlive);
      size_t n = live[i].n;
      unsigned char tag = live[i].tag;
      /* Another thread scribbling on our block would change these. */
      if (n && (live[i].p[0] != tag || live[i].p[n - 1] != tag || live[i].p[n / 2] != tag)) {
        snprintf(a->why, sizeof a->why, "thread %d: block %p of %zu bytes was overwritten", a->id, (void *)live[i].p, n);
        a->bad = 1;
      }
      if (rnd(&rs) % 8 == 0) loom_pool_record_stream(a->p, live[i].p, a->streams[rnd(&rs) % NSTREAMS]);
      if (loom_pool_free(a->p, live[i].p) != LOOM_OK) {
        snprintf(a->why, sizeof a->why, "thread %d: free: %s", a->id, loom_last_error());
        a->bad = 1;
      }
      live[i] = live[--nlive];
    } else {
      size_t n = rnd(&rs) % 16 == 0 ? MiB + rnd(&rs) % (3 * MiB) : rnd(&rs) % (64 << 10);
      void *p = NULL;
      if (loom_pool_malloc(a->p, n, a->streams[rnd(&rs) % NSTREAMS], &p) != LOOM_OK) {
        snprintf(a->why, sizeof a->why, "thread %d: malloc(%zu): %s", a->id, n, loom_last_error());
        a->bad = 1;
        break;
      }
      unsigned char tag = (unsigned char)(a->id * 37 + op);
      if (n <= (64 << 10)) memset(p, tag, n);
      else if (n) {
        ((unsigned char *)p)[0] = ((unsigned char *)p)[n - 1] = ((unsigned char *)p)[n / 2] = tag;
      }
      live[nlive].p = p;
      live[nlive].n = n;
      live[nlive].tag = tag;
      nlive++;
    }
  }
  for (int i = 0; i < nlive; i++) loom_pool_free(a->p, live[i].p);
  return NULL;
}

static void run_concurrent(int expandable) {
  loom_stream *streams[NSTREAMS];
  for (int i = 0; i < NSTREAMS; i++) cr_assert_eq(loom_stream_create(loom_cpu(), &streams[i]), LOOM_OK);
  loom_pool_config c;
  loom_pool_config_init(&c, "cpu:test");
  c.poison = 1;
  c.expandable = expandable;
  loom_pool *p = NULL;
  cr_assert_eq(loom_pool_create(loom_provider_cpu(), &c, &p), LOOM_OK);
  pthread_t th[CT_THREADS];
  static ct_arg args[CT_THREADS];
  for (int i = 0; i < CT_THREADS; i++) {
    args[i] = (ct_arg){p, streams, i, 0, ""};
    pthread_create(&th[i], NULL, ct_worker, &args[i]);
  }
  for (int i = 0; i < CT_THREADS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < CT_THREADS; i++) cr_assert(!args[i].bad, "%s", args[i].why);
  char err[512];
  cr_assert(loom_pool_verify(p, err, sizeof err), "%s", err);
  loom_memory_stats s;
  s.struct_size = sizeof s;
  loom_pool_stats(p, &s);
  cr_assert_eq(s.num_allocs, s.num_frees);
  cr_assert_eq(s.allocated_bytes[0].current, 0);
  cr_assert_eq(loom_pool_empty_cache(p), LOOM_OK, "CPU events complete at once, so nothing stays pending");
  loom_pool_stats(p, &s);
  cr_assert_eq(s.reserved_bytes[0].current, 0);
  cr_assert_eq(s.active_bytes[0].current, 0);
  loom_pool_destroy(p);
  for (int i = 0; i < NSTREAMS; i++) loom_stream_free(streams[i]);
}

Test(alloc_stress, concurrent_threads_on_cpu_memory, .timeout = 600) { run_concurrent(0); }

/* The same on mmap'd expandable segments: real pages committed and
 * decommitted under 4 threads, with the tags catching any overlap. */
Test(alloc_stress, concurrent_threads_on_cpu_expandable_segments, .timeout = 600) { run_concurrent(1); }
