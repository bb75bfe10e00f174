/* provider_fake.c — the simulated device behind provider_fake.h.
 * Segments and address reservations share one sorted list of ranges; a
 * reservation also keeps its mapped intervals, so a pool that maps a granule
 * twice, unmaps what it never mapped or gives back a range that still has
 * memory in it gets an error instead of silently corrupting the count. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "support/provider_fake.h"

#define FAKE_ALIGN ((size_t)2 << 20)
#define FAKE_BASE ((uintptr_t)1 << 40)

typedef struct fival { uintptr_t lo, hi; } fival;
typedef struct fres { fival *iv; int niv, cap; size_t mapped; } fres;
typedef struct fseg { uintptr_t base; size_t size; fres *res; /* NULL: a segment */ } fseg;
#define FAKE_MAX_RESERVATIONS 16
typedef struct fev { loom_stream *stream; int pending; int in_use; } fev;

struct loom_fake {
  loom_provider prov;
  pthread_mutex_t mu;
  size_t capacity, live_bytes, span, granule;
  fseg *segs;  /* sorted by base */
  int nsegs, capsegs;
  fseg *freed;
  int nfreed, capfreed;
  long fail_countdown;
  int auto_complete;
  long seg_allocs, seg_frees, waits, maps, unmaps;
  uintptr_t *remapped;  /* reservations mapped or unmapped since the last drain */
  int nremapped, capremapped;
  loom_stream *last_waiter, *last_on;
  fev *evs;
  int nevs, capevs;
};

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

#define LOCKED(f, stmt)            \
  do {                             \
    pthread_mutex_lock(&(f)->mu);  \
    stmt;                          \
    pthread_mutex_unlock(&(f)->mu); \
  } while (0)


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

static int injected_failure(loom_fake *f) { return f->fail_countdown > 0 && --f->fail_countdown == 0; }

/* Place a range of n bytes first-fit (align-aligned, a FAKE_ALIGN hole on
 * each side); returns its index in f->segs or -1. Under f->mu. */
static int place(loom_fake *f, size_t n, size_t align, fres *res) {
  uintptr_t at = align_up(FAKE_BASE + FAKE_ALIGN, align);
  int pos = 0;
  for (; pos < f->nsegs; pos++) {
    if (at + n + FAKE_ALIGN <= f->segs[pos].base) break;
    at = align_up(f->segs[pos].base + align_up(f->segs[pos].size, FAKE_ALIGN) + FAKE_ALIGN, align);
  }
  if (at + n + FAKE_ALIGN > FAKE_BASE + f->span || !grow((void **)&f->segs, &f->capsegs, f->nsegs + 1, sizeof(fseg)))
    return -1;
  memmove(&f->segs[pos + 1], &f->segs[pos], (size_t)(f->nsegs - pos) * sizeof(fseg));
  f->segs[pos] = (fseg){at, n, res};
  f->nsegs++;
  return pos;
}

static loom_status f_seg_alloc(void *ctx, size_t n, void **out) {
  loom_fake *f = ctx;
  pthread_mutex_lock(&f->mu);
  if (injected_failure(f)) {
    pthread_mutex_unlock(&f->mu);
    return loom_set_error(LOOM_ERR_OOM, "fake device: injected failure allocating %zu bytes", n);
  }
  if (n > f->capacity || f->live_bytes + n > f->capacity) {
    size_t used = f->live_bytes, cap = f->capacity;
    pthread_mutex_unlock(&f->mu);
    return loom_set_error(LOOM_ERR_OOM, "fake device full: %zu bytes requested, %zu of %zu in use", n, used, cap);
  }
  int i = place(f, n, FAKE_ALIGN, NULL);
  if (i < 0) {
    pthread_mutex_unlock(&f->mu);
    return loom_set_error(LOOM_ERR_OOM, "fake device: simulated address space exhausted");
  }
  f->live_bytes += n;
  f->seg_allocs++;
  *out = (void *)f->segs[i].base;
  pthread_mutex_unlock(&f->mu);
  return LOOM_OK;
}

