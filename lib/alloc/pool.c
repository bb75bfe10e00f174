/* pool.c — the caching, stream-ordered pool (policy in pool.h, data
 * structures in pool_internal.h): allocation with best fit, splitting and
 * the cross-stream and OOM fallbacks, free (pending until other streams are
 * done), record_stream, empty_cache, creation, destruction and controls. */
#include "alloc/pool_internal.h"
#include "core/sys.h"

/* ---- allocation ------------------------------------------------------------ */

static int size_ok(const loom_pool *p, size_t req, size_t bsize) {
  size_t ms = p->cfg.max_split_size;
  if (req < ms && bsize >= ms) return 0;  /* keep oversize blocks for oversize requests */
  if (req >= ms && bsize >= req + LOOM_POOL_OVERSIZE_TOLERANCE) return 0;
  return 1;
}

static int should_split(const loom_pool *p, const block *b, size_t size) {
  size_t rem = b->size - size;
  if (b->seg->arena || b->seg->kind == LOOM_POOL_SMALL) return rem >= LOOM_POOL_MIN_BLOCK;
  return size < p->cfg.max_split_size && rem > LOOM_POOL_SMALL_SIZE;
}

static block *find_free(loom_pool *p, int kind, loom_stream *s, size_t size, int check) {
  block key;
  loom_pool_tree_key(&key, s, size);
  block *b = loom_pool_tree_lower(0, p->root[kind][0], &key, 0);
  if (!b || b->stream != s || (check && !size_ok(p, size, b->size))) return NULL;
  loom_pool_tree_remove(p, b);
  return b;
}

static loom_status take_other_stream(loom_pool *p, int kind, loom_stream *s, size_t size, block **out) {
  block key;
  loom_pool_tree_key(&key, NULL, size);
  for (block *b = loom_pool_tree_lower(1, p->root[kind][1], &key, 0); b;
       b = loom_pool_tree_lower(1, p->root[kind][1], b, 1)) {
    if (!size_ok(p, size, b->size)) break;
    if (b->stream == s) continue;
    LOOM_TRY(loom_pool_wait_for_stream(p, s, b->stream));
    loom_pool_tree_remove(p, b);
    b->stream = s;
    b->seg->stream = s;
    *out = b;
    return LOOM_OK;
  }
  *out = NULL;
  return LOOM_OK;
}

