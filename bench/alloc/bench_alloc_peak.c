/* bench_alloc_peak.c — where the reserved bytes are at peak reserved: replays
 * an allocation trace (bench_alloc_replay's format) through loom's pool on
 * the fake device and, at the moment reserved bytes reach their peak after
 * the first epoch marker (the whole run without one), prints every segment
 * with what its mapped granules hold. It explains a reserved/allocated ratio
 * that bench_alloc_replay only reports.
 *
 * Usage: bench_alloc_peak TRACE [--conf LOOM_ALLOC_CONF-string] [--granule BYTES] [--blocks 1] [--trim 1]
 * Output: one `peak ...` line (reserved, allocated then and at its own peak),
 * then one `seg ...` line per segment: kind, stream, mapped granules, bytes
 * allocated, bytes free but mapped, whole free granules still mapped (the
 * unmap policy's share), granules holding allocated bytes (the minimum this
 * placement needs), and the mapped free tail after the last allocated block. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"
#include "alloc/pool.h"
#include "alloc/ptrmap.h"
#include "support/provider_fake.h"

#define MAX_STREAMS 64
#define MAX_BLOCKS 65536

static loom_block_info blocks[MAX_BLOCKS];
static char report[1 << 16];
static int verbose;  /* --blocks 1: list each segment's mapped blocks too */
/* --trim 1: empty the cache at the first epoch marker, so that the steady
 * state's peak is its own and not what warm-up left mapped. */
static int trim;

static size_t up(size_t n, size_t g) { return (n + g - 1) / g * g; }

