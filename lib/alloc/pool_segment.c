/* pool_segment.c — blocks, segments and events: obtaining and releasing
 * segments from the provider (with the OOM-retry and garbage-collection
 * policies), coalescing freed blocks, and completing pending cross-stream
 * frees when their events have fired. */
#include "alloc/pool_internal.h"
#include "core/sys.h"

size_t loom_pool_round_size(size_t n) {
  if (n < LOOM_POOL_MIN_BLOCK) return LOOM_POOL_MIN_BLOCK;
  return (n + LOOM_POOL_MIN_BLOCK - 1) / LOOM_POOL_MIN_BLOCK * LOOM_POOL_MIN_BLOCK;
}

size_t loom_pool_segment_size(size_t rounded) {
  if (rounded <= LOOM_POOL_SMALL_SIZE) return LOOM_POOL_SMALL_BUFFER;
  if (rounded < LOOM_POOL_MIN_LARGE_ALLOC) return LOOM_POOL_LARGE_BUFFER;
  return (rounded + LOOM_POOL_ROUND_LARGE - 1) / LOOM_POOL_ROUND_LARGE * LOOM_POOL_ROUND_LARGE;
}

block *loom_pool_block_new(loom_pool *p) {
  block *b = p->spare;
  if (b) {
    p->spare = b->spare_next;
    memset(b, 0, offsetof(block, uses));  /* keeps uses and capuses, the last fields */
  } else {
    b = loom_sys_calloc(1, sizeof *b);
    if (!b) return NULL;
  }
  p->rng ^= p->rng << 13;
  p->rng ^= p->rng >> 17;
  p->rng ^= p->rng << 5;
  b->prio = p->rng;
  return b;
}

void loom_pool_block_recycle(loom_pool *p, block *b) {
  b->spare_next = p->spare;
  p->spare = b;
}