static loom_status oom_fail(loom_pool *p, size_t n, size_t size, size_t seg_size, loom_stream *s) {
  p->st.num_ooms++;
  history(p, H_OOM, 0, n, s, LOOM_PROF_ACTIVE() ? loom_prof_site() : NULL);
  size_t fr = 0, tot = 0;
  int have_info = p->prov->mem_info(p->prov->ctx, &fr, &tot) == LOOM_OK;
  size_t largest = 0;
  for (int i = 0; i < p->nsegs; i++)
    for (block *b = p->segs[i]->head; b; b = b->next)
      if (b->state == LOOM_BLOCK_FREE && b->size > largest) largest = b->size;
  char req[32], al[32], rs[32], lim[32], fre[32], tt[32], lg[32], un[32], sp[32], sg[32];
  int64_t unalloc = p->st.reserved_bytes[0].current - p->st.active_bytes[0].current;
  char how[800];
  const char *capturing = loom_pool_may_give_back(p) ? "" : " (a graph capture is open on this device: cached "
                          "segments are not given back while it lasts, cudaFree being illegal inside a capture; "
                          "allocate what the captured step needs before capturing, or call loom_empty_cache "
                          "before loom_graph_capture_begin)";
  if (p->cfg.expandable)
    snprintf(how, sizeof how, "growing an expandable segment by %s failed: %s%s", fmt_bytes(sg, sizeof sg, seg_size),
             p->provider_msg, capturing);
  else if (p->arena)
    snprintf(how, sizeof how, "the pool was preallocated (preallocate:%g, one arena of %s) and does not grow",
             p->cfg.preallocate, fmt_bytes(sg, sizeof sg, p->arena->size));
  else
    snprintf(how, sizeof how, "a new %s segment failed: %s%s", fmt_bytes(sg, sizeof sg, seg_size), p->provider_msg,
             capturing);
  loom_set_error(
      LOOM_ERR_OOM,
      "%s: out of memory allocating %s (%zu bytes, rounded to %zu) on stream %p; %s. "
      "%s allocated, %s reserved, limit %s, %s free on the device (of %s), largest free block %s, "
      "%s reserved but unallocated (%s of it in free pieces of split segments: fragmentation). "
      "Free tensors you no longer need or use a smaller batch; if reserved is much larger than allocated, "
      "set LOOM_ALLOC_CONF=max_split_size_mb:N or call loom_empty_cache()",
      p->cfg.name, fmt_bytes(req, sizeof req, n), n, size, (void *)s, how,
      fmt_bytes(al, sizeof al, (uint64_t)p->st.allocated_bytes[0].current),
      fmt_bytes(rs, sizeof rs, (uint64_t)p->st.reserved_bytes[0].current),
      p->cfg.limit ? fmt_bytes(lim, sizeof lim, p->cfg.limit) : "none",
      have_info ? fmt_bytes(fre, sizeof fre, fr) : "unknown", have_info ? fmt_bytes(tt, sizeof tt, tot) : "unknown",
      fmt_bytes(lg, sizeof lg, largest), fmt_bytes(un, sizeof un, unalloc > 0 ? (uint64_t)unalloc : 0),
      fmt_bytes(sp, sizeof sp, (uint64_t)p->st.inactive_split_bytes[0].current));
  return LOOM_ERR_OOM;
}

/* Expandable segments: map what the request lacks; on OOM unmap the free
 * granules of this size class, then of every class, and retry. */
static loom_status grow_expandable(loom_pool *p, int kind, size_t n, size_t size, loom_stream *s, block **out) {
  size_t need = (size + p->granule - 1) / p->granule * p->granule;
  loom_pool_garbage_collect(p, need);
  loom_status st = loom_pool_exp_grow(p, kind, s, size, out);
  if (st == LOOM_OK || st != LOOM_ERR_OOM) return st;
  if (!loom_pool_may_give_back(p)) return oom_fail(p, n, size, need, s);
  if (loom_pool_exp_unmap_all(p, kind, NULL) > 0) {
    p->st.num_alloc_retries++;
    st = loom_pool_exp_grow(p, kind, s, size, out);
    if (st == LOOM_OK || st != LOOM_ERR_OOM) return st;
  }
  loom_pool_process_events_locked(p);
  if (loom_pool_release_all(p, NULL) > 0) {
    p->st.num_alloc_retries++;
    st = loom_pool_exp_grow(p, kind, s, size, out);
    if (st == LOOM_OK || st != LOOM_ERR_OOM) return st;
  }
  return oom_fail(p, n, size, need, s);
}

