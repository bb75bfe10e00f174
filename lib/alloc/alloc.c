/* alloc.c — the per-device allocators behind lib/alloc/alloc.h and the
 * public controls of include/loom/alloc.h.
 *
 * One slot per device: the CPU, the pinned host pool, and each logical CUDA
 * device. A slot's pool is created at its first allocation (so
 * LOOM_ALLOC_CONF, loom_alloc_set_config and the virtual-device limits are
 * known by then) with the provider that fits: CPU memory, cudaMalloc, or
 * cudaHostAlloc for pinned memory when a GPU exists (plain CPU memory
 * otherwise); with backend:cuda_async a CUDA device gets the
 * cudaMallocAsync backend instead. Fake GPUs (tests) get fake providers, one
 * per physical GPU, shared by its virtual devices. Query calls never create
 * a pool. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "alloc/alloc_internal.h"
#include "alloc/provider_fake.h"
#include "device/device_internal.h"
#include "device/graph_capture.h"
#include "prof/prof.h"

#define SLOT_CPU 0
#define SLOT_PINNED 1
#define SLOT_CUDA0 2
#define NSLOTS (SLOT_CUDA0 + LOOM_MAX_LOGICAL_GPUS)

typedef struct slot {
  _Atomic(loom_pool *) pool;
  _Atomic(loom_async *) async;
  int has_own;
  loom_alloc_options own;
} slot;

static slot g_slots[NSLOTS];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_init = 0;
static loom_alloc_options g_opts;
static loom_status g_env_status = LOOM_OK;
static char g_env_msg[768];
static loom_fake *g_fake_phys[LOOM_MAX_LOGICAL_GPUS];

/* ---- allocation trace ------------------------------------------------------ */

static pthread_mutex_t g_trace_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *g_trace = NULL;
static atomic_int g_tracing = 0;  /* lets the hot path skip the trace lock */
static uint64_t g_trace_next = 0;
static loom_stream *g_trace_streams[256];
static int g_trace_slots[256];
static int g_trace_nstreams = 0;

static void slot_name(int slot, char *buf, int n) {
  if (slot == SLOT_CPU) snprintf(buf, (size_t)n, "cpu");
  else if (slot == SLOT_PINNED) snprintf(buf, (size_t)n, "pinned");
  else snprintf(buf, (size_t)n, "cuda:%d", slot - SLOT_CUDA0);
}

static uint64_t trace_alloc(void *ud, size_t n, loom_stream *s) {
  int slot = (int)(intptr_t)ud;
  if (!atomic_load_explicit(&g_tracing, memory_order_relaxed)) return 0;
  pthread_mutex_lock(&g_trace_lock);
  if (!g_trace) {
    pthread_mutex_unlock(&g_trace_lock);
    return 0;
  }
  int sid = 0;
  while (sid < g_trace_nstreams && !(g_trace_streams[sid] == s && g_trace_slots[sid] == slot)) sid++;
  if (sid == g_trace_nstreams && sid < 256) {
    char name[32];
    slot_name(slot, name, sizeof name);
    g_trace_streams[sid] = s;
    g_trace_slots[sid] = slot;
    g_trace_nstreams++;
    fprintf(g_trace, "# stream %d %s\n", sid, name);
  }
  uint64_t id = ++g_trace_next;
  fprintf(g_trace, "alloc %" PRIu64 " %zu %d\n", id, n, sid);
  pthread_mutex_unlock(&g_trace_lock);
  return id;
}

static void trace_free(void *ud, uint64_t id) {
  (void)ud;
  if (!atomic_load_explicit(&g_tracing, memory_order_relaxed)) return;
  pthread_mutex_lock(&g_trace_lock);
  if (g_trace) fprintf(g_trace, "free %" PRIu64 "\n", id);
  pthread_mutex_unlock(&g_trace_lock);
}

loom_status loom_alloc_trace_start(const char *path) {
  if (!path) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_trace_start: path is NULL");
  FILE *f = fopen(path, "a");
  if (!f) return loom_set_error(LOOM_ERR_IO, "loom_alloc_trace_start: cannot open '%s' for appending", path);
  pthread_mutex_lock(&g_trace_lock);
  if (g_trace) fclose(g_trace);
  g_trace = f;
  g_trace_nstreams = 0;
  fprintf(f, "# loom allocation trace v1: alloc <id> <bytes> <stream> | free <id> | epoch <n>\n");
  atomic_store(&g_tracing, 1);
  pthread_mutex_unlock(&g_trace_lock);
  return LOOM_OK;
}

