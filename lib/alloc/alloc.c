/* alloc.c — the per-device allocators behind lib/alloc/alloc.h and the
 * public controls of include/loom/alloc.h.
 *
 * One slot per device: the CPU, the pinned host pool, and each logical CUDA
 * device. A slot's allocator is created at its first allocation (so
 * LOOM_ALLOC_CONF, loom_alloc_set_config and the virtual-device limits are
 * known by then): a native pool over the provider that fits (CPU memory,
 * cudaMalloc, or cudaHostAlloc for pinned memory when a GPU exists, plain
 * CPU memory otherwise), or with backend:cuda_async on a CUDA device the
 * cudaMallocAsync back end; either sits behind the capture router
 * (capture_pools.c), and every entry point calls through the slot's
 * allocator table (allocator.h). Simulated GPUs (tests) get their memory
 * from the provider factory registered for them (provider.h). Query calls
 * never create an allocator. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "alloc/alloc_internal.h"
#include "alloc/allocator.h"
#include "core/capture.h"
#include "core/struct_size.h"
#include "core/teardown.h"
#include "device/device_internal.h"
#include "core/sys.h"

#define SLOT_CPU 0
#define SLOT_PINNED 1
#define SLOT_CUDA0 2
#define NSLOTS (SLOT_CUDA0 + LOOM_MAX_LOGICAL_GPUS)

typedef struct slot {
  _Atomic(loom_allocator *) alloc;  /* the capture router over the device's own back end */
  int has_own;
  loom_alloc_options own;
} slot;

static slot g_slots[NSLOTS];
static atomic_int g_captures[NSLOTS];  /* graph captures open per slot (pool.h: loom_pool_config.captures) */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_init = 0;
static loom_alloc_options g_opts;
static loom_status g_env_status = LOOM_OK;
static char g_env_msg[768];

void loom_alloc_slot_name(int slot, char *buf, int n) {
  if (slot == SLOT_CPU) snprintf(buf, (size_t)n, "cpu");
  else if (slot == SLOT_PINNED) snprintf(buf, (size_t)n, "pinned");
  else snprintf(buf, (size_t)n, "cuda:%d", slot - SLOT_CUDA0);
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
  if (loom_device_fake_gpus(NULL) > 0) {
    int phys = loom_device_physical(idx);
    return phys < 0 ? NULL : loom_provider_fake_gpu(phys);
  }
  return loom_provider_cuda(idx);
}