static loom_status take_block(loom_pool *p, size_t n, size_t size, loom_stream *s, block **out) {
  if (p->arena) {
    loom_stream *as = p->cfg.arena_stream;
    block *b = find_free(p, LOOM_POOL_LARGE, as, size, 0);
    if (!b) return oom_fail(p, n, size, 0, s);
    loom_status st = loom_pool_wait_for_stream(p, s, as);
    if (st != LOOM_OK) {
      loom_pool_merge_insert(p, b);
      return st;
    }
    p->st.num_cache_hits++;
    *out = b;
    return LOOM_OK;
  }
  int kind = size <= LOOM_POOL_SMALL_SIZE ? LOOM_POOL_SMALL : LOOM_POOL_LARGE;
  block *b = find_free(p, kind, s, size, 1);
  if (b) {
    p->st.num_cache_hits++;
    *out = b;
    return LOOM_OK;
  }
  if (p->cfg.expandable) return grow_expandable(p, kind, n, size, s, out);
  LOOM_TRY(take_other_stream(p, kind, s, size, &b));
  if (b) {
    p->st.num_cache_hits++;
    p->st.num_cross_stream_reuses++;
    *out = b;
    return LOOM_OK;
  }
  size_t seg = loom_pool_segment_size(size);
  loom_pool_garbage_collect(p, seg);
  loom_status st = loom_pool_seg_new(p, kind, seg, s, out);
  if (st == LOOM_OK || st != LOOM_ERR_OOM) return st;
  if (!loom_pool_may_give_back(p)) return oom_fail(p, n, size, seg, s);
  /* Retry 1: free the one cached segment that fits best. */
  if (loom_pool_release_fitting(p, kind, seg)) {
    p->st.num_alloc_retries++;
    st = loom_pool_seg_new(p, kind, seg, s, out);
    if (st == LOOM_OK || st != LOOM_ERR_OOM) return st;
  }
  /* Retry 2: everything unused, after collecting finished frees. */
  loom_pool_process_events_locked(p);
  if (loom_pool_release_all(p, NULL) > 0) {
    p->st.num_alloc_retries++;
    st = loom_pool_seg_new(p, kind, seg, s, out);
    if (st == LOOM_OK || st != LOOM_ERR_OOM) return st;
  }
  return oom_fail(p, n, size, seg, s);
}

static int add_use(block *b, loom_stream *s) {
  if (!s || s == b->stream) return 1;
  for (int i = 0; i < b->nuses; i++)
    if (b->uses[i] == s) return 1;
  if (!grow((void **)&b->uses, &b->capuses, b->nuses + 1, sizeof(loom_stream *))) return 0;
  b->uses[b->nuses++] = s;
  return 1;
}