static loom_status f_seg_free(void *ctx, void *ptr, size_t n) {
  loom_fake *f = ctx;
  uintptr_t b = (uintptr_t)ptr;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->nsegs; i++) {
    if (f->segs[i].base != b) continue;
    if (f->segs[i].size != n || f->segs[i].res) {
      pthread_mutex_unlock(&f->mu);
      return loom_set_error(LOOM_ERR_INTERNAL, "fake device: segment %#lx freed with size %zu, allocated with %zu%s",
                            (unsigned long)b, n, f->segs[i].size, f->segs[i].res ? " (and it is a reservation)" : "");
    }
    if (grow((void **)&f->freed, &f->capfreed, f->nfreed + 1, sizeof(fseg))) f->freed[f->nfreed++] = f->segs[i];
    memmove(&f->segs[i], &f->segs[i + 1], (size_t)(f->nsegs - i - 1) * sizeof(fseg));
    f->nsegs--;
    f->live_bytes -= n;
    f->seg_frees++;
    pthread_mutex_unlock(&f->mu);
    return LOOM_OK;
  }
  pthread_mutex_unlock(&f->mu);
  return loom_set_error(LOOM_ERR_INTERNAL, "fake device: free of %#lx, which is not a live segment", (unsigned long)b);
}

/* ---- virtual memory -------------------------------------------------------- */

static size_t f_va_granularity(void *ctx) {
  loom_fake *f = ctx;
  size_t g;
  LOCKED(f, g = f->granule);
  return g;
}

static void note_remap(loom_fake *f, uintptr_t base) {
  if (grow((void **)&f->remapped, &f->capremapped, f->nremapped + 1, sizeof(uintptr_t))) f->remapped[f->nremapped++] = base;
}

static loom_status f_va_reserve(void *ctx, size_t n, void **base) {
  loom_fake *f = ctx;
  pthread_mutex_lock(&f->mu);
  size_t g = f->granule;
  fres *res = NULL;
  int i = -1;
  if (n == 0 || n % g) {
    pthread_mutex_unlock(&f->mu);
    return loom_set_error(LOOM_ERR_INTERNAL, "fake device: reservation of %zu bytes is not a granule multiple", n);
  }
  if (!injected_failure(f) && (res = calloc(1, sizeof *res)) != NULL) i = place(f, n, g > FAKE_ALIGN ? g : FAKE_ALIGN, res);
  if (i < 0) {
    free(res);
    pthread_mutex_unlock(&f->mu);
    return loom_set_error(LOOM_ERR_OOM, "fake device: cannot reserve %zu bytes of simulated address space", n);
  }
  *base = (void *)f->segs[i].base;
  note_remap(f, f->segs[i].base);
  pthread_mutex_unlock(&f->mu);
  return LOOM_OK;
}

/* The reservation holding [a, a + n), or NULL. Under f->mu. */
static fseg *res_of(loom_fake *f, uintptr_t a, size_t n) {
  for (int i = 0; i < f->nsegs; i++)
    if (f->segs[i].res && a >= f->segs[i].base && a + n <= f->segs[i].base + f->segs[i].size) return &f->segs[i];
  return NULL;
}


static loom_status f_va_release(void *ctx, void *base, size_t n) {
  loom_fake *f = ctx;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->nsegs; i++) {
    fseg *sg = &f->segs[i];
    if (sg->base != (uintptr_t)base || !sg->res) continue;
    if (sg->size != n || sg->res->mapped) {
      size_t sz = sg->size, m = sg->res->mapped;
      pthread_mutex_unlock(&f->mu);
      return loom_set_error(LOOM_ERR_INTERNAL, "fake device: reservation %p (%zu bytes) released as %zu bytes with %zu "
                            "bytes still mapped", base, sz, n, m);
    }
    free(sg->res->iv);
    free(sg->res);
    if (grow((void **)&f->freed, &f->capfreed, f->nfreed + 1, sizeof(fseg))) f->freed[f->nfreed++] = (fseg){sg->base, n, NULL};
    memmove(sg, sg + 1, (size_t)(f->nsegs - i - 1) * sizeof(fseg));
    f->nsegs--;
    pthread_mutex_unlock(&f->mu);
    return LOOM_OK;
  }
  pthread_mutex_unlock(&f->mu);
  return loom_set_error(LOOM_ERR_INTERNAL, "fake device: release of %p, which is not a reservation", base);
}

