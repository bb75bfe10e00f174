/* devtime.c — device time of ranges from events recorded on their stream.
 *
 * One timeline per device. A timed range takes two events from the
 * timeline's pool, records one on the stream before the work and one after,
 * and queues the pair. Pairs are resolved in order, in batches: when the
 * pool runs dry, completed pairs (polled, never waited for) become slices
 * and give their events back; if none has completed, another batch of
 * events is created, up to a cap beyond which ranges go untimed (counted as
 * dropped). At stop the host waits for the last recorded event of each
 * device (no stream is stalled and no device-wide sync is made) and resolves
 * everything.
 *
 * CUDA timestamps come from cudaEventElapsedTime against an anchor event
 * whose host time was taken when it completed (one host wait, at the
 * device's first timed range of a recording); the anchor moves forward to a
 * resolved event every second so the float milliseconds keep sub-
 * microsecond precision. CPU streams (and the tests' fake GPUs) are
 * synchronous: their "event" is the host clock read when it is recorded, so
 * the same batching code runs, and is tested, without a GPU. */
#include <stdlib.h>
#include <string.h>

#include "device/device_internal.h"
#include "prof/prof_internal.h"
#include "core/sys.h"

#define MAX_TL (1 + LOOM_MAX_LOGICAL_GPUS)
#define MAX_STREAMS 32
#define EV_BATCH 64
#define MAX_EVENTS 65536
#define REANCHOR_NS 1000000000ll

typedef struct dev_ev {
  void *native;    /* cudaEvent_t (timing enabled) on a real GPU */
  int64_t host_ns; /* CPU / fake GPU: when it was recorded */
} dev_ev;

typedef struct pair {
  int32_t b, e;
  uint32_t flow, gen;
  const char *name;
  loom_stream *stream;
  int16_t si;
  uint8_t cat, ended;
} pair;

typedef struct timeline {
  _Atomic int ready;
  loom_device dev;
  int real;  /* a CUDA device backed by the runtime */
  int track; /* its process in the trace */
  pthread_mutex_t mu;
  dev_ev *ev;
  int nev;
  int *freel;
  int nfree;
  pair *pairs;  /* pending: [head, n); handle = base + index */
  size_t head, n, cap;
  int64_t base;
  const void *streams[MAX_STREAMS];
  char sname[MAX_STREAMS][24];
  int nstreams;
  int anchor;  /* event index, -1: none yet this recording */
  int64_t anchor_ns;
  uint32_t gen;
  prof_slice *sl;
  size_t nsl, capsl;
  int64_t dropped;
} timeline;

static timeline g_tl[MAX_TL];
static pthread_mutex_t g_tl_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t g_flow = 0;

/* ---- backends: CUDA events, or the host clock --------------------------------- */

#ifdef LOOM_HAVE_CUDA
static int exit_registered = 0;
#endif

static loom_status ev_create(timeline *tl, dev_ev *e) {
  e->native = NULL;
  e->host_ns = 0;
#ifdef LOOM_HAVE_CUDA
  if (tl->real) {
    LOOM_TRY(loom_cuda_set_device(tl->dev.index));
    cudaEvent_t ce;
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&ce, cudaEventDefault));
    e->native = ce;
  }
#else
  (void)tl;
#endif
  return LOOM_OK;
}

static loom_status ev_record(timeline *tl, dev_ev *e, loom_stream *s) {
#ifdef LOOM_HAVE_CUDA
  if (tl->real) {
    LOOM_CUDA_CHECK(cudaEventRecord((cudaEvent_t)e->native, (cudaStream_t)loom_stream_native(s)));
    return LOOM_OK;
  }
#else
  (void)tl, (void)s;
#endif
  e->host_ns = loom_prof_now_ns();
  return LOOM_OK;
}

/* 1: complete, 0: not yet, -1: error. */
static int ev_query(timeline *tl, dev_ev *e) {
#ifdef LOOM_HAVE_CUDA
  if (tl->real) {
    cudaError_t r = cudaEventQuery((cudaEvent_t)e->native);
    if (r == cudaSuccess) return 1;
    if (r == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return 0;
    }
    return -1;
  }
#else
  (void)tl, (void)e;
#endif
  return 1;
}

static void ev_sync(timeline *tl, dev_ev *e) {
#ifdef LOOM_HAVE_CUDA
  if (tl->real) cudaEventSynchronize((cudaEvent_t)e->native);
#else
  (void)tl, (void)e;
#endif
}

