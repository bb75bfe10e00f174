/* recorder.c — the profiler's state: the flag word the hooks test, per-thread
 * event buffers, start / stop / step, the stopped session, allocation-site
 * requests, interned strings, and LOOM_PROFILE / LOOM_NVTX at library load. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"
#include "core/struct_size.h"
#include "core/teardown.h"
#include "loom/log.h"
#include "prof/prof_internal.h"
#include "core/sys.h"

_Atomic int loom_prof_flags_ = 0;

#define DEFAULT_MAX_EVENTS 2000000
#define MAX_SITE_KEYS 256

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* start/stop/step/session, thread list */
static _Atomic uint32_t g_gen = 0;
static _Atomic int64_t g_budget = 0;
static _Atomic int64_t g_dropped = 0;
static _Atomic int g_opt_devtime = LOOM_PROFILER_DEVICE_TIME_AUTO;
static _Atomic int g_opt_memory = 1;
static int g_running = 0;
static int g_print_summary = 0;
static FILE *g_trace = NULL;
static char *g_trace_path = NULL;
static int64_t g_t_start = 0, g_last_step = 0, g_steps = 0;
static prof_session g_sess;
static int g_env_profile = 0; /* started by LOOM_PROFILE: stop at exit */
static _Atomic int64_t g_start_ns = 0; /* g_t_start for threads outside g_mu */

int64_t loom_prof_start_ns(void) { return atomic_load_explicit(&g_start_ns, memory_order_acquire); }
uint32_t loom_prof_gen(void) { return atomic_load_explicit(&g_gen, memory_order_acquire); }
int loom_prof_opt_device_timing(void) { return atomic_load_explicit(&g_opt_devtime, memory_order_relaxed); }
int loom_prof_opt_record_memory(void) { return atomic_load_explicit(&g_opt_memory, memory_order_relaxed); }
void loom_prof_lock(void) { pthread_mutex_lock(&g_mu); }
void loom_prof_unlock(void) { pthread_mutex_unlock(&g_mu); }
const prof_session *loom_prof_session(void) { return &g_sess; }

const char *loom_prof_cat_name(int cat) {
  static const char *const names[LOOM_PROF_NCAT] = {"op",         "backward", "optimizer", "loader", "h2d",
                                                    "collective", "user",     "step",      "amp"};
  return cat >= 0 && cat < LOOM_PROF_NCAT ? names[cat] : "other";
}

/* ---- per-thread buffers ------------------------------------------------------ */

typedef struct tbuf {
  pthread_mutex_t mu;
  prof_event *ev;
  size_t n, cap;
  uint32_t gen;
  int tid;
  int alive;
  char name[48];
  struct tbuf *next;
} tbuf;

static pthread_mutex_t g_threads_mu = PTHREAD_MUTEX_INITIALIZER; /* after g_mu, before a tbuf's mu */
static tbuf *g_threads = NULL;
static int g_next_tid = 0;
static _Thread_local tbuf *t_buf = NULL;
static _Thread_local char t_name[48];
static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

static void thread_gone(void *p) {
  tbuf *b = p;
  pthread_mutex_lock(&b->mu);
  b->alive = 0;  /* collected and freed at the next stop or start */
  pthread_mutex_unlock(&b->mu);
}

static void make_key(void) { pthread_key_create(&g_key, thread_gone); }

void loom_prof_thread_name(const char *name) {
  snprintf(t_name, sizeof t_name, "%s", name ? name : "");
  tbuf *b = t_buf;
  if (b) {
    pthread_mutex_lock(&b->mu);
    snprintf(b->name, sizeof b->name, "%s", t_name);
    pthread_mutex_unlock(&b->mu);
  }
}

static tbuf *my_buf(void) {
  if (t_buf) return t_buf;
  pthread_once(&g_key_once, make_key);
  tbuf *b = loom_sys_calloc(1, sizeof *b);
  if (!b) return NULL;
  pthread_mutex_init(&b->mu, NULL);
  b->alive = 1;
  pthread_mutex_lock(&g_threads_mu);
  b->tid = ++g_next_tid;
  if (t_name[0]) snprintf(b->name, sizeof b->name, "%s", t_name);
  else if (syscall(SYS_gettid) == getpid()) snprintf(b->name, sizeof b->name, "main thread");
  else snprintf(b->name, sizeof b->name, "thread %d", b->tid);
  b->next = g_threads;
  g_threads = b;
  pthread_mutex_unlock(&g_threads_mu);
  pthread_setspecific(g_key, b);
  t_buf = b;
  return b;
}