static loom_status f_va_map(void *ctx, void *addr, size_t n) {
  loom_fake *f = ctx;
  uintptr_t lo = (uintptr_t)addr, hi = lo + n;
  pthread_mutex_lock(&f->mu);
  fseg *sg = res_of(f, lo, n);
  loom_status st = LOOM_OK;
  if (!sg || n == 0 || lo % f->granule || n % f->granule) {
    st = loom_set_error(LOOM_ERR_INTERNAL, "fake device: map of %zu bytes at %#lx: not granule-aligned inside a "
                        "reservation", n, (unsigned long)lo);
  } else {
    fres *r = sg->res;
    int pos = 0;
    while (pos < r->niv && r->iv[pos].hi <= lo) pos++;
    if (pos < r->niv && r->iv[pos].lo < hi)
      st = loom_set_error(LOOM_ERR_INTERNAL, "fake device: map of %#lx..%#lx overlaps memory mapped there already",
                          (unsigned long)lo, (unsigned long)hi);
    else if (injected_failure(f))
      st = loom_set_error(LOOM_ERR_OOM, "fake device: injected failure mapping %zu bytes", n);
    else if (f->live_bytes + n > f->capacity)
      st = loom_set_error(LOOM_ERR_OOM, "fake device full: mapping %zu bytes, %zu of %zu in use", n, f->live_bytes,
                          f->capacity);
    else if (!grow((void **)&r->iv, &r->cap, r->niv + 1, sizeof(fival)))
      st = loom_set_error(LOOM_ERR_OOM, "fake device: out of host memory");
    if (st == LOOM_OK) {
      memmove(&r->iv[pos + 1], &r->iv[pos], (size_t)(r->niv - pos) * sizeof(fival));
      r->iv[pos] = (fival){lo, hi};
      r->niv++;
      /* Keep intervals maximal: merge with touching neighbours. */
      if (pos + 1 < r->niv && r->iv[pos + 1].lo == hi) {
        r->iv[pos].hi = r->iv[pos + 1].hi;
        memmove(&r->iv[pos + 1], &r->iv[pos + 2], (size_t)(r->niv - pos - 2) * sizeof(fival));
        r->niv--;
      }
      if (pos > 0 && r->iv[pos - 1].hi == lo) {
        r->iv[pos - 1].hi = r->iv[pos].hi;
        memmove(&r->iv[pos], &r->iv[pos + 1], (size_t)(r->niv - pos - 1) * sizeof(fival));
        r->niv--;
      }
      r->mapped += n;
      f->live_bytes += n;
      f->maps++;
      note_remap(f, sg->base);
    }
  }
  pthread_mutex_unlock(&f->mu);
  return st;
}

static loom_status f_va_unmap(void *ctx, void *addr, size_t n) {
  loom_fake *f = ctx;
  uintptr_t lo = (uintptr_t)addr, hi = lo + n;
  pthread_mutex_lock(&f->mu);
  fseg *sg = res_of(f, lo, n);
  int pos = 0;
  fres *r = sg ? sg->res : NULL;
  if (r)
    while (pos < r->niv && r->iv[pos].hi < hi) pos++;
  if (!r || n == 0 || lo % f->granule || n % f->granule || pos == r->niv || r->iv[pos].lo > lo) {
    pthread_mutex_unlock(&f->mu);
    return loom_set_error(LOOM_ERR_INTERNAL, "fake device: unmap of %#lx..%#lx, which is not all mapped (or not "
                          "granule-aligned)", (unsigned long)lo, (unsigned long)hi);
  }
  fival v = r->iv[pos];
  int pieces = (v.lo < lo) + (hi < v.hi);
  if (pieces == 2 && !grow((void **)&r->iv, &r->cap, r->niv + 1, sizeof(fival))) {
    pthread_mutex_unlock(&f->mu);
    return loom_set_error(LOOM_ERR_OOM, "fake device: out of host memory");
  }
  if (pieces == 0) {
    memmove(&r->iv[pos], &r->iv[pos + 1], (size_t)(r->niv - pos - 1) * sizeof(fival));
    r->niv--;
  } else if (pieces == 2) {
    memmove(&r->iv[pos + 1], &r->iv[pos], (size_t)(r->niv - pos) * sizeof(fival));
    r->niv++;
    r->iv[pos] = (fival){v.lo, lo};
    r->iv[pos + 1] = (fival){hi, v.hi};
  } else {
    r->iv[pos] = v.lo < lo ? (fival){v.lo, lo} : (fival){hi, v.hi};
  }
  r->mapped -= n;
  f->live_bytes -= n;
  f->unmaps++;
  note_remap(f, sg->base);
  pthread_mutex_unlock(&f->mu);
  return LOOM_OK;
}

