/* pool.c — the caching, stream-ordered pool (policy in pool.h).
 *
 * Data structures, all protected by the pool mutex:
 *  - segments: a sorted array (by base) of device segments; each holds a
 *    doubly linked list of blocks that tiles it exactly.
 *  - free blocks: per size class, a treap keyed by (stream, size, address)
 *    for best fit on a stream, and a second treap keyed by (size, address)
 *    holding only free blocks that span a whole segment, which is what a
 *    cross-stream take, an OOM release or a garbage collection looks for.
 *  - allocated blocks: an address -> block hash map, because callers free
 *    by pointer.
 *  - pending frees: (event, block) pairs polled at each allocation.
 * Statistics are updated at each state change so reading them is O(1);
 * loom_pool_verify recomputes them from the blocks. */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/pool.h"
#include "alloc/ptrmap.h"
#include "core/error.h"
#include "prof/prof.h"

#if defined(__SANITIZE_ADDRESS__)
#define LOOM_POOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_POOL_ASAN 1
#endif
#endif
#ifdef LOOM_POOL_ASAN
#include <sanitizer/asan_interface.h>
#endif

typedef struct block block;

typedef struct segment {
  uintptr_t base;
  size_t size;
  int kind;
  int arena;
  loom_stream *stream;
  block *head;
} segment;

struct block {
  uintptr_t addr;
  size_t size, requested;
  segment *seg;
  loom_stream *stream;
  block *prev, *next;  /* neighbours in the segment */
  int state;
  int event_count;
  loom_stream **uses;  /* streams other than `stream` that used it */
  int nuses, capuses;
  block *l[2], *r[2];  /* treap links: [0] free tree, [1] whole-segment tree */
  uint32_t prio;
  uint64_t trace_id, free_tick;
  block *spare_next;
  const char *site;    /* the op (or range) that allocated it, when sites are recorded */
};

typedef struct pending_ev { void *ev; int domain; block *b; } pending_ev;
typedef struct cached_ev { void *ev; int domain; } cached_ev;

enum { H_ALLOC, H_FREE, H_FREE_COMPLETED, H_SEGMENT_ALLOC, H_SEGMENT_FREE, H_OOM };
static const char *const hist_names[] = {"alloc", "free", "free_completed", "segment_alloc", "segment_free", "oom"};
typedef struct hist_entry {
  int action;
  uintptr_t addr;
  size_t size;
  loom_stream *stream;
  uint64_t seq;
  int64_t ts_ns;       /* CLOCK_MONOTONIC, the profiler's clock */
  const char *site;
} hist_entry;

struct loom_pool {
  pthread_mutex_t mu;
  const loom_provider *prov;
  loom_pool_config cfg;
  block *root[3][2];  /* [LOOM_POOL_SMALL/LARGE][tree] */
  loom_ptrmap live;
  segment **segs;
  int nsegs, capsegs;
  pending_ev *pend;
  int npend, cappend;
  cached_ev *evcache;
  int nevcache, capevcache;
  block *spare;
  uint32_t rng;
  uint64_t tick;
  loom_memory_stats st;
  hist_entry *hist;
  int hist_len, hist_head;
  uint64_t hist_seq;
  segment *arena;
  char provider_msg[256];
};

/* ---- small helpers --------------------------------------------------------- */

static int grow(void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap) return 1;
  int nc = *cap ? *cap * 2 : 16;
  while (nc < need) nc *= 2;
  void *p = realloc(*arr, (size_t)nc * elem);
  if (!p) return 0;
  *arr = p;
  *cap = nc;
  return 1;
}

static void poison(loom_pool *p, uintptr_t a, size_t n) {
#ifdef LOOM_POOL_ASAN
  if (p->cfg.poison && n) ASAN_POISON_MEMORY_REGION((void *)a, n);
#else
  (void)p, (void)a, (void)n;
#endif
}

static void unpoison(loom_pool *p, uintptr_t a, size_t n) {
#ifdef LOOM_POOL_ASAN
  if (p->cfg.poison && n) ASAN_UNPOISON_MEMORY_REGION((void *)a, n);
#else
  (void)p, (void)a, (void)n;
#endif
}

static void stat_add(loom_memory_stat *a, int kind, int64_t d) {
  a[0].current += d;
  if (a[0].current > a[0].peak) a[0].peak = a[0].current;
  a[kind].current += d;
  if (a[kind].current > a[kind].peak) a[kind].peak = a[kind].current;
}

static const char *fmt_bytes(char *buf, size_t n, uint64_t v) {
  if (v >= ((uint64_t)1 << 30)) snprintf(buf, n, "%.2f GiB", (double)v / (double)(1u << 30));
  else if (v >= ((uint64_t)1 << 20)) snprintf(buf, n, "%.2f MiB", (double)v / (double)(1u << 20));
  else if (v >= 1024) snprintf(buf, n, "%.2f KiB", (double)v / 1024.0);
  else snprintf(buf, n, "%" PRIu64 " B", v);
  return buf;
}

/* Called after the statistics changed, so the profiler's counter sample
 * (lib/prof) is exact at this instant. Out of line behind history() below:
 * inlined, its call to the profiler made every allocation pay a full call
 * frame (cachegrind: ~28 instructions per call with both off). */
