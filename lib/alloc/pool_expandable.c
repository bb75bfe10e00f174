/* pool_expandable.c — expandable segments (policy in pool.h): an address
 * range per (stream, size class) into which the provider maps physical
 * granules as the pool grows, and from which the whole granules inside free
 * blocks are unmapped when the pool gives memory back.
 *
 * Invariants (checked by loom_pool_verify): blocks tile the whole range;
 * LOOM_BLOCK_UNMAPPED blocks start and end on granule boundaries, are never
 * next to each other and are in no index; seg->mapped is the sum of the
 * other blocks; a range with nothing mapped is given back at once. */
#include "alloc/pool_internal.h"
#include "core/sys.h"

static uintptr_t up(uintptr_t n, size_t g) { return (n + g - 1) / g * g; }
static uintptr_t down(uintptr_t n, size_t g) { return n / g * g; }

/* Link r into the segment list right after b. */
static void link_after(block *b, block *r) {
  r->seg = b->seg;
  r->stream = b->stream;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  b->next = r;
}

static void unlink_block(loom_pool *p, block *b) {
  if (b->prev) b->prev->next = b->next;
  if (b->next) b->next->prev = b->prev;
  if (b->seg->head == b) b->seg->head = b->next;
  loom_pool_block_recycle(p, b);
}

/* Merge unmapped block u with unmapped neighbours; returns the result. */
static block *merge_unmapped(loom_pool *p, block *u) {
  if (u->prev && u->prev->state == LOOM_BLOCK_UNMAPPED) {
    block *pr = u->prev;
    pr->size += u->size;
    unlink_block(p, u);
    u = pr;
  }
  if (u->next && u->next->state == LOOM_BLOCK_UNMAPPED) {
    block *nx = u->next;
    u->size += nx->size;
    unlink_block(p, nx);
  }
  return u;
}

/* Give back a range with nothing mapped (one unmapped block). */
static loom_status exp_release(loom_pool *p, segment *sg) {
  loom_status st = p->prov->va_release(p->prov->ctx, (void *)sg->base, sg->size);
  loom_pool_seg_remove(p, sg);
  loom_pool_block_recycle(p, sg->head);
  loom_sys_free(sg);
  return st;
}

static loom_status exp_reserve(loom_pool *p, int kind, loom_stream *s, size_t size, block **out) {
  size_t n = p->va_size > size ? p->va_size : (size_t)up(size, p->granule);
  void *base = NULL;
  loom_status st = loom_pool_prov_va_reserve(p, n, &base);
  if (st != LOOM_OK) {
    snprintf(p->provider_msg, sizeof p->provider_msg, "reserving %zu bytes of address space: %s", n,
             loom_last_error());
    return st;
  }
  segment *sg = loom_pool_seg_add(p, kind, s, (uintptr_t)base, n);
  if (!sg) {
    p->prov->va_release(p->prov->ctx, base, n);
    return loom_set_error(LOOM_ERR_OOM, "%s", p->provider_msg);
  }
  sg->expandable = 1;
  block *b = sg->head;
  b->state = LOOM_BLOCK_UNMAPPED;
  *out = b;
  return LOOM_OK;
}

static size_t unmap_block(loom_pool *p, block *b, size_t cap, loom_status *st, block **cont, int may_release);
static loom_status map_into(loom_pool *p, block *best, size_t need, block **out);
static void release_emptied(loom_pool *p);

static int by_tick(const void *a, const void *b) {
  uint64_t x = (*(block *const *)a)->free_tick, y = (*(block *const *)b)->free_tick;
  return x < y ? -1 : x > y;
}

/* Compact mode: before mapping need more bytes, unmap as much from whole
 * free granules of stream s's ranges, least recently freed first, except
 * inside `keep` (the free block the growth merges with). Ranges stay
 * reserved here even when emptied (the caller may hold a block of one). */