void loom_alloc_trace_stop(void) {
  pthread_mutex_lock(&g_trace_lock);
  if (g_trace) fclose(g_trace);
  g_trace = NULL;
  atomic_store(&g_tracing, 0);
  pthread_mutex_unlock(&g_trace_lock);
}

void loom_alloc_trace_epoch(int n) {
  pthread_mutex_lock(&g_trace_lock);
  if (g_trace) fprintf(g_trace, "epoch %d\n", n);
  pthread_mutex_unlock(&g_trace_lock);
}

/* ---- configuration --------------------------------------------------------- */

static void init_locked(void) {
  if (g_init) return;
  g_init = 1;
  loom_alloc_options_init(&g_opts);
  const char *conf = getenv("LOOM_ALLOC_CONF");
  if (conf && loom_alloc_options_parse(conf, &g_opts) != LOOM_OK) {
    g_env_status = loom_last_status();
    snprintf(g_env_msg, sizeof g_env_msg, "LOOM_ALLOC_CONF: %s", loom_last_error());
  }
  const char *trace = getenv("LOOM_ALLOC_TRACE");
  if (trace && *trace && g_env_status == LOOM_OK && loom_alloc_trace_start(trace) != LOOM_OK) {
    g_env_status = loom_last_status();
    snprintf(g_env_msg, sizeof g_env_msg, "LOOM_ALLOC_TRACE: %s", loom_last_error());
  }
}

static int slot_of(loom_device dev, int *out) {
  if (dev.kind == LOOM_CPU && dev.index == -1) {
    *out = SLOT_PINNED;
    return 1;
  }
  if (loom_device_check(dev) != LOOM_OK) return 0;
  if (dev.kind == LOOM_CPU) *out = SLOT_CPU;
  else if (dev.index >= LOOM_MAX_LOGICAL_GPUS) {
    loom_set_error(LOOM_ERR_DEVICE, "cuda:%d: loom supports at most %d CUDA devices", dev.index, LOOM_MAX_LOGICAL_GPUS);
    return 0;
  } else *out = SLOT_CUDA0 + dev.index;
  return 1;
}

static const loom_provider *slot_provider(int slot) {
  if (slot == SLOT_CPU) return loom_provider_cpu();
  if (slot == SLOT_PINNED) {
    const loom_provider *p = loom_provider_pinned();
    if (p && !loom_device_fake_gpus(NULL) && loom_device_count(LOOM_CUDA) > 0) return p;
    return loom_provider_cpu();
  }
  int idx = slot - SLOT_CUDA0;
  size_t mem = 0;
  if (loom_device_fake_gpus(&mem) > 0) {
    int phys = loom_device_physical(idx);
    if (phys < 0) return NULL;
    if (!g_fake_phys[phys]) g_fake_phys[phys] = loom_fake_create(mem);
    return g_fake_phys[phys] ? loom_fake_provider(g_fake_phys[phys]) : NULL;
  }
  return loom_provider_cuda(idx);
}

/* Limit in bytes from the options and, for virtual devices, their size. */
static loom_status resolve_limit(int slot, const loom_provider *prov, const loom_alloc_options *o, size_t *limit) {
  size_t lim = o->limit_bytes;
  if (o->limit_fraction > 0) {
    size_t fr = 0, tot = 0;
    if (prov) LOOM_TRY(prov->mem_info(prov->ctx, &fr, &tot));
    size_t f = (size_t)(o->limit_fraction * (double)tot);
    if (!lim || f < lim) lim = f;
  }
  if (slot >= SLOT_CUDA0) {
    size_t v = loom_device_memory_limit(slot - SLOT_CUDA0);
    if (v && (!lim || v < lim)) lim = v;
  }
  *limit = lim;
  return LOOM_OK;
}

static const loom_alloc_options *slot_opts(int slot) {
  return g_slots[slot].has_own ? &g_slots[slot].own : &g_opts;
}

