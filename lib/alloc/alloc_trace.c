/* alloc_trace.c — the allocation trace (LOOM_ALLOC_TRACE,
 * loom_alloc_trace_start; format in include/loom/alloc.h): hooks the device
 * pools call under their lock, one line per event, streams numbered in
 * order of first use. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "alloc/alloc_internal.h"
#include "core/sys.h"

static pthread_mutex_t g_trace_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *g_trace = NULL;
static atomic_int g_tracing = 0;  /* lets the hot path skip the trace lock */
static uint64_t g_trace_next = 0;
static loom_stream *g_trace_streams[256];
static int g_trace_slots[256];
static int g_trace_nstreams = 0;

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
    loom_alloc_slot_name(slot, name, sizeof name);
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
  FILE *f = loom_sys_fopen(path, "a");
  if (!f) return loom_set_error(LOOM_ERR_IO, "loom_alloc_trace_start: cannot open '%s' for appending", path);
  pthread_mutex_lock(&g_trace_lock);
  if (g_trace) loom_sys_fclose(g_trace);
  g_trace = f;
  g_trace_nstreams = 0;
  fprintf(f, "# loom allocation trace v1: alloc <id> <bytes> <stream> | free <id> | epoch <n>\n");
  atomic_store(&g_tracing, 1);
  pthread_mutex_unlock(&g_trace_lock);
  return LOOM_OK;
}

void loom_alloc_trace_stop(void) {
  pthread_mutex_lock(&g_trace_lock);
  if (g_trace) loom_sys_fclose(g_trace);
  g_trace = NULL;
  atomic_store(&g_tracing, 0);
  pthread_mutex_unlock(&g_trace_lock);
}

void loom_alloc_trace_epoch(int n) {
  pthread_mutex_lock(&g_trace_lock);
  if (g_trace) fprintf(g_trace, "epoch %d\n", n);
  pthread_mutex_unlock(&g_trace_lock);
}

loom_pool_trace loom_alloc_trace_hooks(int slot) {
  loom_pool_trace t = {trace_alloc, trace_free, (void *)(intptr_t)slot};
  return t;
}
