/* capture_pools.c — graph capture's private pools (alloc.h) and the
 * capture router (allocator.h) every device slot is reached through.
 *
 * loom_alloc_private_begin gives the calling thread a new private pool on a
 * device; until loom_alloc_private_end the router sends that thread's
 * allocations on the device there. A pointer operation (free,
 * record_stream), from any thread, first looks for a live private pool of
 * the device that owns the pointer — one atomic load when there is none —
 * and runs under the registry lock, so the pool (and its graph) cannot be
 * destroyed meanwhile; otherwise it goes to the device's own back end.
 * Queries and controls (stats, summary, empty_cache, options) are the
 * device's own: private pools are accounted to their graphs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "alloc/alloc_internal.h"
#include "alloc/allocator.h"
#include "core/sys.h"
#include "core/teardown.h"

#define MAX_PRIVATE 64
static _Thread_local loom_allocator *tl_private;  /* this thread's allocations on tl_private_slot go here */
static _Thread_local int tl_private_slot;
static pthread_mutex_t g_private_lock = PTHREAD_MUTEX_INITIALIZER;
static loom_allocator *g_private[MAX_PRIVATE];
static int g_private_slot[MAX_PRIVATE];
static int g_private_retired[MAX_PRIVATE];  /* its graph is freed; the pool goes with its last block */
static atomic_int g_nprivate;  /* lets the pointer operations skip the lock when there are none */

/* ---- private pools ------------------------------------------------------------ */

loom_status loom_alloc_private_begin(loom_device dev, loom_allocator **out) {
  *out = NULL;
  if (tl_private) return loom_set_error(LOOM_ERR_STATE, "graph capture: this thread already routes allocations to a "
                                        "private pool (one capture at a time per thread)");
  int slot;
  const loom_provider *prov;
  loom_pool_config cfg;
  LOOM_TRY(loom_alloc_capture_config(dev, &slot, &prov, &cfg));
  loom_allocator *p = NULL;
  LOOM_TRY(loom_allocator_pool_create(prov, &cfg, -1, 0, &p));
  pthread_mutex_lock(&g_private_lock);
  int n = atomic_load(&g_nprivate);
  if (n == MAX_PRIVATE) {
    pthread_mutex_unlock(&g_private_lock);
    p->ops->destroy(p);
    return loom_set_error(LOOM_ERR_STATE, "graph capture: %d graphs (or tensors made while capturing them) alive "
                          "already; free some (loom_graph_free, loom_tensor_release)", MAX_PRIVATE);
  }
  g_private[n] = p;
  g_private_slot[n] = slot;
  g_private_retired[n] = 0;
  atomic_store(&g_nprivate, n + 1);
  pthread_mutex_unlock(&g_private_lock);
  loom_alloc_capture_count(slot, 1);
  tl_private = p;
  tl_private_slot = slot;
  *out = p;
  return LOOM_OK;
}

void loom_alloc_private_end(void) {
  if (tl_private) loom_alloc_capture_count(tl_private_slot, -1);
  tl_private = NULL;
}

static int64_t live_blocks(loom_allocator *p) {
  loom_memory_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  p->ops->stats(p, &st);
  return st.allocations[LOOM_MEM_ALL].current;
}

/* Under g_private_lock: take entry i out of the registry and destroy it. */
static void drop_locked(int i) {
  int n = atomic_load(&g_nprivate);
  loom_allocator *p = g_private[i];
  g_private[i] = g_private[n - 1];
  g_private_slot[i] = g_private_slot[n - 1];
  g_private_retired[i] = g_private_retired[n - 1];
  atomic_store(&g_nprivate, n - 1);
  p->ops->destroy(p);
}

void loom_alloc_private_destroy(loom_allocator *p) {
  if (!p) return;
  if (tl_private == p) loom_alloc_private_end();
  pthread_mutex_lock(&g_private_lock);
  int n = atomic_load(&g_nprivate);
  for (int i = 0; i < n; i++)
    if (g_private[i] == p) {
      /* Blocks made while capturing may outlive the graph (an optimizer's
       * state, a kernel table, a tensor the caller kept): their segments
       * stay until the last of them is freed (on_private). */
      if (live_blocks(p) > 0) g_private_retired[i] = 1;
      else drop_locked(i);
      break;
    }
  pthread_mutex_unlock(&g_private_lock);
}

int loom_alloc_private_count(void) { return atomic_load(&g_nprivate); }

int64_t loom_alloc_private_reserved(loom_allocator *p) {
  if (!p) return 0;
  loom_memory_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  p->ops->stats(p, &st);
  return st.reserved_bytes[0].current;
}

/* loom_shutdown: the private pools of graphs never freed go too (their
 * graphs are invalid afterwards). */
