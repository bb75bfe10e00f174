/* tracks.c — the trace's device processes: one per device or memory pool
 * ("cpu", "pinned", "cuda:0"), holding its memory counters, its allocator
 * events and its streams' device slices. Entries are only ever appended, so
 * lookups need no lock. */
#include <string.h>

#include "prof/prof_internal.h"

typedef struct track {
  char name[32];
  _Atomic int64_t last_ts;
} track;

static track g_tracks[LOOM_PROF_MAX_TRACKS];
static _Atomic int g_ntracks = 0;
static pthread_mutex_t g_tracks_mu = PTHREAD_MUTEX_INITIALIZER;

int loom_prof_track(const char *name) {
  int n = atomic_load_explicit(&g_ntracks, memory_order_acquire);
  for (int i = 0; i < n; i++)
    if (!strcmp(g_tracks[i].name, name)) return i;
  pthread_mutex_lock(&g_tracks_mu);
  int r = -1;
  n = atomic_load(&g_ntracks);
  for (int i = 0; i < n && r < 0; i++)
    if (!strcmp(g_tracks[i].name, name)) r = i;
  if (r < 0 && n < LOOM_PROF_MAX_TRACKS) {
    snprintf(g_tracks[n].name, sizeof g_tracks[n].name, "%s", name);
    atomic_store(&g_tracks[n].last_ts, 0);
    atomic_store_explicit(&g_ntracks, n + 1, memory_order_release);
    r = n;
  }
  pthread_mutex_unlock(&g_tracks_mu);
  return r;
}

int loom_prof_ntracks(void) { return atomic_load_explicit(&g_ntracks, memory_order_acquire); }

const char *loom_prof_track_name(int t) {
  return t >= 0 && t < loom_prof_ntracks() ? g_tracks[t].name : "?";
}

int64_t loom_prof_track_stamp(int t) {
  int64_t now = loom_prof_now_ns();
  int64_t last = atomic_load_explicit(&g_tracks[t].last_ts, memory_order_relaxed);
  if (now <= last) now = last + 1;
  atomic_store_explicit(&g_tracks[t].last_ts, now, memory_order_relaxed);
  return now;
}
