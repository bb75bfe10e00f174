/* metrics.c — the metrics writer of include/loom/metrics.h: scalars to a
 * TensorBoard event file (lib/io/tfrecord.c) and to metrics.csv. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/struct_size.h"
#include "io/tfrecord.h"
#include "loom/metrics.h"
#include "core/sys.h"

#define FLUSH_NS 2000000000ll
#define MAX_TAG 512

struct loom_metrics {
  pthread_mutex_t mu;
  FILE *events, *csv;
  char *event_path, *csv_path;
  int64_t last_flush;
  loom_status err; /* first write error */
  char err_msg[512];
};

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void loom_metrics_options_init(loom_metrics_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->tensorboard = true;
  o->csv = true;
}

/* mkdir -p */
static loom_status make_dirs(const char *dir) {
  char *p = loom_sys_strdup(dir);
  if (!p) return loom_set_error(LOOM_ERR_OOM, "loom_metrics_open: out of host memory");
  loom_status st = LOOM_OK;
  for (char *c = p + 1;; c++) {
    if (*c == '/' || *c == '\0') {
      char save = *c;
      *c = '\0';
      if (mkdir(p, 0777) != 0 && errno != EEXIST) {
        st = loom_set_error(LOOM_ERR_IO, "loom_metrics_open: cannot create the directory '%s': %s", p, strerror(errno));
        break;
      }
      *c = save;
      if (!save) break;
    }
  }
  struct stat sb;
  if (st == LOOM_OK && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
    st = loom_set_error(LOOM_ERR_IO, "loom_metrics_open: '%s' exists and is not a directory", dir);
  loom_sys_free(p);
  return st;
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *s = loom_sys_malloc(n);
  if (s) snprintf(s, n, "%s/%s", dir, name);
  return s;
}

static void destroy(loom_metrics *m) {
  if (m->events) loom_sys_fclose(m->events);
  if (m->csv) loom_sys_fclose(m->csv);
  loom_sys_free(m->event_path);
  loom_sys_free(m->csv_path);
  pthread_mutex_destroy(&m->mu);
  loom_sys_free(m);
}

loom_metrics *loom_metrics_open(const char *logdir, const loom_metrics_options *user) {
  loom_metrics_options o;
  loom_metrics_options_init(&o);
  if (LOOM_STRUCT_IN("loom_metrics_open", loom_metrics_options, &o, user) != LOOM_OK) return NULL;
  if (!logdir || !*logdir) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_metrics_open: logdir is NULL or empty");
    return NULL;
  }
  if (make_dirs(logdir) != LOOM_OK) return NULL;
  loom_metrics *m = loom_sys_calloc(1, sizeof *m);
  if (!m) {
    loom_set_error(LOOM_ERR_OOM, "loom_metrics_open: out of host memory");
    return NULL;
  }
  pthread_mutex_init(&m->mu, NULL);
  m->last_flush = mono_ns();
  if (o.tensorboard) {
    char host[64] = "localhost", name[160];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
      if (*c == '/') *c = '_';
    snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%d.loom", (long long)time(NULL), host, (int)getpid());
    m->event_path = join(logdir, name);
    /* "x": a second writer in the same second and process gets its own file. */
    for (int k = 1; m->event_path && !(m->events = loom_sys_fopen(m->event_path, "wbx")) && errno == EEXIST && k < 100; k++) {
      loom_sys_free(m->event_path);
      snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%d.%d.loom", (long long)time(NULL), host, (int)getpid(), k);
      m->event_path = join(logdir, name);
    }
    if (!m->events) {
      loom_set_error(LOOM_ERR_IO, "loom_metrics_open: cannot create the event file in '%s': %s", logdir, strerror(errno));
      destroy(m);
      return NULL;
    }
    uint8_t buf[64];
    size_t n = loom_event_file_version(buf, sizeof buf, wall_now());
    if (loom_tfrecord_write(m->events, buf, n) != 0 || loom_sys_fflush(m->events) != 0) {
      loom_set_error(LOOM_ERR_IO, "loom_metrics_open: cannot write '%s': %s", m->event_path, strerror(errno));
      destroy(m);
      return NULL;
    }
  }
  if (o.csv) {
    m->csv_path = join(logdir, "metrics.csv");
    struct stat sb;
    int fresh = !m->csv_path || stat(m->csv_path, &sb) != 0 || sb.st_size == 0;
    m->csv = m->csv_path ? loom_sys_fopen(m->csv_path, "a") : NULL;
    if (!m->csv) {
      loom_set_error(LOOM_ERR_IO, "loom_metrics_open: cannot open '%s/metrics.csv' for appending: %s", logdir,
                     strerror(errno));
      destroy(m);
      return NULL;
    }
    if (fresh && (fputs("wall_time,step,tag,value\n", m->csv) < 0 || loom_sys_fflush(m->csv) != 0)) {
      loom_set_error(LOOM_ERR_IO, "loom_metrics_open: cannot write '%s': %s", m->csv_path, strerror(errno));
      destroy(m);
      return NULL;
    }
  }
  return m;
}