int loom_pool_seg_index(loom_pool *p, uintptr_t addr) {
  int lo = 0, hi = p->nsegs - 1, ans = -1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (p->segs[mid]->base <= addr) {
      ans = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (ans >= 0 && addr - p->segs[ans]->base < p->segs[ans]->size) return ans;
  return -1;
}

loom_status loom_pool_event_get(loom_pool *p, loom_stream *s, void **ev, int *dom) {
  *dom = p->prov->event_domain(p->prov->ctx, s);
  for (int i = p->nevcache - 1; i >= 0; i--) {
    if (p->evcache[i].domain == *dom) {
      *ev = p->evcache[i].ev;
      p->evcache[i] = p->evcache[--p->nevcache];
      return LOOM_OK;
    }
  }
  return p->prov->event_create(p->prov->ctx, s, ev);
}

void loom_pool_event_put(loom_pool *p, void *ev, int dom) {
  if (!grow((void **)&p->evcache, &p->capevcache, p->nevcache + 1, sizeof(cached_ev))) {
    p->prov->event_free(p->prov->ctx, ev);
    return;
  }
  p->evcache[p->nevcache++] = (cached_ev){ev, dom};
}

/* Make `waiter` wait (GPU-side) for what is queued on `on` now. */
loom_status loom_pool_wait_for_stream(loom_pool *p, loom_stream *waiter, loom_stream *on) {
  if (!on || waiter == on) return LOOM_OK;  /* the host is synchronous */
  void *ev;
  int dom;
  LOOM_TRY(loom_pool_event_get(p, on, &ev, &dom));
  loom_status st = p->prov->event_record(p->prov->ctx, ev, on);
  if (st == LOOM_OK) st = p->prov->stream_wait(p->prov->ctx, waiter, ev);
  loom_pool_event_put(p, ev, dom);  /* a wait captures the record; the event can be reused */
  return st;
}

segment *loom_pool_seg_add(loom_pool *p, int kind, loom_stream *s, uintptr_t base, size_t n) {
  segment *sg = loom_sys_calloc(1, sizeof *sg);
  block *b = loom_pool_block_new(p);
  if (!sg || !b || !grow((void **)&p->segs, &p->capsegs, p->nsegs + 1, sizeof(segment *))) {
    loom_sys_free(sg);
    if (b) loom_pool_block_recycle(p, b);
    snprintf(p->provider_msg, sizeof p->provider_msg, "out of host memory for allocator bookkeeping");
    return NULL;
  }
  sg->base = base;
  sg->size = n;
  sg->kind = kind;
  sg->stream = s;
  sg->head = b;
  int pos = 0;
  while (pos < p->nsegs && p->segs[pos]->base < sg->base) pos++;
  memmove(&p->segs[pos + 1], &p->segs[pos], (size_t)(p->nsegs - pos) * sizeof(segment *));
  p->segs[pos] = sg;
  p->nsegs++;
  b->addr = base;
  b->size = n;
  b->seg = sg;
  b->stream = s;
  stat_add(p->st.segments, kind, 1);
  return sg;
}

void loom_pool_seg_remove(loom_pool *p, segment *sg) {
  int i = loom_pool_seg_index(p, sg->base);
  memmove(&p->segs[i], &p->segs[i + 1], (size_t)(p->nsegs - i - 1) * sizeof(segment *));
  p->nsegs--;
  stat_add(p->st.segments, sg->kind, -1);
}

loom_status loom_pool_seg_new(loom_pool *p, int kind, size_t n, loom_stream *s, block **out) {
  if (p->cfg.limit && (size_t)p->st.reserved_bytes[0].current + n > p->cfg.limit) {
    char a[32], b[32], c[32];
    snprintf(p->provider_msg, sizeof p->provider_msg, "the limit of %s would be exceeded (%s reserved + %s)",
             fmt_bytes(a, sizeof a, p->cfg.limit), fmt_bytes(b, sizeof b, (uint64_t)p->st.reserved_bytes[0].current),
             fmt_bytes(c, sizeof c, n));
    return loom_set_error(LOOM_ERR_OOM, "%s", p->provider_msg);
  }
  void *ptr = NULL;
  loom_status st = loom_pool_prov_seg_alloc(p, n, &ptr);
  if (st != LOOM_OK) {
    snprintf(p->provider_msg, sizeof p->provider_msg, "%s", loom_last_error());
    return st;
  }
  segment *sg = loom_pool_seg_add(p, kind, s, (uintptr_t)ptr, n);
  if (!sg) {
    p->prov->seg_free(p->prov->ctx, ptr, n);
    return loom_set_error(LOOM_ERR_OOM, "%s", p->provider_msg);
  }
  sg->mapped = n;
  block *b = sg->head;
  b->state = LOOM_BLOCK_FREE;
  stat_add(p->st.reserved_bytes, kind, (int64_t)n);
  p->st.num_device_allocs++;
  poison(p, sg->base, n);
  history(p, H_SEGMENT_ALLOC, sg->base, n, s, NULL);
  *out = b;
  return LOOM_OK;
}

/* b spans a whole unused segment and sits in the free trees. */
loom_status loom_pool_seg_release(loom_pool *p, block *b) {
  segment *sg = b->seg;
  loom_pool_tree_remove(p, b);
  unpoison(p, sg->base, sg->size);
  loom_status st = p->prov->seg_free(p->prov->ctx, (void *)sg->base, sg->size);
  loom_pool_seg_remove(p, sg);
  stat_add(p->st.reserved_bytes, sg->kind, -(int64_t)sg->size);
  p->st.num_device_frees++;
  history(p, H_SEGMENT_FREE, sg->base, sg->size, b->stream, NULL);
  loom_pool_block_recycle(p, b);
  loom_sys_free(sg);
  return st;
}

int loom_pool_release_all(loom_pool *p, loom_status *st) {
  int n = p->cfg.expandable && loom_pool_exp_unmap_all(p, 0, st) > 0;
  for (int k = LOOM_POOL_SMALL; k <= LOOM_POOL_LARGE; k++) {
    while (p->root[k][1]) {
      loom_status s = loom_pool_seg_release(p, p->root[k][1]);
      if (s != LOOM_OK && st && *st == LOOM_OK) *st = s;
      n++;
    }
  }
  return n;
}

/* First OOM retry, for this size class: the smallest unused cached segment
 * that can hold n; if none can, the largest ones until n bytes are freed.
 * Returns how many segments were released. */
int loom_pool_release_fitting(loom_pool *p, int kind, size_t n) {
  if (p->cfg.expandable) return loom_pool_exp_unmap_all(p, kind, NULL) > 0;
  block key;
  loom_pool_tree_key(&key, NULL, n);
  block *b = loom_pool_tree_lower(1, p->root[kind][1], &key, 0);
  if (b) {
    loom_pool_seg_release(p, b);
    return 1;
  }
  int count = 0;
  for (size_t freed = 0; freed < n && p->root[kind][1]; count++) {
    block *m = p->root[kind][1];
    while (m->r[1]) m = m->r[1];
    freed += m->size;
    loom_pool_seg_release(p, m);
  }
  return count;
}

static void collect_whole(block *n, block **arr, int *len) {
  if (!n) return;
  collect_whole(n->l[1], arr, len);
  arr[(*len)++] = n;
  collect_whole(n->r[1], arr, len);
}

static int cmp_tick(const void *a, const void *b) {
  uint64_t x = (*(block *const *)a)->free_tick, y = (*(block *const *)b)->free_tick;
  return x < y ? -1 : x > y;
}

/* Over the threshold, give back the least recently freed unused segments. */
/* Free blocks of expandable segments with a whole granule inside (NULL arr:
 * only count them). */
static int collect_unmappable(loom_pool *p, block **arr) {
  int len = 0;
  for (int i = 0; i < p->nsegs; i++) {
    if (!p->segs[i]->expandable) continue;
    for (block *b = p->segs[i]->head; b; b = b->next) {
      uintptr_t lo = (b->addr + p->granule - 1) / p->granule * p->granule;
      if (b->state == LOOM_BLOCK_FREE && lo + p->granule <= b->addr + b->size) {
        if (arr) arr[len] = b;
        len++;
      }
    }
  }
  return len;
}

void loom_pool_garbage_collect(loom_pool *p, size_t need) {
  if (p->cfg.gc_threshold <= 0 || !loom_pool_may_give_back(p)) return;  /* deferred past the capture */
  size_t cap = p->cfg.limit, fr = 0, tot = 0;
  if (!cap && p->prov->mem_info(p->prov->ctx, &fr, &tot) == LOOM_OK) cap = tot;
  double target = p->cfg.gc_threshold * (double)cap;
  if (!cap || (double)((size_t)p->st.reserved_bytes[0].current + need) <= target) return;
  int n = p->st.segments[0].current > 0 ? (int)p->st.segments[0].current : 0;
  if (p->cfg.expandable) n += collect_unmappable(p, NULL);
  block **arr = loom_sys_malloc((size_t)(n + 1) * sizeof *arr);
  if (!arr) return;
  int len = 0;
  collect_whole(p->root[LOOM_POOL_SMALL][1], arr, &len);
  collect_whole(p->root[LOOM_POOL_LARGE][1], arr, &len);
  if (p->cfg.expandable) len += collect_unmappable(p, arr + len);
  qsort(arr, (size_t)len, sizeof *arr, cmp_tick);
  /* Unmapping a block only splits it or merges unmapped neighbours, so the
   * other candidates stay valid free blocks. */
  for (int i = 0; i < len && (double)((size_t)p->st.reserved_bytes[0].current + need) > target; i++) {
    if (arr[i]->seg->expandable) loom_pool_exp_unmap_block(p, arr[i], NULL);
    else loom_pool_seg_release(p, arr[i]);
  }
  loom_sys_free(arr);
}

block *loom_pool_merge_insert(loom_pool *p, block *b) {
  if (b->prev && b->prev->state == LOOM_BLOCK_FREE) {
    block *pr = b->prev;
    loom_pool_tree_remove(p, pr);
    pr->size += b->size;
    pr->next = b->next;
    if (b->next) b->next->prev = pr;
    loom_pool_block_recycle(p, b);
    b = pr;
  }
  if (b->next && b->next->state == LOOM_BLOCK_FREE) {
    block *nx = b->next;
    loom_pool_tree_remove(p, nx);
    b->size += nx->size;
    b->next = nx->next;
    if (nx->next) nx->next->prev = b;
    loom_pool_block_recycle(p, nx);
  }
  loom_pool_tree_insert(p, b);
  return b;
}

void loom_pool_block_free(loom_pool *p, block *b) {
  stat_add(p->st.active_bytes, b->seg->kind, -(int64_t)b->size);
  b->state = LOOM_BLOCK_FREE;
  b->nuses = 0;
  b->event_count = 0;
  loom_pool_merge_insert(p, b);
}

void loom_pool_process_events_locked(loom_pool *p) {
  for (int i = 0; i < p->npend;) {
    if (p->prov->event_query(p->prov->ctx, p->pend[i].ev) != 1) {
      i++;
      continue;
    }
    block *b = p->pend[i].b;
    loom_pool_event_put(p, p->pend[i].ev, p->pend[i].domain);
    p->pend[i] = p->pend[--p->npend];
    if (--b->event_count == 0) {
      uintptr_t addr = b->addr;
      size_t size = b->size;
      loom_stream *bs = b->stream;
      const char *site = b->site;
      loom_pool_block_free(p, b);
      history(p, H_FREE_COMPLETED, addr, size, bs, site);
    }
  }
}

void loom_pool_process_events(loom_pool *p) {
  pthread_mutex_lock(&p->mu);
  loom_pool_process_events_locked(p);
  pthread_mutex_unlock(&p->mu);
}