int loom_prof_emit(const prof_event *e, uint32_t gen) {
  if (!(atomic_load_explicit(&loom_prof_flags_, memory_order_acquire) & LOOM_PROF_RECORD) || gen != loom_prof_gen())
    return 0;
  tbuf *b = my_buf();
  if (!b) return 0;
  if (atomic_fetch_sub_explicit(&g_budget, 1, memory_order_relaxed) <= 0) {
    atomic_fetch_add_explicit(&g_dropped, 1, memory_order_relaxed);
    return 0;
  }
  int ok = 0;
  pthread_mutex_lock(&b->mu);
  if (b->gen != gen) {
    b->n = 0;
    b->gen = gen;
  }
  if (b->n == b->cap) {
    size_t nc = b->cap ? b->cap * 2 : 1024;
    prof_event *ne = loom_sys_realloc(b->ev, nc * sizeof *ne);
    if (ne) {
      b->ev = ne;
      b->cap = nc;
    }
  }
  if (b->n < b->cap) {
    b->ev[b->n++] = *e;
    ok = 1;
  }
  pthread_mutex_unlock(&b->mu);
  if (!ok) atomic_fetch_add_explicit(&g_dropped, 1, memory_order_relaxed);
  return ok;
}

/* Under g_mu: move every buffer of generation gen into the session; free the
 * buffers of threads that have exited. */
static loom_status collect_locked(uint32_t gen);
static loom_status collect(uint32_t gen) {
  pthread_mutex_lock(&g_threads_mu);
  loom_status st = collect_locked(gen);
  pthread_mutex_unlock(&g_threads_mu);
  return st;
}

static loom_status collect_locked(uint32_t gen) {
  size_t total = 0;
  int nth = 0;
  for (tbuf *b = g_threads; b; b = b->next) {
    pthread_mutex_lock(&b->mu);
    if (b->gen == gen) total += b->n;
    pthread_mutex_unlock(&b->mu);
    nth++;
  }
  g_sess.ev = loom_sys_malloc((total ? total : 1) * sizeof *g_sess.ev);
  g_sess.th = loom_sys_calloc((size_t)(nth ? nth : 1), sizeof *g_sess.th);
  if (!g_sess.ev || !g_sess.th)
    return loom_set_error(LOOM_ERR_OOM, "loom_profiler_stop: out of host memory collecting %zu events", total);
  tbuf **pp = &g_threads;
  while (*pp) {
    tbuf *b = *pp;
    pthread_mutex_lock(&b->mu);
    size_t take = b->gen == gen ? b->n : 0;
    if (g_sess.nev + take > total) take = total - g_sess.nev;  /* appended since we counted: late, dropped */
    for (size_t i = 0; i < take; i++) {
      g_sess.ev[g_sess.nev + i] = b->ev[i];
      g_sess.ev[g_sess.nev + i].tid = (int16_t)b->tid;
    }
    g_sess.nev += take;
    if (take) {
      g_sess.th[g_sess.nth].tid = b->tid;
      snprintf(g_sess.th[g_sess.nth].name, sizeof g_sess.th[0].name, "%s", b->name);
      g_sess.nth++;
    }
    b->n = 0;
    int dead = !b->alive;
    pthread_mutex_unlock(&b->mu);
    if (dead) {
      *pp = b->next;
      pthread_mutex_destroy(&b->mu);
      loom_sys_free(b->ev);
      loom_sys_free(b);
    } else {
      pp = &b->next;
    }
  }
  return LOOM_OK;
}

static void session_clear(void) {
  loom_sys_free(g_sess.ev);
  loom_sys_free(g_sess.sl);
  loom_sys_free(g_sess.th);
  memset(&g_sess, 0, sizeof g_sess);
}

/* ---- start / stop / step ------------------------------------------------------- */

void loom_profiler_options_init(loom_profiler_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->device_timing = LOOM_PROFILER_DEVICE_TIME_AUTO;
  o->record_memory = true;
}