__attribute__((noinline)) static void history_record(loom_pool *p, int action, uintptr_t addr, size_t size,
                                                     loom_stream *s, const char *site) {
  int64_t ts = 0;
  if (LOOM_PROF_ACTIVE())
    ts = loom_prof_alloc_event(p->cfg.name, hist_names[action], addr, size, s, site, p->st.allocated_bytes[0].current,
                               p->st.reserved_bytes[0].current, p->st.active_bytes[0].current);
  if (!p->hist || p->cfg.history <= 0) return;
  hist_entry *h = &p->hist[p->hist_head];
  h->ts_ns = ts ? ts : loom_prof_now_ns();
  h->site = site;
  h->action = action;
  h->addr = addr;
  h->size = size;
  h->stream = s;
  h->seq = ++p->hist_seq;
  p->hist_head = (p->hist_head + 1) % p->cfg.history;
  if (p->hist_len < p->cfg.history) p->hist_len++;
}

/* With neither the profiler nor history on: two predictable tests. */
static inline void history(loom_pool *p, int action, uintptr_t addr, size_t size, loom_stream *s, const char *site) {
  if (LOOM_PROF_ACTIVE() || p->hist) history_record(p, action, addr, size, s, site);
}

size_t loom_pool_round_size(size_t n) {
  if (n < LOOM_POOL_MIN_BLOCK) return LOOM_POOL_MIN_BLOCK;
  return (n + LOOM_POOL_MIN_BLOCK - 1) / LOOM_POOL_MIN_BLOCK * LOOM_POOL_MIN_BLOCK;
}

size_t loom_pool_segment_size(size_t rounded) {
  if (rounded <= LOOM_POOL_SMALL_SIZE) return LOOM_POOL_SMALL_BUFFER;
  if (rounded < LOOM_POOL_MIN_LARGE_ALLOC) return LOOM_POOL_LARGE_BUFFER;
  return (rounded + LOOM_POOL_ROUND_LARGE - 1) / LOOM_POOL_ROUND_LARGE * LOOM_POOL_ROUND_LARGE;
}

static int is_split(const block *b) { return b->prev != NULL || b->next != NULL; }

/* ---- treaps ---------------------------------------------------------------- */