static void io_error(loom_metrics *m, const char *path) {
  if (m->err != LOOM_OK) return;
  m->err = LOOM_ERR_IO;
  snprintf(m->err_msg, sizeof m->err_msg, "metrics: writing '%s' failed: %s (disk full?)", path, strerror(errno));
}

static loom_status flush_locked(loom_metrics *m) {
  if (m->events && loom_sys_fflush(m->events) != 0) io_error(m, m->event_path);
  if (m->csv && loom_sys_fflush(m->csv) != 0) io_error(m, m->csv_path);
  m->last_flush = mono_ns();
  return m->err == LOOM_OK ? LOOM_OK : loom_set_error(m->err, "%s", m->err_msg);
}

/* CSV field: quoted when it holds a comma, quote or space at an end. */
static void csv_tag(FILE *f, const char *tag) {
  if (!strpbrk(tag, ",\"") && tag[0] != ' ' && tag[strlen(tag) - 1] != ' ') {
    fputs(tag, f);
    return;
  }
  fputc('"', f);
  for (const char *c = tag; *c; c++) {
    if (*c == '"') fputc('"', f);
    fputc(*c, f);
  }
  fputc('"', f);
}

loom_status loom_metrics_scalar(loom_metrics *m, const char *tag, int64_t step, double value) {
  if (!m) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_metrics_scalar: writer is NULL");
  if (!tag || !*tag) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_metrics_scalar: tag is NULL or empty");
  size_t tl = strlen(tag);
  if (tl > MAX_TAG) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_metrics_scalar: tag is %zu bytes (at most %d)", tl, MAX_TAG);
  for (const unsigned char *c = (const unsigned char *)tag; *c; c++)
    if (*c < 0x20 || *c == 0x7F)
      return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_metrics_scalar: tag '%s' has a control character", tag);
  double wall = wall_now();
  pthread_mutex_lock(&m->mu);
  if (m->events) {
    uint8_t buf[MAX_TAG + 64];
    size_t n = loom_event_scalar(buf, sizeof buf, wall, step, tag, (float)value);
    if (!n || loom_tfrecord_write(m->events, buf, n) != 0) io_error(m, m->event_path);
  }
  if (m->csv) {
    fprintf(m->csv, "%.6f,%lld,", wall, (long long)step);
    csv_tag(m->csv, tag);
    /* %.17g round-trips a double; nan/inf spelled as Python's float() reads them */
    if (isnan(value)) fputs(",nan\n", m->csv);
    else if (isinf(value)) fputs(value > 0 ? ",inf\n" : ",-inf\n", m->csv);
    else fprintf(m->csv, ",%.17g\n", value);
    if (ferror(m->csv)) io_error(m, m->csv_path);
  }
  loom_status st = LOOM_OK;
  if (mono_ns() - m->last_flush > FLUSH_NS) st = flush_locked(m);
  else if (m->err != LOOM_OK) st = loom_set_error(m->err, "%s", m->err_msg);
  pthread_mutex_unlock(&m->mu);
  return st;
}

loom_status loom_metrics_flush(loom_metrics *m) {
  if (!m) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_metrics_flush: writer is NULL");
  pthread_mutex_lock(&m->mu);
  loom_status st = flush_locked(m);
  pthread_mutex_unlock(&m->mu);
  return st;
}

loom_status loom_metrics_close(loom_metrics *m) {
  if (!m) return LOOM_OK;
  pthread_mutex_lock(&m->mu);
  flush_locked(m);
  if (m->events && loom_sys_fclose(m->events) != 0) io_error(m, m->event_path);
  if (m->csv && loom_sys_fclose(m->csv) != 0) io_error(m, m->csv_path);
  m->events = m->csv = NULL;
  loom_status st = m->err == LOOM_OK ? LOOM_OK : loom_set_error(m->err, "%s", m->err_msg);
  pthread_mutex_unlock(&m->mu);
  destroy(m);
  return st;
}

const char *loom_metrics_event_path(const loom_metrics *m) { return m ? m->event_path : NULL; }