loom_status loom_profiler_start(const loom_profiler_options *user) {
  loom_profiler_options o;
  loom_profiler_options_init(&o);
  LOOM_TRY(LOOM_STRUCT_IN("loom_profiler_start", loom_profiler_options, &o, user));
  if (o.device_timing < LOOM_PROFILER_DEVICE_TIME_AUTO || o.device_timing > LOOM_PROFILER_DEVICE_TIME_OFF)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_profiler_start: device_timing %d is not a loom_profiler_device_timing",
                          (int)o.device_timing);
  if (o.max_events < 0)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_profiler_start: max_events %lld is negative",
                          (long long)o.max_events);
  pthread_mutex_lock(&g_mu);
  if (g_running) {
    pthread_mutex_unlock(&g_mu);
    return loom_set_error(LOOM_ERR_STATE, "loom_profiler_start: the profiler is already running; stop it first");
  }
  FILE *f = NULL;
  char *path = NULL;
  if (o.trace_path) {
    path = loom_sys_strdup(o.trace_path);
    f = path ? loom_sys_fopen(path, "w") : NULL;
    if (!f) {
      loom_sys_free(path);
      pthread_mutex_unlock(&g_mu);
      return path ? loom_set_error(LOOM_ERR_IO, "loom_profiler_start: cannot create the trace file '%s'; check the "
                                                "directory exists and is writable", o.trace_path)
                  : loom_set_error(LOOM_ERR_OOM, "loom_profiler_start: out of host memory");
    }
  }
  session_clear();
  loom_prof_dev_reset();
  g_trace = f;
  g_trace_path = path;
  g_print_summary = o.print_summary;
  atomic_store(&g_opt_devtime, o.device_timing);
  atomic_store(&g_opt_memory, o.record_memory ? 1 : 0);
  atomic_store(&g_budget, o.max_events ? o.max_events : DEFAULT_MAX_EVENTS);
  atomic_store(&g_dropped, 0);
  g_t_start = g_last_step = loom_prof_now_ns();
  atomic_store(&g_start_ns, g_t_start);
  g_steps = 0;
  atomic_fetch_add_explicit(&g_gen, 1, memory_order_release);
  g_running = 1;
  atomic_fetch_or_explicit(&loom_prof_flags_, LOOM_PROF_RECORD, memory_order_release);
  pthread_mutex_unlock(&g_mu);
  return LOOM_OK;
}

bool loom_profiler_is_running(void) {
  return (atomic_load_explicit(&loom_prof_flags_, memory_order_acquire) & LOOM_PROF_RECORD) != 0;
}

void loom_profiler_step(void) {
  pthread_mutex_lock(&g_mu);
  if (g_running) {
    int64_t t = loom_prof_now_ns();
    prof_event e;
    memset(&e, 0, sizeof e);
    e.kind = EV_RANGE;
    e.cat = LOOM_PROF_CAT_STEP;
    e.name = "step";
    e.t0 = g_last_step;
    e.t1 = t;
    e.v[1] = g_steps;
    if (loom_prof_emit(&e, loom_prof_gen())) g_steps++;
    g_last_step = t;
  }
  pthread_mutex_unlock(&g_mu);
}

loom_status loom_profiler_stop(void) {
  pthread_mutex_lock(&g_mu);
  if (!g_running) {
    pthread_mutex_unlock(&g_mu);
    return loom_set_error(LOOM_ERR_STATE, "loom_profiler_stop: the profiler is not running; call loom_profiler_start first");
  }
  int64_t t = loom_prof_now_ns();
  loom_prof_close_user_ranges(t);
  uint32_t gen = loom_prof_gen();
  atomic_fetch_and_explicit(&loom_prof_flags_, ~LOOM_PROF_RECORD, memory_order_release);
  g_running = 0;
  g_sess.t_start = g_t_start;
  g_sess.t_stop = t;
  g_sess.steps = g_steps;
  loom_status st = loom_prof_dev_finish(gen, &g_sess.sl, &g_sess.nsl, &g_sess.dropped_device);
  loom_status st2 = collect(gen);
  if (st == LOOM_OK) st = st2;
  g_sess.dropped = atomic_load(&g_dropped);
  g_sess.have = 1;
  if (g_trace) {
    loom_status sw = loom_prof_write_json(&g_sess, g_trace, g_trace_path);
    if (loom_sys_fclose(g_trace) != 0 && sw == LOOM_OK)
      sw = loom_set_error(LOOM_ERR_IO, "loom_profiler_stop: writing the trace '%s' failed (disk full?)", g_trace_path);
    if (st == LOOM_OK) st = sw;
    g_trace = NULL;
  }
  if (g_print_summary) {
    char *s = loom_prof_summary_text(&g_sess, 40);
    if (s) {
      fputs(s, stderr);
      if (g_trace_path) fprintf(stderr, "trace written to %s (open it in https://ui.perfetto.dev)\n", g_trace_path);
      loom_sys_free(s);
    }
  }
  loom_sys_free(g_trace_path);
  g_trace_path = NULL;
  pthread_mutex_unlock(&g_mu);
  return st;
}