static void reclaim(loom_pool *p, loom_stream *s, size_t need, const block *keep) {
  if (!loom_pool_may_give_back(p)) return;  /* no unmapping while a graph is captured */
  int n = 0;
  for (int pass = 0; pass < 2; pass++) {
    block **arr = NULL;
    if (pass == 1) {
      if (n == 0 || !(arr = loom_sys_malloc((size_t)n * sizeof *arr))) return;
      n = 0;
    }
    for (int i = 0; i < p->nsegs; i++) {
      segment *sg = p->segs[i];
      if (!sg->expandable || sg->stream != s) continue;
      for (block *b = sg->head; b; b = b->next) {
        if (b->state != LOOM_BLOCK_FREE || b == keep || up(b->addr, p->granule) + p->granule > b->addr + b->size) continue;
        if (arr) arr[n] = b;
        n++;
      }
    }
    if (arr) {
      qsort(arr, (size_t)n, sizeof *arr, by_tick);
      size_t freed = 0;
      for (int i = 0; i < n && freed < need; i++) {
        block *cont;
        freed += unmap_block(p, arr[i], need - freed, NULL, &cont, 0);
      }
      loom_sys_free(arr);
    }
  }
}

loom_status loom_pool_exp_grow(loom_pool *p, int kind, loom_stream *s, size_t size, block **out) {
  size_t g = p->granule;
  /* The unmapped block that needs the least new memory: one right after a
   * free block merges with it (normally the free tail of the range). */
  block *best = NULL;
  size_t need = 0;
  for (int i = 0; i < p->nsegs; i++) {
    segment *sg = p->segs[i];
    if (!sg->expandable || sg->kind != kind || sg->stream != s) continue;
    for (block *u = sg->head; u; u = u->next) {
      if (u->state != LOOM_BLOCK_UNMAPPED) continue;
      size_t before = u->prev && u->prev->state == LOOM_BLOCK_FREE ? u->prev->size : 0;
      if (before >= size || size - before > u->size) continue;
      size_t n = (size_t)up(size - before, g);
      if (!best || n < need) {
        best = u;
        need = n;
      }
    }
  }
  if (!best) need = (size_t)up(size, g);
  if (p->cfg.expandable == 2)
    reclaim(p, s, need, best && best->prev && best->prev->state == LOOM_BLOCK_FREE ? best->prev : NULL);
  int fresh = !best;
  loom_status st = LOOM_OK;
  if (p->cfg.limit && (size_t)p->st.reserved_bytes[0].current + need > p->cfg.limit) {
    char a[32], b[32], c[32];
    snprintf(p->provider_msg, sizeof p->provider_msg, "the limit of %s would be exceeded (%s reserved + %s)",
             fmt_bytes(a, sizeof a, p->cfg.limit), fmt_bytes(b, sizeof b, (uint64_t)p->st.reserved_bytes[0].current),
             fmt_bytes(c, sizeof c, need));
    st = loom_set_error(LOOM_ERR_OOM, "%s", p->provider_msg);
    fresh = 0;
  } else if (fresh) {
    st = exp_reserve(p, kind, s, size, &best);
  }
  if (st == LOOM_OK) st = map_into(p, best, need, out);
  if (st != LOOM_OK && fresh && best) exp_release(p, best->seg);
  if (p->cfg.expandable == 2) release_emptied(p);
  return st;
}

/* Map need bytes at the start of unmapped block best and hand out the free
 * block that results (merged with a free block before it). */
static loom_status map_into(loom_pool *p, block *best, size_t need, block **out) {
  segment *sg = best->seg;
  block *rest = need < best->size ? loom_pool_block_new(p) : NULL;
  loom_status st = need < best->size && !rest
                       ? loom_set_error(LOOM_ERR_OOM, "out of host memory for allocator bookkeeping")
                       : loom_pool_prov_va_map(p, (void *)best->addr, need);
  if (st != LOOM_OK) {
    snprintf(p->provider_msg, sizeof p->provider_msg, "%s", loom_last_error());
    if (rest) loom_pool_block_recycle(p, rest);
    return st;
  }
  if (rest) {
    rest->addr = best->addr + need;
    rest->size = best->size - need;
    rest->state = LOOM_BLOCK_UNMAPPED;
    link_after(best, rest);
    best->size = need;
  }
  best->state = LOOM_BLOCK_FREE;
  best->event_count = 0;
  best->nuses = 0;
  sg->mapped += need;
  stat_add(p->st.reserved_bytes, sg->kind, (int64_t)need);
  p->st.num_device_allocs++;
  history(p, H_SEGMENT_ALLOC, best->addr, need, sg->stream, NULL);
  poison(p, best->addr, need);
  block *m = loom_pool_merge_insert(p, best);
  loom_pool_tree_remove(p, m);
  *out = m;
  return LOOM_OK;
}

/* Compact mode: give back the ranges reclaim() emptied. */
static void release_emptied(loom_pool *p) {
  for (int i = p->nsegs - 1; i >= 0; i--)
    if (p->segs[i]->expandable && p->segs[i]->mapped == 0) exp_release(p, p->segs[i]);
}

