/* ranges.c — what the hooks call: internal ranges (ops, backward,
 * optimizer, loader, copies, collectives), user ranges, allocator events and
 * the per-thread allocation site; and the NVTX switch. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "prof/prof_internal.h"

static _Thread_local const char *t_site = NULL;

const char *loom_prof_site(void) {
  return (atomic_load_explicit(&loom_prof_flags_, memory_order_relaxed) & (LOOM_PROF_SITES | LOOM_PROF_RECORD))
             ? t_site
             : NULL;
}

void loom_prof_set_site(const char *site) { t_site = site; }

static int want_devtime(loom_device dev) {
  int mode = loom_prof_opt_device_timing();
  if (mode == LOOM_PROFILER_DEVICE_TIME_OFF) return 0;
  return dev.kind == LOOM_CUDA || mode == LOOM_PROFILER_DEVICE_TIME_ALL;
}

static void begin(loom_prof_range *r, loom_prof_cat cat, const char *name, const loom_device *dev, loom_stream *s) {
  int flags = atomic_load_explicit(&loom_prof_flags_, memory_order_acquire);
  r->name = name;
  r->cat = (uint8_t)cat;
  r->pair = -1;
  r->flow = 0;
  r->tl = -1;
  r->on = 1;
  r->record = (flags & LOOM_PROF_RECORD) != 0;
  r->nvtx = (flags & LOOM_PROF_NVTX) != 0;
  r->site = (flags & (LOOM_PROF_RECORD | LOOM_PROF_SITES)) != 0;
  if (r->site) {
    r->prev_site = t_site;
    t_site = name;
  }
  if (r->nvtx) loom_prof_nvtx_push(cat, name);
  if (!r->record) return;
  r->gen = loom_prof_gen();
  r->t0 = loom_prof_now_ns();
  if (dev && want_devtime(*dev)) {
    if (!s) s = loom_stream_current(*dev);
    if (s) r->pair = loom_prof_dev_begin(*dev, s, name, cat, r->gen, &r->flow, &r->tl);
  }
}

void loom_prof_begin(loom_prof_range *r, loom_prof_cat cat, const char *name, loom_stream *stream) {
  if (stream) {
    loom_device d = loom_stream_device(stream);
    begin(r, cat, name, &d, stream);
  } else {
    begin(r, cat, name, NULL, NULL);
  }
}

void loom_prof_begin_device(loom_prof_range *r, loom_prof_cat cat, const char *name, loom_device dev) {
  begin(r, cat, name, &dev, NULL);
}

void loom_prof_end_(loom_prof_range *r, double flops, int64_t bytes) {
  if (!r->on) return;
  r->on = 0;
  if (r->pair >= 0) loom_prof_dev_end(r->tl, r->pair, r->gen);
  if (r->record) {
    prof_event e;
    memset(&e, 0, sizeof e);
    e.kind = EV_RANGE;
    e.cat = r->cat;
    e.name = r->name;
    e.t0 = r->t0;
    e.t1 = loom_prof_now_ns();
    e.flops = flops;
    e.v[0] = bytes;
    e.flow = r->pair >= 0 ? r->flow : 0;
    loom_prof_emit(&e, r->gen);
  }
  if (r->nvtx) loom_prof_nvtx_pop();
  if (r->site) t_site = r->prev_site;
}

const char *loom_prof_backward_name(const char *op) {
  char buf[96];
  snprintf(buf, sizeof buf, "%s (backward)", op ? op : "?");
  const char *s = loom_prof_intern(buf);
  return s ? s : "backward";
}

/* ---- allocator events ------------------------------------------------------------ */