loom_status loom_profiler_write_trace(const char *path) {
  if (!path) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_profiler_write_trace: path is NULL");
  pthread_mutex_lock(&g_mu);
  loom_status st;
  if (!g_sess.have) {
    st = loom_set_error(LOOM_ERR_STATE, "loom_profiler_write_trace: nothing recorded yet; call loom_profiler_start and "
                                        "loom_profiler_stop first");
  } else {
    FILE *f = loom_sys_fopen(path, "w");
    if (!f) {
      st = loom_set_error(LOOM_ERR_IO, "loom_profiler_write_trace: cannot create '%s'", path);
    } else {
      st = loom_prof_write_json(&g_sess, f, path);
      if (loom_sys_fclose(f) != 0 && st == LOOM_OK)
        st = loom_set_error(LOOM_ERR_IO, "loom_profiler_write_trace: writing '%s' failed (disk full?)", path);
    }
  }
  pthread_mutex_unlock(&g_mu);
  return st;
}

char *loom_profiler_summary(int max_rows) {
  pthread_mutex_lock(&g_mu);
  char *s = NULL;
  if (!g_sess.have)
    loom_set_error(LOOM_ERR_STATE, "loom_profiler_summary: nothing recorded yet; call loom_profiler_start and "
                                   "loom_profiler_stop first");
  else
    s = loom_prof_summary_text(&g_sess, max_rows);
  pthread_mutex_unlock(&g_mu);
  return s;
}

int loom_profiler_summary_rows(loom_profiler_row *rows, size_t row_size, int max) {
  if (max > 0 && (!rows || row_size < sizeof(rows->name) || row_size > sizeof *rows)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_profiler_summary_rows: rows is NULL or row_size %zu is not between %zu "
                                         "and sizeof(loom_profiler_row)", row_size, sizeof(rows->name));
    return -1;
  }
  pthread_mutex_lock(&g_mu);
  int n = -1;
  if (!g_sess.have)
    loom_set_error(LOOM_ERR_STATE, "loom_profiler_summary_rows: nothing recorded yet");
  else
    n = loom_prof_summary_fill(&g_sess, rows, row_size, max < 0 ? 0 : max);
  pthread_mutex_unlock(&g_mu);
  return n;
}

int64_t loom_profiler_dropped_events(void) {
  pthread_mutex_lock(&g_mu);
  int64_t d = g_sess.have ? g_sess.dropped + g_sess.dropped_device : 0;
  pthread_mutex_unlock(&g_mu);
  return d;
}

/* ---- allocation sites ------------------------------------------------------------ */

static pthread_mutex_t g_site_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char g_site_keys[MAX_SITE_KEYS];
static int g_site_count = 0;

void loom_prof_sites_request(int key, bool on) {
  if (key < 0 || key >= MAX_SITE_KEYS) return;
  pthread_mutex_lock(&g_site_mu);
  if (g_site_keys[key] != (on ? 1 : 0)) {
    g_site_keys[key] = on ? 1 : 0;
    g_site_count += on ? 1 : -1;
    if (g_site_count > 0) atomic_fetch_or(&loom_prof_flags_, LOOM_PROF_SITES);
    else atomic_fetch_and(&loom_prof_flags_, ~LOOM_PROF_SITES);
  }
  pthread_mutex_unlock(&g_site_mu);
}

/* ---- interned strings ------------------------------------------------------------- */

#define INTERN_MAX 4096
static pthread_mutex_t g_intern_mu = PTHREAD_MUTEX_INITIALIZER;
static char *g_intern[INTERN_MAX * 2];  /* open addressing, never freed: blocks keep pointers */
static int g_intern_n = 0;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