/* One line per segment into report (overwritten at each new peak). */
static void snapshot(loom_pool *p, size_t g, const loom_memory_stats *st, loom_stream **streams) {
  size_t len = 0;
  len += (size_t)snprintf(report + len, sizeof report - len, "peak reserved=%lld (%lld granules) allocated_now=%lld\n",
                          (long long)st->reserved_bytes[0].current, (long long)(st->reserved_bytes[0].current / (int64_t)g),
                          (long long)st->allocated_bytes[0].current);
  loom_segment_info segs[256];
  int ns = loom_pool_debug_segments(p, segs, 256);
  size_t need_total = 0, free_whole_total = 0;
  for (int i = 0; i < ns && i < 256; i++) {
    loom_segment_info si;
    loom_pool_debug_segment(p, segs[i].base, &si, blocks, MAX_BLOCKS);
    int nb = si.nblocks < MAX_BLOCKS ? si.nblocks : MAX_BLOCKS;
    size_t alloc = 0, freeb = 0, free_whole = 0, used_granules = 0, tail = 0;
    uintptr_t last_used_granule = UINTPTR_MAX;
    for (int b = 0; b < nb; b++) {
      loom_block_info *bi = &blocks[b];
      if (bi->state == LOOM_BLOCK_UNMAPPED) continue;
      if (bi->state == LOOM_BLOCK_FREE) {
        freeb += bi->size;
        uintptr_t lo = up(bi->addr, g), hi = (bi->addr + bi->size) / g * g;
        if (hi > lo) free_whole += hi - lo;
        tail = bi->size;  /* reset below by a later allocated block */
        continue;
      }
      alloc += bi->size;
      tail = 0;
      /* Granules this block touches, not counting one shared with the
       * previous allocated block. */
      uintptr_t first = bi->addr / g, last = (bi->addr + bi->size - 1) / g;
      if (first == last_used_granule) first++;
      if (last >= first) used_granules += last - first + 1;
      last_used_granule = last;
    }
    if (verbose)
      for (int b = 0; b < nb; b++)
        if (blocks[b].state != LOOM_BLOCK_UNMAPPED && len < sizeof report - 512)
          len += (size_t)snprintf(report + len, sizeof report - len, "  block off=%zu size=%zu requested=%zu state=%d\n",
                                  (size_t)(blocks[b].addr - si.base), blocks[b].size, blocks[b].requested,
                                  blocks[b].state);
    int sidx = -1;
    for (int k = 0; k < MAX_STREAMS; k++)
      if (streams[k] == si.stream) sidx = k;
    len += (size_t)snprintf(report + len, sizeof report - len,
                            "seg kind=%s stream=%d expandable=%d blocks=%d mapped=%zu granules=%zu allocated=%zu "
                            "free_mapped=%zu free_whole_granules=%zu used_granules=%zu free_tail=%zu\n",
                            si.kind == LOOM_POOL_SMALL ? "small" : "large", sidx, si.expandable, si.nblocks, si.mapped,
                            si.mapped / g, alloc, freeb, free_whole / g, used_granules, tail);
    need_total += used_granules;
    free_whole_total += free_whole / g;
    if (len >= sizeof report - 512) break;
  }
  snprintf(report + len, sizeof report - len, "sum used_granules=%zu free_whole_granules=%zu\n", need_total,
           free_whole_total);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s TRACE [--conf CONF] [--granule BYTES]\n", argv[0]);
    return 2;
  }
  const char *trace = argv[1], *conf = "expandable_segments:compact";
  size_t g = (size_t)2 << 20;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--conf")) conf = argv[i + 1];
    else if (!strcmp(argv[i], "--blocks")) verbose = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--trim")) trim = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--granule")) g = (size_t)strtoull(argv[i + 1], NULL, 10);
    else {
      fprintf(stderr, "bench_alloc_peak: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (g < 512 || (g & (g - 1))) {
    fprintf(stderr, "bench_alloc_peak: --granule must be a power of two >= 512\n");
    return 2;
  }
  loom_alloc_options o;
  loom_alloc_options_init(&o);
  if (loom_alloc_options_parse(conf, &o) != LOOM_OK) {
    fprintf(stderr, "bench_alloc_peak: %s\n", loom_last_error());
    return 2;
  }
  loom_fake *fake = loom_fake_create((size_t)1 << 46);
  loom_fake_set_auto_complete(fake, 1);
  loom_fake_set_granularity(fake, g);
  loom_pool_config cfg;
  loom_pool_config_init(&cfg, "fake");
  cfg.max_split_size = o.max_split_size;
  cfg.expandable = o.expandable_segments;
  loom_pool *pool = NULL;
  FILE *f = fopen(trace, "r");
  if (!f || loom_pool_create(loom_fake_provider(fake), &cfg, &pool) != LOOM_OK) {
    fprintf(stderr, "bench_alloc_peak: cannot open %s or create the pool\n", trace);
    return 1;
  }
  loom_ptrmap ids = {0};
  loom_stream *streams[MAX_STREAMS];
  for (int i = 0; i < MAX_STREAMS; i++) streams[i] = (loom_stream *)(uintptr_t)(0x1000 * (i + 1));
  char line[256];
  int64_t best = -1;
  loom_memory_stats st;
  st.struct_size = sizeof st;
  while (fgets(line, sizeof line, f)) {
    unsigned long long id;
    size_t n;
    int s, ep;
    if (sscanf(line, "alloc %llu %zu %d", &id, &n, &s) == 3 && s >= 0 && s < MAX_STREAMS) {
      void *ptr = NULL;
      if (loom_pool_malloc(pool, n, streams[s], &ptr) == LOOM_OK) loom_ptrmap_put(&ids, (uintptr_t)id, ptr);
    } else if (sscanf(line, "free %llu", &id) == 1) {
      void *ptr = loom_ptrmap_del(&ids, (uintptr_t)id);
      if (ptr) loom_pool_free(pool, ptr);
    } else if (sscanf(line, "epoch %d", &ep) == 1) {
      if (ep == 1) {
        if (trim) loom_pool_empty_cache(pool);
        loom_pool_reset_peaks(pool);
        best = 0;  /* from here on, the steady state */
      }
      continue;
    }
    loom_pool_stats(pool, &st);
    if (st.reserved_bytes[0].current > best) {
      best = st.reserved_bytes[0].current;
      snapshot(pool, g, &st, streams);
    }
  }
  fclose(f);
  loom_pool_stats(pool, &st);
  printf("conf=%s granule=%zu peak_reserved=%lld peak_allocated=%lld peak_requested=%lld ratio=%.3f\n%s", conf, g,
         (long long)st.reserved_bytes[0].peak, (long long)st.allocated_bytes[0].peak,
         (long long)st.requested_bytes[0].peak,
         (double)st.reserved_bytes[0].peak / (double)st.allocated_bytes[0].peak, report);
  loom_ptrmap_free(&ids);
  loom_pool_destroy(pool);
  loom_fake_destroy(fake);
  return 0;
}