loom_status loom_pool_malloc(loom_pool *p, size_t n, loom_stream *s, void **out) {
  if (!p || !out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_pool_malloc: NULL pool or out");
  *out = NULL;
  pthread_mutex_lock(&p->mu);
  if (n > ((size_t)1 << 60)) {
    p->st.num_ooms++;
    pthread_mutex_unlock(&p->mu);
    return loom_set_error(LOOM_ERR_OOM, "%s: cannot allocate %zu bytes: larger than any device", p->cfg.name, n);
  }
  size_t size = loom_pool_round_size(n);
  loom_pool_process_events_locked(p);
  block *b = NULL;
  loom_status st = take_block(p, n, size, s, &b);
  if (st != LOOM_OK) {
    pthread_mutex_unlock(&p->mu);
    return st;
  }
  if (should_split(p, b, size)) {
    block *r = loom_pool_block_new(p);
    if (r) {  /* no bookkeeping memory: hand out the whole block */
      r->addr = b->addr + size;
      r->size = b->size - size;
      r->seg = b->seg;
      r->stream = b->stream;
      r->prev = b;
      r->next = b->next;
      if (b->next) b->next->prev = r;
      b->next = r;
      b->size = size;
      r->state = LOOM_BLOCK_FREE;
      loom_pool_tree_insert(p, r);
    }
  }
  b->nuses = 0;
  if (!loom_ptrmap_put(&p->live, b->addr, b) || (p->arena && !add_use(b, s))) {
    loom_ptrmap_del(&p->live, b->addr);
    loom_pool_merge_insert(p, b);
    pthread_mutex_unlock(&p->mu);
    return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory for allocator bookkeeping", p->cfg.name);
  }
  int k = b->seg->kind;
  b->state = LOOM_BLOCK_ALLOCATED;
  b->requested = n;
  stat_add(p->st.allocated_bytes, k, (int64_t)b->size);
  stat_add(p->st.active_bytes, k, (int64_t)b->size);
  stat_add(p->st.requested_bytes, k, (int64_t)n);
  stat_add(p->st.allocations, k, 1);
  p->st.num_allocs++;
  b->trace_id = p->cfg.trace.alloc ? p->cfg.trace.alloc(p->cfg.trace.ud, n, s) : 0;
  b->site = LOOM_PROF_ACTIVE() ? loom_prof_site() : NULL;
  history(p, H_ALLOC, b->addr, b->size, s, b->site);
  unpoison(p, b->addr, n);
  *out = (void *)b->addr;
  pthread_mutex_unlock(&p->mu);
  return LOOM_OK;
}

loom_status loom_pool_free(loom_pool *p, void *ptr) {
  if (!p) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_pool_free: NULL pool");
  if (!ptr) return LOOM_OK;
  pthread_mutex_lock(&p->mu);
  block *b = loom_ptrmap_del(&p->live, (uintptr_t)ptr);
  if (!b) {
    pthread_mutex_unlock(&p->mu);
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "loom_alloc_free: %p was not allocated on %s, or was already freed (free it once, on the "
                          "device it was allocated on)",
                          ptr, p->cfg.name);
  }
  int k = b->seg->kind;
  stat_add(p->st.allocated_bytes, k, -(int64_t)b->size);
  stat_add(p->st.requested_bytes, k, -(int64_t)b->requested);
  stat_add(p->st.allocations, k, -1);
  p->st.num_frees++;
  if (b->trace_id && p->cfg.trace.free) p->cfg.trace.free(p->cfg.trace.ud, b->trace_id);
  poison(p, b->addr, b->size);
  loom_status st = LOOM_OK;
  uintptr_t addr = b->addr;
  size_t bsize = b->size;
  loom_stream *bs = b->stream;
  const char *site = b->site;
  if (b->nuses == 0) {
    loom_pool_block_free(p, b);
    history(p, H_FREE, addr, bsize, bs, site);  /* after active_bytes dropped */
  } else {
    history(p, H_FREE, addr, bsize, bs, site);
    b->state = LOOM_BLOCK_PENDING;
    for (int i = 0; i < b->nuses; i++) {
      void *ev;
      int dom;
      loom_status s = loom_pool_event_get(p, b->uses[i], &ev, &dom);
      if (s == LOOM_OK) s = p->prov->event_record(p->prov->ctx, ev, b->uses[i]);
      if (s == LOOM_OK && !grow((void **)&p->pend, &p->cappend, p->npend + 1, sizeof(pending_ev)))
        s = loom_set_error(LOOM_ERR_OOM, "%s: out of host memory for allocator events", p->cfg.name);
      if (s != LOOM_OK) {
        /* Without the event we cannot know when the stream is done with the
         * block, so it stays pending (lost) rather than be reused too early. */
        if (st == LOOM_OK) st = s;
        b->event_count++;
        continue;
      }
      p->pend[p->npend++] = (pending_ev){ev, dom, b};
      b->event_count++;
    }
    b->nuses = 0;
  }
  pthread_mutex_unlock(&p->mu);
  return st;
}

loom_status loom_pool_record_stream(loom_pool *p, void *ptr, loom_stream *s) {
  if (!p || !ptr) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_record_stream: NULL pool or pointer");
  pthread_mutex_lock(&p->mu);
  block *b = loom_ptrmap_get(&p->live, (uintptr_t)ptr);
  loom_status st = LOOM_OK;
  if (!b)
    st = loom_set_error(LOOM_ERR_INVALID_ARG,
                        "loom_alloc_record_stream: %p is not the start of a live allocation on %s", ptr, p->cfg.name);
  else if (!add_use(b, s))
    st = loom_set_error(LOOM_ERR_OOM, "loom_alloc_record_stream: out of host memory");
  pthread_mutex_unlock(&p->mu);
  return st;
}