const char *loom_prof_intern(const char *s) {
  if (!s) return NULL;
  size_t cap = INTERN_MAX * 2;
  size_t i = (size_t)(hash_str(s) % cap);
  pthread_mutex_lock(&g_intern_mu);
  const char *r = NULL;
  while (g_intern[i]) {
    if (!strcmp(g_intern[i], s)) {
      r = g_intern[i];
      break;
    }
    i = (i + 1) % cap;
  }
  if (!r && g_intern_n < INTERN_MAX && (g_intern[i] = loom_sys_strdup(s))) {
    g_intern_n++;
    r = g_intern[i];
  }
  pthread_mutex_unlock(&g_intern_mu);
  return r;
}

/* ---- loom_shutdown ------------------------------------------------------------------ */

/* A running recording is stopped (its trace written, as loom_profiler_stop
 * would); the kept session and the event buffers are freed: the buffers of
 * exited threads whole, those of live threads down to their small header
 * (their threads still point at it). Interned names stay (bounded, and a
 * range still open on this thread may point at one). */
static loom_status recorder_teardown(void) {
  pthread_mutex_lock(&g_mu);
  int running = g_running;
  pthread_mutex_unlock(&g_mu);
  loom_status st = running ? loom_profiler_stop() : LOOM_OK;
  pthread_mutex_lock(&g_mu);
  g_env_profile = 0;
  session_clear();
  pthread_mutex_lock(&g_threads_mu);
  for (tbuf **pp = &g_threads; *pp;) {
    tbuf *b = *pp;
    pthread_mutex_lock(&b->mu);
    int dead = !b->alive;
    loom_sys_free(b->ev);
    b->ev = NULL;
    b->n = b->cap = 0;
    pthread_mutex_unlock(&b->mu);
    if (dead) {
      *pp = b->next;
      pthread_mutex_destroy(&b->mu);
      loom_sys_free(b);
    } else {
      pp = &b->next;
    }
  }
  pthread_mutex_unlock(&g_threads_mu);
  pthread_mutex_unlock(&g_mu);
  loom_prof_dev_release();
  return st;
}
LOOM_TEARDOWN(LOOM_LAYER_PROF, recorder_teardown)

/* ---- LOOM_PROFILE and LOOM_NVTX ----------------------------------------------------- */

static void stop_at_exit(void) {
  pthread_mutex_lock(&g_mu);
  int run = g_env_profile && g_running;
  g_env_profile = 0;
  pthread_mutex_unlock(&g_mu);
  if (run && loom_profiler_stop() != LOOM_OK)
    loom_log_msg(LOOM_LOG_WARN, "LOOM_PROFILE: %s", loom_last_error());
}

void loom_prof_register_exit(void) {
  pthread_mutex_lock(&g_mu);
  int env = g_env_profile;
  pthread_mutex_unlock(&g_mu);
  if (env) atexit(stop_at_exit);  /* runs once: the first call to run stops it, the others see nothing running */
}

__attribute__((constructor)) static void prof_from_env(void) {
  const char *nv = getenv("LOOM_NVTX");
  if (nv && *nv) {
    if (!strcmp(nv, "1") || !strcmp(nv, "on")) {
      if (loom_nvtx_set_enabled(true) != LOOM_OK) loom_log_msg(LOOM_LOG_WARN, "LOOM_NVTX=%s: %s", nv, loom_last_error());
    } else if (strcmp(nv, "0") && strcmp(nv, "off")) {
      loom_log_msg(LOOM_LOG_WARN, "LOOM_NVTX=%s: expected 1 or 0; NVTX ranges stay off", nv);
    }
  } else if (getenv("NVTX_INJECTION64_PATH") && loom_prof_nvtx_available()) {
    loom_nvtx_set_enabled(true);  /* an NVTX tool (nsys) is attached */
  }
  const char *path = getenv("LOOM_PROFILE");
  if (!path || !*path) return;
  loom_profiler_options o;
  loom_profiler_options_init(&o);
  o.trace_path = path;
  o.print_summary = true;
  if (loom_profiler_start(&o) != LOOM_OK) {
    loom_log_msg(LOOM_LOG_WARN, "LOOM_PROFILE=%s: %s; not profiling", path, loom_last_error());
    loom_clear_error();
    return;
  }
  loom_clear_error();
  pthread_mutex_lock(&g_mu);
  g_env_profile = 1;
  pthread_mutex_unlock(&g_mu);
  loom_prof_register_exit();
}