/* Create the slot's pool or async backend (under g_lock). */
static loom_status create_locked(int slot) {
  init_locked();
  if (g_env_status != LOOM_OK) return loom_set_error(g_env_status, "%s", g_env_msg);
  if (atomic_load(&g_slots[slot].pool) || atomic_load(&g_slots[slot].async)) return LOOM_OK;
  const loom_alloc_options *o = slot_opts(slot);
  char name[32];
  slot_name(slot, name, sizeof name);
  const loom_provider *prov = slot_provider(slot);
  if (!prov) return loom_set_error(LOOM_ERR_DEVICE, "%s: no memory provider (built without CUDA?)", name);
  size_t limit = 0;
  LOOM_TRY(resolve_limit(slot, prov, o, &limit));
  if (slot >= SLOT_CUDA0 && o->backend == LOOM_ALLOC_BACKEND_CUDA_ASYNC) {
    if (loom_device_fake_gpus(NULL) > 0)
      return loom_set_error(LOOM_ERR_UNSUPPORTED, "%s: backend:cuda_async needs a real GPU", name);
    loom_async *a = NULL;
    LOOM_TRY(loom_async_create(slot - SLOT_CUDA0, name, limit, &a));
    atomic_store(&g_slots[slot].async, a);
    return LOOM_OK;
  }
  loom_pool_config cfg;
  loom_pool_config_init(&cfg, name);
  cfg.limit = limit;
  cfg.max_split_size = o->max_split_size;
  cfg.gc_threshold = o->gc_threshold;
  cfg.preallocate = o->preallocate_fraction;
  cfg.history = o->history;
  cfg.poison = prov->host_accessible;
  cfg.expandable = o->expandable_segments && slot != SLOT_PINNED;
  if (slot != SLOT_PINNED) {
    loom_device dev = slot == SLOT_CPU ? loom_cpu() : loom_cuda(slot - SLOT_CUDA0);
    cfg.arena_stream = loom_stream_current(dev);
    if (!cfg.arena_stream) return loom_last_status();
    cfg.trace.alloc = trace_alloc;
    cfg.trace.free = trace_free;
    cfg.trace.ud = (void *)(intptr_t)slot;
  }
  loom_pool *p = NULL;
  LOOM_TRY(loom_pool_create(prov, &cfg, &p));
  atomic_store(&g_slots[slot].pool, p);
  loom_prof_sites_request(slot, o->history > 0);  /* history on: blocks remember the op that made them */
  return LOOM_OK;
}

static loom_status get_slot(int slot, loom_pool **pool, loom_async **async) {
  *pool = atomic_load_explicit(&g_slots[slot].pool, memory_order_acquire);
  *async = atomic_load_explicit(&g_slots[slot].async, memory_order_acquire);
  if (*pool || *async) return LOOM_OK;
  pthread_mutex_lock(&g_lock);
  loom_status st = create_locked(slot);
  pthread_mutex_unlock(&g_lock);
  *pool = atomic_load(&g_slots[slot].pool);
  *async = atomic_load(&g_slots[slot].async);
  return st;
}

/* Apply options to an existing pool (under g_lock). */
static loom_status apply_locked(int slot) {
  loom_pool *p = atomic_load(&g_slots[slot].pool);
  loom_async *a = atomic_load(&g_slots[slot].async);
  if (!p && !a) return LOOM_OK;
  const loom_alloc_options *o = slot_opts(slot);
  char name[32];
  slot_name(slot, name, sizeof name);
  int want_async = slot >= SLOT_CUDA0 && o->backend == LOOM_ALLOC_BACKEND_CUDA_ASYNC;
  if (want_async != (a != NULL))
    return loom_set_error(LOOM_ERR_STATE, "%s: the allocator backend cannot change after the device's first allocation; "
                          "set LOOM_ALLOC_CONF or call loom_alloc_set_config before allocating", name);
  size_t limit = 0;
  LOOM_TRY(resolve_limit(slot, slot_provider(slot), o, &limit));
  if (a) {
    loom_async_set_limit(a, limit);
    return LOOM_OK;
  }
  if ((o->preallocate_fraction > 0) != (loom_pool_preallocated(p) != 0))
    return loom_set_error(LOOM_ERR_STATE, "%s: preallocation cannot change after the device's first allocation; set "
                          "LOOM_ALLOC_CONF or call loom_alloc_set_config before allocating", name);
  if (slot != SLOT_PINNED && (o->expandable_segments != 0) != (loom_pool_expandable(p) != 0))
    return loom_set_error(LOOM_ERR_STATE, "%s: expandable_segments cannot change after the device's first allocation; "
                          "set LOOM_ALLOC_CONF or call loom_alloc_set_config before allocating", name);
  loom_status st = loom_pool_set_controls(p, limit, o->max_split_size, o->gc_threshold, o->history);
  if (st == LOOM_OK) loom_prof_sites_request(slot, o->history > 0);
  return st;
}

