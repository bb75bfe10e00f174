/* provider_fake.c — the simulated device behind provider_fake.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/provider_fake.h"
#include "core/error.h"

#define FAKE_ALIGN ((size_t)2 << 20)
#define FAKE_BASE ((uintptr_t)1 << 40)

typedef struct fseg { uintptr_t base; size_t size; } fseg;
typedef struct fev { loom_stream *stream; int pending; int in_use; } fev;

struct loom_fake {
  loom_provider prov;
  pthread_mutex_t mu;
  size_t capacity, live_bytes, span;
  fseg *segs;  /* sorted by base */
  int nsegs, capsegs;
  fseg *freed;
  int nfreed, capfreed;
  long fail_countdown;
  int auto_complete;
  long seg_allocs, seg_frees, waits;
  loom_stream *last_waiter, *last_on;
  fev *evs;
  int nevs, capevs;
};

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

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

static loom_status f_seg_alloc(void *ctx, size_t n, void **out) {
  loom_fake *f = ctx;
  pthread_mutex_lock(&f->mu);
  if (f->fail_countdown > 0 && --f->fail_countdown == 0) {
    pthread_mutex_unlock(&f->mu);
    return loom_set_error(LOOM_ERR_OOM, "fake device: injected failure allocating %zu bytes", n);
  }
  if (n > f->capacity || f->live_bytes + n > f->capacity) {
    size_t used = f->live_bytes, cap = f->capacity;
    pthread_mutex_unlock(&f->mu);
    return loom_set_error(LOOM_ERR_OOM, "fake device full: %zu bytes requested, %zu of %zu in use", n, used, cap);
  }
  /* First fit, leaving a hole of FAKE_ALIGN before and after every segment. */
  uintptr_t at = FAKE_BASE + FAKE_ALIGN;
  int pos = 0;
  for (; pos < f->nsegs; pos++) {
    if (at + n + FAKE_ALIGN <= f->segs[pos].base) break;
    at = f->segs[pos].base + align_up(f->segs[pos].size, FAKE_ALIGN) + FAKE_ALIGN;
  }
  if (at + n + FAKE_ALIGN > FAKE_BASE + f->span ||
      !grow((void **)&f->segs, &f->capsegs, f->nsegs + 1, sizeof(fseg))) {
    pthread_mutex_unlock(&f->mu);
    return loom_set_error(LOOM_ERR_OOM, "fake device: simulated address space exhausted");
  }
  memmove(&f->segs[pos + 1], &f->segs[pos], (size_t)(f->nsegs - pos) * sizeof(fseg));
  f->segs[pos].base = at;
  f->segs[pos].size = n;
  f->nsegs++;
  f->live_bytes += n;
  f->seg_allocs++;
  pthread_mutex_unlock(&f->mu);
  *out = (void *)at;
  return LOOM_OK;
}

static loom_status f_seg_free(void *ctx, void *ptr, size_t n) {
  loom_fake *f = ctx;
  uintptr_t b = (uintptr_t)ptr;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->nsegs; i++) {
    if (f->segs[i].base != b) continue;
    if (f->segs[i].size != n) {
      pthread_mutex_unlock(&f->mu);
      return loom_set_error(LOOM_ERR_INTERNAL, "fake device: segment %#lx freed with size %zu, allocated with %zu",
                            (unsigned long)b, n, f->segs[i].size);
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

static void f_ev_destroy(void *ctx, void *ev) {
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
  loom_provider p = {"fake", f, f_seg_alloc, f_seg_free, f_domain, f_ev_create, f_ev_destroy,
                     f_ev_record, f_ev_query, f_wait, f_mem_info, 0};
  f->prov = p;
  return f;
}

void loom_fake_destroy(loom_fake *f) {
  if (!f) return;
  pthread_mutex_destroy(&f->mu);
  free(f->segs);
  free(f->freed);
  free(f->evs);
  free(f);
}

const loom_provider *loom_fake_provider(loom_fake *f) { return &f->prov; }

#define LOCKED(f, stmt)            \
  do {                             \
    pthread_mutex_lock(&(f)->mu);  \
    stmt;                          \
    pthread_mutex_unlock(&(f)->mu); \
  } while (0)

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