/* Host time of a completed event. */
static int64_t ev_time(timeline *tl, dev_ev *e) {
#ifdef LOOM_HAVE_CUDA
  if (tl->real) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, (cudaEvent_t)tl->ev[tl->anchor].native, (cudaEvent_t)e->native) != cudaSuccess) {
      (void)cudaGetLastError();
      return tl->anchor_ns;
    }
    return tl->anchor_ns + (int64_t)((double)ms * 1e6);
  }
#else
  (void)tl;
#endif
  return e->host_ns;
}

/* A real GPU's first timed range of a recording: the anchor. */
static loom_status set_anchor(timeline *tl, int idx, loom_stream *s) {
#ifdef LOOM_HAVE_CUDA
  if (tl->real) {
    LOOM_CUDA_CHECK(cudaEventRecord((cudaEvent_t)tl->ev[idx].native, (cudaStream_t)loom_stream_native(s)));
    LOOM_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)tl->ev[idx].native));
    if (!exit_registered) {
      exit_registered = 1;
      loom_prof_register_exit();  /* after the CUDA runtime's own exit handler: ours runs first */
    }
  }
#else
  (void)s;
#endif
  tl->anchor = idx;
  tl->anchor_ns = loom_prof_now_ns();
  return LOOM_OK;
}

/* ---- the pool and the pending pairs ----------------------------------------------- */

static timeline *get_tl(loom_device dev, int *slot) {
  int i = dev.kind == LOOM_CPU ? 0 : 1 + dev.index;
  if (dev.index < 0 || i >= MAX_TL) return NULL;
  *slot = i;
  timeline *tl = &g_tl[i];
  if (atomic_load_explicit(&tl->ready, memory_order_acquire)) return tl;
  pthread_mutex_lock(&g_tl_mu);
  if (!atomic_load(&tl->ready)) {
    char name[32];
    loom_device_str(dev, name, sizeof name);
    tl->track = loom_prof_track(name);
    if (tl->track >= 0) {
      pthread_mutex_init(&tl->mu, NULL);
      tl->dev = dev;
      tl->real = dev.kind == LOOM_CUDA && loom_device_is_real_cuda(dev);
      tl->anchor = -1;
      atomic_store_explicit(&tl->ready, 1, memory_order_release);
    }
  }
  pthread_mutex_unlock(&g_tl_mu);
  return atomic_load(&tl->ready) ? tl : NULL;
}

static void put_ev(timeline *tl, int idx) {
  if (idx >= 0 && idx != tl->anchor) tl->freel[tl->nfree++] = idx;
}

static int add_slice(timeline *tl, const prof_slice *s) {
  if (tl->nsl == tl->capsl) {
    size_t nc = tl->capsl ? tl->capsl * 2 : 256;
    prof_slice *ns = loom_sys_realloc(tl->sl, nc * sizeof *ns);
    if (!ns) return 0;
    tl->sl = ns;
    tl->capsl = nc;
  }
  tl->sl[tl->nsl++] = *s;
  return 1;
}

/* Turn a completed pair into a slice and give its events back. */
static void resolve(timeline *tl, pair *p) {
  prof_slice s;
  s.t0 = ev_time(tl, &tl->ev[p->b]);
  s.t1 = ev_time(tl, &tl->ev[p->e]);
  if (s.t1 < s.t0) s.t1 = s.t0;
  s.name = p->name;
  s.flow = p->flow;
  s.track = (int16_t)tl->track;
  s.stream = p->si;
  s.cat = p->cat;
  if (!add_slice(tl, &s)) tl->dropped++;
  int keep = -1;
  if (tl->real && s.t0 - tl->anchor_ns > REANCHOR_NS) {
    /* Move the anchor forward: p->b's host time is known now. */
    int old = tl->anchor;
    tl->anchor = p->b;
    tl->anchor_ns = s.t0;
    keep = p->b;
    put_ev(tl, old);
  }
  if (p->b != keep) put_ev(tl, p->b);
  put_ev(tl, p->e);
  p->b = p->e = -1;
}

/* Resolve completed pairs from the oldest on; stop at the first one that is
 * not done yet (an open range, or work still queued). */
static void poll_locked(timeline *tl) {
  while (tl->head < tl->n) {
    pair *p = &tl->pairs[tl->head];
    if (!p->ended || ev_query(tl, &tl->ev[p->e]) != 1) break;
    resolve(tl, p);
    tl->head++;
  }
}