static void copy_opts(loom_alloc_options *dst, const loom_alloc_options *src) {
  loom_alloc_options_init(dst);
  memcpy(dst, src, sizeof *dst);
  dst->struct_size = sizeof *dst;
}

loom_status loom_alloc_set_config(const loom_alloc_options *o) {
  LOOM_TRY(loom_alloc_options_check(o));
  pthread_mutex_lock(&g_lock);
  init_locked();
  copy_opts(&g_opts, o);
  g_env_status = LOOM_OK;  /* the API replaces a bad LOOM_ALLOC_CONF */
  loom_status st = LOOM_OK;
  for (int i = 0; i < NSLOTS; i++) {
    if (g_slots[i].has_own) continue;
    loom_status s = apply_locked(i);
    if (s != LOOM_OK && st == LOOM_OK) st = s;
  }
  pthread_mutex_unlock(&g_lock);
  return st;
}

loom_status loom_alloc_configure(const char *conf) {
  loom_alloc_options o;
  loom_alloc_options_init(&o);
  LOOM_TRY(loom_alloc_options_parse(conf, &o));
  return loom_alloc_set_config(&o);
}

loom_status loom_alloc_set_device_config(loom_device dev, const loom_alloc_options *o) {
  LOOM_TRY(loom_alloc_options_check(o));
  int slot;
  if (!slot_of(dev, &slot)) return loom_last_status();
  pthread_mutex_lock(&g_lock);
  init_locked();
  copy_opts(&g_slots[slot].own, o);
  g_slots[slot].has_own = 1;
  loom_status st = apply_locked(slot);
  pthread_mutex_unlock(&g_lock);
  return st;
}

/* ---- allocation ------------------------------------------------------------ */

/* ---- private pools (graph capture, see alloc.h) ----------------------------- */

#define MAX_PRIVATE 64
static _Thread_local loom_pool *tl_private;  /* this thread's allocations on tl_private_slot go here */
static _Thread_local int tl_private_slot;
static pthread_mutex_t g_private_lock = PTHREAD_MUTEX_INITIALIZER;
static loom_pool *g_private[MAX_PRIVATE];
static int g_private_slot[MAX_PRIVATE];
static atomic_int g_nprivate;  /* lets the free path skip the lock when there are none */

loom_status loom_alloc_private_begin(loom_device dev, loom_pool **out) {
  int slot;
  *out = NULL;
  if (tl_private) return loom_set_error(LOOM_ERR_STATE, "graph capture: this thread already routes allocations to a "
                                        "private pool (one capture at a time per thread)");
  if (!slot_of(dev, &slot)) return loom_last_status();
  loom_pool *mp;
  loom_async *a;
  LOOM_TRY(get_slot(slot, &mp, &a));
  char name[48], dn[32];
  slot_name(slot, dn, sizeof dn);
  if (a)
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "%s: graph capture needs the native allocator (backend:native); "
                          "backend:cuda_async has its own capture rules", dn);
  snprintf(name, sizeof name, "%s:graph", dn);
  const loom_provider *prov = slot_provider(slot);
  loom_pool_config cfg;
  loom_pool_config_init(&cfg, name);
  cfg.poison = prov->host_accessible;
  LOOM_TRY(resolve_limit(slot, prov, slot_opts(slot), &cfg.limit));
  loom_pool *p = NULL;
  LOOM_TRY(loom_pool_create(prov, &cfg, &p));
  pthread_mutex_lock(&g_private_lock);
  int n = atomic_load(&g_nprivate);
  if (n == MAX_PRIVATE) {
    pthread_mutex_unlock(&g_private_lock);
    loom_pool_destroy(p);
    return loom_set_error(LOOM_ERR_STATE, "graph capture: %d graphs alive already; free some (loom_graph_free)",
                          MAX_PRIVATE);
  }
  g_private[n] = p;
  g_private_slot[n] = slot;
  atomic_store(&g_nprivate, n + 1);
  pthread_mutex_unlock(&g_private_lock);
  tl_private = p;
  tl_private_slot = slot;
  *out = p;
  return LOOM_OK;
}