static int f_domain(void *ctx, loom_stream *s) {
  (void)ctx;
  (void)s;
  return 0;
}

static loom_status f_ev_create(void *ctx, loom_stream *s, void **out) {
  loom_fake *f = ctx;
  (void)s;
  pthread_mutex_lock(&f->mu);
  int i = 0;
  for (; i < f->nevs; i++)
    if (!f->evs[i].in_use) break;
  if (i == f->nevs) {
    if (!grow((void **)&f->evs, &f->capevs, f->nevs + 1, sizeof(fev))) {
      pthread_mutex_unlock(&f->mu);
      return loom_set_error(LOOM_ERR_OOM, "fake device: out of host memory for events");
    }
    f->nevs++;
  }
  f->evs[i] = (fev){NULL, 0, 1};
  pthread_mutex_unlock(&f->mu);
  *out = (void *)(intptr_t)(i + 1);
  return LOOM_OK;
}

static void f_ev_free(void *ctx, void *ev) {
  loom_fake *f = ctx;
  pthread_mutex_lock(&f->mu);
  f->evs[(intptr_t)ev - 1].in_use = 0;
  pthread_mutex_unlock(&f->mu);
}

static loom_status f_ev_record(void *ctx, void *ev, loom_stream *s) {
  loom_fake *f = ctx;
  pthread_mutex_lock(&f->mu);
  fev *e = &f->evs[(intptr_t)ev - 1];
  e->stream = s;
  e->pending = !f->auto_complete;
  pthread_mutex_unlock(&f->mu);
  return LOOM_OK;
}

static int f_ev_query(void *ctx, void *ev) {
  loom_fake *f = ctx;
  pthread_mutex_lock(&f->mu);
  int r = !f->evs[(intptr_t)ev - 1].pending;
  pthread_mutex_unlock(&f->mu);
  return r;
}

static loom_status f_wait(void *ctx, loom_stream *waiter, void *ev) {
  loom_fake *f = ctx;
  pthread_mutex_lock(&f->mu);
  f->waits++;
  f->last_waiter = waiter;
  f->last_on = f->evs[(intptr_t)ev - 1].stream;
  pthread_mutex_unlock(&f->mu);
  return LOOM_OK;
}

static loom_status f_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes) {
  loom_fake *f = ctx;
  pthread_mutex_lock(&f->mu);
  *total_bytes = f->capacity;
  *free_bytes = f->capacity > f->live_bytes ? f->capacity - f->live_bytes : 0;
  pthread_mutex_unlock(&f->mu);
  return LOOM_OK;
}

loom_fake *loom_fake_create(size_t capacity) {
  loom_fake *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  pthread_mutex_init(&f->mu, NULL);
  f->capacity = capacity;
  /* Room for every segment's alignment slack and guard hole even when the
   * capacity is spent in many small segments (2 MiB each at least). */
  f->span = 3 * align_up(capacity, FAKE_ALIGN) + 4 * FAKE_ALIGN;
  /* ... and for address reservations (expandable segments), which are
   * usually the device's size each. */
  f->span += FAKE_MAX_RESERVATIONS * (align_up(capacity, FAKE_ALIGN) + 2 * FAKE_ALIGN);
  f->granule = FAKE_ALIGN;
  loom_provider p = {"fake", f, f_seg_alloc, f_seg_free, f_domain, f_ev_create, f_ev_free,
                     f_ev_record, f_ev_query, f_wait, f_mem_info, 0,
                     f_va_granularity, f_va_reserve, f_va_release, f_va_map, f_va_unmap};
  f->prov = p;
  return f;
}

void loom_fake_destroy(loom_fake *f) {
  if (!f) return;
  pthread_mutex_destroy(&f->mu);
  for (int i = 0; i < f->nsegs; i++)
    if (f->segs[i].res) {
      free(f->segs[i].res->iv);
      free(f->segs[i].res);
    }
  free(f->remapped);
  free(f->segs);
  free(f->freed);
  free(f->evs);
  free(f);
}

const loom_provider *loom_fake_provider(loom_fake *f) { return &f->prov; }


void loom_fake_set_capacity(loom_fake *f, size_t c) { LOCKED(f, f->capacity = c); }
void loom_fake_fail_nth(loom_fake *f, long n) { LOCKED(f, f->fail_countdown = n); }
void loom_fake_set_auto_complete(loom_fake *f, int on) { LOCKED(f, f->auto_complete = on); }