static loom_status private_teardown(void) {
  loom_alloc_private_end();
  pthread_mutex_lock(&g_private_lock);
  while (atomic_load(&g_nprivate) > 0) drop_locked(0);
  pthread_mutex_unlock(&g_private_lock);
  return LOOM_OK;
}
LOOM_TEARDOWN(LOOM_LAYER_ALLOC, private_teardown)

/* ---- the router --------------------------------------------------------------- */

typedef struct router {
  loom_allocator base;
  int slot;
  loom_allocator *own;  /* the device's own back end */
} router;

static loom_allocator *own_of(loom_allocator *a) { return ((router *)a)->own; }
loom_allocator *loom_allocator_router_own(loom_allocator *a) { return own_of(a); }

enum { OP_FREE, OP_RECORD, OP_OWNS };

/* Run op on the private pool of slot that owns ptr, under the registry lock;
 * 0 when none does (*st untouched). */
static int on_private(int slot, void *ptr, int op, loom_stream *s, loom_status *st) {
  if (atomic_load_explicit(&g_nprivate, memory_order_acquire) == 0) return 0;
  pthread_mutex_lock(&g_private_lock);
  loom_allocator *owner = NULL;
  int at = -1;
  for (int i = 0; i < atomic_load(&g_nprivate) && !owner; i++)
    if (g_private_slot[i] == slot && g_private[i]->ops->owns(g_private[i], ptr)) owner = g_private[i], at = i;
  if (owner && op == OP_FREE) {
    *st = owner->ops->free(owner, ptr);
    if (g_private_retired[at] && live_blocks(owner) == 0) drop_locked(at);  /* its graph is gone: so is the pool */
  } else if (owner && op == OP_RECORD) {
    *st = owner->ops->record_stream(owner, ptr, s);
  } else if (owner) {
    *st = LOOM_OK;
  }
  pthread_mutex_unlock(&g_private_lock);
  return owner != NULL;
}

static loom_status r_malloc(loom_allocator *a, size_t n, loom_stream *s, void **out) {
  router *r = (router *)a;
  if (tl_private && tl_private_slot == r->slot) return tl_private->ops->malloc(tl_private, n, s, out);
  return r->own->ops->malloc(r->own, n, s, out);
}

static loom_status r_free(loom_allocator *a, void *ptr) {
  router *r = (router *)a;
  loom_status st;
  if (on_private(r->slot, ptr, OP_FREE, NULL, &st)) return st;
  return r->own->ops->free(r->own, ptr);
}

static loom_status r_record(loom_allocator *a, void *ptr, loom_stream *s) {
  router *r = (router *)a;
  loom_status st;
  if (on_private(r->slot, ptr, OP_RECORD, s, &st)) return st;
  return r->own->ops->record_stream(r->own, ptr, s);
}

static int r_owns(loom_allocator *a, const void *ptr) {
  router *r = (router *)a;
  loom_status st;
  return on_private(r->slot, (void *)ptr, OP_OWNS, NULL, &st) || r->own->ops->owns(r->own, ptr);
}

static void r_stats(loom_allocator *a, loom_memory_stats *out) { own_of(a)->ops->stats(own_of(a), out); }
static void r_reset_peaks(loom_allocator *a) { own_of(a)->ops->reset_peaks(own_of(a)); }
static void r_reset_counters(loom_allocator *a) { own_of(a)->ops->reset_counters(own_of(a)); }
static char *r_summary(loom_allocator *a) { return own_of(a)->ops->summary(own_of(a)); }
static char *r_snapshot(loom_allocator *a) { return own_of(a)->ops->snapshot_json(own_of(a)); }
static loom_status r_empty_cache(loom_allocator *a) { return own_of(a)->ops->empty_cache(own_of(a)); }
static loom_status r_reconfigure(loom_allocator *a, const loom_alloc_options *o, size_t limit) {
  return own_of(a)->ops->reconfigure(own_of(a), o, limit);
}

static void r_destroy(loom_allocator *a) {
  if (!a) return;
  own_of(a)->ops->destroy(own_of(a));
  loom_sys_free(a);
}

static const loom_allocator_ops g_router_ops = {
    r_malloc,         r_free,    r_record,   r_owns,        r_stats,       r_reset_peaks,
    r_reset_counters, r_summary, r_snapshot, r_empty_cache, r_reconfigure, r_destroy,
};

loom_status loom_allocator_router_create(int slot, loom_allocator *own, loom_allocator **out) {
  *out = NULL;
  router *r = loom_sys_calloc(1, sizeof *r);
  if (!r) return loom_set_error(LOOM_ERR_OOM, "allocator: out of host memory");
  r->base.ops = &g_router_ops;
  r->base.backend = own->backend;
  r->slot = slot;
  r->own = own;
  *out = &r->base;
  return LOOM_OK;
}