loom_status loom_pool_empty_cache(loom_pool *p) {
  if (!loom_pool_may_give_back(p))
    return loom_set_error(LOOM_ERR_STATE, "%s: empty_cache during a graph capture on this device: segments cannot be "
                          "given back while a stream is captured (cudaFree is illegal there); call it before "
                          "loom_graph_capture_begin or after loom_graph_capture_end", p->cfg.name);
  loom_status st = LOOM_OK;
  pthread_mutex_lock(&p->mu);
  loom_pool_process_events_locked(p);
  loom_pool_release_all(p, &st);
  pthread_mutex_unlock(&p->mu);
  return st;
}

/* ---- lifecycle and controls ------------------------------------------------ */

void loom_pool_config_init(loom_pool_config *c, const char *name) {
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "%s", name ? name : "pool");
  c->max_split_size = SIZE_MAX;
}

static int set_history(loom_pool *p, int n) {
  hist_entry *h = NULL;
  if (n > 0 && !(h = loom_sys_calloc((size_t)n, sizeof *h))) return 0;
  loom_sys_free(p->hist);
  p->hist = h;
  p->cfg.history = n > 0 ? n : 0;
  p->hist_len = p->hist_head = 0;
  return 1;
}

/* Expandable segments: the provider's granule and the range to reserve per
 * (stream, size class): the limit, or else the whole device. */
static loom_status setup_expandable(loom_pool *p) {
  const loom_provider *prov = p->prov;
  const char *name = p->cfg.name;
  if (p->cfg.preallocate > 0)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: preallocate and expandable_segments exclude each other (one "
                          "arena that never grows, or ranges that grow); choose one", name);
  if (!prov->va_granularity || !prov->va_reserve || !prov->va_release || !prov->va_map || !prov->va_unmap)
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "%s: expandable_segments needs virtual memory support, which the %s "
                          "memory provider lacks; drop expandable_segments:true for this device", name, prov->name);
  size_t g = prov->va_granularity(prov->ctx);
  if (g == 0) return loom_error_prefix("%s: expandable_segments", name);
  if (g % LOOM_POOL_MIN_BLOCK || (g & (g - 1)))
    return loom_set_error(LOOM_ERR_INTERNAL, "%s: the %s provider's granule of %zu bytes is not a power of two of at "
                          "least 512", name, prov->name, g);
  size_t va = p->cfg.limit, fr = 0, tot = 0;
  if (!va) {
    if (prov->mem_info(prov->ctx, &fr, &tot) != LOOM_OK)
      return loom_error_prefix("%s: expandable_segments needs the device size", name);
    va = tot;
  }
  if (va > ((size_t)1 << 60)) va = (size_t)1 << 60;
  p->granule = g;
  p->va_size = (va + g - 1) / g * g;
  if (p->va_size < g) p->va_size = g;
  return LOOM_OK;
}