void loom_alloc_private_end(void) { tl_private = NULL; }

void loom_alloc_private_destroy(loom_pool *p) {
  if (!p) return;
  if (tl_private == p) tl_private = NULL;
  pthread_mutex_lock(&g_private_lock);
  int n = atomic_load(&g_nprivate);
  for (int i = 0; i < n; i++)
    if (g_private[i] == p) {
      g_private[i] = g_private[n - 1];
      g_private_slot[i] = g_private_slot[n - 1];
      atomic_store(&g_nprivate, n - 1);
      break;
    }
  pthread_mutex_unlock(&g_private_lock);
  loom_pool_destroy(p);
}

/* Free ptr into the private pool of slot that owns it; 0 if none does. */
static int free_private(int slot, void *ptr) {
  if (atomic_load_explicit(&g_nprivate, memory_order_acquire) == 0) return 0;
  pthread_mutex_lock(&g_private_lock);
  loom_pool *owner = NULL;
  for (int i = 0; i < atomic_load(&g_nprivate) && !owner; i++)
    if (g_private_slot[i] == slot && loom_pool_owns(g_private[i], ptr)) owner = g_private[i];
  /* Freed under the lock: the graph (and its pool) cannot go away meanwhile. */
  if (owner) loom_pool_free(owner, ptr);
  pthread_mutex_unlock(&g_private_lock);
  return owner != NULL;
}

loom_status loom_alloc_malloc(loom_device dev, size_t nbytes, loom_stream *stream, void **out) {
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_malloc: out is NULL");
  *out = NULL;
  int slot;
  if (dev.kind == LOOM_CPU && dev.index == -1)
    return loom_set_error(LOOM_ERR_DEVICE, "loom_alloc_malloc: use loom_alloc_pinned_malloc for pinned memory");
  if (!slot_of(dev, &slot)) return loom_last_status();
  if (!stream) {
    stream = loom_stream_current(dev);
    if (!stream) return loom_last_status();
  } else if (!loom_device_eq(loom_stream_device(stream), dev)) {
    char a[32], b[32];
    return loom_set_error(LOOM_ERR_DEVICE, "loom_alloc_malloc: stream belongs to %s, memory is asked for on %s",
                          loom_device_str(loom_stream_device(stream), a, sizeof a), loom_device_str(dev, b, sizeof b));
  }
  if (tl_private && tl_private_slot == slot) return loom_pool_malloc(tl_private, nbytes, stream, out);
  loom_pool *p;
  loom_async *a;
  LOOM_TRY(get_slot(slot, &p, &a));
  return a ? loom_async_malloc(a, nbytes, stream, out) : loom_pool_malloc(p, nbytes, stream, out);
}

static loom_status free_in_slot(int slot, void *ptr) {
  if (free_private(slot, ptr)) return LOOM_OK;
  loom_pool *p = atomic_load_explicit(&g_slots[slot].pool, memory_order_acquire);
  loom_async *a = atomic_load_explicit(&g_slots[slot].async, memory_order_acquire);
  if (a) return loom_async_free(a, ptr);
  if (p) return loom_pool_free(p, ptr);
  char name[32];
  slot_name(slot, name, sizeof name);
  return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_free: %p was not allocated on %s (nothing was)", ptr, name);
}

void loom_alloc_free(loom_device dev, void *ptr) {
  int slot;
  if (!ptr || !slot_of(dev, &slot)) return;
  free_in_slot(slot, ptr);
}

loom_status loom_alloc_pinned_malloc(size_t nbytes, void **out) {
  loom_capture_note_unsafe("a pinned host allocation (outside the capture's pool)");
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_pinned_malloc: out is NULL");
  *out = NULL;
  loom_pool *p;
  loom_async *a;
  LOOM_TRY(get_slot(SLOT_PINNED, &p, &a));
  return loom_pool_malloc(p, nbytes, NULL, out);
}

void loom_alloc_pinned_free(void *ptr) {
  if (ptr) free_in_slot(SLOT_PINNED, ptr);
}