static loom_status no_provider(int slot) {
  char name[32];
  loom_alloc_slot_name(slot, name, sizeof name);
  if (slot >= SLOT_CUDA0 && loom_device_fake_gpus(NULL) > 0)
    return loom_set_error(LOOM_ERR_DEVICE, "%s: the simulated GPUs have no memory provider (register a factory with "
                          "loom_provider_set_fake_gpu_factory, as tests/support/fake_gpus.c does)", name);
  return loom_set_error(LOOM_ERR_DEVICE, "%s: no memory provider (built without CUDA?)", name);
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

/* Create the slot's allocator (under g_lock). */
static loom_status create_locked(int slot) {
  init_locked();
  if (g_env_status != LOOM_OK) return loom_set_error(g_env_status, "%s", g_env_msg);
  if (atomic_load(&g_slots[slot].alloc)) return LOOM_OK;
  const loom_alloc_options *o = slot_opts(slot);
  char name[32];
  loom_alloc_slot_name(slot, name, sizeof name);
  const loom_provider *prov = slot_provider(slot);
  if (!prov) return no_provider(slot);
  size_t limit = 0;
  LOOM_TRY(resolve_limit(slot, prov, o, &limit));
  loom_allocator *own = NULL;
  if (slot >= SLOT_CUDA0 && o->backend == LOOM_ALLOC_BACKEND_CUDA_ASYNC) {
    if (loom_device_fake_gpus(NULL) > 0)
      return loom_set_error(LOOM_ERR_UNSUPPORTED, "%s: backend:cuda_async needs a real GPU", name);
    LOOM_TRY(loom_allocator_async_create(slot - SLOT_CUDA0, name, limit, &own));
  } else {
    loom_pool_config cfg;
    loom_pool_config_init(&cfg, name);
    cfg.limit = limit;
    cfg.max_split_size = o->max_split_size;
    cfg.gc_threshold = o->gc_threshold;
    cfg.preallocate = o->preallocate_fraction;
    cfg.history = o->history;
    cfg.poison = prov->host_accessible;
    cfg.expandable = o->expandable_segments && slot != SLOT_PINNED;
    cfg.captures = &g_captures[slot];
    if (slot != SLOT_PINNED) {
      loom_device dev = slot == SLOT_CPU ? loom_cpu() : loom_cuda(slot - SLOT_CUDA0);
      cfg.arena_stream = loom_stream_current(dev);
      if (!cfg.arena_stream) return loom_last_status();
      cfg.trace = loom_alloc_trace_hooks(slot);
    }
    /* The slot is the profiler's key: with history on, blocks remember the op that made them. */
    LOOM_TRY(loom_allocator_pool_create(prov, &cfg, slot, slot != SLOT_PINNED, &own));
  }
  loom_allocator *routed = NULL;
  loom_status st = loom_allocator_router_create(slot, own, &routed);
  if (st != LOOM_OK) {
    own->ops->destroy(own);
    return st;
  }
  atomic_store_explicit(&g_slots[slot].alloc, routed, memory_order_release);
  return LOOM_OK;
}

static loom_status get_alloc(int slot, loom_allocator **out) {
  *out = atomic_load_explicit(&g_slots[slot].alloc, memory_order_acquire);
  if (*out) return LOOM_OK;
  pthread_mutex_lock(&g_lock);
  loom_status st = create_locked(slot);
  pthread_mutex_unlock(&g_lock);
  *out = atomic_load(&g_slots[slot].alloc);
  return st;
}

/* Apply options to an existing allocator (under g_lock). */
static loom_status apply_locked(int slot) {
  loom_allocator *a = atomic_load(&g_slots[slot].alloc);
  if (!a) return LOOM_OK;
  const loom_alloc_options *o = slot_opts(slot);
  char name[32];
  loom_alloc_slot_name(slot, name, sizeof name);
  int want = slot >= SLOT_CUDA0 ? o->backend : LOOM_ALLOC_BACKEND_NATIVE;
  if (want != a->backend)
    return loom_set_error(LOOM_ERR_STATE, "%s: the allocator backend cannot change after the device's first allocation; "
                          "set LOOM_ALLOC_CONF or call loom_alloc_set_config before allocating", name);
  size_t limit = 0;
  LOOM_TRY(resolve_limit(slot, slot_provider(slot), o, &limit));
  return a->ops->reconfigure(a, o, limit);
}

/* The caller's options (NULL refused), widened to this library's struct and
 * checked. */
static loom_status take_opts(const char *fn, const loom_alloc_options *user, loom_alloc_options *o) {
  if (!user) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: allocator options: NULL", fn);
  loom_alloc_options_init(o);
  LOOM_TRY(LOOM_STRUCT_IN(fn, loom_alloc_options, o, user));
  return loom_alloc_options_check(o);
}

loom_status loom_alloc_set_config(const loom_alloc_options *user) {
  loom_alloc_options o;
  LOOM_TRY(take_opts("loom_alloc_set_config", user, &o));
  pthread_mutex_lock(&g_lock);
  init_locked();
  g_opts = o;
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

loom_status loom_alloc_set_device_config(loom_device dev, const loom_alloc_options *user) {
  loom_alloc_options o;
  LOOM_TRY(take_opts("loom_alloc_set_device_config", user, &o));
  int slot;
  if (!slot_of(dev, &slot)) return loom_last_status();
  pthread_mutex_lock(&g_lock);
  init_locked();
  g_slots[slot].own = o;
  g_slots[slot].has_own = 1;
  loom_status st = apply_locked(slot);
  pthread_mutex_unlock(&g_lock);
  return st;
}

/* ---- graph capture's private pools (capture_pools.c) ------------------------ */

loom_status loom_alloc_capture_config(loom_device dev, int *slot, const loom_provider **prov, loom_pool_config *cfg) {
  if (!slot_of(dev, slot)) return loom_last_status();
  loom_allocator *own;
  LOOM_TRY(get_alloc(*slot, &own));
  char name[48], dn[32];
  loom_alloc_slot_name(*slot, dn, sizeof dn);
  if (own->backend != LOOM_ALLOC_BACKEND_NATIVE)
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "%s: graph capture needs the native allocator (backend:native); "
                          "backend:cuda_async has its own capture rules", dn);
  snprintf(name, sizeof name, "%s:graph", dn);
  *prov = slot_provider(*slot);
  if (!*prov) return no_provider(*slot);
  loom_pool_config_init(cfg, name);
  cfg->poison = (*prov)->host_accessible;
  cfg->captures = &g_captures[*slot];
  return resolve_limit(*slot, *prov, slot_opts(*slot), &cfg->limit);
}

void loom_alloc_capture_count(int slot, int delta) {
  if (slot >= 0 && slot < NSLOTS) atomic_fetch_add(&g_captures[slot], delta);
}

/* ---- allocation ------------------------------------------------------------ */

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
  loom_allocator *a;
  LOOM_TRY(get_alloc(slot, &a));
  return a->ops->malloc(a, nbytes, stream, out);
}

loom_status loom_alloc_malloc_uncaptured(loom_device dev, size_t nbytes, loom_stream *stream, void **out) {
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_malloc_uncaptured: out is NULL");
  *out = NULL;
  if (dev.kind == LOOM_CPU && dev.index == -1)
    return loom_set_error(LOOM_ERR_DEVICE, "loom_alloc_malloc_uncaptured: not for pinned memory");
  int slot;
  if (!slot_of(dev, &slot)) return loom_last_status();
  if (!stream) stream = loom_stream_current(dev);
  if (!stream) return loom_last_status();
  loom_allocator *a;
  LOOM_TRY(get_alloc(slot, &a));
  loom_allocator *own = loom_allocator_router_own(a);
  return own->ops->malloc(own, nbytes, stream, out);
}