static int grow_pool(timeline *tl) {
  if (tl->nev >= MAX_EVENTS) return 0;
  int add = tl->nev + EV_BATCH > MAX_EVENTS ? MAX_EVENTS - tl->nev : EV_BATCH;
  dev_ev *ne = loom_sys_realloc(tl->ev, (size_t)(tl->nev + add) * sizeof *ne);
  if (!ne) return 0;
  tl->ev = ne;
  int *nf = loom_sys_realloc(tl->freel, (size_t)(tl->nev + add) * sizeof *nf);
  if (!nf) return 0;
  tl->freel = nf;
  int made = 0;
  for (int i = 0; i < add; i++) {
    if (ev_create(tl, &tl->ev[tl->nev]) != LOOM_OK) break;
    tl->freel[tl->nfree++] = tl->nev++;
    made++;
  }
  return made > 0;
}

static int take_ev(timeline *tl) {
  if (tl->nfree == 0) poll_locked(tl);
  if (tl->nfree == 0 && !grow_pool(tl)) return -1;
  return tl->freel[--tl->nfree];
}

static int push_pair(timeline *tl, const pair *p) {
  if (tl->n == tl->cap) {
    if (tl->head > 0) {  /* drop the resolved prefix; handles stay valid through base */
      memmove(tl->pairs, tl->pairs + tl->head, (tl->n - tl->head) * sizeof *tl->pairs);
      tl->base += (int64_t)tl->head;
      tl->n -= tl->head;
      tl->head = 0;
    }
    if (tl->n == tl->cap) {
      size_t nc = tl->cap ? tl->cap * 2 : 256;
      pair *np = loom_sys_realloc(tl->pairs, nc * sizeof *np);
      if (!np) return -1;
      tl->pairs = np;
      tl->cap = nc;
    }
  }
  tl->pairs[tl->n] = *p;
  return (int)(tl->base + (int64_t)tl->n++);
}

static int stream_index(timeline *tl, loom_stream *s, int cat) {
  for (int i = 0; i < tl->nstreams; i++)
    if (tl->streams[i] == s) return i;
  if (tl->nstreams == MAX_STREAMS) return -1;
  int i = tl->nstreams++;
  tl->streams[i] = s;
  if (s == loom_stream_current(tl->dev)) snprintf(tl->sname[i], sizeof tl->sname[i], "compute stream");
  else if (cat == LOOM_PROF_CAT_H2D) snprintf(tl->sname[i], sizeof tl->sname[i], "copy stream %d", i);
  else if (cat == LOOM_PROF_CAT_COLLECTIVE) snprintf(tl->sname[i], sizeof tl->sname[i], "comm stream %d", i);
  else snprintf(tl->sname[i], sizeof tl->sname[i], "stream %d", i);
  return i;
}

/* A new recording: pending pairs and slices of the old one are forgotten. */
static void reset_locked(timeline *tl, uint32_t gen) {
  for (size_t i = tl->head; i < tl->n; i++) {
    put_ev(tl, tl->pairs[i].b);
    put_ev(tl, tl->pairs[i].e);
  }
  int a = tl->anchor;
  tl->anchor = -1;
  put_ev(tl, a);
  tl->head = tl->n = 0;
  tl->base = 0;
  loom_sys_free(tl->sl);
  tl->sl = NULL;
  tl->nsl = tl->capsl = 0;
  tl->dropped = 0;
  tl->gen = gen;
}

int32_t loom_prof_dev_begin(loom_device dev, loom_stream *stream, const char *name, int cat, uint32_t gen,
                            uint32_t *flow, int16_t *tlo) {
  int slot;
  timeline *tl = get_tl(dev, &slot);
  if (!tl) return -1;
  pthread_mutex_lock(&tl->mu);
  int32_t h = -1;
  if (tl->gen != gen) reset_locked(tl, gen);
  int si = stream_index(tl, stream, cat);
  if (tl->anchor < 0 && si >= 0) {
    int a = take_ev(tl);
    if (a >= 0 && set_anchor(tl, a, stream) != LOOM_OK) {
      put_ev(tl, a);
      tl->anchor = -1;
    }
  }
  int b = tl->anchor >= 0 && si >= 0 ? take_ev(tl) : -1;
  int e = b >= 0 ? take_ev(tl) : -1;
  if (e >= 0 && ev_record(tl, &tl->ev[b], stream) == LOOM_OK) {
    pair p = {b, e, atomic_fetch_add(&g_flow, 1) + 1, gen, name, stream, (int16_t)si, (uint8_t)cat, 0};
    h = push_pair(tl, &p);
    if (h >= 0) *flow = p.flow;
  }
  if (h < 0) {
    put_ev(tl, b);
    put_ev(tl, e);
    tl->dropped++;
  }
  pthread_mutex_unlock(&tl->mu);
  *tlo = (int16_t)slot;
  return h;
}