static loom_status record_in_slot(int slot, void *ptr, loom_stream *stream) {
  loom_pool *p = atomic_load_explicit(&g_slots[slot].pool, memory_order_acquire);
  loom_async *a = atomic_load_explicit(&g_slots[slot].async, memory_order_acquire);
  if (a) return loom_async_record_stream(a, ptr, stream);
  if (p) return loom_pool_record_stream(p, ptr, stream);
  return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_record_stream: %p is not a live allocation", ptr);
}

loom_status loom_alloc_record_stream(loom_device dev, void *ptr, loom_stream *stream) {
  int slot;
  if (!stream) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_record_stream: stream is NULL");
  if (!slot_of(dev, &slot)) return loom_last_status();
  return record_in_slot(slot, ptr, stream);
}

loom_status loom_alloc_pinned_record_stream(void *ptr, loom_stream *stream) {
  if (!stream) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_pinned_record_stream: stream is NULL");
  return record_in_slot(SLOT_PINNED, ptr, stream);
}

/* ---- observability --------------------------------------------------------- */

static int existing(loom_device dev, loom_pool **p, loom_async **a, int *slot) {
  if (!slot_of(dev, slot)) return 0;
  *p = atomic_load_explicit(&g_slots[*slot].pool, memory_order_acquire);
  *a = atomic_load_explicit(&g_slots[*slot].async, memory_order_acquire);
  return 1;
}

loom_status loom_memory_stats_get(loom_device dev, loom_memory_stats *out) {
  if (!out || out->struct_size < sizeof(size_t))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_memory_stats_get: out is NULL or out->struct_size is not set");
  loom_pool *p;
  loom_async *a;
  int slot;
  if (!existing(dev, &p, &a, &slot)) return loom_last_status();
  if (p) loom_pool_stats(p, out);
  else if (a) loom_async_stats(a, out);
  else {
    size_t n = out->struct_size < sizeof *out ? out->struct_size : sizeof *out;
    memset(out, 0, n);
    out->struct_size = n;
  }
  return LOOM_OK;
}

loom_status loom_memory_reset_peaks(loom_device dev) {
  loom_pool *p;
  loom_async *a;
  int slot;
  if (!existing(dev, &p, &a, &slot)) return loom_last_status();
  if (p) loom_pool_reset_peaks(p);
  if (a) loom_async_reset_peaks(a);
  return LOOM_OK;
}

loom_status loom_memory_reset_counters(loom_device dev) {
  loom_pool *p;
  loom_async *a;
  int slot;
  if (!existing(dev, &p, &a, &slot)) return loom_last_status();
  if (p) loom_pool_reset_counters(p);
  if (a) loom_async_reset_counters(a);
  return LOOM_OK;
}

static char *dup_str(const char *s) {
  char *r = strdup(s);
  if (!r) loom_set_error(LOOM_ERR_OOM, "out of host memory");
  return r;
}

char *loom_memory_summary(loom_device dev) {
  loom_pool *p;
  loom_async *a;
  int slot;
  if (!existing(dev, &p, &a, &slot)) return NULL;
  if (p) return loom_pool_summary(p);
  if (a) return loom_async_summary(a);
  char name[32], buf[96];
  slot_name(slot, name, sizeof name);
  snprintf(buf, sizeof buf, "loom memory summary: %s: no allocations yet\n", name);
  return dup_str(buf);
}

char *loom_memory_snapshot_json(loom_device dev) {
  loom_pool *p;
  loom_async *a;
  int slot;
  if (!existing(dev, &p, &a, &slot)) return NULL;
  if (p) return loom_pool_snapshot_json(p);
  if (a) return loom_async_snapshot_json(a);
  char name[32], buf[128];
  slot_name(slot, name, sizeof name);
  snprintf(buf, sizeof buf, "{\"device\":\"%s\",\"preallocated\":false,\"stats\":null,\"segments\":[],\"history\":[]}", name);
  return dup_str(buf);
}

loom_status loom_empty_cache(loom_device dev) {
  loom_pool *p;
  loom_async *a;
  int slot;
  if (!existing(dev, &p, &a, &slot)) return loom_last_status();
  if (p) return loom_pool_empty_cache(p);
  if (a) return loom_async_empty_cache(a);
  return LOOM_OK;
}