int64_t loom_prof_alloc_event(const char *pool, const char *action, uintptr_t addr, size_t size, const void *stream,
                              const char *site, int64_t allocated, int64_t reserved, int64_t active) {
  int flags = atomic_load_explicit(&loom_prof_flags_, memory_order_acquire);
  if (!(flags & LOOM_PROF_RECORD) || !loom_prof_opt_record_memory()) return 0;
  int track = loom_prof_track(pool);
  if (track < 0) return 0;
  prof_event e;
  memset(&e, 0, sizeof e);
  e.kind = EV_ALLOC;
  e.name = action;
  e.site = site;
  e.t0 = e.t1 = loom_prof_track_stamp(track);
  e.v[0] = (int64_t)addr;
  e.v[1] = (int64_t)size;
  e.v[2] = allocated;
  e.v[3] = reserved;
  e.v[4] = active;
  e.stream = stream;
  e.track = (int16_t)track;
  loom_prof_emit(&e, loom_prof_gen());
  return e.t0;
}

/* ---- user ranges ------------------------------------------------------------------ */

#define MAX_DEPTH 64
typedef struct urange {
  const char *name;
  const char *prev_site;
  int64_t t0;
  uint8_t nvtx, site;
} urange;
static _Thread_local urange t_ranges[MAX_DEPTH];
static _Thread_local int t_depth = 0;

loom_status loom_range_push(const char *name) {
  if (!name) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_range_push: name is NULL");
  if (t_depth == MAX_DEPTH)
    return loom_set_error(LOOM_ERR_STATE, "loom_range_push: ranges nest %d deep on this thread (the most is %d); a "
                                          "loom_range_pop is probably missing", t_depth, MAX_DEPTH);
  const char *in = loom_prof_intern(name);
  if (!in) in = "user range";  /* past the interning cap: still balanced, just unnamed */
  int flags = atomic_load_explicit(&loom_prof_flags_, memory_order_acquire);
  urange *u = &t_ranges[t_depth++];
  u->name = in;
  u->t0 = loom_prof_now_ns();
  u->nvtx = (flags & LOOM_PROF_NVTX) != 0;
  u->site = 1;
  u->prev_site = t_site;
  t_site = in;
  if (u->nvtx) loom_prof_nvtx_push(LOOM_PROF_CAT_USER, in);
  return LOOM_OK;
}

static void emit_user(const urange *u, int64_t t1, int unclosed) {
  prof_event e;
  memset(&e, 0, sizeof e);
  e.kind = EV_RANGE;
  e.cat = LOOM_PROF_CAT_USER;
  e.name = u->name;
  e.t0 = u->t0;
  e.t1 = t1;
  e.flags = unclosed ? EV_UNCLOSED : 0;
  loom_prof_emit(&e, loom_prof_gen());
}

loom_status loom_range_pop(void) {
  if (t_depth == 0)
    return loom_set_error(LOOM_ERR_STATE, "loom_range_pop: no open range on this thread (push and pop on the same "
                                          "thread, innermost first)");
  urange *u = &t_ranges[--t_depth];
  if (loom_profiler_is_running()) {
    urange c = *u;
    int64_t start = loom_prof_start_ns();
    if (c.t0 < start) c.t0 = start;  /* pushed before the profiler started: clip */
    emit_user(&c, loom_prof_now_ns(), 0);
  }
  if (u->nvtx) loom_prof_nvtx_pop();
  t_site = u->prev_site;
  return LOOM_OK;
}

void loom_prof_close_user_ranges(int64_t t) {
  int64_t start = loom_prof_start_ns();
  for (int i = t_depth - 1; i >= 0; i--) {
    urange c = t_ranges[i];
    if (c.t0 < start) c.t0 = start;
    emit_user(&c, t, 1);
  }
}

/* ---- NVTX switch -------------------------------------------------------------------- */

loom_status loom_nvtx_set_enabled(bool on) {
  if (on && !loom_prof_nvtx_available())
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "loom_nvtx_set_enabled: this build of loom has no NVTX (it was built "
                                                "without the CUDA toolkit)");
  if (on) atomic_fetch_or(&loom_prof_flags_, LOOM_PROF_NVTX);
  else atomic_fetch_and(&loom_prof_flags_, ~LOOM_PROF_NVTX);
  return LOOM_OK;
}

bool loom_nvtx_enabled(void) { return (atomic_load(&loom_prof_flags_) & LOOM_PROF_NVTX) != 0; }