void loom_prof_dev_end(int16_t slot, int32_t handle, uint32_t gen) {
  if (slot < 0 || slot >= MAX_TL || !atomic_load(&g_tl[slot].ready)) return;
  timeline *tl = &g_tl[slot];
  pthread_mutex_lock(&tl->mu);
  int64_t i = (int64_t)handle - tl->base;
  if (tl->gen == gen && i >= (int64_t)tl->head && i < (int64_t)tl->n) {
    pair *p = &tl->pairs[i];
    if (ev_record(tl, &tl->ev[p->e], p->stream) == LOOM_OK) p->ended = 1;
  }
  pthread_mutex_unlock(&tl->mu);
}

void loom_prof_dev_reset(void) {
  for (int i = 0; i < MAX_TL; i++) {
    timeline *tl = &g_tl[i];
    if (!atomic_load(&tl->ready)) continue;
    pthread_mutex_lock(&tl->mu);
    reset_locked(tl, 0);
    pthread_mutex_unlock(&tl->mu);
  }
}

loom_status loom_prof_dev_finish(uint32_t gen, prof_slice **out, size_t *nout, int64_t *dropped) {
  *out = NULL;
  *nout = 0;
  *dropped = 0;
  size_t total = 0;
  for (int i = 0; i < MAX_TL; i++) {
    timeline *tl = &g_tl[i];
    if (!atomic_load(&tl->ready)) continue;
    pthread_mutex_lock(&tl->mu);
    if (tl->gen == gen) {
      /* Wait (host side) for the newest ended pair; everything before it on
       * its stream is then done. Others streams are polled below. */
      for (size_t k = tl->n; k > tl->head; k--) {
        if (tl->pairs[k - 1].ended) {
          ev_sync(tl, &tl->ev[tl->pairs[k - 1].e]);
          break;
        }
      }
      for (size_t k = tl->head; k < tl->n; k++) {
        pair *p = &tl->pairs[k];
        if (!p->ended) {
          tl->dropped++;  /* still open on another thread */
          continue;
        }
        if (ev_query(tl, &tl->ev[p->e]) != 1) ev_sync(tl, &tl->ev[p->e]);
        resolve(tl, p);
      }
      tl->head = tl->n;
      total += tl->nsl;
      *dropped += tl->dropped;
    }
    pthread_mutex_unlock(&tl->mu);
  }
  prof_slice *all = loom_sys_malloc((total ? total : 1) * sizeof *all);
  if (!all) return loom_set_error(LOOM_ERR_OOM, "loom_profiler_stop: out of host memory for %zu device slices", total);
  size_t n = 0;
  for (int i = 0; i < MAX_TL; i++) {
    timeline *tl = &g_tl[i];
    if (!atomic_load(&tl->ready)) continue;
    pthread_mutex_lock(&tl->mu);
    if (tl->gen == gen && n + tl->nsl <= total) {
      memcpy(all + n, tl->sl, tl->nsl * sizeof *all);
      n += tl->nsl;
    }
    loom_sys_free(tl->sl);
    tl->sl = NULL;
    tl->nsl = tl->capsl = 0;
    pthread_mutex_unlock(&tl->mu);
  }
  *out = all;
  *nout = n;
  return LOOM_OK;
}

void loom_prof_dev_release(void) {
  pthread_mutex_lock(&g_tl_mu);
  for (int i = 0; i < MAX_TL; i++) {
    timeline *tl = &g_tl[i];
    if (!atomic_load(&tl->ready)) continue;
#ifdef LOOM_HAVE_CUDA
    if (tl->real) {
      if (loom_cuda_set_device(tl->dev.index) == LOOM_OK)
        for (int k = 0; k < tl->nev; k++)
          if (tl->ev[k].native) cudaEventDestroy((cudaEvent_t)tl->ev[k].native);
      (void)cudaGetLastError();
    }
#endif
    loom_sys_free(tl->ev);
    loom_sys_free(tl->freel);
    loom_sys_free(tl->pairs);
    loom_sys_free(tl->sl);
    pthread_mutex_destroy(&tl->mu);
    memset(tl, 0, sizeof *tl);  /* ready = 0: rebuilt at the next timed range */
  }
  pthread_mutex_unlock(&g_tl_mu);
}

const char *loom_prof_dev_stream_name(int track, int s) {
  for (int i = 0; i < MAX_TL; i++) {
    timeline *tl = &g_tl[i];
    if (atomic_load(&tl->ready) && tl->track == track && s >= 0 && s < tl->nstreams) return tl->sname[s];
  }
  return "stream";
}