static loom_status free_in_slot(int slot, void *ptr) {
  loom_allocator *a = atomic_load_explicit(&g_slots[slot].alloc, memory_order_acquire);
  if (a) return a->ops->free(a, ptr);
  char name[32];
  loom_alloc_slot_name(slot, name, sizeof name);
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
  loom_allocator *a;
  LOOM_TRY(get_alloc(SLOT_PINNED, &a));
  return a->ops->malloc(a, nbytes, NULL, out);
}

void loom_alloc_pinned_free(void *ptr) {
  if (ptr) free_in_slot(SLOT_PINNED, ptr);
}

static loom_status record_in_slot(int slot, void *ptr, loom_stream *stream) {
  loom_allocator *a = atomic_load_explicit(&g_slots[slot].alloc, memory_order_acquire);
  if (a) return a->ops->record_stream(a, ptr, stream);
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

/* The device's allocator, NULL when it has none yet (queries never make one). */
static int existing(loom_device dev, loom_allocator **a, int *slot) {
  if (!slot_of(dev, slot)) return 0;
  *a = atomic_load_explicit(&g_slots[*slot].alloc, memory_order_acquire);
  return 1;
}

loom_status loom_memory_stats_get(loom_device dev, loom_memory_stats *out) {
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_memory_stats_get: out is NULL");
  LOOM_TRY(loom_struct_size_check("loom_memory_stats_get", "loom_memory_stats", out->struct_size, sizeof *out));
  loom_allocator *a;
  int slot;
  if (!existing(dev, &a, &slot)) return loom_last_status();
  loom_memory_stats full = {.struct_size = sizeof full};  /* zeros for a device that never allocated */
  if (a) a->ops->stats(a, &full);
  return LOOM_STRUCT_OUT("loom_memory_stats_get", loom_memory_stats, out, &full);
}

loom_status loom_memory_reset_peaks(loom_device dev) {
  loom_allocator *a;
  int slot;
  if (!existing(dev, &a, &slot)) return loom_last_status();
  if (a) a->ops->reset_peaks(a);
  return LOOM_OK;
}

loom_status loom_memory_reset_counters(loom_device dev) {
  loom_allocator *a;
  int slot;
  if (!existing(dev, &a, &slot)) return loom_last_status();
  if (a) a->ops->reset_counters(a);
  return LOOM_OK;
}

static char *dup_str(const char *s) {
  char *r = loom_sys_strdup(s);
  if (!r) loom_set_error(LOOM_ERR_OOM, "out of host memory");
  return r;
}

char *loom_memory_summary(loom_device dev) {
  loom_allocator *a;
  int slot;
  if (!existing(dev, &a, &slot)) return NULL;
  if (a) return a->ops->summary(a);
  char name[32], buf[96];
  loom_alloc_slot_name(slot, name, sizeof name);
  snprintf(buf, sizeof buf, "loom memory summary: %s: no allocations yet\n", name);
  return dup_str(buf);
}

char *loom_memory_snapshot_json(loom_device dev) {
  loom_allocator *a;
  int slot;
  if (!existing(dev, &a, &slot)) return NULL;
  if (a) return a->ops->snapshot_json(a);
  char name[32], buf[128];
  loom_alloc_slot_name(slot, name, sizeof name);
  snprintf(buf, sizeof buf, "{\"device\":\"%s\",\"preallocated\":false,\"stats\":null,\"segments\":[],\"history\":[]}", name);
  return dup_str(buf);
}

loom_status loom_empty_cache(loom_device dev) {
  loom_allocator *a;
  int slot;
  if (!existing(dev, &a, &slot)) return loom_last_status();
  return a ? a->ops->empty_cache(a) : LOOM_OK;
}

/* ---- loom_shutdown ------------------------------------------------------------ */

/* Every slot's allocator is destroyed, returning all its segments (cached or
 * not) to the provider; the next allocation makes a new one with the same
 * options. Blocks still allocated are freed too and reported (the first
 * slot that had some names them). The allocation trace is closed. */
static loom_status alloc_teardown(void) {
  loom_status st = LOOM_OK;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < NSLOTS; i++) {
    loom_allocator *a = atomic_exchange(&g_slots[i].alloc, NULL);
    if (!a) continue;
    loom_memory_stats ms = {.struct_size = sizeof ms};
    a->ops->stats(a, &ms);
    if (ms.allocations[0].current > 0 && st == LOOM_OK) {
      char name[32];
      loom_alloc_slot_name(i, name, sizeof name);
      st = loom_set_error(LOOM_ERR_STATE, "%s: %lld bytes in %lld blocks were still allocated (a tensor or other "
                          "handle not released before loom_shutdown; it is invalid now)", name,
                          (long long)ms.allocated_bytes[0].current, (long long)ms.allocations[0].current);
    }
    a->ops->destroy(a);
  }
  pthread_mutex_unlock(&g_lock);
  loom_alloc_trace_stop();
  return st;
}
LOOM_TEARDOWN(LOOM_LAYER_ALLOC, alloc_teardown)