static int bcmp_key(int t, const block *a, const block *b) {
  if (t == 0 && a->stream != b->stream) return (uintptr_t)a->stream < (uintptr_t)b->stream ? -1 : 1;
  if (a->size != b->size) return a->size < b->size ? -1 : 1;
  return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static void tsplit(int t, block *n, const block *key, block **lo, block **hi) {
  if (!n) {
    *lo = *hi = NULL;
  } else if (bcmp_key(t, n, key) < 0) {
    tsplit(t, n->r[t], key, &n->r[t], hi);
    *lo = n;
  } else {
    tsplit(t, n->l[t], key, lo, &n->l[t]);
    *hi = n;
  }
}

static block *tmerge(int t, block *a, block *b) {
  if (!a) return b;
  if (!b) return a;
  if (a->prio > b->prio) {
    a->r[t] = tmerge(t, a->r[t], b);
    return a;
  }
  b->l[t] = tmerge(t, a, b->l[t]);
  return b;
}

static block *tinsert(int t, block *root, block *x) {
  if (!root) {
    x->l[t] = x->r[t] = NULL;
    return x;
  }
  if (x->prio > root->prio) {
    tsplit(t, root, x, &x->l[t], &x->r[t]);
    return x;
  }
  if (bcmp_key(t, x, root) < 0) root->l[t] = tinsert(t, root->l[t], x);
  else root->r[t] = tinsert(t, root->r[t], x);
  return root;
}

static block *terase(int t, block *root, const block *x) {
  if (!root) return NULL;
  int c = bcmp_key(t, x, root);
  if (c == 0) return tmerge(t, root->l[t], root->r[t]);
  if (c < 0) root->l[t] = terase(t, root->l[t], x);
  else root->r[t] = terase(t, root->r[t], x);
  return root;
}

/* First block >= key (strict: > key). */
static block *tlower(int t, block *n, const block *key, int strict) {
  block *best = NULL;
  while (n) {
    int c = bcmp_key(t, n, key);
    if (c > 0 || (c == 0 && !strict)) {
      best = n;
      n = n->l[t];
    } else {
      n = n->r[t];
    }
  }
  return best;
}

static int in_whole_tree(const block *b) { return !is_split(b) && !b->seg->arena; }

static void free_insert(loom_pool *p, block *b) {
  int k = b->seg->kind;
  p->root[k][0] = tinsert(0, p->root[k][0], b);
  if (in_whole_tree(b)) p->root[k][1] = tinsert(1, p->root[k][1], b);
  else if (is_split(b)) stat_add(p->st.inactive_split_bytes, k, (int64_t)b->size);
  b->free_tick = ++p->tick;
}

static void free_remove(loom_pool *p, block *b) {
  int k = b->seg->kind;
  p->root[k][0] = terase(0, p->root[k][0], b);
  if (in_whole_tree(b)) p->root[k][1] = terase(1, p->root[k][1], b);
  else if (is_split(b)) stat_add(p->st.inactive_split_bytes, k, -(int64_t)b->size);
}

/* ---- blocks, segments, events ---------------------------------------------- */

static block *block_new(loom_pool *p) {
  block *b = p->spare;
  if (b) {
    p->spare = b->spare_next;
    loom_stream **uses = b->uses;
    int cap = b->capuses;
    memset(b, 0, sizeof *b);
    b->uses = uses;
    b->capuses = cap;
  } else {
    b = calloc(1, sizeof *b);
    if (!b) return NULL;
  }
  p->rng ^= p->rng << 13;
  p->rng ^= p->rng >> 17;
  p->rng ^= p->rng << 5;
  b->prio = p->rng;
  return b;
}

static void block_recycle(loom_pool *p, block *b) {
  b->spare_next = p->spare;
  p->spare = b;
}

static int seg_index(loom_pool *p, uintptr_t addr) {
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

static loom_status get_event(loom_pool *p, loom_stream *s, void **ev, int *dom) {
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

static void put_event(loom_pool *p, void *ev, int dom) {
  if (!grow((void **)&p->evcache, &p->capevcache, p->nevcache + 1, sizeof(cached_ev))) {
    p->prov->event_destroy(p->prov->ctx, ev);
    return;
  }
  p->evcache[p->nevcache++] = (cached_ev){ev, dom};
}

/* Make `waiter` wait (GPU-side) for what is queued on `on` now. */
static loom_status wait_for_stream(loom_pool *p, loom_stream *waiter, loom_stream *on) {
  if (!on || waiter == on) return LOOM_OK;  /* the host is synchronous */
  void *ev;
  int dom;
  LOOM_TRY(get_event(p, on, &ev, &dom));
  loom_status st = p->prov->event_record(p->prov->ctx, ev, on);
  if (st == LOOM_OK) st = p->prov->stream_wait(p->prov->ctx, waiter, ev);
  put_event(p, ev, dom);  /* a wait captures the record; the event can be reused */
  return st;
}

static loom_status new_segment(loom_pool *p, int kind, size_t n, loom_stream *s, block **out) {
  if (p->cfg.limit && (size_t)p->st.reserved_bytes[0].current + n > p->cfg.limit) {
    char a[32], b[32], c[32];
    snprintf(p->provider_msg, sizeof p->provider_msg, "the limit of %s would be exceeded (%s reserved + %s)",
             fmt_bytes(a, sizeof a, p->cfg.limit), fmt_bytes(b, sizeof b, (uint64_t)p->st.reserved_bytes[0].current),
             fmt_bytes(c, sizeof c, n));
    return loom_set_error(LOOM_ERR_OOM, "%s", p->provider_msg);
  }
  void *ptr = NULL;
  loom_status st = p->prov->seg_alloc(p->prov->ctx, n, &ptr);
  if (st != LOOM_OK) {
    snprintf(p->provider_msg, sizeof p->provider_msg, "%s", loom_last_error());
    return st;
  }
  segment *sg = calloc(1, sizeof *sg);
  block *b = block_new(p);
  if (!sg || !b || !grow((void **)&p->segs, &p->capsegs, p->nsegs + 1, sizeof(segment *))) {
    free(sg);
    if (b) block_recycle(p, b);
    p->prov->seg_free(p->prov->ctx, ptr, n);
    snprintf(p->provider_msg, sizeof p->provider_msg, "out of host memory for allocator bookkeeping");
    return loom_set_error(LOOM_ERR_OOM, "%s", p->provider_msg);
  }
  sg->base = (uintptr_t)ptr;
  sg->size = n;
  sg->kind = kind;
  sg->stream = s;
  sg->head = b;
  int pos = 0;
  while (pos < p->nsegs && p->segs[pos]->base < sg->base) pos++;
  memmove(&p->segs[pos + 1], &p->segs[pos], (size_t)(p->nsegs - pos) * sizeof(segment *));
  p->segs[pos] = sg;
  p->nsegs++;
  b->addr = sg->base;
  b->size = n;
  b->seg = sg;
  b->stream = s;
  b->state = LOOM_BLOCK_FREE;
  stat_add(p->st.reserved_bytes, kind, (int64_t)n);
  stat_add(p->st.segments, kind, 1);
  p->st.num_device_allocs++;
  poison(p, sg->base, n);
  history(p, H_SEGMENT_ALLOC, sg->base, n, s, NULL);
  *out = b;
  return LOOM_OK;
}

/* b spans a whole unused segment and sits in the free trees. */
static loom_status release_segment(loom_pool *p, block *b) {
  segment *sg = b->seg;
  free_remove(p, b);
  unpoison(p, sg->base, sg->size);
  loom_status st = p->prov->seg_free(p->prov->ctx, (void *)sg->base, sg->size);
  int i = seg_index(p, sg->base);
  memmove(&p->segs[i], &p->segs[i + 1], (size_t)(p->nsegs - i - 1) * sizeof(segment *));
  p->nsegs--;
  stat_add(p->st.reserved_bytes, sg->kind, -(int64_t)sg->size);
  stat_add(p->st.segments, sg->kind, -1);
  p->st.num_device_frees++;
  history(p, H_SEGMENT_FREE, sg->base, sg->size, b->stream, NULL);
  block_recycle(p, b);
  free(sg);
  return st;
}

static int release_all(loom_pool *p, loom_status *st) {
  int n = 0;
  for (int k = LOOM_POOL_SMALL; k <= LOOM_POOL_LARGE; k++) {
    while (p->root[k][1]) {
      loom_status s = release_segment(p, p->root[k][1]);
      if (s != LOOM_OK && st && *st == LOOM_OK) *st = s;
      n++;
    }
  }
  return n;
}

/* First OOM retry, for this size class: the smallest unused cached segment
 * that can hold n; if none can, the largest ones until n bytes are freed.
 * Returns how many segments were released. */
static int release_fitting(loom_pool *p, int kind, size_t n) {
  block key = {0};
  key.size = n;
  block *b = tlower(1, p->root[kind][1], &key, 0);
  if (b) {
    release_segment(p, b);
    return 1;
  }
  int count = 0;
  for (size_t freed = 0; freed < n && p->root[kind][1]; count++) {
    block *m = p->root[kind][1];
    while (m->r[1]) m = m->r[1];
    freed += m->size;
    release_segment(p, m);
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
static void garbage_collect(loom_pool *p, size_t need) {
  if (p->cfg.gc_threshold <= 0) return;
  size_t cap = p->cfg.limit, fr = 0, tot = 0;
  if (!cap && p->prov->mem_info(p->prov->ctx, &fr, &tot) == LOOM_OK) cap = tot;
  double target = p->cfg.gc_threshold * (double)cap;
  if (!cap || (double)((size_t)p->st.reserved_bytes[0].current + need) <= target) return;
  int n = p->st.segments[0].current > 0 ? (int)p->st.segments[0].current : 0;
  block **arr = malloc((size_t)(n + 1) * sizeof *arr);
  if (!arr) return;
  int len = 0;
  collect_whole(p->root[LOOM_POOL_SMALL][1], arr, &len);
  collect_whole(p->root[LOOM_POOL_LARGE][1], arr, &len);
  qsort(arr, (size_t)len, sizeof *arr, cmp_tick);
  for (int i = 0; i < len && (double)((size_t)p->st.reserved_bytes[0].current + need) > target; i++)
    release_segment(p, arr[i]);
  free(arr);
}

static void merge_insert(loom_pool *p, block *b) {
  if (b->prev && b->prev->state == LOOM_BLOCK_FREE) {
    block *pr = b->prev;
    free_remove(p, pr);
    pr->size += b->size;
    pr->next = b->next;
    if (b->next) b->next->prev = pr;
    block_recycle(p, b);
    b = pr;
  }
  if (b->next && b->next->state == LOOM_BLOCK_FREE) {
    block *nx = b->next;
    free_remove(p, nx);
    b->size += nx->size;
    b->next = nx->next;
    if (nx->next) nx->next->prev = b;
    block_recycle(p, nx);
  }
  free_insert(p, b);
}

static void free_block(loom_pool *p, block *b) {
  stat_add(p->st.active_bytes, b->seg->kind, -(int64_t)b->size);
  b->state = LOOM_BLOCK_FREE;
  b->nuses = 0;
  b->event_count = 0;
  merge_insert(p, b);
}

static void process_events_locked(loom_pool *p) {
  for (int i = 0; i < p->npend;) {
    if (p->prov->event_query(p->prov->ctx, p->pend[i].ev) != 1) {
      i++;
      continue;
    }
    block *b = p->pend[i].b;
    put_event(p, p->pend[i].ev, p->pend[i].domain);
    p->pend[i] = p->pend[--p->npend];
    if (--b->event_count == 0) {
      uintptr_t addr = b->addr;
      size_t size = b->size;
      loom_stream *bs = b->stream;
      const char *site = b->site;
      free_block(p, b);
      history(p, H_FREE_COMPLETED, addr, size, bs, site);
    }
  }
}

void loom_pool_process_events(loom_pool *p) {
  pthread_mutex_lock(&p->mu);
  process_events_locked(p);
  pthread_mutex_unlock(&p->mu);
}

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
  block key = {0};
  key.stream = s;
  key.size = size;
  block *b = tlower(0, p->root[kind][0], &key, 0);
  if (!b || b->stream != s || (check && !size_ok(p, size, b->size))) return NULL;
  free_remove(p, b);
  return b;
}

static loom_status take_other_stream(loom_pool *p, int kind, loom_stream *s, size_t size, block **out) {
  block key = {0};
  key.size = size;
  for (block *b = tlower(1, p->root[kind][1], &key, 0); b; b = tlower(1, p->root[kind][1], b, 1)) {
    if (!size_ok(p, size, b->size)) break;
    if (b->stream == s) continue;
    LOOM_TRY(wait_for_stream(p, s, b->stream));
    free_remove(p, b);
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
  char how[384];
  if (p->arena)
    snprintf(how, sizeof how, "the pool was preallocated (preallocate:%g, one arena of %s) and does not grow",
             p->cfg.preallocate, fmt_bytes(sg, sizeof sg, p->arena->size));
  else
    snprintf(how, sizeof how, "a new %s segment failed: %s", fmt_bytes(sg, sizeof sg, seg_size), p->provider_msg);
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

static loom_status take_block(loom_pool *p, size_t n, size_t size, loom_stream *s, block **out) {
  if (p->arena) {
    loom_stream *as = p->cfg.arena_stream;
    block *b = find_free(p, LOOM_POOL_LARGE, as, size, 0);
    if (!b) return oom_fail(p, n, size, 0, s);
    loom_status st = wait_for_stream(p, s, as);
    if (st != LOOM_OK) {
      merge_insert(p, b);
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
  LOOM_TRY(take_other_stream(p, kind, s, size, &b));
  if (b) {
    p->st.num_cache_hits++;
    p->st.num_cross_stream_reuses++;
    *out = b;
    return LOOM_OK;
  }
  size_t seg = loom_pool_segment_size(size);
  garbage_collect(p, seg);
  loom_status st = new_segment(p, kind, seg, s, out);
  if (st == LOOM_OK || st != LOOM_ERR_OOM) return st;
  /* Retry 1: free the one cached segment that fits best. */
  if (release_fitting(p, kind, seg)) {
    p->st.num_alloc_retries++;
    st = new_segment(p, kind, seg, s, out);
    if (st == LOOM_OK || st != LOOM_ERR_OOM) return st;
  }
  /* Retry 2: everything unused, after collecting finished frees. */
  process_events_locked(p);
  if (release_all(p, NULL) > 0) {
    p->st.num_alloc_retries++;
    st = new_segment(p, kind, seg, s, out);
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
  process_events_locked(p);
  block *b = NULL;
  loom_status st = take_block(p, n, size, s, &b);
  if (st != LOOM_OK) {
    pthread_mutex_unlock(&p->mu);
    return st;
  }
  if (should_split(p, b, size)) {
    block *r = block_new(p);
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
      free_insert(p, r);
    }
  }
  b->nuses = 0;
  if (!loom_ptrmap_put(&p->live, b->addr, b) || (p->arena && !add_use(b, s))) {
    loom_ptrmap_del(&p->live, b->addr);
    merge_insert(p, b);
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
    free_block(p, b);
    history(p, H_FREE, addr, bsize, bs, site);  /* after active_bytes dropped */
  } else {
    history(p, H_FREE, addr, bsize, bs, site);
    b->state = LOOM_BLOCK_PENDING;
    for (int i = 0; i < b->nuses; i++) {
      void *ev;
      int dom;
      loom_status s = get_event(p, b->uses[i], &ev, &dom);
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
  loom_status st = LOOM_OK;
  pthread_mutex_lock(&p->mu);
  process_events_locked(p);
  release_all(p, &st);
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
  if (n > 0 && !(h = calloc((size_t)n, sizeof *h))) return 0;
  free(p->hist);
  p->hist = h;
  p->cfg.history = n > 0 ? n : 0;
  p->hist_len = p->hist_head = 0;
  return 1;
}

loom_status loom_pool_create(const loom_provider *prov, const loom_pool_config *cfg, loom_pool **out) {
  if (!prov || !cfg || !out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_pool_create: NULL argument");
  *out = NULL;
  loom_pool *p = calloc(1, sizeof *p);
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
    loom_status st = new_segment(p, LOOM_POOL_LARGE, want, cfg->arena_stream, &b);
    if (st != LOOM_OK) {
      loom_pool_destroy(p);
      return loom_error_prefix("%s: preallocate:%g (%zu bytes) failed", cfg->name, cfg->preallocate, want);
    }
    b->seg->arena = 1;
    p->arena = b->seg;
    free_insert(p, b);
  }
  *out = p;
  return LOOM_OK;
}

void loom_pool_destroy(loom_pool *p) {
  if (!p) return;
  for (int i = 0; i < p->nsegs; i++) {
    segment *sg = p->segs[i];
    unpoison(p, sg->base, sg->size);
    p->prov->seg_free(p->prov->ctx, (void *)sg->base, sg->size);
    for (block *b = sg->head; b;) {
      block *nx = b->next;
      free(b->uses);
      free(b);
      b = nx;
    }
    free(sg);
  }
  for (int i = 0; i < p->npend; i++) p->prov->event_destroy(p->prov->ctx, p->pend[i].ev);
  for (int i = 0; i < p->nevcache; i++) p->prov->event_destroy(p->prov->ctx, p->evcache[i].ev);
  while (p->spare) {
    block *nx = p->spare->spare_next;
    free(p->spare->uses);
    free(p->spare);
    p->spare = nx;
  }
  loom_ptrmap_free(&p->live);
  free(p->segs);
  free(p->pend);
  free(p->evcache);
  free(p->hist);
  pthread_mutex_destroy(&p->mu);
  free(p);
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

int loom_pool_has_allocated(loom_pool *p) {
  pthread_mutex_lock(&p->mu);
  int r = p->st.num_allocs > 0 || p->st.reserved_bytes[0].current > 0;
  pthread_mutex_unlock(&p->mu);
  return r;
}

/* ---- statistics ------------------------------------------------------------ */

static void fill_stats(loom_pool *p, loom_memory_stats *s) {
  *s = p->st;
  s->struct_size = sizeof *s;
  s->limit_bytes = (int64_t)p->cfg.limit;
  s->max_split_size = p->cfg.max_split_size == SIZE_MAX ? -1 : (int64_t)p->cfg.max_split_size;
}

void loom_pool_stats(loom_pool *p, loom_memory_stats *out) {
  size_t want = out->struct_size ? out->struct_size : sizeof *out;
  if (want > sizeof *out) want = sizeof *out;
  loom_memory_stats s;
  pthread_mutex_lock(&p->mu);
  fill_stats(p, &s);
  pthread_mutex_unlock(&p->mu);
  memcpy(out, &s, want);
  out->struct_size = want;
}

#define LOOM_STAT_ARRAYS(s)                                                                        \
  { (s)->allocated_bytes, (s)->reserved_bytes, (s)->active_bytes, (s)->inactive_split_bytes,       \
    (s)->requested_bytes, (s)->allocations, (s)->segments }

void loom_pool_reset_peaks(loom_pool *p) {
  pthread_mutex_lock(&p->mu);
  loom_memory_stat *arrs[] = LOOM_STAT_ARRAYS(&p->st);
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++)
    for (int k = 0; k < LOOM_MEM_POOLS; k++) arrs[i][k].peak = arrs[i][k].current;
  pthread_mutex_unlock(&p->mu);
}

void loom_pool_reset_counters(loom_pool *p) {
  pthread_mutex_lock(&p->mu);
  p->st.num_allocs = p->st.num_frees = p->st.num_cache_hits = p->st.num_cross_stream_reuses = 0;
  p->st.num_device_allocs = p->st.num_device_frees = p->st.num_alloc_retries = p->st.num_ooms = 0;
  pthread_mutex_unlock(&p->mu);
}

/* Growable string for the summary and the snapshot. */
typedef struct sbuf { char *s; size_t len, cap; int failed; } sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) { b->failed = 1; return; }
    if (b->s && b->len + (size_t)n < b->cap) { b->len += (size_t)n; return; }
    size_t nc = b->cap ? b->cap * 2 : 4096;
    while (nc < b->len + (size_t)n + 1) nc *= 2;
    char *ns = realloc(b->s, nc);
    if (!ns) { b->failed = 1; return; }
    b->s = ns;
    b->cap = nc;
  }
}

/* A JSON string (null for NULL); sites are op names and user range names. */
static void sb_json_str(sbuf *b, const char *s) {
  if (!s) {
    sb_printf(b, "null");
    return;
  }
  sb_printf(b, "\"");
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') sb_printf(b, "\\%c", *c);
    else if (*c < 0x20) sb_printf(b, "\\u%04x", *c);
    else sb_printf(b, "%c", *c);
  }
  sb_printf(b, "\"");
}

static char *sb_finish(sbuf *b) {
  if (b->failed) {
    free(b->s);
    loom_set_error(LOOM_ERR_OOM, "out of host memory formatting allocator state");
    return NULL;
  }
  return b->s;
}

char *loom_pool_summary(loom_pool *p) {
  loom_memory_stats s;
  pthread_mutex_lock(&p->mu);
  fill_stats(p, &s);
  int npend = p->npend;
  pthread_mutex_unlock(&p->mu);
  sbuf b = {0};
  char x[32], y[32];
  sb_printf(&b, "loom memory summary: %s%s\n", p->cfg.name, p->arena ? " (preallocated arena, no growth)" : "");
  sb_printf(&b, "  limit: %s   max_split_size: %s   gc threshold: %g\n",
            s.limit_bytes ? fmt_bytes(x, sizeof x, (uint64_t)s.limit_bytes) : "none",
            s.max_split_size < 0 ? "unlimited" : fmt_bytes(y, sizeof y, (uint64_t)s.max_split_size),
            p->cfg.gc_threshold);
  sb_printf(&b, "  %-22s %-6s %14s %14s\n", "metric", "pool", "current", "peak");
  struct { const char *name; loom_memory_stat *a; int bytes; } rows[] = {
      {"allocated", s.allocated_bytes, 1}, {"reserved", s.reserved_bytes, 1},
      {"active", s.active_bytes, 1},       {"inactive split", s.inactive_split_bytes, 1},
      {"requested", s.requested_bytes, 1}, {"allocations", s.allocations, 0},
      {"segments", s.segments, 0},
  };
  const char *pools[] = {"all", "small", "large"};
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    for (int k = 0; k < LOOM_MEM_POOLS; k++) {
      if (rows[r].bytes)
        sb_printf(&b, "  %-22s %-6s %14s %14s\n", k ? "" : rows[r].name, pools[k],
                  fmt_bytes(x, sizeof x, (uint64_t)rows[r].a[k].current),
                  fmt_bytes(y, sizeof y, (uint64_t)rows[r].a[k].peak));
      else
        sb_printf(&b, "  %-22s %-6s %14" PRId64 " %14" PRId64 "\n", k ? "" : rows[r].name, pools[k],
                  rows[r].a[k].current, rows[r].a[k].peak);
    }
  }
  sb_printf(&b,
            "  counters: allocs %" PRId64 ", frees %" PRId64 ", cache hits %" PRId64 ", cross-stream reuses %" PRId64
            ", device allocs %" PRId64 ", device frees %" PRId64 ", retries %" PRId64 ", OOMs %" PRId64
            ", pending frees %d\n",
            s.num_allocs, s.num_frees, s.num_cache_hits, s.num_cross_stream_reuses, s.num_device_allocs,
            s.num_device_frees, s.num_alloc_retries, s.num_ooms, npend);
  return sb_finish(&b);
}

static const char *state_name(int st) {
  return st == LOOM_BLOCK_ALLOCATED ? "active_allocated" : st == LOOM_BLOCK_PENDING ? "active_pending_free" : "inactive";
}

char *loom_pool_snapshot_json(loom_pool *p) {
  sbuf b = {0};
  pthread_mutex_lock(&p->mu);
  loom_memory_stats s;
  fill_stats(p, &s);
  sb_printf(&b, "{\"device\":\"%s\",\"preallocated\":%s,\"stats\":{", p->cfg.name, p->arena ? "true" : "false");
  struct { const char *name; loom_memory_stat *a; } rows[] = {
      {"allocated_bytes", s.allocated_bytes}, {"reserved_bytes", s.reserved_bytes},
      {"active_bytes", s.active_bytes},       {"inactive_split_bytes", s.inactive_split_bytes},
      {"requested_bytes", s.requested_bytes}, {"allocations", s.allocations},
      {"segments", s.segments},
  };
  const char *pools[] = {"all", "small_pool", "large_pool"};
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    sb_printf(&b, "%s\"%s\":{", r ? "," : "", rows[r].name);
    for (int k = 0; k < LOOM_MEM_POOLS; k++)
      sb_printf(&b, "%s\"%s\":{\"current\":%" PRId64 ",\"peak\":%" PRId64 "}", k ? "," : "", pools[k],
                rows[r].a[k].current, rows[r].a[k].peak);
    sb_printf(&b, "}");
  }
  sb_printf(&b,
            ",\"num_allocs\":%" PRId64 ",\"num_frees\":%" PRId64 ",\"num_cache_hits\":%" PRId64
            ",\"num_cross_stream_reuses\":%" PRId64 ",\"num_device_allocs\":%" PRId64 ",\"num_device_frees\":%" PRId64
            ",\"num_alloc_retries\":%" PRId64 ",\"num_ooms\":%" PRId64 ",\"limit_bytes\":%" PRId64
            ",\"max_split_size\":%" PRId64 "},\"segments\":[",
            s.num_allocs, s.num_frees, s.num_cache_hits, s.num_cross_stream_reuses, s.num_device_allocs,
            s.num_device_frees, s.num_alloc_retries, s.num_ooms, s.limit_bytes, s.max_split_size);
  for (int i = 0; i < p->nsegs; i++) {
    segment *sg = p->segs[i];
    sb_printf(&b, "%s{\"address\":%" PRIuPTR ",\"size\":%zu,\"pool\":\"%s\",\"stream\":%" PRIuPTR ",\"blocks\":[",
              i ? "," : "", sg->base, sg->size, sg->kind == LOOM_POOL_SMALL ? "small" : "large",
              (uintptr_t)sg->stream);
    for (block *x = sg->head; x; x = x->next) {
      sb_printf(&b, "%s{\"address\":%" PRIuPTR ",\"size\":%zu,\"requested\":%zu,\"state\":\"%s\",\"site\":",
                x == sg->head ? "" : ",", x->addr, x->size, x->state == LOOM_BLOCK_FREE ? (size_t)0 : x->requested,
                state_name(x->state));
      sb_json_str(&b, x->state == LOOM_BLOCK_FREE ? NULL : x->site);
      sb_printf(&b, "}");
    }
    sb_printf(&b, "]}");
  }
  sb_printf(&b, "],\"history\":[");
  for (int i = 0; i < p->hist_len; i++) {
    int idx = (p->hist_head - p->hist_len + i + p->cfg.history) % p->cfg.history;
    hist_entry *h = &p->hist[idx];
    sb_printf(&b, "%s{\"seq\":%" PRIu64 ",\"ts_ns\":%" PRId64 ",\"action\":\"%s\",\"address\":%" PRIuPTR
              ",\"size\":%zu,\"stream\":%" PRIuPTR ",\"site\":",
              i ? "," : "", h->seq, h->ts_ns, hist_names[h->action], h->addr, h->size, (uintptr_t)h->stream);
    sb_json_str(&b, h->site);
    sb_printf(&b, "}");
  }
  sb_printf(&b, "]}");
  pthread_mutex_unlock(&p->mu);
  return sb_finish(&b);
}

/* ---- inspection for tests -------------------------------------------------- */

static void seg_info(const segment *sg, loom_segment_info *out) {
  out->base = sg->base;
  out->size = sg->size;
  out->kind = sg->kind;
  out->stream = sg->stream;
  out->nblocks = 0;
  for (const block *b = sg->head; b; b = b->next) out->nblocks++;
}

int loom_pool_debug_segment(loom_pool *p, uintptr_t addr, loom_segment_info *seg, loom_block_info *blocks, int max) {
  pthread_mutex_lock(&p->mu);
  int i = seg_index(p, addr);
  if (i < 0) {
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  segment *sg = p->segs[i];
  seg_info(sg, seg);
  int n = 0;
  for (block *b = sg->head; b && n < max; b = b->next, n++)
    blocks[n] = (loom_block_info){b->addr, b->size, b->state == LOOM_BLOCK_FREE ? 0 : b->requested, b->state,
                                  b->stream};
  pthread_mutex_unlock(&p->mu);
  return 1;
}

int loom_pool_debug_segments(loom_pool *p, loom_segment_info *segs, int max) {
  pthread_mutex_lock(&p->mu);
  int n = p->nsegs;
  for (int i = 0; segs && i < n && i < max; i++) seg_info(p->segs[i], &segs[i]);
  pthread_mutex_unlock(&p->mu);
  return n;
}

static int tree_count(int t, const block *n) { return n ? 1 + tree_count(t, n->l[t]) + tree_count(t, n->r[t]) : 0; }

static int tree_find(int t, block *root, const block *x) {
  block *f = tlower(t, root, x, 0);
  return f == x;
}

#define VFAIL(...)                    \
  do {                                \
    snprintf(err, n, __VA_ARGS__);    \
    pthread_mutex_unlock(&p->mu);     \
    return 0;                         \
  } while (0)

int loom_pool_verify(loom_pool *p, char *err, size_t n) {
  pthread_mutex_lock(&p->mu);
  int64_t alloc[3] = {0}, reserved[3] = {0}, active[3] = {0}, inactive[3] = {0}, req[3] = {0}, nalloc[3] = {0},
          nseg[3] = {0};
  int nfree[3] = {0}, nwhole[3] = {0};
  for (int i = 0; i < p->nsegs; i++) {
    segment *sg = p->segs[i];
    int k = sg->kind;
    if (i > 0 && p->segs[i - 1]->base + p->segs[i - 1]->size > sg->base)
      VFAIL("segments %d and %d overlap", i - 1, i);
    if (!sg->head || sg->head->prev) VFAIL("segment %#" PRIxPTR ": bad head", sg->base);
    uintptr_t at = sg->base;
    for (block *b = sg->head; b; b = b->next) {
      if (b->addr != at) VFAIL("segment %#" PRIxPTR ": block at %#" PRIxPTR ", expected %#" PRIxPTR, sg->base, b->addr, at);
      if (b->seg != sg) VFAIL("block %#" PRIxPTR ": wrong segment", b->addr);
      if (b->size < LOOM_POOL_MIN_BLOCK || b->size % LOOM_POOL_MIN_BLOCK) VFAIL("block %#" PRIxPTR ": size %zu", b->addr, b->size);
      if (b->next && b->next->prev != b) VFAIL("block %#" PRIxPTR ": broken links", b->addr);
      if (b->stream != sg->stream && !sg->arena) VFAIL("block %#" PRIxPTR ": stream differs from its segment's", b->addr);
      if (b->state == LOOM_BLOCK_FREE && b->next && b->next->state == LOOM_BLOCK_FREE)
        VFAIL("blocks %#" PRIxPTR " and %#" PRIxPTR " are free neighbours left unmerged", b->addr, b->next->addr);
      if (b->state == LOOM_BLOCK_ALLOCATED) {
        if (loom_ptrmap_get(&p->live, b->addr) != b) VFAIL("allocated block %#" PRIxPTR " missing from the map", b->addr);
        if (b->requested > b->size) VFAIL("block %#" PRIxPTR ": requested > size", b->addr);
        alloc[k] += (int64_t)b->size;
        req[k] += (int64_t)b->requested;
        nalloc[k]++;
        active[k] += (int64_t)b->size;
      } else if (b->state == LOOM_BLOCK_PENDING) {
        if (b->event_count <= 0) VFAIL("pending block %#" PRIxPTR " without events", b->addr);
        active[k] += (int64_t)b->size;
      } else {
        nfree[k]++;
        if (!tree_find(0, p->root[k][0], b)) VFAIL("free block %#" PRIxPTR " missing from the free tree", b->addr);
        if (in_whole_tree(b)) {
          nwhole[k]++;
          if (!tree_find(1, p->root[k][1], b)) VFAIL("whole free segment %#" PRIxPTR " missing from its tree", b->addr);
        }
        if (is_split(b)) inactive[k] += (int64_t)b->size;
      }
      at += b->size;
    }
    if (at != sg->base + sg->size) VFAIL("segment %#" PRIxPTR ": blocks cover %zu of %zu bytes", sg->base,
                                         (size_t)(at - sg->base), sg->size);
    reserved[k] += (int64_t)sg->size;
    nseg[k]++;
  }
  for (int k = 1; k <= 2; k++) {
    if (tree_count(0, p->root[k][0]) != nfree[k]) VFAIL("pool %d: free tree holds %d blocks, segments %d", k,
                                                        tree_count(0, p->root[k][0]), nfree[k]);
    if (tree_count(1, p->root[k][1]) != nwhole[k]) VFAIL("pool %d: whole-segment tree size mismatch", k);
  }
  struct { const char *name; int64_t *want; loom_memory_stat *have; } chk[] = {
      {"allocated_bytes", alloc, p->st.allocated_bytes},   {"reserved_bytes", reserved, p->st.reserved_bytes},
      {"active_bytes", active, p->st.active_bytes},        {"inactive_split_bytes", inactive, p->st.inactive_split_bytes},
      {"requested_bytes", req, p->st.requested_bytes},     {"allocations", nalloc, p->st.allocations},
      {"segments", nseg, p->st.segments},
  };
  for (size_t c = 0; c < sizeof chk / sizeof chk[0]; c++) {
    chk[c].want[0] = chk[c].want[1] + chk[c].want[2];
    for (int k = 0; k < 3; k++)
      if (chk[c].have[k].current != chk[c].want[k] || chk[c].have[k].peak < chk[c].have[k].current)
        VFAIL("%s[%d]: statistic says %" PRId64 " (peak %" PRId64 "), blocks add up to %" PRId64, chk[c].name, k,
              chk[c].have[k].current, chk[c].have[k].peak, chk[c].want[k]);
  }
  if ((int64_t)p->live.len != nalloc[0]) VFAIL("map holds %zu blocks, %" PRId64 " allocated", p->live.len, nalloc[0]);
  pthread_mutex_unlock(&p->mu);
  if (n) err[0] = '\0';
  return 1;
}