void loom_fake_complete(loom_fake *f, loom_stream *s) {
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->nevs; i++)
    if (f->evs[i].stream == s) f->evs[i].pending = 0;
  pthread_mutex_unlock(&f->mu);
}

void loom_fake_complete_all(loom_fake *f) {
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->nevs; i++) f->evs[i].pending = 0;
  pthread_mutex_unlock(&f->mu);
}

int loom_fake_pending_events(loom_fake *f) {
  int n = 0;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->nevs; i++) n += f->evs[i].in_use && f->evs[i].pending;
  pthread_mutex_unlock(&f->mu);
  return n;
}

size_t loom_fake_live_bytes(loom_fake *f) { size_t r; LOCKED(f, r = f->live_bytes); return r; }
long loom_fake_live_segments(loom_fake *f) { long r; LOCKED(f, r = f->nsegs); return r; }
long loom_fake_seg_allocs(loom_fake *f) { long r; LOCKED(f, r = f->seg_allocs); return r; }
long loom_fake_seg_frees(loom_fake *f) { long r; LOCKED(f, r = f->seg_frees); return r; }
long loom_fake_waits(loom_fake *f) { long r; LOCKED(f, r = f->waits); return r; }

void loom_fake_last_wait(loom_fake *f, loom_stream **waiter, loom_stream **on) {
  LOCKED(f, { *waiter = f->last_waiter; *on = f->last_on; });
}

uintptr_t loom_fake_base(loom_fake *f) { (void)f; return FAKE_BASE; }
size_t loom_fake_span(loom_fake *f) { return f->span; }

int loom_fake_drain_freed(loom_fake *f, uintptr_t *bases, size_t *sizes, int max) {
  pthread_mutex_lock(&f->mu);
  int n = f->nfreed < max ? f->nfreed : max;
  for (int i = 0; i < n; i++) {
    bases[i] = f->freed[i].base;
    if (sizes) sizes[i] = f->freed[i].size;
  }
  if (n) memmove(f->freed, f->freed + n, (size_t)(f->nfreed - n) * sizeof(fseg));
  f->nfreed -= n;
  pthread_mutex_unlock(&f->mu);
  return n;
}

int loom_fake_is_live(loom_fake *f, uintptr_t base) {
  int r = 0;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->nsegs && !r; i++) r = f->segs[i].base == base;
  pthread_mutex_unlock(&f->mu);
  return r;
}

void loom_fake_set_granularity(loom_fake *f, size_t g) { LOCKED(f, f->granule = g); }
long loom_fake_maps(loom_fake *f) { long r; LOCKED(f, r = f->maps); return r; }
long loom_fake_unmaps(loom_fake *f) { long r; LOCKED(f, r = f->unmaps); return r; }

size_t loom_fake_mapped_within(loom_fake *f, uintptr_t addr, size_t n) {
  size_t r = 0;
  pthread_mutex_lock(&f->mu);
  fseg *sg = res_of(f, addr, n);
  for (int i = 0; sg && i < sg->res->niv; i++) {
    uintptr_t lo = sg->res->iv[i].lo > addr ? sg->res->iv[i].lo : addr;
    uintptr_t hi = sg->res->iv[i].hi < addr + n ? sg->res->iv[i].hi : addr + n;
    if (hi > lo) r += hi - lo;
  }
  pthread_mutex_unlock(&f->mu);
  return r;
}

size_t loom_fake_reservation_mapped(loom_fake *f, uintptr_t base) {
  size_t r = 0;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->nsegs; i++)
    if (f->segs[i].base == base && f->segs[i].res) r = f->segs[i].res->mapped;
  pthread_mutex_unlock(&f->mu);
  return r;
}

int loom_fake_drain_remapped(loom_fake *f, uintptr_t *bases, int max) {
  pthread_mutex_lock(&f->mu);
  int n = f->nremapped < max ? f->nremapped : max;
  if (n) memcpy(bases, f->remapped, (size_t)n * sizeof *bases);
  if (n) memmove(f->remapped, f->remapped + n, (size_t)(f->nremapped - n) * sizeof *bases);
  f->nremapped -= n;
  pthread_mutex_unlock(&f->mu);
  return n;
}