/* loom_pool_exp_unmap_block, unmapping at most cap bytes (rounded up to the granule;
 * the first whole granules of b), also telling where to continue a walk of
 * the segment (NULL: its end, or the segment was given back). */
static size_t unmap_block(loom_pool *p, block *b, size_t cap, loom_status *st, block **cont, int may_release) {
  segment *sg = b->seg;
  size_t g = p->granule;
  uintptr_t end = b->addr + b->size, lo = up(b->addr, g), hi = down(end, g);
  *cont = b->next;
  if (hi <= lo) return 0;
  if (cap < hi - lo && up(cap, g) < hi - lo) hi = lo + up(cap, g);
  int head = lo > b->addr, tail = hi < end;
  block *h = head ? loom_pool_block_new(p) : NULL, *t = tail ? loom_pool_block_new(p) : NULL;
  if ((head && !h) || (tail && !t)) {  /* no bookkeeping memory: keep it mapped */
    if (h) loom_pool_block_recycle(p, h);
    if (t) loom_pool_block_recycle(p, t);
    return 0;
  }
  loom_pool_tree_remove(p, b);
  unpoison(p, lo, hi - lo);
  loom_status s = p->prov->va_unmap(p->prov->ctx, (void *)lo, hi - lo);
  if (s != LOOM_OK) {
    if (st && *st == LOOM_OK) *st = s;
    poison(p, lo, hi - lo);
    loom_pool_tree_insert(p, b);
    if (h) loom_pool_block_recycle(p, h);
    if (t) loom_pool_block_recycle(p, t);
    return 0;
  }
  block *mid = b;
  if (head) {  /* b keeps [addr, lo) */
    b->size = lo - b->addr;
    h->addr = lo;
    link_after(b, h);
    mid = h;
  }
  mid->addr = lo;
  mid->size = hi - lo;
  mid->state = LOOM_BLOCK_UNMAPPED;
  if (tail) {
    t->addr = hi;
    t->size = end - hi;
    t->state = LOOM_BLOCK_FREE;
    link_after(mid, t);
    loom_pool_tree_insert(p, t);
  }
  if (head) loom_pool_tree_insert(p, b);
  mid = merge_unmapped(p, mid);
  *cont = tail ? t->next : mid->next;
  sg->mapped -= hi - lo;
  stat_add(p->st.reserved_bytes, sg->kind, -(int64_t)(hi - lo));
  p->st.num_device_frees++;
  history(p, H_SEGMENT_FREE, lo, hi - lo, sg->stream, NULL);
  if (sg->mapped == 0 && may_release) {
    loom_status r = exp_release(p, sg);
    if (r != LOOM_OK && st && *st == LOOM_OK) *st = r;
    *cont = NULL;
  }
  return hi - lo;
}

size_t loom_pool_exp_unmap_block(loom_pool *p, block *b, loom_status *st) {
  block *cont;
  return unmap_block(p, b, SIZE_MAX, st, &cont, 1);
}

size_t loom_pool_exp_unmap_all(loom_pool *p, int kind, loom_status *st) {
  size_t total = 0;
  /* Backwards: a range given back only shifts the ones already visited. */
  for (int i = p->nsegs - 1; i >= 0; i--) {
    segment *sg = p->segs[i];
    if (!sg->expandable || (kind && sg->kind != kind)) continue;
    for (block *b = sg->head; b;) {
      block *cont = b->next;
      if (b->state == LOOM_BLOCK_FREE) total += unmap_block(p, b, SIZE_MAX, st, &cont, 1);
      b = cont;
    }
  }
  return total;
}

void loom_pool_exp_destroy_segment(loom_pool *p, segment *sg) {
  /* Unmap each maximal mapped run (runs end on granule boundaries). */
  for (block *b = sg->head; b;) {
    if (b->state == LOOM_BLOCK_UNMAPPED) {
      b = b->next;
      continue;
    }
    uintptr_t start = b->addr;
    while (b && b->state != LOOM_BLOCK_UNMAPPED) b = b->next;
    uintptr_t end = b ? b->addr : sg->base + sg->size;
    unpoison(p, start, end - start);
    p->prov->va_unmap(p->prov->ctx, (void *)start, end - start);
  }
  p->prov->va_release(p->prov->ctx, (void *)sg->base, sg->size);
}