loom_status loom_pool_create(const loom_provider *prov, const loom_pool_config *cfg, loom_pool **out) {
  if (!prov || !cfg || !out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_pool_create: NULL argument");
  *out = NULL;
  loom_pool *p = loom_sys_calloc(1, sizeof *p);
  if (!p) return loom_set_error(LOOM_ERR_OOM, "loom_pool_create: out of host memory");
  pthread_mutex_init(&p->mu, NULL);
  p->prov = prov;
  p->cfg = *cfg;
  p->cfg.history = 0;
  p->rng = 0x9E3779B9u;
  p->st.struct_size = sizeof p->st;
  if (!set_history(p, cfg->history)) {
    loom_pool_destroy(p);
    return loom_set_error(LOOM_ERR_OOM, "loom_pool_create: out of host memory for %d history entries", cfg->history);
  }
  if (cfg->expandable) {
    loom_status st = setup_expandable(p);
    if (st != LOOM_OK) {
      loom_pool_destroy(p);
      return st;
    }
  }
  if (cfg->preallocate > 0) {
    size_t cap = cfg->limit, fr = 0, tot = 0;
    if (!cap) {
      loom_status st = prov->mem_info(prov->ctx, &fr, &tot);
      if (st != LOOM_OK) {
        loom_pool_destroy(p);
        return loom_error_prefix("%s: preallocate needs the device size", cfg->name);
      }
      cap = tot;
    }
    size_t want = (size_t)(cfg->preallocate * (double)cap) / LOOM_POOL_ROUND_LARGE * LOOM_POOL_ROUND_LARGE;
    if (want == 0) {
      loom_pool_destroy(p);
      return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: preallocate:%g of %zu bytes is less than 2 MiB; raise it",
                            cfg->name, cfg->preallocate, cap);
    }
    block *b = NULL;
    loom_status st = loom_pool_seg_new(p, LOOM_POOL_LARGE, want, cfg->arena_stream, &b);
    if (st != LOOM_OK) {
      loom_pool_destroy(p);
      return loom_error_prefix("%s: preallocate:%g (%zu bytes) failed", cfg->name, cfg->preallocate, want);
    }
    b->seg->arena = 1;
    p->arena = b->seg;
    loom_pool_tree_insert(p, b);
  }
  *out = p;
  return LOOM_OK;
}

void loom_pool_destroy(loom_pool *p) {
  if (!p) return;
  for (int i = 0; i < p->nsegs; i++) {
    segment *sg = p->segs[i];
    if (sg->expandable) {
      loom_pool_exp_destroy_segment(p, sg);
    } else {
      unpoison(p, sg->base, sg->size);
      p->prov->seg_free(p->prov->ctx, (void *)sg->base, sg->size);
    }
    for (block *b = sg->head; b;) {
      block *nx = b->next;
      loom_sys_free(b->uses);
      loom_sys_free(b);
      b = nx;
    }
    loom_sys_free(sg);
  }
  for (int i = 0; i < p->npend; i++) p->prov->event_free(p->prov->ctx, p->pend[i].ev);
  for (int i = 0; i < p->nevcache; i++) p->prov->event_free(p->prov->ctx, p->evcache[i].ev);
  while (p->spare) {
    block *nx = p->spare->spare_next;
    loom_sys_free(p->spare->uses);
    loom_sys_free(p->spare);
    p->spare = nx;
  }
  loom_ptrmap_free(&p->live);
  loom_sys_free(p->segs);
  loom_sys_free(p->pend);
  loom_sys_free(p->evcache);
  loom_sys_free(p->hist);
  pthread_mutex_destroy(&p->mu);
  loom_sys_free(p);
}

loom_status loom_pool_set_controls(loom_pool *p, size_t limit, size_t max_split_size, double gc_threshold,
                                   int history_n) {
  loom_status st = LOOM_OK;
  pthread_mutex_lock(&p->mu);
  p->cfg.limit = limit;
  p->cfg.max_split_size = max_split_size;
  p->cfg.gc_threshold = gc_threshold;
  if (history_n != p->cfg.history && !set_history(p, history_n))
    st = loom_set_error(LOOM_ERR_OOM, "%s: out of host memory for %d history entries", p->cfg.name, history_n);
  pthread_mutex_unlock(&p->mu);
  return st;
}

int loom_pool_preallocated(const loom_pool *p) { return p->arena != NULL; }

int loom_pool_expandable(const loom_pool *p) { return p->cfg.expandable != 0; }

int loom_pool_owns(loom_pool *p, const void *ptr) {
  pthread_mutex_lock(&p->mu);
  int r = loom_ptrmap_get(&p->live, (uintptr_t)ptr) != NULL;
  pthread_mutex_unlock(&p->mu);
  return r;
}

int loom_pool_has_allocated(loom_pool *p) {
  pthread_mutex_lock(&p->mu);
  int r = p->st.num_allocs > 0 || p->st.reserved_bytes[0].current > 0;
  pthread_mutex_unlock(&p->mu);
  return r;
}
